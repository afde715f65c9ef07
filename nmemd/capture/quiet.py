"""The quiet moments between hooks: whether one is in flight, and how long the pauses between them last.

Work that loads the machine beside the hooks (team sync's push: the server's backend takes a core for
as long as its statement runs) waits for these moments and sizes itself to them, so that a hook finds
the cores free. On a 2-core machine, a hook that arrived while the backend and another process held
both cores waited for the next scheduler tick (4 ms at 250 Hz), twice in its round trip (its read,
then its client's wake-up): the slow acks left while pushing (bench_team_pull.py, issue #40).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final

import anyio

GAPS_KEPT: Final = 8  # the pauses a moment's length is judged from


class QuietMoments:
    """Told by the daemon when a hook's connection opens (`hook_started`) and when none is in flight
    any more (`all_done`); asked by background work (`left`, `next`). Event loop only."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since: float | None = clock()  # quiet since then; None while a hook is in flight
        self._gaps: deque[float] = deque(maxlen=GAPS_KEPT)
        self._waiters: list[anyio.Event] = []

    def hook_started(self) -> None:
        if self._since is not None:
            self._gaps.append(self._clock() - self._since)
            self._since = None

    def all_done(self) -> None:
        if self._since is None:
            self._since = self._clock()
        for waiter in self._waiters:
            waiter.set()
        self._waiters.clear()

    def quiet_for(self) -> float | None:
        """Seconds since the last hook was answered; None while one is in flight."""
        return None if self._since is None else self._clock() - self._since

    def left(self) -> float:
        """Seconds this pause is likely to last still: a short one of the last pauses (the second
        shortest of GAPS_KEPT) less what passed of it; 0 while a hook is in flight or none was seen."""
        quiet = self.quiet_for()
        if quiet is None or not self._gaps:
            return 0.0
        gaps = sorted(self._gaps)
        return max(0.0, gaps[min(1, len(gaps) - 1)] - quiet)

    async def next(self, max_wait_s: float) -> bool:
        """Until the next moment no hook is in flight (its client has its ack); False after `max_wait_s`."""
        waiter = anyio.Event()
        self._waiters.append(waiter)
        with anyio.move_on_after(max_wait_s):
            await waiter.wait()
            return True
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        return False
