"""Read timeouts for every connection, enforced by one sweeper task.

A cancel scope per read (`anyio.fail_after`) costs about 10 µs on asyncio, twice
per frame, on the hottest path of the daemon. Here a read only stores a float;
one task wakes a few times a second and cancels the connections whose peer has
been too slow. A timeout fires up to one `resolution` late, which is fine for
timeouts measured in seconds.

When the daemon is crowded (more connections than `max_connections`), peers
that have waited `squeeze` seconds without sending a frame header are dropped
at the next sweep: thousands of idle connections cannot starve a health check
or a hook, which sends its header within milliseconds of connecting.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

import anyio

NEVER = math.inf


class Cancellable(Protocol):
    """What a watch ends when its deadline passes (a connection, a cancel scope)."""

    def cancel(self) -> None: ...


class Watch:
    """One connection's read deadline and what to cancel when it passes."""

    __slots__ = ("scope", "deadline", "expired", "header_since")

    def __init__(self, scope: Cancellable):
        self.scope = scope
        self.deadline = NEVER  # only finite while the connection waits for its peer
        self.expired = False
        self.header_since = NEVER  # when it began waiting for a frame header

    def reading_header(self, seconds: float) -> None:
        self.header_since = time.monotonic()
        self.deadline = self.header_since + seconds

    def reading(self, seconds: float) -> None:
        self.header_since = NEVER
        self.deadline = time.monotonic() + seconds

    def idle(self) -> None:
        """Not waiting for the peer (processing, or waiting on our own commit)."""
        self.deadline = NEVER
        self.header_since = NEVER


class Deadlines:
    def __init__(self, resolution: float, crowded: Callable[[], bool] = lambda: False, squeeze: float = 0.5):
        self.resolution = resolution
        self.crowded = crowded
        self.squeeze = squeeze
        self._watches: set[Watch] = set()

    def watch(self, scope: Cancellable) -> Watch:
        w = Watch(scope)
        self._watches.add(w)
        return w

    def forget(self, w: Watch) -> None:
        self._watches.discard(w)

    def sweep(self, now: float) -> int:
        if self.crowded():
            idle_since = now - self.squeeze
            expired = [w for w in self._watches if w.deadline < now or w.header_since < idle_since]
        else:
            expired = [w for w in self._watches if w.deadline < now]
        for w in expired:
            w.expired = True
            w.idle()
            w.scope.cancel()
        return len(expired)

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.resolution)
            self.sweep(time.monotonic())
