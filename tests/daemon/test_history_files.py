"""Issue #28, finding 4: agents' side files that hung or exhausted the history import, and a hung import
that stalled every scheduled job. Real FIFOs, real links to /dev/zero, the real CLI under a memory
limit (a failure costs the machine nothing), a real daemon; the scheduler's own test runs the daemon
in this process so its import can be a real child process that never ends."""

from __future__ import annotations

import errno
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import anyio
import pytest
from support.daemon import Daemon
from support.db import db_rows
from support.env import BIN
from support.helpers import wait_until

from nmemd import config
from nmemd.daemon.server import serve
from nmemd.jobs import maintenance, scheduler

DATA = Path(__file__).resolve().parents[1] / "data"
GEMINI_SESSION = DATA / "gemini" / "session-2026-11-25T16-14-a2b0235b.jsonl"
CLINE_TASK = DATA / "cline" / "sessions" / "1795627691279_50kdn"
CLAUDE_TRANSCRIPT = DATA / "transcripts" / "short.jsonl"
MEMORY_LIMIT = 1 << 30  # address space of the import: main's /dev/zero read and 800 MB line end in MemoryError
BIG_LINE = b"[" + b"[]," * (10 * 1024 * 1024) + b"[]]\n"  # 30 MB of empty arrays: 27 bytes of objects per byte


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def hostile_history(root: Path) -> dict[str, Path]:
    """Every agent's history under `root` (HOME), each beside a hostile side file, and good files after them."""
    gemini = root / ".gemini" / "tmp"
    fifo_project = gemini / "aaa-fifo" / "chats"
    fifo_project.mkdir(parents=True)
    os.mkfifo(fifo_project.parent / ".project_root")  # no writer ever: a blocking open waits for good
    shutil.copy(GEMINI_SESSION, fifo_project / GEMINI_SESSION.name)
    zero_project = gemini / "bbb-zero" / "chats"
    zero_project.mkdir(parents=True)
    shutil.copy(GEMINI_SESSION, zero_project / GEMINI_SESSION.name.replace("a2b0235b", "b2b0235b"))
    (root / ".gemini" / "projects.json").symlink_to("/dev/zero")  # read whole: 3 GB, then MemoryError
    cline = root / ".cline" / "data" / "sessions"
    shutil.copytree(CLINE_TASK, cline / CLINE_TASK.name)
    meta = cline / CLINE_TASK.name / f"{CLINE_TASK.name}.json"
    meta.unlink()
    os.mkfifo(meta)
    other = cline / "task2"
    other.mkdir()
    shutil.copy(CLINE_TASK / f"{CLINE_TASK.name}.messages.json", other / "task2.messages.json")
    (other / "task2.json").symlink_to("/dev/zero")
    claude = root / ".claude" / "projects" / "-work"
    claude.mkdir(parents=True)
    (claude / "aaaa-big.jsonl").write_bytes(BIG_LINE + CLAUDE_TRANSCRIPT.read_bytes())
    shutil.copy(CLAUDE_TRANSCRIPT, claude / "zzzz-good.jsonl")
    return {"fifo_root": fifo_project.parent / ".project_root", "projects": root / ".gemini" / "projects.json",
            "cline_fifo": meta, "cline_zero": other / "task2.json", "big": claude / "aaaa-big.jsonl"}  # fmt: skip


def history_env(root: Path) -> dict[str, str]:
    return {"HOME": str(root), "GEMINI_CLI_HOME": str(root), "CLAUDE_CONFIG_DIR": str(root / ".claude"),
            "CODEX_HOME": str(root / ".codex")}  # fmt: skip


def test_side_files_are_opened_without_waiting_and_read_bounded(tmp_path: Path) -> None:
    from nmemd.history import files

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        files.open_file(str(fifo))  # a blocking open would wait here for a writer
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    with pytest.raises(OSError, match="not a regular file"):
        files.read_file(str(zero), files.SIDE_MAX)
    with pytest.raises(OSError) as link:
        files.read_file(str(zero), files.SIDE_MAX, follow=False)
    assert link.value.errno == errno.ELOOP and "symbolic link" in str(link.value)
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(2 << 30)  # 2 GB, sparse
    with pytest.raises(OSError) as over:
        files.read_file(str(big), files.PROJECTS_MAX)
    assert over.value.errno == errno.EFBIG
    assert files.too_many_values(BIG_LINE)
    assert not files.too_many_values(json.dumps({"output": "a, b: [c] {d}" * 300_000}).encode())


def test_hostile_side_files_neither_hang_nor_exhaust_the_import(daemon: Daemon, tmp_path: Path) -> None:
    """A FIFO as Gemini's `.project_root` and Cline's `<id>.json` hung the import; `projects.json` and
    `<id>.json` linked to /dev/zero ended the whole run in MemoryError; a 30 MB line of `[]` took
    800 MB. Each is skipped with its reason and everything else is imported, within 1 GB."""
    daemon.start()
    root = tmp_path / "user"
    bad = hostile_history(root)
    done = subprocess.run([str(BIN / "nmem"), "import-transcripts", "--json"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **history_env(root)}, preexec_fn=_limited)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    reasons = " | ".join(f"{b['path']}: {b['reason']}" for b in report["bad_files"])
    assert f"{bad['fifo_root']} skipped (not a regular file)" in reasons
    assert f"{bad['projects']} skipped (a symbolic link, not read)" in reasons
    assert f"{bad['cline_fifo']} skipped (not a regular file)" in reasons
    assert f"{bad['cline_zero']} skipped (a symbolic link, not read)" in reasons
    assert f"{bad['big']}: line of over 1,000,000 JSON values skipped" in reasons
    agents = {str(r[0]) for r in db_rows(daemon.db, "SELECT DISTINCT coalesce(agent, 'claude-code') FROM observations")}
    assert agents == {"claude-code", "gemini", "cline"}, agents
    cwd = db_rows(daemon.db, "SELECT count(*) FROM observations WHERE agent = 'gemini' AND project = '/tmp/gm/work'")
    assert cwd == [(0,)]  # the FIFO named no folder, and none was guessed
    assert report["files_read"] == report["files"] == 6, report


