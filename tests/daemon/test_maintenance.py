"""Maintenance: vacuum gives deleted space back, checkpoints truncate the WAL, the scheduler runs, ingestion goes on."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import anyio
import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.helpers import count, edit_incoming, new_id, nmem, payload, send_hook, wait_until

from nmemd import config
from nmemd.jobs import maintenance, scheduler
from nmemd.store.database import open_store

TIMEOUT_S = 30.0
JOB_NAMES = {"fts_merge", "vacuum", "optimize", "integrity", "checkpoint"}


async def _fill_and_delete_half(settings: config.Settings, count: int = 20_000) -> None:
    """Many observations, then the older half deleted: a big freelist and a fragmented FTS index."""
    async with open_store(settings) as store:
        for start in range(0, count, 1000):
            await store.commit_batch([edit_incoming(n) for n in range(start, start + 1000)])
        async with store.write() as conn:
            await conn.execute("DELETE FROM observations WHERE id <= ?", (count // 2,))


def _sizes(db: str) -> dict[str, int]:
    rows = db_rows(db, "SELECT * FROM pragma_freelist_count, pragma_page_count")
    return {
        "freelist": int(rows[0][0]),  # type: ignore[call-overload]
        "pages": int(rows[0][1]),  # type: ignore[call-overload]
        "file": os.path.getsize(db),
        "wal": os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0,
    }


@pytest.mark.anyio
async def test_maintain_gives_space_back_and_truncates_the_wal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(maintenance, "WAL_TRUNCATE_BYTES", 1024 * 1024)
    settings = config.load()
    await _fill_and_delete_half(settings)
    async with open_store(settings) as store:
        # close() truncated the WAL; put the freed pages' history back in it, as a busy daemon would have
        async with store.write() as conn:
            await conn.execute("UPDATE observations SET count = count + 1")
        before = _sizes(settings.db)
        results = await scheduler.run_jobs(store)
        after = _sizes(settings.db)
        print(f"\nbefore {before}\nafter  {after}")
        for r in results:
            print(f"  {r.name}: {r.outcome} ({r.duration_ms:.0f} ms)")
        assert [r.name for r in results] == list(scheduler.MAINTAIN_ALL)  # history: on its schedule only
        assert all(r.ok for r in results), results
        # A big freelist: a fifth of the file at least (~1,000 of ~4,000 pages; its exact size moves with
        # the row format, e.g. m011's agent column)
        assert before["freelist"] > before["pages"] // 5 and after["freelist"] == 0
        assert after["file"] < before["file"] * 0.75
        checkpoint = results[-1]
        assert checkpoint.name == "checkpoint" and "TRUNCATE" in checkpoint.outcome and "-> 0 B" in checkpoint.outcome
        assert before["wal"] > maintenance.WAL_TRUNCATE_BYTES and after["wal"] < 64 * 1024  # + the jobs row
    integrity_ok(settings.db)
    jobs = {str(r[0]) for r in db_rows(settings.db, "SELECT name FROM jobs")}
    assert JOB_NAMES | {"fts_optimize"} <= jobs
    assert db_rows(settings.db, "SELECT count(*) FROM observations") == [(10_000,)]
    assert db_rows(settings.db, "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH 'alpha0'") != [(0,)]

    # the CLI, with no daemon: status shows the jobs, maintain runs locally, a bad job is one line
    status = json.loads(nmem("status", "--json").stdout)
    assert JOB_NAMES <= {j["name"] for j in status["database"]["jobs"]}
    done = nmem("maintain", "--job", "checkpoint", "--json")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["name"] for line in done.stdout.splitlines()] == ["checkpoint"]
    bad = nmem("maintain", "--job", "defrag")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown job 'defrag'") and "vacuum" in lines[0]


def _scheduler_env(interval: str) -> dict[str, str]:
    return {
        "NMEM_MAINTENANCE_INTERVAL_S": interval,
        "NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S": interval,
        "NMEM_MAINTENANCE_OPTIMIZE_INTERVAL_S": interval,
        "NMEM_MAINTENANCE_INTEGRITY_INTERVAL_S": interval,
        "NMEM_MAINTENANCE_IDLE_S": "0.1",
    }


def test_the_scheduler_runs_due_jobs_in_a_running_daemon(daemon: Daemon) -> None:
    daemon.env.update(_scheduler_env("0.3"))
    daemon.start()
    assert run_send(payload("scheduled maintenance")).returncode == 0

    def recorded() -> set[str] | None:
        if not daemon.db.exists():
            return None
        names = {str(r[0]) for r in db_rows(daemon.db, "SELECT name FROM jobs WHERE outcome NOT LIKE 'failed%'")}
        return names if JOB_NAMES <= names else None

    wait_until(recorded, timeout=15.0, message="every job recorded by the scheduler")

    def last_checkpoint() -> float:
        return float(db_rows(daemon.db, "SELECT last_run FROM jobs WHERE name = 'checkpoint'")[0][0])  # type: ignore[arg-type]

    first = last_checkpoint()
    wait_until(lambda: last_checkpoint() > first, timeout=15.0, message="a second checkpoint run (jobs are periodic)")
    status = json.loads(nmem("status", "--json").stdout)
    assert status["daemon"]["running"] and JOB_NAMES <= {j["name"] for j in status["database"]["jobs"]}
    done = nmem("maintain", "--job", "optimize")  # on demand, through the daemon
    assert done.returncode == 0 and "optimize" in done.stdout, done.stderr
    assert daemon.stop() == 0


@pytest.mark.slow
def test_a_new_database_runs_no_job_under_load_until_it_is_due_and_quiet(daemon: Daemon) -> None:
    """A job never run counts its age from the daemon's start: no vacuum or integrity check at the
    first tick of a new install while its first events stream in."""
    daemon.env.update({"NMEM_MAINTENANCE_IDLE_S": "1", "NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S": "2"})
    daemon.start()
    deadline = time.monotonic() + 3.0  # busy past several 0.5 s ticks, short of twice the checkpoint interval
    sent = 0
    while time.monotonic() < deadline:
        assert send_hook(daemon.socket, new_id(), payload(f"busy-{sent}"))[0] == b"OK"
        sent += 1
    assert db_rows(daemon.db, "SELECT name FROM jobs") == []

    def checkpointed() -> bool:
        return bool(db_rows(daemon.db, "SELECT 1 FROM jobs WHERE name = 'checkpoint'"))

    wait_until(checkpointed, timeout=15.0, message="the checkpoint job once the daemon is quiet")
    assert {str(r[0]) for r in db_rows(daemon.db, "SELECT name FROM jobs")} == {"checkpoint"}  # the rest: not due
    assert daemon.stop() == 0
    assert count(daemon.db, "events") == sent


@pytest.mark.slow
def test_ingestion_keeps_working_while_a_big_vacuum_runs(daemon: Daemon) -> None:
    settings = config.load()
    anyio.run(_fill_and_delete_half, settings)
    freelist = _sizes(settings.db)["freelist"]
    assert freelist > 1000
    daemon.env.update({
        **_scheduler_env("0"),  # only the on-demand run below
        "NMEM_TUNE_VACUUM_PAGES": "1",  # one page per step: the run lasts long enough to overlap
        "NMEM_INBOX_DRAIN_INTERVAL_S": "3600",  # so an event only counts if the socket path stored it
    })  # fmt: skip
    daemon.start()
    out: dict[str, subprocess.CompletedProcess[str]] = {}
    runner = threading.Thread(target=lambda: out.update(run=nmem("maintain", "--job", "vacuum", "--json")))
    acks: list[bool] = []  # per acknowledged event: was the vacuum still under way when it was stored?
    failures: list[str] = []

    def sender(k: int) -> None:
        n = 0
        while len(acks) < 400 and (runner.is_alive() or n < 3):
            done = run_send(payload(f"during vacuum {k} {n}", session_id="during-vacuum"))
            if done.returncode != 0 or done.stderr:
                failures.append(done.stderr.decode(errors="replace"))
            acks.append(_sizes(settings.db)["freelist"] > 0)
            n += 1

    runner.start()
    wait_until(lambda: _sizes(settings.db)["freelist"] < freelist, timeout=10.0, message="the vacuum started")
    senders = [threading.Thread(target=sender, args=(k,)) for k in range(4)]
    for t in senders:
        t.start()
    for t in [runner, *senders]:
        t.join(TIMEOUT_S)
    assert not failures, failures[:3]
    overlapped = sum(acks)
    assert overlapped >= 4, f"only {overlapped} events were stored while the vacuum ran"
    result = json.loads(out["run"].stdout)
    assert result["ok"] and result["name"] == "vacuum", result
    stored = db_rows(daemon.db, "SELECT count(*) FROM observations WHERE session_id = 'during-vacuum'")
    assert stored == [(len(acks),)]
    assert db_rows(daemon.db, "SELECT count(*) FROM inbox") == [(0,)]
    assert _sizes(settings.db)["freelist"] < 50  # events stored after the run may free a few FTS pages again
    print(f"\nvacuum of {freelist} free pages: {result['outcome']} ({result['duration_ms']:.0f} ms); {overlapped} of"
          f" {len(acks)} events stored meanwhile")  # fmt: skip
    assert daemon.stop() == 0
    integrity_ok(Path(settings.db))


def test_a_last_run_recorded_in_the_future_does_not_postpone_a_job(daemon: Daemon) -> None:
    """Issue #16, finding 12: a job that ran while the wall clock was 400 days ahead recorded that
    time, and once the clock came back the daily job waited 400 days. A last run in the future
    counts as now: the job is due again one interval later."""
    daemon.env.update({"NMEM_MAINTENANCE_IDLE_S": "0.1", "NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S": "0.5"})
    daemon.start()
    assert run_send(payload("before the clock jump")).returncode == 0
    assert daemon.stop() == 0
    ahead = time.time() + 400 * 86400
    conn = sqlite3.connect(daemon.db)
    try:
        conn.execute("INSERT OR REPLACE INTO jobs(name, last_run, outcome) VALUES ('checkpoint', ?, 'ok')", (ahead,))
        conn.commit()
    finally:
        conn.close()
    daemon.start()

    def ran_again() -> bool:
        return float(db_rows(daemon.db, "SELECT last_run FROM jobs WHERE name = 'checkpoint'")[0][0]) < ahead  # type: ignore[arg-type]

    wait_until(ran_again, timeout=15.0, message="the checkpoint job ran although its last run was 400 days ahead")
    assert daemon.stop() == 0


TRANSCRIPTS = Path(__file__).resolve().parents[1] / "data" / "transcripts"


def test_the_daemon_imports_new_agent_sessions_on_its_schedule(daemon: Daemon, tmp_path: Path) -> None:
    """Nothing to remember to run: a transcript written by a session without hooks is remembered by
    the next scheduled import, a later one too, and nothing twice."""
    claude = tmp_path / "claude"
    project = claude / "projects" / "-home-dev-projects-orchard"
    project.mkdir(parents=True)
    (project / "4dad2986-ce83-4960-aa06-e9ab85a0bcc1.jsonl").write_bytes((TRANSCRIPTS / "short.jsonl").read_bytes())
    daemon.env.update({"NMEM_MAINTENANCE_HISTORY_INTERVAL_S": "0.3", "NMEM_MAINTENANCE_IDLE_S": "0.1",
                       "CLAUDE_CONFIG_DIR": str(claude), "CODEX_HOME": str(tmp_path / "codex"),
                       "GEMINI_CLI_HOME": str(tmp_path / "gemini")})  # fmt: skip
    daemon.start()

    def sessions() -> set[str]:
        if not daemon.db.exists():
            return set()
        return {str(r[0]) for r in db_rows(daemon.db, "SELECT session_id FROM observations")}

    wait_until(lambda: "4dad2986-ce83-4960-aa06-e9ab85a0bcc1" in sessions(), 30.0, "the scheduled import")
    recorded = wait_until(lambda: db_rows(daemon.db, "SELECT outcome FROM jobs WHERE name = 'history'"), 30.0)
    outcome = str(recorded[0][0])
    assert "new events" in outcome, outcome
    first = db_rows(daemon.db, "SELECT count(*) FROM observations")[0][0]
    (project / "later.jsonl").write_bytes((TRANSCRIPTS / "tool-heavy.jsonl").read_bytes())
    wait_until(lambda: len(sessions()) >= 2, 30.0, "the next scheduled import")

    def runs() -> int:
        return len(db_rows(daemon.db, "SELECT 1 FROM jobs WHERE name = 'history' AND outcome LIKE '%, 0 new events%'"))

    wait_until(runs, 30.0, "a run that found nothing new")
    counts = db_rows(daemon.db, "SELECT count(*), count(DISTINCT event_id) FROM observations")[0]
    assert counts[0] == counts[1] and counts[0] > first
    done = nmem("maintain", "--job", "history", "--json", env={**daemon.env})
    assert done.returncode == 0 and json.loads(done.stdout)["ok"], done.stderr
    assert db_rows(daemon.db, "SELECT count(*) FROM observations")[0][0] == counts[0]
