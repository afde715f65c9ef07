"""When and how the maintenance jobs run: the table of jobs in `nmem maintain`'s order, each one's
time limit, a run recorded in the `jobs` table, and the daemon's scheduler.

The scheduler runs each job in a task of its own, within its time limit (`TIME_LIMIT_S`): a job
that hangs is stopped at its limit, and meanwhile the others keep their own schedules (issue #28,
finding 4: a hung history import kept the 2 s checkpoint from running). Jobs never raise into the
daemon: a failure is a result with ok=False.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

import anyio
import anyio.abc
import msgspec

from nmemd.errors import UnknownJob
from nmemd.jobs.maintenance import (
    HISTORY_TIMEOUT_S,
    checkpoint,
    fts_merge,
    history,
    integrity,
    optimize,
    record_run,
    retention_job,
    team_window,
    vacuum,
)
from nmemd.store.database import Store

if TYPE_CHECKING:
    from nmemd.capture.host import Host

LOG = logging.getLogger("nmemd.maintenance")


class JobResult(msgspec.Struct, kw_only=True):
    """What one job run did, as `nmem maintain` prints it."""

    name: str
    ok: bool
    outcome: str
    duration_ms: float


Job = Callable[..., Awaitable[str]]

# The order `nmem maintain` runs them in: retention deletes, merges free pages (and drop
# deleted entries from the FTS index), vacuum gives them back, the checkpoint last copies
# all of it into the file and truncates the WAL.
JOBS: dict[str, Job] = {
    "retention": retention_job,
    "team_window": team_window,
    "fts_merge": fts_merge,
    "vacuum": vacuum,
    "optimize": optimize,
    "integrity": integrity,
    "checkpoint": checkpoint,
    "history": history,
}
# `nmem maintain` without --job: everything but reading the agents' session files, which the
# schedule does (and `--job history` on demand).
MAINTAIN_ALL: Final = tuple(name for name in JOBS if name != "history")
# How long a scheduled run of each job may take before it is stopped (it runs again at its next
# time; every job resumes where it stopped, or starts over harmlessly). Far above what each takes
# on a million observations (BENCHMARKS.md: a full FTS merge ~76 s on a loaded machine), so only a
# job that hangs meets its limit.
TIME_LIMIT_S: Final[dict[str, float]] = {
    "retention": 1800.0,
    "fts_merge": 3600.0,
    "vacuum": 1800.0,
    "optimize": 600.0,
    "integrity": 3600.0,
    "checkpoint": 300.0,
    "history": HISTORY_TIMEOUT_S + 60.0,  # its own limit stops the import first, with its own outcome
    "team_window": 1800.0,
}
DEFAULT_TIME_LIMIT_S: Final = 3600.0  # a job added without its own
# A bulk write (an import, a team join, a history pass) leaves the FTS index in large segments beside
# the merged one, and searches and hooks pay for them until the next merge (BENCHMARKS.md: ingest 0.87x,
# search +6 % at a million observations). Once this many rows were indexed since the last `fts_merge`
# of this process (and this share of the index), the job runs at the next quiet moment instead of at its
# interval; it merges fully when FTS_UNMERGED_SHARE of the index lies outside its largest segment.
MERGE_AFTER_ROWS: Final = 10_000
MERGE_AFTER_SHARE: Final = 0.05


# --- running and recording -----------------------------------------------------------------------


def _store_of(target: Host | Store) -> Store:
    return target if isinstance(target, Store) else target.ingestor.store


def check_job(name: str) -> None:
    if name not in JOBS:
        raise UnknownJob(f"unknown job {name!r} (known: {', '.join(JOBS)})")


async def run_job(
    target: Host | Store, name: str, *, forced: bool = True, time_limit: float | None = None
) -> JobResult:
    """Run one job now and record it; failures come back as ok=False, never as exceptions.

    `forced` (on-demand runs) also does the daily full FTS merge; the scheduler passes False, and
    each job's `time_limit` (TIME_LIMIT_S): a job still running then is cancelled and recorded as failed.
    """
    check_job(name)
    store = _store_of(target)
    started = time.perf_counter()
    try:
        with anyio.move_on_after(math.inf if time_limit is None else time_limit) as limit:
            outcome, ok = await JOBS[name](store, forced=forced), True
        if limit.cancelled_caught:
            LOG.warning("maintenance job %s stopped at its time limit of %.0f s", name, time_limit)
            outcome, ok = f"failed: stopped at its time limit of {time_limit:.0f} s; it runs again next time", False
    except Exception as exc:
        LOG.exception("maintenance job %s failed", name)
        outcome, ok = f"failed: {exc}", False
    duration_ms = (time.perf_counter() - started) * 1000
    try:
        await record_run(store, name, outcome)
    except Exception:
        LOG.exception("could not record maintenance job %s", name)
    if ok:
        LOG.info("maintenance %s (%.0f ms): %s", name, duration_ms, outcome)
    return JobResult(name=name, ok=ok, outcome=outcome, duration_ms=round(duration_ms, 1))


async def run_jobs(target: Host | Store, job: str | None = None) -> list[JobResult]:
    """`nmem maintain`: one job, or all of them in order."""
    names = [job] if job is not None else list(MAINTAIN_ALL)
    for name in names:
        check_job(name)
    return [await run_job(target, name) for name in names]


# --- scheduler -----------------------------------------------------------------------------------


class Scheduler:
    """Runs each job when its interval has passed, preferably once the daemon has been quiet a moment.

    A job that has waited twice its interval for quiet runs anyway: its steps are
    short, and a daemon that is never idle still needs its WAL checkpointed.
    """

    def __init__(self, daemon: Host):
        self.daemon = daemon
        s = daemon.settings
        self.intervals = {
            "retention": s.maintenance_retention_interval_s,
            "checkpoint": s.maintenance_checkpoint_interval_s,
            "vacuum": s.maintenance_interval_s,
            "fts_merge": s.maintenance_interval_s,
            "optimize": s.maintenance_optimize_interval_s,
            "integrity": s.maintenance_integrity_interval_s,
            "history": s.maintenance_history_interval_s,
            "team_window": s.maintenance_retention_interval_s,
        }
        self.last_run: dict[str, float] = {}
        self.running: set[str] = set()  # jobs whose task has not ended
        # A job never run (a new database) counts its age from this start: it waits for quiet
        # like any other instead of running at the first tick, under whatever load there is.
        self.started = time.time()
        # The index's extent when fts_merge last started here: from 0, a store a bulk write left
        # unmerged (a daemon stopped before it was quiet) is merged at this daemon's first quiet moment.
        self.merged_below = 0

    async def load(self) -> None:
        """Carry last runs over restarts, so a daily job stays daily."""
        store = self.daemon.ingestor.store
        async with store.lock:
            rows = await store.conn.execute_fetchall("SELECT name, last_run FROM jobs")
        for name, last in rows:
            if name in JOBS and last is not None:
                self.last_run[name] = float(last)

    def due(self, now: float) -> list[str]:
        quiet = time.monotonic() - self.daemon.last_activity >= self.daemon.settings.maintenance_idle_s
        idle = quiet and self.daemon.ingestor.queued == 0
        out = []
        for name, interval in self.intervals.items():
            if interval <= 0:
                continue  # 0 turns a job off
            last = self.last_run.get(name, self.started)
            if last > now:
                # A last run in the future (the wall clock ran ahead, a job ran, the clock came
                # back) counts from now: otherwise a daily job would wait as long as the jump.
                LOG.warning("%s last ran %.0f s in the future: the clock went back; from now on", name, last - now)
                last = self.last_run[name] = now
            age = now - last
            due = age >= interval and (idle or age >= 2 * interval)
            if due or (idle and name == "fts_merge" and self._bulk_indexed()):
                out.append(name)
        return out

    def _bulk_indexed(self) -> bool:
        """Rows enough indexed since fts_merge last started to have left large segments beside the merged one."""
        indexed = self.daemon.ingestor.store.indexed_below
        grown = indexed - self.merged_below
        return grown >= MERGE_AFTER_ROWS and grown >= MERGE_AFTER_SHARE * indexed

    def tick_s(self) -> float:
        active = [i for i in self.intervals.values() if i > 0]
        return min([*active, 30.0, max(self.daemon.settings.maintenance_idle_s, 0.05)]) / 2 if active else 60.0

    def start_due(self, tasks: anyio.abc.TaskGroup) -> list[str]:
        """Start each job that is due and not running already, each in its own task of `tasks`, within
        its time limit: one job that hangs delays no other."""
        started = []
        for name in self.due(time.time()):
            if self.daemon.stopping.is_set():
                break
            if name not in self.running:
                self.running.add(name)
                tasks.start_soon(self._run, name, name=f"nmem job {name}")
                started.append(name)
        return started

    async def _run(self, name: str) -> None:
        if name == "fts_merge":
            self.merged_below = self.daemon.ingestor.store.indexed_below
        try:
            await run_job(self.daemon, name, forced=False, time_limit=TIME_LIMIT_S.get(name, DEFAULT_TIME_LIMIT_S))
        finally:
            self.last_run[name] = time.time()
            self.running.discard(name)


async def run_scheduler(daemon: Host) -> None:
    """The daemon's maintenance loop; logs failures and never raises (cancelled at shutdown)."""
    scheduler = Scheduler(daemon)
    if all(i <= 0 for i in scheduler.intervals.values()):
        return
    try:
        await scheduler.load()
    except Exception:
        LOG.exception("could not read the jobs table; running every job as if never run")
    async with anyio.create_task_group() as jobs:
        while True:
            await anyio.sleep(scheduler.tick_s())
            try:
                scheduler.start_due(jobs)
            except Exception:
                LOG.exception("maintenance scheduler step failed")