def _checkpoints(db: str) -> float | None:
    rows = db_rows(db, "SELECT last_run FROM jobs WHERE name = 'checkpoint'")
    return float(rows[0][0]) if rows else None  # type: ignore[arg-type]


def test_the_scheduled_import_meets_a_fifo_and_every_job_keeps_running(daemon: Daemon, tmp_path: Path) -> None:
    """The hourly job over the same hostile files: it ends (it hung for 1,800 s), its outcome names the
    unreadable files, and the 0.3 s checkpoint job keeps running all along."""
    root = tmp_path / "user"
    hostile_history(root)
    daemon.env.update({**history_env(root), "NMEM_MAINTENANCE_HISTORY_INTERVAL_S": "0.5",
                       "NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S": "0.3", "NMEM_MAINTENANCE_IDLE_S": "0.05"})  # fmt: skip
    daemon.start()
    outcome = wait_until(lambda: db_rows(daemon.db, "SELECT outcome FROM jobs WHERE name = 'history'"), 90.0,
                         "the scheduled import to end")  # fmt: skip
    assert "new events" in str(outcome[0][0]) and "unreadable files" in str(outcome[0][0]), outcome
    log = (daemon.home / "logs" / "nmemd.log").read_text()
    assert "history import skipped" in log and ".project_root skipped (not a regular file)" in log
    first = wait_until(lambda: _checkpoints(str(daemon.db)), 30.0, "a checkpoint run")
    wait_until(lambda: (_checkpoints(str(daemon.db)) or 0) > first, 30.0, "the next checkpoint run")
    assert daemon.stop() == 0


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append((int(entry), cmdline))
    return found


def test_every_scheduled_job_has_a_time_limit() -> None:
    assert set(scheduler.TIME_LIMIT_S) == set(scheduler.JOBS)


STUCK = "import time; time.sleep(600)  # nmem-test-stuck-import"


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_stuck_job_is_stopped_at_its_limit_and_never_holds_up_the_others(
    nmem_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever hangs the import (this one is a real child process that never ends), the 0.2 s checkpoint
    keeps running while it hangs, and the import is stopped at the scheduler's time limit, its process
    killed, its outcome recorded. The job ran on the same loop as every other before (28.8 s without a
    checkpoint in the finding)."""
    monkeypatch.setattr(maintenance, "_IMPORT", STUCK)
    monkeypatch.setattr(maintenance, "HISTORY_TIMEOUT_S", 600.0)  # the job's own limit stays out of the way
    monkeypatch.setitem(scheduler.TIME_LIMIT_S, "history", 4.0)
    for key, value in {"NMEM_MAINTENANCE_HISTORY_INTERVAL_S": "0.3", "NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S": "0.2",
                       "NMEM_MAINTENANCE_IDLE_S": "0.05"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    settings = config.load()

    def history_outcome() -> str | None:
        try:
            rows = db_rows(settings.db, "SELECT outcome FROM jobs WHERE name = 'history'")
        except sqlite3.Error:
            return None
        return str(rows[0][0]) if rows else None

    def stuck() -> list[int]:
        return [pid for pid, cmd in _children(os.getpid()) if "nmem-test-stuck-import" in cmd]

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            daemon = await tg.start(partial(serve, settings))
            pids = await anyio.to_thread.run_sync(partial(wait_until, stuck, 20.0, "the import's process"))
            seen: set[float] = set()
            deadline = time.monotonic() + 20.0
            while history_outcome() is None and time.monotonic() < deadline:
                last = await anyio.to_thread.run_sync(_checkpoints, settings.db)
                if last is not None:
                    seen.add(last)
                await anyio.sleep(0.05)
            outcome = history_outcome()
            daemon.stop_requested.set()
    assert len(seen) >= 3, f"the checkpoint ran {len(seen)} times while the import hung"
    assert outcome is not None and "time limit of 4 s" in outcome, outcome
    assert not [pid for pid in pids if _alive(pid)], "the stuck import's process was left running"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_copilots_mcp_config_as_a_fifo_does_not_hang_its_tool_names(tmp_path: Path) -> None:
    """Copilot names an MCP tool `<server>-<tool>`: reading the servers from `mcp-config.json` (live
    capture and the import alike) waited for good on a FIFO there."""
    home = tmp_path / "copilot"
    home.mkdir()
    os.mkfifo(home / "mcp-config.json")
    code = "from nmemd.agents.copilot.capture import mcp_name; print(mcp_name('github-mcp-server-get_me'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20,
                          env={**os.environ, "COPILOT_HOME": str(home)})  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "mcp__github-mcp-server__get_me", done.stderr
