"""What a start puts right before the store takes writes, and the FTS5 and planner settings it keeps.

A migration that adds an index leaves old rows to index (resumable, a chunk per transaction); a
retention sweep that crashed leaves FTS5's merges deferred; a store filled by an import has no
planner statistics, and a young store's statistics make FTS5 scan its own table. `open_store` runs
`repair`; maintenance and retention use the settings' pieces while the daemon runs.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Final

import aiosqlite

from nmemd.store import fts, grams

LOG = logging.getLogger("nmemd.store")
# FTS5's merge settings as nmem runs them (FTS5's defaults): retention sweeps defer merges while they
# run (automerge off, crisismerge raised) and set these back; `repair` puts back what a crash left.
FTS_MERGES: Final = {"automerge": 4, "crisismerge": 16}


async def repair(conn: aiosqlite.Connection) -> None:
    """After the migrations, before the first write: FTS5's merge settings, the indexes a migration
    left to build, planner statistics."""
    # A retention sweep defers FTS5's merges while it runs; a crash may have left them deferred.
    # (A read first: no write at every start for settings that are almost always right.)
    rows = await conn.execute_fetchall(
        "SELECT k, v FROM observations_fts_config WHERE k IN ('automerge', 'crisismerge')"
    )
    await set_fts_merges(conn, {k: FTS_MERGES[k] for k, v in rows if int(v) != FTS_MERGES[k]})
    await _reindex_fts(conn)
    await _backfill_grams(conn)
    await _ensure_statistics(conn)
    if await plan_fts_data_as_large(conn):
        LOG.info("sqlite_stat1: observations_fts_data recorded as large (FTS5 merges scanned it)")


GRAMS_BACKFILL_CHUNK = 50_000  # ids per transaction: ~0.1-0.3 s of the write lock at start
FTS_REINDEX_CHUNK = 100_000  # ids per transaction when a migration (m008, m010) indexes old rows again


async def _backfill_grams(conn: aiosqlite.Connection) -> None:
    """Index the unspaced-script pairs of rows stored before migration m007 (`grams_from` up to
    `grams_below`)."""
    await _index_in_chunks(
        conn, "grams", grams.INDEX_RANGE, GRAMS_BACKFILL_CHUNK, "unspaced-script text",
        "indexing unspaced-script text (CJK, Thai) of observations below id %d",
    )  # fmt: skip


async def _reindex_fts(conn: aiosqlite.Connection) -> None:
    """Index the rows stored before migration m008 or m010 into its new index (`reindex_from` up to
    `reindex_below`). The checkpointer does not run yet: each chunk is checkpointed here, or the WAL
    held the whole new index (650 MB at 1M)."""
    await _index_in_chunks(
        conn, "reindex", fts.INDEX_RANGE, FTS_REINDEX_CHUNK, "observations",
        "indexing observations below id %d again for full-text search (a migration's new index)",
        checkpoint=True,
    )  # fmt: skip


async def _index_in_chunks(
    conn: aiosqlite.Connection, column: str, statement: str, chunk: int, what: str, starting: str,
    *, checkpoint: bool = False,
) -> None:  # fmt: skip
    """Run `statement` over ids from fts_state's `<column>_from` to its `<column>_below`, a chunk per
    transaction. Resumable: `<column>_from` records how far it got, so a crash in the middle goes on
    from there."""
    rows = await conn.execute_fetchall(f"SELECT {column}_from, {column}_below FROM fts_state")
    start, end = (int(v) for v in list(rows)[0])
    if start >= end:
        return
    LOG.info(starting, end)
    began = time.monotonic()
    while start < end:
        stop = min(start + chunk, end)
        await conn.execute("BEGIN IMMEDIATE")
        try:
            await conn.execute(statement, (start, stop))
            await conn.execute(f"UPDATE fts_state SET {column}_from = ?", (stop,))
            await conn.execute("COMMIT")
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        if checkpoint:
            await conn.execute_fetchall("PRAGMA wal_checkpoint(RESTART)")
        start = stop
        LOG.info("indexed %s up to id %d of %d (%.1f s)", what, stop, end, time.monotonic() - began)


async def _ensure_statistics(conn: aiosqlite.Connection) -> None:
    """Planner statistics from the first start: without them SQLite may read a whole type's index
    where a session's would do (a store built by an import had none until the first `optimize`).
    `analysis_limit` keeps ANALYZE to a sample of each index, milliseconds even at a million rows."""
    has = await conn.execute_fetchall("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'")
    if has and not await _statistics_stale(conn):
        return
    await conn.execute("PRAGMA analysis_limit=400")
    await conn.execute("ANALYZE")


async def _statistics_stale(conn: aiosqlite.Connection) -> bool:
    """No statistics of observations, or ones taken when it held a tenth of its rows or fewer (the first
    start's ANALYZE ran on an empty file; an import then brought a million rows)."""
    rows = await conn.execute_fetchall("SELECT stat FROM sqlite_stat1 WHERE tbl = 'observations' LIMIT 1")
    recorded = int(str(list(rows)[0][0]).split()[0]) if rows else 0
    span = await conn.execute_fetchall("SELECT coalesce(max(id) - min(id) + 1, 0) FROM observations")
    estimated = int(list(span)[0][0])  # two rowid lookups, not a count
    return estimated >= STATS_MIN_ROWS and recorded * 10 < estimated


STATS_MIN_ROWS = 1000  # below this any plan is fast: no ANALYZE at every start of a young store


# FTS5 plans the statements it runs on its own tables from sqlite_stat1 like any other. The ANALYZE
# of a young store (the first start's, on an empty file) records `observations_fts_data` as 2 rows,
# and believing that, SQLite runs FTS5's `DELETE ... WHERE id>=? AND id<=?` (once per input segment
# of every merge step, automerges inside batches included) as a scan of the whole index: 80 ms per
# statement at a million observations, a 64-page merge step 1.1 s instead of 7 ms. Every statement
# FTS5 runs there is a rowid or primary-key lookup, right whenever the table is believed big.
FTS_DATA_STAT = "1000000"


async def plan_fts_data_as_large(conn: aiosqlite.Connection) -> bool:
    """Record `observations_fts_data` as a big table in sqlite_stat1 (after any ANALYZE); True when
    the row changed. `ANALYZE sqlite_schema` reloads the statistics and prepares statements again,
    FTS5's own included (deleting the row would leave this connection with the old estimate)."""
    if not await conn.execute_fetchall("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'"):
        return False
    rows = await conn.execute_fetchall("SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'observations_fts_data'")
    if all(idx is None and stat == FTS_DATA_STAT for idx, stat in rows):
        return False  # right already, or no row: SQLite's default estimate is a million rows
    await conn.execute("DELETE FROM sqlite_stat1 WHERE tbl = 'observations_fts_data'")
    await conn.execute(
        "INSERT INTO sqlite_stat1(tbl, idx, stat) VALUES ('observations_fts_data', NULL, ?)", (FTS_DATA_STAT,)
    )
    await conn.execute("ANALYZE sqlite_schema")
    return True


def set_fts_merges_on_thread(db: sqlite3.Connection, options: dict[str, int]) -> None:
    """`set_fts_merges` on the writer thread, inside a transaction."""
    db.executemany(fts.COMMAND, options.items())


async def set_fts_merges(conn: aiosqlite.Connection, options: dict[str, int]) -> None:
    """Set FTS5 merge options (`automerge`, `crisismerge`) of the main index; stored in the database."""
    await conn.executemany(fts.COMMAND, list(options.items()))
