"""A team connection whose statements run on a worker thread, never on the daemon's event loop.

Driven by an asyncio psycopg connection, a push's batch (a JSON document of ~400 kB for 1,000 rows)
was sent, and a pull's page of 1,000 rows fetched and decoded, each in one step of the event loop,
which every hook's ack waited behind (bench_team_pull.py: steps of 20-144 ms on a loaded machine).
Here the loop only waits: psycopg's blocking connection sends and waits for the server without the
GIL (libpq's calls run `nogil`), and a page's rows become structs on the thread.

One statement at a time per connection. One given up on (its timeout, the link going down, the
daemon stopping) is left to its thread at once, and the connection's socket is shut down under it so
the thread returns now, whatever the network does (a stalled server would hold it, and the daemon's
exit, for good); the connection is closed once that thread has returned, never under it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, Final, ParamSpec, TypeVar

import anyio
import anyio.to_thread

from nmemd.errors import TeamError
from nmemd.team import pg

if TYPE_CHECKING:
    import psycopg

LOG = logging.getLogger("nmemd.team")
CLOSE_WAIT_S: Final = 5.0  # a statement given up on has this long to return before its connection goes
SWITCH_INTERVAL_S: Final = 0.001  # the GIL's hand-over interval while a push or a pull works (CPython: 5 ms)
GIVE_WAY_NAP_S: Final = 0.0005
# A worker gives way this long at most per call: a flood of hooks slows a push or a pull, never stops it.
GIVE_WAY_MAX_S: Final = 0.01
P = ParamSpec("P")
T = TypeVar("T")


class ThreadedConnection:
    """A blocking psycopg connection (autocommit) whose work the event loop awaits on worker threads."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._lock = anyio.Lock()
        self._idle = threading.Event()  # no thread is using the connection
        self._idle.set()

    @classmethod
    async def open(cls, dsn: str) -> ThreadedConnection:
        """Connect on a worker thread (bounded by libpq's connect_timeout, pg.with_keepalives)."""
        return cls(await anyio.to_thread.run_sync(pg.connect_blocking, dsn, abandon_on_cancel=True))

    @property
    def backend_pid(self) -> int:
        return int(self.conn.info.backend_pid)

    async def run(
        self,
        fn: Callable[Concatenate[psycopg.Connection[Any], P], T],
        timeout_s: float,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """`fn(conn, *args)` on a worker thread; TimeoutError after `timeout_s`. Then, as on any
        cancellation, the connection is broken (`_abort`): the server rolls back what was not committed."""
        async with self._lock:
            if not self._idle.is_set():
                raise TeamError("the team connection is still busy with a statement given up on")
            self._idle.clear()

            def call() -> T:
                try:
                    return fn(self.conn, *args, **kwargs)
                finally:
                    self._idle.set()

            try:
                with anyio.fail_after(timeout_s):
                    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
            except BaseException:
                if not self._idle.is_set():
                    self._abort()
                raise

    def _abort(self) -> None:
        """Shut the socket down under the thread still using it: its wait ends with an error at once.
        Shut down through a duplicate descriptor, so libpq's own stays valid until it closes it."""
        with contextlib.suppress(Exception):
            with socket.socket(fileno=os.dup(self.conn.pgconn.socket)) as sock:
                sock.shutdown(socket.SHUT_RDWR)

    async def close(self) -> None:
        """Close it once no thread uses it (CLOSE_WAIT_S at most; past that, its last thread's
        reference keeps it, and it closes with the process)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_WAIT_S + 1.0):
            await anyio.to_thread.run_sync(self._close_when_idle, abandon_on_cancel=True)

    def _close_when_idle(self) -> None:
        if not self._idle.wait(CLOSE_WAIT_S):
            LOG.debug("a team connection was left open: a statement given up on has not returned")
            return
        try:
            self.conn.close()
        except Exception:
            LOG.debug("closing a team connection failed", exc_info=True)


_working = 0  # pushes and pulls under way (event loop only)
_saved_interval = 0.0


@contextlib.contextmanager
def short_gil_turns() -> Iterator[None]:
    """While a push or a pull works on threads (reading and redacting the outbox, encoding a batch,
    decoding a page, storing it), the GIL changes hands every SWITCH_INTERVAL_S instead of every
    5 ms, so the event loop, when a hook arrives, waits that long at most for a turn. Only then: for
    the daemon's whole life it cost ingest ~10 % more CPU (BENCHMARKS.md, issue #40)."""
    global _working, _saved_interval
    if _working == 0:
        _saved_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(_saved_interval, SWITCH_INTERVAL_S))
    _working += 1
    try:
        yield
    finally:
        _working -= 1
        if _working == 0:
            sys.setswitchinterval(_saved_interval)


def give_way(hooks_waiting: Callable[[], bool]) -> Callable[[], None]:
    """What a push's or a pull's worker thread calls between a few rows of its Python work: while a
    hook's event waits for its commit and ack, it naps without the GIL (GIVE_WAY_MAX_S at most), so the
    event loop and the writer thread, which take and drop the GIL a dozen times for one batch, never
    wait a switch interval behind it at each (a hook's batch of 0.5 ms of CPU took 5 ms beside a
    thread redacting the outbox, bench_team_pull.py, issue #40)."""

    def call() -> None:
        if not hooks_waiting():
            return
        deadline = time.monotonic() + GIVE_WAY_MAX_S
        while hooks_waiting() and time.monotonic() < deadline:
            time.sleep(GIVE_WAY_NAP_S)

    return call
