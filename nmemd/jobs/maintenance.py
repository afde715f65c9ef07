"""The maintenance jobs: retention, checkpoints, incremental vacuum, FTS5 merges, integrity, optimize,
the teammates' window and the import of new agent session files (`scheduler` runs them).

Every job is a series of short steps, each its own `BEGIN IMMEDIATE` under the
store lock (a few ms), so ingestion never waits behind a whole job: the lock is
handed to a waiting batch between steps. Each returns the line `nmem maintain` prints.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel

from nmemd.config import tunable
from nmemd.errors import StorageError
from nmemd.jobs import retention
from nmemd.store import fts, readers
from nmemd.store.checkpointer import WAL_TRUNCATE_BYTES, keep_wal_short, side_checkpoint
from nmemd.store.database import Store, translate
from nmemd.store.repair import plan_fts_data_as_large

LOG = logging.getLogger("nmemd.maintenance")
VACUUM_PAGES = tunable("VACUUM_PAGES", 256, 1)  # pages per incremental_vacuum step
MAX_STEPS = 100_000  # a runaway loop guard; real jobs need far fewer steps
FTS_OPTIMIZE_ROW = "fts_optimize"  # jobs row: when fts_merge last merged the index down completely


# --- steps ---------------------------------------------------------------------------------------


async def _script_step(store: Store, sql: str) -> None:
    """One short write transaction run by executescript.

    `PRAGMA incremental_vacuum(N)` yields zero-column rows that Python's
    `execute` stops at after one page; executescript steps it to the end.
    """
    async with store.lock:
        with anyio.CancelScope(shield=True):
            try:
                await store.conn.executescript(f"BEGIN IMMEDIATE;\n{sql};\nCOMMIT;")
            except sqlite3.Error as exc:
                try:
                    if store.conn.in_transaction:
                        await store.conn.execute("ROLLBACK")
                except sqlite3.Error:
                    LOG.exception("rollback failed")
                raise translate(exc) from exc
            store.committed()


async def _read(store: Store, sql: str) -> Any:
    """A scalar from the write connection, between (never inside) other writers' transactions."""
    async with store.lock:
        try:
            return await store.scalar(sql)
        except sqlite3.Error as exc:
            raise translate(exc) from exc


async def _between_steps(store: Store) -> None:
    """Between two steps: let waiting batches run, then copy the step's WAL frames.

    Job steps write a lot: a retention step of 100 rows rewrites ~200 pages
    (tables, indexes, FTS segments, zeroed by secure_delete), ~200 MB/s of WAL.
    Copying each step's frames before the next one (`keep_wal_short`, also what
    the daemon's background checkpointer does) keeps the WAL from growing by the
    whole job; the job just takes a little longer. The same code runs when
    `nmem maintain` works on the database itself, with no daemon and no checkpointer.
    """
    await anyio.lowlevel.checkpoint()  # a batch waiting for the lock goes first
    try:
        await keep_wal_short(store)
    except sqlite3.Error as exc:  # the next step tries again
        LOG.debug("checkpoint between steps: %s", exc)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _mb(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.0f} KB" if n < 1048576 else f"{n / 1048576:.1f} MB"


async def _checkpoint(store: Store, mode: str) -> tuple[int, int, int]:
    try:
        async with store.checkpoint_lock:  # the background checkpointer may be mid-copy
            return await anyio.to_thread.run_sync(side_checkpoint, store.settings.db, mode)
    except sqlite3.Error as exc:
        raise translate(exc) from exc


async def record_run(store: Store, name: str, outcome: str) -> None:
    """A job's outcome and time in the `jobs` table (`nmem status`; the scheduler's next run counts from it)."""
    async with store.write() as conn:
        await conn.execute(
            "INSERT INTO jobs(name, last_run, outcome) VALUES (?, ?, ?)"
            " ON CONFLICT(name) DO UPDATE SET last_run = excluded.last_run, outcome = excluded.outcome",
            (name, time.time(), outcome),
        )


