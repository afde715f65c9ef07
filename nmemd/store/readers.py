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
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

import anyio
import anyio.to_thread

from nmemd.errors import StorageError

T = TypeVar("T")

_local = threading.local()


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


async def query(
    db_path: str,
    capture_busy: Callable[[], bool],
    fn: Callable[..., T],
    *args: object,
    then: Callable[[T], object] | None = None,
) -> T:
    """`run` for a query a person or a model asked: it takes its turn (QUERY_THREADS), and its turn
    rests after it while `capture_busy()` (QUERY_REST). `then`: called with the result on the worker
    thread, before the event loop hears of it (a reply sent from there)."""
    limiter, token = _query_limiter(), object()
    try:  # a free slot is taken without a round of the event loop (the awaited acquire's checkpoint)
        limiter.acquire_on_behalf_of_nowait(token)
    except anyio.WouldBlock:
        await limiter.acquire_on_behalf_of(token)
    started = time.perf_counter()
    work = fn if then is None else _then(fn, then)
    try:
        # On the queries' own thread: no rounds of the event loop before it starts (anyio's `to_thread` takes
        # two), and one connection whose page cache every query warms (anyio's idle threads take turns).
        done = asyncio.get_running_loop().run_in_executor(_QUERIES, lambda: work(thread_connection(db_path), *args))
        with anyio.CancelScope(shield=True):  # a cancelled caller waits for its query, as `to_thread` waits
            result = await done
        return result
    finally:
        rest = (time.perf_counter() - started) * QUERY_REST if capture_busy() else 0.0
        if rest > 0:
            asyncio.get_running_loop().call_later(rest, limiter.release_on_behalf_of, token)
        else:
            limiter.release_on_behalf_of(token)


def _then(fn: Callable[..., T], then: Callable[[T], object]) -> Callable[..., T]:
    def both(*args: object) -> T:
        result = fn(*args)
        then(result)
        return result

    return both
