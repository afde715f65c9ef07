"""The WAL is checkpointed in the background while the daemon runs, never inside a commit."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import anyio
import anyio.lowlevel
import pytest
from support.daemon import Daemon
from support.db import db_rows, integrity_ok
from support.helpers import new_id, payload, wait_until

from nmem_client import protocol
from nmem_client.hook import deliver
from nmemd import config
from nmemd.model import Extracted, Observation
from nmemd.store.batches import Incoming
from nmemd.store.checkpointer import Checkpointer
from nmemd.store.database import open_store


def test_wal_is_copied_into_the_database_while_events_keep_coming(daemon: Daemon) -> None:
    daemon.env["NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S"] = "0"  # the scheduled job is not what we test
    daemon.start()
    assert db_rows(daemon.db, "PRAGMA wal_autocheckpoint") == [(1000,)]  # readers keep SQLite's default
    empty = os.stat(daemon.db).st_size
    for i in range(300):
        status, _ = deliver(protocol.KIND_HOOK, new_id().encode(), payload(f"ckpt-{i:04d}"), 5.0)
        assert status == b"OK"
    # Only a checkpoint moves pages into the main file: it grows while the daemon still runs.
    wait_until(lambda: os.stat(daemon.db).st_size > empty, 10, "a background checkpoint")
    assert daemon.stop() == 0
    assert db_rows(daemon.db, "SELECT count(*) FROM events") == [(300,)]
    assert os.stat(str(daemon.db) + "-wal").st_size == 0  # TRUNCATE at shutdown


AHEAD = 8  # batches the sustained writer may run past the checkpointer's last run


@pytest.mark.anyio
async def test_sustained_writes_restart_the_wal_instead_of_growing_it() -> None:
    """Commits back to back: PASSIVE alone never catches up; RESTART keeps the WAL bounded.

    At least 300 batches, and on (bounded) until the checkpointer has restarted the WAL: on a fast run
    its first checkpoint can come after 300 batches are already in. The writer never gets more than
    AHEAD batches past the checkpointer's last run (commits still land during every PASSIVE): on a
    loaded machine the checkpointer's thread could otherwise wait for a core while a hundred batches
    went in, and the WAL's size would measure the scheduler, not the RESTART.
    """
    settings = config.load()
    async with open_store(settings) as store:
        checkpointer = Checkpointer(store, interval=0.0, restart_frames=64)
        store.add_commit_listener(checkpointer.committed)
        frames_seen: list[int] = []
        batches = ran_at = runs = 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(checkpointer.run)
            while batches < 300 or (checkpointer.restarts == 0 and batches < 5000):
                items = [_incoming(f"sustained-{batches}-{k}") for k in range(4)]
                await store.commit_batch(items)
                batches += 1
                if batches % 20 == 0:
                    frames_seen.append(checkpointer.wal_frames)
                if checkpointer.runs > runs:
                    ran_at, runs = batches, checkpointer.runs
                elif batches - ran_at >= AHEAD:
                    await _until(lambda last=runs: checkpointer.runs > last)
            tg.cancel_scope.cancel()
        assert checkpointer.restarts > 0, (checkpointer.runs, frames_seen)
        assert max(frames_seen[len(frames_seen) // 2 :]) < 64 * 8, frames_seen
    assert db_rows(settings.db, "SELECT count(*) FROM events") == [(4 * batches,)]
    integrity_ok(settings.db)


@pytest.mark.anyio
async def test_a_wal_past_its_restart_size_restarts_once_the_writer_is_quiet() -> None:
    """The RESTART that holds batches off waits for a pause, and needs no further commit to happen."""
    settings = config.load()
    async with open_store(settings) as store:
        # Never forced: only a quiet writer lets it restart.
        checkpointer = Checkpointer(store, interval=0.0, restart_frames=64, quiet_s=0.2, force_frames=10**9)
        store.add_commit_listener(checkpointer.committed)
        async with anyio.create_task_group() as tg:
            tg.start_soon(checkpointer.run)
            batches = 0
            while checkpointer.wal_frames < 64 and batches < 5000:
                await store.commit_batch([_incoming(f"quiet-{batches}-{k}") for k in range(4)])
                batches += 1
            assert checkpointer.wal_frames >= 64
            await _until(lambda: checkpointer.restarts > 0)
            assert time.monotonic() - checkpointer.last_commit >= 0.2
            await store.commit_batch([_incoming("quiet-after")])
            await _until(lambda: checkpointer.wal_frames < 64)  # the next checkpoint finds a WAL started over
            tg.cancel_scope.cancel()
    assert db_rows(settings.db, "SELECT count(*) FROM events") == [(4 * batches + 1,)]
    integrity_ok(settings.db)


@pytest.mark.anyio
async def test_checkpoints_follow_every_few_commits_under_load() -> None:
    """Commits back to back: a checkpoint after each `every` commits, without waiting out `interval`."""
    settings = config.load()
    async with open_store(settings) as store:
        checkpointer = Checkpointer(store, interval=3600.0, every=8)
        store.add_commit_listener(checkpointer.committed)
        async with anyio.create_task_group() as tg:
            tg.start_soon(checkpointer.run)
            batches = 0
            with anyio.fail_after(60):
                while checkpointer.runs < 3:
                    await store.commit_batch([_incoming(f"every-{batches}")])
                    batches += 1
                    await anyio.lowlevel.checkpoint()
            tg.cancel_scope.cancel()
        # The first follows the first commit, each other one 8 commits after the one before began
        # (an interval of an hour never ends here).
        assert batches >= 1 + 8 + 8
    assert db_rows(settings.db, "SELECT count(*) FROM events") == [(batches,)]


async def _until(predicate: Callable[[], bool]) -> None:
    """Poll (every 10 ms, 30 s at most) a figure of the checkpointer's, which has no event to wait on."""
    with anyio.fail_after(30):
        while not predicate():  # noqa: ASYNC110 - a bounded poll
            await anyio.sleep(0.01)


def _incoming(marker: str) -> Incoming:
    ex = Extracted(
        hook_event="PostToolUse",
        session_id="sustained",
        cwd="/p",
        project="/p",
        observations=[Observation(type="edit", title=f"Edit {marker}", content="x" * 2000, file_path=f"/p/{marker}")],
    )
    return Incoming(event_id=marker.replace("-", "x"), received_at=time.time(), extracted=ex)