async def last_run(store: Store, name: str) -> float | None:
    """When a job (or a `jobs` row such as FTS_OPTIMIZE_ROW) last ran, None if never."""
    async with store.lock:
        rows = await store.conn.execute_fetchall("SELECT last_run FROM jobs WHERE name = ?", (name,))
    for row in rows:
        return float(row[0]) if row[0] is not None else None
    return None


# --- jobs ----------------------------------------------------------------------------------------


async def checkpoint(store: Store, *, forced: bool = False) -> str:
    """PASSIVE; TRUNCATE once the WAL file outgrows its limit (it never shrinks otherwise), or
    whenever someone asked for maintenance (`nmem maintain`) and every frame was copied."""
    wal = store.settings.db + "-wal"
    before = _size(wal)
    busy, frames, done = await _checkpoint(store, "PASSIVE")
    mode = "PASSIVE"
    copied_all = not busy and done == frames
    if copied_all and (forced or before > WAL_TRUNCATE_BYTES):
        mode = "TRUNCATE"  # PASSIVE above did the copying; this only waits (briefly) for readers and truncates
        busy, frames, done = await _checkpoint(store, "TRUNCATE")
    after = _size(wal)
    note = " (a reader kept some frames; retried next time)" if busy or done < frames else ""
    return f"{mode}: WAL {_mb(before)} -> {_mb(after)}, {done}/{frames} frames copied{note}"


