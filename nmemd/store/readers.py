"""Read-only SQLite connections for queries, one per worker thread.

The daemon's single aiosqlite connection is for writing; a query run there
would queue behind (and inside) batch transactions. WAL lets these readers
see every committed batch without blocking the writer.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

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


async def run(db_path: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """Run `fn(conn, *args, **kwargs)` on a worker thread's read-only connection."""

    def call() -> T:
        return fn(thread_connection(db_path), *args, **kwargs)

    return await anyio.to_thread.run_sync(call)
