"""FTS5 merges at scale: FTS5's own statements keep their plans, the merge job goes in bounded steps and converges."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import db_rows, integrity_ok

from nmemd import config
from nmemd.jobs import maintenance
from nmemd.model import Extracted, Observation
from nmemd.store.database import FTS_DATA_STAT, Incoming, open_store

# What FTS5 runs on its data table for every input segment of every merge step (fts5_index.c).
FTS5_RANGE_DELETE = "EXPLAIN QUERY PLAN DELETE FROM observations_fts_data WHERE id>=? AND id<=?"
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def _event(n: int) -> Incoming:
    text = " ".join(f"{WORDS[(n * 7 + k) % len(WORDS)]}{(n + k) % 97}" for k in range(40))
    obs = Observation(type="edit", title=f"Edit file{n}.py", content=text, file_path=f"/p/src/file{n}.py")
    ex = Extracted(hook_event="PostToolUse", session_id=f"s{n // 500}", cwd="/p", project="/p", observations=[obs])
    return Incoming(event_id=f"ev{n:08d}", received_at=1000.0 + n, extracted=ex)


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
        await store.commit_batch([_event(n) for n in range(2000)])
        results = await maintenance.run_jobs(store, "optimize")  # PRAGMA optimize may analyse again
        assert results[0].ok, results
        rows = await store.conn.execute_fetchall(FTS5_RANGE_DELETE, (1, 2))
        assert "SEARCH" in str(list(rows)), rows
    assert _fts_data_stat(settings.db) == [(None, FTS_DATA_STAT)]
    assert "SEARCH" in _plan(settings.db)
    integrity_ok(settings.db)
