"""The query turn (store/readers.py): free again by the time a reply has gone out.

A client that sends its next read as soon as it has a reply (a script, an agent's next tool call) must
find the turn free, or the read takes the slow way (a task, the limiter's wait, more rounds of the loop).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import anyio
import pytest

from nmemd.errors import QueryError
from nmemd.store import readers


def _store(folder: Path) -> str:
    path = folder / "nmem.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    return str(path)


def _count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


def _fails(conn: sqlite3.Connection) -> int:
    raise QueryError("bad query")


def test_the_turn_is_free_when_the_loop_hears_of_the_reply(tmp_path: Path) -> None:
    db = _store(tmp_path)

    async def main() -> None:
        sent = anyio.Event()
        loop_calls: list[object] = []

        def reply(result: object) -> None:  # on the worker thread, as rpc's reply is
            loop_calls.append(result)
            loop.call_soon_threadsafe(sent.set)

        loop = asyncio.get_running_loop()
        running = readers.start(db, lambda: False, _count, then=reply)
        assert running is not None
        assert readers.start(db, lambda: False, _count) is None  # one query at a time
        with anyio.fail_after(10):
            await sent.wait()
        # The next read, as the client sends it once it has the reply: the turn is free.
        again = readers.start(db, lambda: False, _count)
        assert again is not None
        with anyio.fail_after(10):
            assert await readers.finish(again) == 1
        assert loop_calls == [1]
        assert running.result() == 1

    anyio.run(main)


def test_a_failed_query_gives_its_turn_back_and_raises_its_error(tmp_path: Path) -> None:
    db = _store(tmp_path)

    async def main() -> None:
        done = threading.Event()
        running = readers.start(db, lambda: False, _fails)
        assert running is not None
        running.add_done_callback(lambda _: done.set())
        with anyio.fail_after(10):
            with pytest.raises(QueryError):
                await readers.finish(running)
        # The turn's give-back was queued on the loop before the error reached it.
        assert readers.start(db, lambda: False, _count) is not None
        assert done.is_set()

    anyio.run(main)
