"""FTS5 merges at scale: FTS5's own statements keep their plans, the merge job goes in bounded steps and converges."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
from functools import partial
from pathlib import Path

import anyio
import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.env import BIN
from support.helpers import edit_incoming, payload, wait_until

from nmemd import config
from nmemd.daemon.server import serve
from nmemd.jobs import maintenance, scheduler
from nmemd.store.database import open_store
from nmemd.store.repair import FTS_DATA_STAT

# What FTS5 runs on its data table for every input segment of every merge step (fts5_index.c).
FTS5_RANGE_DELETE = "EXPLAIN QUERY PLAN DELETE FROM observations_fts_data WHERE id>=? AND id<=?"


def _plan(db: str | Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return " ".join(str(r[3]) for r in conn.execute(FTS5_RANGE_DELETE, (1, 2)))
    finally:
        conn.close()


def _fts_data_stat(db: str | Path) -> list[tuple[object, ...]]:
    return db_rows(db, "SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'observations_fts_data'")


@pytest.mark.anyio
async def test_the_first_starts_statistics_never_make_fts5_scan_its_index() -> None:
    """The ANALYZE of an empty store counted 2 rows in observations_fts_data: FTS5's range deletes
    then scanned the whole index (a merge step of 1.1 s at a million observations)."""
    settings = config.load()
    async with open_store(settings) as store:  # a new, empty store: the daemon's first start analyses it
        rows = await store.conn.execute_fetchall(FTS5_RANGE_DELETE, (1, 2))
        assert "SEARCH" in str(list(rows)), rows
    assert _fts_data_stat(settings.db) == [(None, FTS_DATA_STAT)]
    assert "SEARCH" in _plan(settings.db)

    # a store analysed young by an earlier version: the row is put right at the next start
    conn = sqlite3.connect(settings.db)
    with conn:
        conn.execute("UPDATE sqlite_stat1 SET stat = '2' WHERE tbl = 'observations_fts_data'")
    conn.close()
    assert "SCAN" in _plan(settings.db)  # what FTS5 ran on such a store
    async with open_store(settings) as store:
        rows = await store.conn.execute_fetchall(FTS5_RANGE_DELETE, (1, 2))
        assert "SEARCH" in str(list(rows)), rows
        await store.commit_batch([edit_incoming(n, words=40) for n in range(2000)])
        results = await scheduler.run_jobs(store, "optimize")  # PRAGMA optimize may analyse again
        assert results[0].ok, results
        rows = await store.conn.execute_fetchall(FTS5_RANGE_DELETE, (1, 2))
        assert "SEARCH" in str(list(rows)), rows
    assert _fts_data_stat(settings.db) == [(None, FTS_DATA_STAT)]
    assert "SEARCH" in _plan(settings.db)
    integrity_ok(settings.db)


def _segments(db: str | Path) -> int:
    """FTS5 segments holding pages: a segment's pages have rowids (segid << 37) + ... (fts5_index.c)."""
    rows = db_rows(db, "SELECT count(DISTINCT id >> 37) FROM observations_fts_data WHERE id >= (1 << 37)")
    return int(rows[0][0])  # type: ignore[call-overload]


def _steps(monkeypatch: pytest.MonkeyPatch, first_pages: int, target_ms: float) -> None:
    """The merge's first step size and target time, constants of the job."""
    monkeypatch.setattr(maintenance, "FTS_MERGE_PAGES", first_pages)
    monkeypatch.setattr(maintenance, "FTS_STEP_MS", target_ms)


async def _fill(settings: config.Settings, batches: int, per_batch: int = 1100) -> None:
    """Each batch is indexed in its own transaction (> FTS_CHUNK rows): a segment each, automerged as FTS5 does."""
    async with open_store(settings) as store:
        for b in range(batches):
            await store.commit_batch([edit_incoming(n, words=40) for n in range(b * per_batch, (b + 1) * per_batch)])


@pytest.mark.anyio
async def test_the_full_merge_goes_in_steps_of_the_target_time_and_converges_to_one_segment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a target no step can meet: every step after the first asks FTS5 for the fewest pages
    _steps(monkeypatch, 16, 0.001)
    settings = config.load()
    await _fill(settings, 15)  # with automerge 4, 15 one-segment batches leave >= 4 segments whatever their size
    before = _segments(settings.db)
    assert before >= 4
    async with open_store(settings) as store:
        run = await maintenance.merge_fts(store, full=True)
        assert run.pages[0] == 16 and set(run.pages[1:]) == {maintenance.FTS_STEP_PAGES_MIN}, run.pages
        assert len(run.ms) > 50, run.line()  # many short transactions, each one a step
        assert _segments(settings.db) == 1
        again = await maintenance.merge_fts(store, full=False)  # nothing left: one step that changes nothing
        assert len(again.ms) == 1 and again.changed < 2, again.line()
        results = await scheduler.run_jobs(store, "fts_merge")
        assert results[0].ok and "full merge" in results[0].outcome and "step p50" in results[0].outcome, results
    assert _segments(settings.db) == 1
    integrity_ok(settings.db)
    print(f"\n{before} segments -> 1: {run.line()}")


@pytest.mark.anyio
async def test_fast_steps_grow_and_a_positive_merge_finishes_what_fts5_started(monkeypatch: pytest.MonkeyPatch) -> None:
    _steps(monkeypatch, 4, 1000.0)
    settings = config.load()
    await _fill(settings, 10)
    async with open_store(settings) as store:
        run = await maintenance.merge_fts(store, full=False)
        # steps far under the target double their pages each time
        assert run.pages[: min(3, len(run.pages))] == [4, 8, 16][: len(run.pages)], run.pages
        again = await maintenance.merge_fts(store, full=False)
        assert len(again.ms) == 1 and again.changed < 2, again.line()
    integrity_ok(settings.db)


@pytest.mark.anyio
async def test_batches_commit_between_the_steps_of_a_full_merge(monkeypatch: pytest.MonkeyPatch) -> None:
    _steps(monkeypatch, 4, 0.001)
    settings = config.load()
    await _fill(settings, 10)
    async with open_store(settings) as store:
        running = False
        during = batches = 0
        done = False

        async def job() -> None:
            nonlocal running, done
            running = True
            await maintenance.merge_fts(store, full=True)
            running, done = False, True

        async def capture() -> None:
            nonlocal during, batches
            n = 100_000
            while not done:
                assert await store.commit_batch([edit_incoming(k, words=40) for k in range(n, n + 10)]) == 10
                n += 10
                batches += 1
                during += running

        async with anyio.create_task_group() as tg:
            tg.start_soon(job)
            tg.start_soon(capture)
        assert during >= 10, during  # the store lock went to the waiting batch after each step
        await store.index_pending()
    integrity_ok(settings.db)
    assert db_rows(settings.db, "SELECT count(*) FROM observations WHERE event_id >= 'ev00100000'") == [(batches * 10,)]


def test_hooks_are_acknowledged_while_the_daemon_merges_in_steps(daemon: Daemon) -> None:
    settings = config.load()
    anyio.run(_fill, settings, 10)
    daemon.env.update({
        "NMEM_MAINTENANCE_INTERVAL_S": "0", "NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S": "0",
        "NMEM_MAINTENANCE_OPTIMIZE_INTERVAL_S": "0", "NMEM_MAINTENANCE_INTEGRITY_INTERVAL_S": "0",
        "NMEM_TUNE_FTS_MERGE_PAGES": "4", "NMEM_TUNE_FTS_STEP_MS": "0.001",  # the fewest pages a step
        "NMEM_INBOX_DRAIN_INTERVAL_S": "3600",  # so an event only counts if the socket path stored it
    })  # fmt: skip
    daemon.start()
    out: dict[str, subprocess.CompletedProcess[str]] = {}
    env = {**os.environ, "NMEM_AUTOSTART": "0"}
    runner = threading.Thread(target=lambda: out.update(run=subprocess.run(
        [str(BIN / "nmem"), "maintain", "--job", "fts_merge", "--json"], capture_output=True, text=True,
        timeout=120, env=env)))  # fmt: skip
    during: list[bool] = []  # per acknowledged event: was the merge still under way when it came back?
    failures: list[str] = []

    def sender(k: int) -> None:
        n = 0
        while runner.is_alive() or n < 3:
            done = run_send(payload(f"during merge {k} {n}", session_id="during-merge"))
            if done.returncode != 0 or done.stderr:
                failures.append(done.stderr.decode(errors="replace"))
            during.append(runner.is_alive())
            n += 1

    runner.start()
    senders = [threading.Thread(target=sender, args=(k,)) for k in range(3)]
    for t in senders:
        t.start()
    for t in [runner, *senders]:
        t.join(120)
    assert not failures, failures[:3]
    result = json.loads(out["run"].stdout)
    assert result["ok"] and "full merge" in result["outcome"], result
    assert sum(during) >= 4, f"only {sum(during)} events were acknowledged while the merge ran: {result}"
    assert db_rows(daemon.db, "SELECT count(*) FROM observations WHERE session_id = 'during-merge'") == [(len(during),)]
    assert db_rows(daemon.db, "SELECT count(*) FROM inbox") == [(0,)]
    assert daemon.stop() == 0
    integrity_ok(daemon.db)
    print(f"\n{sum(during)} of {len(during)} events acknowledged during {result['outcome']}")


@pytest.mark.anyio
async def test_large_segments_beside_the_merged_one_are_merged_before_the_day_is_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An import or a team join writes many rows in a day: the scheduled merge (not forced, the daily full
    merge done) merges the index down to one segment when FTS_UNMERGED_SHARE of its pages lie outside the
    largest one; a few rows more after that are merged as FTS5 would."""
    _steps(monkeypatch, 64, 1000.0)
    settings = config.load()
    await _fill(settings, 10)
    async with open_store(settings) as store:
        await maintenance.record_run(store, maintenance.FTS_OPTIMIZE_ROW, "full merge: this morning")
        assert _segments(settings.db) > 1
        assert await maintenance.unmerged_share(store) >= maintenance.FTS_UNMERGED_SHARE
        outcome = await maintenance.fts_merge(store)  # as the scheduler runs it
        assert outcome.startswith("full merge"), outcome
        assert _segments(settings.db) == 1 and await maintenance.unmerged_share(store) == 0.0
        await store.commit_batch([edit_incoming(n, words=40) for n in range(20_000, 20_050)])
        await store.index_pending()
        assert 0.0 < await maintenance.unmerged_share(store) < maintenance.FTS_UNMERGED_SHARE
        outcome = await maintenance.fts_merge(store)
        assert outcome.startswith("merge"), outcome
    integrity_ok(settings.db)


@pytest.mark.anyio
async def test_a_bulk_write_is_merged_at_the_next_quiet_moment_not_at_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An import or a team join leaves large segments beside the merged one; the scheduler runs fts_merge
    at the first quiet moment after it (an hour's interval here), on a store a stopped daemon left so and
    after rows written while the daemon runs, and never again while nothing more is written."""
    _steps(monkeypatch, 64, 1000.0)
    monkeypatch.setattr(scheduler, "MERGE_AFTER_ROWS", 2000)
    for key, value in {"NMEM_MAINTENANCE_INTERVAL_S": "3600", "NMEM_MAINTENANCE_IDLE_S": "0.05"}.items():
        monkeypatch.setenv(key, value)
    settings = config.load()
    await _fill(settings, 10)
    async with open_store(settings) as store:
        await maintenance.record_run(store, maintenance.FTS_OPTIMIZE_ROW, "full merge: this morning")
    assert _segments(settings.db) > 1

    def merges() -> list[tuple[object, ...]]:
        try:
            return db_rows(settings.db, "SELECT last_run, outcome FROM jobs WHERE name = 'fts_merge'")
        except sqlite3.Error:
            return []

    async def merged_after(before: list[tuple[object, ...]]) -> str:
        def changed() -> list[tuple[object, ...]]:
            return now if (now := merges()) != before else []

        rows = await anyio.to_thread.run_sync(partial(wait_until, changed, 30.0, "an fts_merge run"))
        return str(rows[0][1])

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            daemon = await tg.start(partial(serve, settings))
            first = await merged_after([])
            assert first.startswith("full merge") and _segments(settings.db) == 1, first
            store = daemon.ingestor.store
            for b in range(3):
                n = 50_000 + b * 1100
                await store.commit_batch([edit_incoming(k, words=40) for k in range(n, n + 1100)])
            await store.index_pending()
            second = await merged_after(merges())
            assert second.startswith("full merge") and _segments(settings.db) == 1, second  # 23 % outside
            after = merges()
            await anyio.sleep(1.0)  # many scheduler ticks at 0.05 s of quiet: nothing new to merge
            assert merges() == after
            daemon.stop_requested.set()
    integrity_ok(settings.db)
