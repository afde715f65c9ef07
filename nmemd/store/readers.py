"""Read-only SQLite connections for queries, one per worker thread.

The daemon's single aiosqlite connection is for writing; a query run there
would queue behind (and inside) batch transactions. WAL lets these readers
see every committed batch without blocking the writer.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

from nmemd.errors import StorageError

T = TypeVar("T")

_local = threading.local()
Then = Callable[[Any], object] | None  # called with a query's result on its thread (`rpc.dispatch`'s reply)


def open_readonly(db_path: str) -> sqlite3.Connection:
    """A query connection that cannot write, even by mistake."""
    try:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5.0, check_same_thread=False)
        conn.execute("PRAGMA query_only=ON")
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open {db_path} for reading: {exc}") from exc
    return conn


def thread_connection(db_path: str) -> sqlite3.Connection:
    cache: dict[str, sqlite3.Connection] | None = getattr(_local, "conns", None)
    if cache is None:
        cache = _local.conns = {}
    conn = cache.get(db_path)
    if conn is None:
        conn = cache[db_path] = open_readonly(db_path)
    return conn


# Queries that people and models ask (CLI, MCP) run one at a time; while events are arriving, each
# one's slot then rests as long as the query ran, so queries hold at most half of the GIL the
# event loop needs to take events in. Ranking is Python: 8 searchers at once, each on its own
# thread, cut ingest to a tenth and acks waited 81 ms (issue #16, finding 14). A lone search is
# never delayed (only the next one waits out a rest), and without events arriving nothing rests.
# A hook's own reply (SessionStart context, prompt recall) has its time budget and does not queue.
QUERY_THREADS = 1
QUERY_REST = 1.0  # a slot rests this many times as long as its query ran, while capture is busy
_limiters: dict[int, tuple[object, anyio.CapacityLimiter]] = {}  # id(event loop) -> (loop, limiter)
_QUERIES: Final = ThreadPoolExecutor(QUERY_THREADS, thread_name_prefix="nmem-query")


def _query_limiter() -> anyio.CapacityLimiter:
    """This event loop's limiter (tests run many loops in one process; the daemon runs one)."""
    loop = asyncio.get_running_loop()
    held = _limiters.get(id(loop))
    if held is None or held[0] is not loop:
        _limiters.clear()  # an earlier loop's is dead
        held = _limiters[id(loop)] = (loop, anyio.CapacityLimiter(QUERY_THREADS))
    return held[1]


async def run(db_path: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run `fn(conn, *args, **kwargs)` on a worker thread's read-only connection."""

    def call() -> T:
        return fn(thread_connection(db_path), *args, **kwargs)

    return await anyio.to_thread.run_sync(call)


# A query under way on the queries' thread (`start`, `query`): its future. Its turn is the worker's to give
# back (`_submit`), so nothing else needs holding.
Running = Future[Any]


def start(
    db_path: str, capture_busy: Callable[[], bool], fn: Callable[..., object], *args: object, then: Then = None
) -> Running | None:
    """`fn(conn, *args)` started now on the queries' thread when no other query holds the turn (None when
    one does): from a callback on the loop, with no task to start first (`rpc.start_read`)."""
    limiter, token = _query_limiter(), object()
    try:
        limiter.acquire_on_behalf_of_nowait(token)
    except anyio.WouldBlock:
        return None
    return _submit(limiter, token, capture_busy, db_path, fn, args, then)


async def finish(running: Running) -> Any:
    """A started query's result (or its error, raised), once it is done. A cancelled caller waits for it, as
    `to_thread` waits."""
    with anyio.CancelScope(shield=True):
        return await asyncio.wrap_future(running)


def when_done(running: Running, then: Callable[[Running], object]) -> None:
    """`then(running)` on this event loop once the started query is done, with no task to wait for it: a
    task's start and its shielded wait cost ~60 us of the ~0.35 ms the daemon spends on a read's trip."""
    loop = asyncio.get_running_loop()
    running.add_done_callback(lambda _: _on_loop(loop, then, running))


async def query(
    db_path: str, capture_busy: Callable[[], bool], fn: Callable[..., T], *args: object, then: Then = None
) -> T:
    """`run` for a query a person or a model asked: it takes its turn (QUERY_THREADS), and its turn
    rests after it while `capture_busy()` (QUERY_REST). `then`: called with the result on the worker
    thread, before the event loop hears of it (a reply sent from there)."""
    limiter, token = _query_limiter(), object()
    try:  # a free slot is taken without a round of the event loop (the awaited acquire's checkpoint)
        limiter.acquire_on_behalf_of_nowait(token)
    except anyio.WouldBlock:
        await limiter.acquire_on_behalf_of(token)
    result: T = await finish(_submit(limiter, token, capture_busy, db_path, fn, args, then))
    return result


def _submit(
    limiter: anyio.CapacityLimiter,
    token: object,
    capture_busy: Callable[[], bool],
    db_path: str,
    fn: Callable[..., Any],
    args: tuple[object, ...],
    then: Then,
) -> Running:
    """The query on the queries' own thread: no rounds of the event loop before it starts (anyio's
    `to_thread` takes two), and one connection whose page cache every query warms (anyio's idle threads
    took turns, each with its own connection).

    The turn is given back as the query ends, before its reply goes out (`then`): a client that sends
    its next request as soon as it has the reply (a script, an agent's next tool call) finds the turn
    free, where a turn given back after the loop heard of the end was still held for 126 of 285 such
    searches, and each of those waited on the slow way (a task, the limiter's wait, more rounds)."""
    loop = asyncio.get_running_loop()
    started = time.perf_counter()

    def work() -> Any:
        try:
            result = fn(thread_connection(db_path), *args)
        finally:
            _on_loop(loop, _give_back, limiter, token, started, capture_busy)
        if then is not None:
            then(result)
        return result

    try:
        done = _QUERIES.submit(work)
    except BaseException:
        limiter.release_on_behalf_of(token)
        raise
    return done


def _give_back(limiter: anyio.CapacityLimiter, token: object, started: float, capture_busy: Callable[[], bool]) -> None:
    """A query's turn, given back (on the loop), after a rest while `capture_busy()` (QUERY_REST)."""
    rest = (time.perf_counter() - started) * QUERY_REST if capture_busy() else 0.0
    if rest > 0:
        asyncio.get_running_loop().call_later(rest, limiter.release_on_behalf_of, token)
    else:
        limiter.release_on_behalf_of(token)


def _on_loop(loop: asyncio.AbstractEventLoop, fn: Callable[..., object], *args: object) -> None:
    """`fn(*args)` on `loop`, from a worker thread; nothing once the loop is closed (the daemon stopped)."""
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass
