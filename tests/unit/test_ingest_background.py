"""The ingestor in-process: background writes (team sync's) go between the hooks' batches, never before them."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import anyio
import anyio.lowlevel
import pytest
from support.db import db_rows

from nmemd import config
from nmemd.capture.ingest import Ingestor
from nmemd.errors import StorageError
from nmemd.model import Extracted, Observation
from nmemd.store.batches import Incoming
from nmemd.store.database import on_writer_thread, open_store

pytestmark = pytest.mark.anyio
WAIT_S = 10.0


def _event(eid: str) -> Incoming:
    obs = Observation(type="command", title="$ make", command="make")
    ex = Extracted(hook_event="PostToolUse", session_id="s1", cwd="/p", project="/p", observations=[obs])
    return Incoming(event_id=eid, received_at=1000.0, extracted=ex)


async def test_an_event_queued_during_a_background_write_commits_before_the_next_one() -> None:
    settings = config.load()
    running, release = threading.Event(), threading.Event()
    seen: dict[str, int] = {}

    def job(db: sqlite3.Connection, name: str, gate: bool) -> str:
        if gate:  # the writer thread is in this job while the test queues what follows
            running.set()
            assert release.wait(WAIT_S)
        seen[name] = db.execute("SELECT count(*) FROM events WHERE event_id = 'e1'").fetchone()[0]
        return name

    async with open_store(settings) as store:
        ingestor = Ingestor(store)
        acked, second_done = anyio.Event(), anyio.Event()
        results: list[str] = []

        async def write(name: str, gate: bool) -> None:
            results.append(await ingestor.write_between_batches(job, name, gate))
            if name == "second":
                second_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(ingestor.run)
            tg.start_soon(write, "first", True)
            assert await anyio.to_thread.run_sync(running.wait, WAIT_S)
            tg.start_soon(write, "second", False)
            await anyio.lowlevel.checkpoint()  # the second job is queued first, then the event
            ingestor.enqueue([_event("e1")], lambda error, new: acked.set())
            release.set()
            with anyio.fail_after(WAIT_S):
                await acked.wait()
                await second_done.wait()
            ingestor.close()
    assert results == ["first", "second"]
    assert seen == {"first": 0, "second": 1}  # the event, queued after the second job, committed before it
    assert db_rows(settings.db, "SELECT count(*) FROM events WHERE event_id = 'e1'") == [(1,)]


async def test_the_writer_indexes_a_chunk_between_batches_not_in_the_batch_that_completes_it() -> None:
    """FTS_CHUNK waiting observations are indexed by the writer's own step after the batch that brought
    them there (that batch's hook is acked without waiting for it); every row is found, no search asked."""
    from nmemd.store.batches import FTS_CHUNK

    settings = config.load()
    statements: list[str] = []
    async with open_store(settings) as store:
        ingestor = Ingestor(store)
        await on_writer_thread(store.conn, lambda db: db.set_trace_callback(statements.append))
        indexed = anyio.Event()
        store.add_commit_listener(lambda: indexed.set() if not store.unindexed else None)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ingestor.run)
            with anyio.fail_after(WAIT_S):
                assert await ingestor.submit_many([_event(f"a{n:05d}") for n in range(FTS_CHUNK)]) == FTS_CHUNK
                await indexed.wait()
            ingestor.close()
        await on_writer_thread(store.conn, lambda db: db.set_trace_callback(None))
    kinds = [s.split("(")[0].split(" VALUES")[0].strip() for s in statements]
    batch_end = kinds.index("COMMIT")  # the batch: its own transaction, no FTS insert in it
    assert "INSERT INTO events" in kinds[:batch_end] and not any("observations_fts" in k for k in kinds[:batch_end])
    assert any("INSERT INTO observations_fts" in k for k in kinds[batch_end:])  # the writer's step, after it
    assert db_rows(settings.db, "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH 'make'") == [
        (FTS_CHUNK,)
    ]
    assert db_rows(settings.db, "SELECT indexed_below FROM fts_state") == [(FTS_CHUNK + 1,)]


async def test_a_failed_background_write_is_rolled_back_and_raised_to_its_caller() -> None:
    settings = config.load()

    def half_then_fail(db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE scratch(x)")
        raise ValueError("a bug in the write")

    def bad_sql(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO no_such_table VALUES (1)")

    async with open_store(settings) as store:
        ingestor = Ingestor(store)
        async with anyio.create_task_group() as tg:
            tg.start_soon(ingestor.run)
            with anyio.fail_after(WAIT_S):
                with pytest.raises(ValueError, match="a bug"):
                    await ingestor.write_between_batches(half_then_fail)
                with pytest.raises(StorageError):
                    await ingestor.write_between_batches(bad_sql)
                assert await ingestor.write_between_batches(lambda db: db.execute("SELECT 1").fetchone()[0]) == 1
            ingestor.close()
        assert await ingestor.write_between_batches(lambda db: 2) == 2  # once closed: the store's lock, as before
    assert db_rows(settings.db, "SELECT count(*) FROM sqlite_master WHERE name = 'scratch'") == [(0,)]


async def test_a_write_that_paces_itself_is_not_followed_by_the_writers_rest() -> None:
    """Two background writes queued: after one with rest=False (team sync's pull, written in a pause
    between hooks) the writer takes the next in the same turn; after a default one it rests first."""
    settings = config.load()
    ran: list[str] = []
    async with open_store(settings) as store:
        ingestor = Ingestor(store)
        loop = asyncio.get_running_loop()
        for rest in (False, True):
            done = [anyio.Event(), anyio.Event()]

            async def write(n: int, rest: bool = rest, done: list[anyio.Event] = done) -> None:
                await ingestor.write_between_batches(lambda db: ran.append(f"{rest}{n}"), rest=rest)
                done[n].set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(write, 0)
                tg.start_soon(write, 1)
                with anyio.fail_after(WAIT_S):  # both queued; no ingestor.run: this test takes the writer's turn
                    while len(ingestor._jobs) < 2:
                        await anyio.lowlevel.checkpoint()
                async with store.lock:
                    rests_s = await on_writer_thread(store.conn, ingestor._write_while_queued, loop)
                if rest:  # the second waits for the writer's next turn, after the rest
                    assert rests_s > 0 and ran[-1] == "True0"
                    async with store.lock:
                        await on_writer_thread(store.conn, ingestor._write_while_queued, loop)
                else:
                    assert rests_s == 0 and ran[-2:] == ["False0", "False1"]
                with anyio.fail_after(WAIT_S):
                    await done[0].wait()
                    await done[1].wait()
    assert ran == ["False0", "False1", "True0", "True1"]