async def vacuum(store: Store, *, forced: bool = False) -> str:
    """Give freelist pages back to the filesystem in small incremental_vacuum steps, then checkpoint.

    In WAL mode the database file only shrinks when a checkpoint copies the
    shortened database back, hence the PASSIVE checkpoint at the end.
    """
    if await _read(store, "PRAGMA auto_vacuum") != 2:
        return "skipped: auto_vacuum is not INCREMENTAL (only a full VACUUM can shrink this file)"
    pages = VACUUM_PAGES
    page_size = int(await _read(store, "PRAGMA page_size"))
    size_before = _size(store.settings.db)
    free_before = free = int(await _read(store, "PRAGMA freelist_count"))
    # Concurrent batches reuse free pages and FTS5 automerges free some: the budget (twice
    # what the freelist needed at the start) ends a run that chases a refilling freelist.
    budget = min(MAX_STEPS, 2 * -(-free_before // pages) + 10)
    steps = freed = 0
    while free > 0 and steps < budget:
        await _script_step(store, f"PRAGMA incremental_vacuum({pages})")
        steps += 1
        left = int(await _read(store, "PRAGMA freelist_count"))
        freed += max(0, min(pages, free - left))
        free = left
        await _between_steps(store)
    if freed:
        await _checkpoint(store, "PASSIVE")
    size_after = _size(store.settings.db)
    return (
        f"freed {freed} pages ({_mb(freed * page_size)}) in {steps} steps, {free} left;"
        f" file {_mb(size_before)} -> {_mb(size_after)}"
    )


# A merge step holds the write lock about FTS_STEP_MS: the first asks for FTS_MERGE_PAGES, the next
# step's page count follows the last step's time. FTS5 ends a step only between two terms, so a step that
# reaches a common word's doclist takes longer whatever the count (up to ~60 ms at a million
# observations); the steps after it are smaller, and grow back by at most twice per step.
FTS_MERGE_PAGES = tunable("FTS_MERGE_PAGES", 64, 1)
FTS_STEP_MS = tunable("FTS_STEP_MS", 10.0, 0.0001)
FTS_STEP_PAGES_MIN = 4
FTS_STEP_PAGES_MAX = 4096
# After a long step (over twice the target, and over FTS_LONG_STEP_MS) the job waits 50 times the
# excess (at most FTS_PAUSE_MAX_S): the lock is then held that long in at most ~1/50 of the job's
# time, so few hooks arrive during a long step (the p99 of acknowledgements during a full merge
# at a million observations). The full merge takes longer there: 76 s instead of 48 s (a loaded machine).
FTS_LONG_STEP_MS = 20.0
FTS_LONG_STEP_PAUSE = 50.0
FTS_PAUSE_MAX_S = 2.0


@dataclass
class FtsMergeRun:
    """What one `merge_fts` did, step by step."""

    full: bool
    pages: list[int] = field(default_factory=list)  # the page count asked of each step
    ms: list[float] = field(default_factory=list)  # how long each step held the write lock
    changed: int = 0  # rows of the FTS5 tables written
    paused_s: float = 0.0  # waited after long steps

    def line(self) -> str:
        kind = "full merge" if self.full else "merge"
        if not self.ms:
            return f"{kind}: no step"
        ms = sorted(self.ms)
        return (
            f"{kind}: {len(ms)} steps of {min(self.pages)}-{max(self.pages)} pages, {self.changed} rows changed;"
            f" step p50 {ms[len(ms) // 2]:.1f} ms, max {ms[-1]:.1f} ms, {sum(ms) / 1000:.1f} s in all"
            f" (+{self.paused_s:.1f} s paused after long steps)"
        )


async def _fts_step(store: Store, pages: int) -> tuple[int, float]:
    """One `merge` of about |pages| pages in its own transaction; returns the rows it changed
    (< 2: nothing was left to merge) and the ms it held the write lock."""
    async with store.write() as conn:
        started = time.perf_counter()
        rows = await conn.execute_fetchall("SELECT total_changes()")
        start = int(list(rows)[0][0])
        await conn.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES ('merge', ?)", (pages,))
        rows = await conn.execute_fetchall("SELECT total_changes()")
        changed = int(list(rows)[0][0]) - start
    return changed, (time.perf_counter() - started) * 1000  # COMMIT included


def _next_pages(pages: int, took_ms: float, target_ms: float) -> int:
    scale = min(2.0, target_ms / max(took_ms, 0.01))
    return max(FTS_STEP_PAGES_MIN, min(FTS_STEP_PAGES_MAX, int(pages * scale)))


async def merge_fts(store: Store, *, full: bool) -> FtsMergeRun:
    """Merge FTS5 segments in steps of about FTS_STEP_MS each, until FTS5 has nothing left to merge.

    `full`: all segments into one (FTS5's 'optimize' is one long transaction; `('merge', -N)`
    followed by `('merge', N)` until a step changes less than 2 rows does the same work in
    steps). Otherwise only what FTS5 would merge itself: merges under way, levels of `usermerge`
    (4) segments. Ingestion goes on between steps.
    """
    run = FtsMergeRun(full=full)
    pages, target_ms = FTS_MERGE_PAGES, FTS_STEP_MS
    sign = -1 if full else 1
    while len(run.ms) < MAX_STEPS:
        delta, took = await _fts_step(store, sign * pages)
        run.pages.append(pages)
        run.ms.append(took)
        run.changed += delta
        if delta < 2 and sign > 0:
            break
        sign = 1  # `-N` only starts a full merge (and does its first N pages)
        pages = _next_pages(pages, took, target_ms)
        await _between_steps(store)
        long_ms = max(2 * target_ms, FTS_LONG_STEP_MS)
        if took > long_ms:
            pause = min(FTS_PAUSE_MAX_S, (took - long_ms) / 1000 * FTS_LONG_STEP_PAUSE)
            run.paused_s += pause
            await anyio.sleep(pause)
    return run


# A search reads a word's doclist in each FTS5 segment from its end (newest first), and SQLite 3.40 pays
# for each segment's long doclists there: the bulk writes of an import or a team join leave the index in
# several large segments until its daily full merge, and a search then costs 15 % more instructions (a
# million observations in 9 segments; ~7 % of the daemon's CPU a search: BENCHMARKS.md). When the pages
# outside the largest segment reach this share of the index, the next merge is a full one; a day of hooks
# adds a few percent.
FTS_UNMERGED_SHARE: Final = 0.1


async def unmerged_share(store: Store) -> float:
    """The share of the index's leaf pages outside its largest segment, from FTS5's page index (a row per
    leaf page a term starts on, `pgno` the page number shifted left once: fts5_index.c); ~2 ms at 1M."""
    async with store.lock:
        rows = await store.conn.execute_fetchall("SELECT max(pgno >> 1) FROM observations_fts_idx GROUP BY segid")
    pages = [int(r[0] or 0) for r in rows]
    total = sum(pages)
    return (total - max(pages)) / total if total else 0.0


async def fts_merge(store: Store, *, forced: bool = False) -> str:
    """Merge FTS5 segments in bounded steps; at most daily (or on demand, or when large segments stand
    beside the largest: FTS_UNMERGED_SHARE) merge it down to one."""
    last = await last_run(store, FTS_OPTIMIZE_ROW)
    full = (
        forced
        or last is None
        or time.time() - last >= store.settings.maintenance_fts_optimize_interval_s
        or await unmerged_share(store) >= FTS_UNMERGED_SHARE
    )
    outcome = (await merge_fts(store, full=full)).line()
    if full:
        await record_run(store, FTS_OPTIMIZE_ROW, outcome)
    return outcome


def _integrity_read(conn: sqlite3.Connection) -> list[str]:
    return [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]


def _fts_check_on_snapshot(db: str) -> float:
    """FTS5's integrity-check on a private copy of the database; returns the ms it took.

    The check is an INSERT: on the live file it would hold the write lock for
    the whole check (~0.3 s per 50,000 observations), stalling ingestion. The
    backup API copies one read snapshot (a WAL reader never blocks the writer)
    into a 0600 file beside the database, checked and removed here.
    """
    fd, copy = tempfile.mkstemp(prefix=".nmem-integrity-", suffix=".db", dir=os.path.dirname(db) or ".")
    os.close(fd)
    started = time.perf_counter()
    try:
        src = readers.open_readonly(db)
        dst = sqlite3.connect(copy, isolation_level=None)
        try:
            # A throwaway copy needs no durability: without these, closing it fsynced the whole
            # file and the disk stalled everybody's writes, ours included, for ~0.2 s.
            dst.execute("PRAGMA journal_mode=OFF")
            dst.execute("PRAGMA synchronous=OFF")
            src.backup(dst)  # in one step: one snapshot, never restarted by our writer's commits
            # The snapshot's newest observations may wait for indexing (m004): index them in the copy.
            below = dst.execute("SELECT indexed_below FROM fts_state").fetchone()[0]
            dst.execute(fts.INDEX_RANGE, (below, 1 << 62))
            dst.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES ('integrity-check', 1)")
        finally:
            dst.close()
            src.close()
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(copy + suffix)
            except FileNotFoundError:
                pass
    return (time.perf_counter() - started) * 1000


async def integrity(store: Store, *, forced: bool = False) -> str:
    """quick_check on a read-only connection, then FTS5's index-versus-content check on a snapshot.

    Neither takes the write lock: ingestion goes on while they run.
    """

    def quick_check() -> list[str]:
        conn = readers.open_readonly(store.settings.db)
        try:
            return _integrity_read(conn)
        finally:
            conn.close()

    try:
        problems = await anyio.to_thread.run_sync(quick_check)
    except sqlite3.Error as exc:
        raise translate(exc) from exc
    if problems != ["ok"]:
        raise StorageError(f"quick_check: {'; '.join(problems)}")
    try:
        took = await anyio.to_thread.run_sync(_fts_check_on_snapshot, store.settings.db)
    except sqlite3.DatabaseError as exc:
        raise StorageError(f"FTS index does not match the observations: {exc}") from exc
    except OSError as exc:
        raise StorageError(f"FTS integrity-check: cannot copy the database: {exc}") from exc
    return f"quick_check ok; FTS integrity-check ok on a snapshot ({took:.0f} ms, none under the write lock)"


async def optimize(store: Store, *, forced: bool = False) -> str:
    """`PRAGMA optimize` with a bounded ANALYZE, so query plans follow the data's shape (but FTS5's
    data table is always planned as large: see `plan_fts_data_as_large`)."""
    async with store.write() as conn:
        await conn.execute("PRAGMA analysis_limit=400")
        await conn.execute("PRAGMA optimize")
        fixed = await plan_fts_data_as_large(conn)
    return "PRAGMA optimize done" + ("; observations_fts_data recorded as large again" if fixed else "")


async def retention_job(store: Store, *, forced: bool = False) -> str:
    """Delete what retention expired (nmemd.jobs.retention), checkpointing as the other jobs do."""
    notice = 0.0 if forced else retention.NOTICE_S  # on demand: the person asked, and sees what went
    return (await retention.sweep(store, between_steps=_between_steps, notice_s=notice)).line()


async def team_window(store: Store, *, forced: bool = False) -> str:
    """Teammates' rows older than `team_window_days` go (the server still answers for them), in
    short steps as retention deletes."""
    from nmemd.team import local

    days, total = store.settings.team_window_days, 0
    for _ in range(MAX_STEPS):
        gone = await store.transaction(local.prune_step, days, time.time(), retention.RETENTION_BATCH)
        total += gone
        if gone < retention.RETENTION_BATCH:
            break
        await _between_steps(store)
    return f"removed {total} teammates' observations older than {days:g} days" if days > 0 else "window off"


BAD_FILES_LOGGED: Final = 10
HISTORY_TIMEOUT_S: Final = 1800.0  # an import of years of sessions takes minutes; a hung one is stopped
_IMPORT = "import sys; from nmemd.cli import main; sys.argv = ['nmem', 'import-transcripts', '--json']; main()"


async def history(store: Store, *, forced: bool = False) -> str:
    """Import what is new in the agents' session files, as `nmem import-transcripts` does, through
    this daemon's socket like any client: the same reading, keys and group commit, so a session also
    seen live is stored once. Run as a child process: reading and parsing stay off the event loop."""
    settings = store.settings
    env = {**os.environ, "NMEM_HOME": settings.home, "NMEM_SOCKET": settings.socket, "NMEM_DB": settings.db}
    try:
        with anyio.fail_after(HISTORY_TIMEOUT_S):
            done = await anyio.run_process([sys.executable, "-I", "-c", _IMPORT], env=env, check=False)
    except TimeoutError:
        return f"failed: the import took over {HISTORY_TIMEOUT_S:.0f} s and was stopped (it resumes next time)"
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    try:
        summary = json.loads(lines[-1]) if lines else {}
    except ValueError:
        summary = {}
    if done.returncode != 0 or not isinstance(summary, dict):
        reason = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        return f"failed: nmem import-transcripts exited with {done.returncode}: {reason}"
    bad_files = [b for b in summary.get("bad_files") or [] if isinstance(b, dict)]
    for b in bad_files[:BAD_FILES_LOGGED]:  # each skipped file named once a run, the run went on
        LOG.info("history import skipped %s: %s", b.get("path"), b.get("reason"))
    if len(bad_files) > BAD_FILES_LOGGED:
        more = len(bad_files) - BAD_FILES_LOGGED
        LOG.info("history import skipped %d more files (nmem import-transcripts names them)", more)
    bad = len(bad_files)
    return (
        f"{summary.get('files_read', 0)} of {summary.get('files', 0)} session files read,"
        f" {summary.get('events_new', 0)} new events" + (f", {bad} unreadable files" if bad else "")
    )
