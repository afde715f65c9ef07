"""`nmem import-transcripts` over Gemini CLI session files: the same observations as live capture, stored
once, incremental, bad files reported, never fatal. A real daemon and the real CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.helpers import imported
from support.payloads.gemini import GEMINI_DATA, SESSION, SESSION_FILE

PROJECT = "/tmp/gm/work"


@pytest.fixture
def gemini_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """GEMINI_CLI_HOME's `.gemini`; no Claude Code nor Codex history here."""
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "g"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    return tmp_path / "g" / ".gemini"


def session_in(gemini_home: Path) -> Path:
    """The real session file where the Gemini CLI keeps it, with its project folder's `.project_root`."""
    chats = gemini_home / "tmp" / "work" / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    (chats.parent / ".project_root").write_text(PROJECT)
    (chats.parent / "logs.jsonl").write_text('{"not": "a session"}\n')  # not history: not read
    return Path(shutil.copy(SESSION_FILE, chats / SESSION_FILE.name))


def observations(daemon: Daemon) -> list[tuple[Any, ...]]:
    return db_rows(daemon.db, "SELECT hook_event, type, title, agent FROM observations ORDER BY ts, id")


EXPECTED = [
    ("UserPromptSubmit", "prompt", "E2E-edit: write hello", "gemini"),
    ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", "gemini"),
    ("PostToolUse", "write", "Write b.txt (created, 2 lines)", "gemini"),
    ("PostToolUse", "edit", "Edit b.txt (-1 +1 lines)", "gemini"),
    ("PostToolUse", "read", "Read b.txt", "gemini"),
    ("PostToolUse", "error", "Shell failed (exit 2): ls missing-file", "gemini"),
    ("PostToolUse", "search", "Grep 'three'", "gemini"),
    ("PostToolUse", "search", "Glob '*.txt'", "gemini"),
    ("PostToolUse", "error", "replace failed: Could not find an exact match for 'old_string' in"
     " '/tmp/gm/work/b.txt'. If previous edits modified… — b.txt", "gemini"),
    ("Stop", "stop", "Stop: Edited notes.txt.", "gemini"),
]  # fmt: skip


def test_a_session_file_imports_as_gemini_observations_once(daemon: Daemon, gemini_home: Path) -> None:
    daemon.start()
    path = session_in(gemini_home)
    first = imported()  # the default: ~/.gemini/tmp
    assert (first["files"], first["events_new"], first["prompts"], first["tool_calls"], first["errors"]) == (
        1, 10, 1, 7, 1
    )  # fmt: skip
    assert first["bad_files"] == [] and first["sessions_summarized"] == 1
    assert observations(daemon) == EXPECTED
    session = db_rows(daemon.db, "SELECT session_id, agent, project, transcript_path FROM sessions")
    assert session == [(SESSION, "gemini", PROJECT, str(path))]
    again = imported()
    assert (again["files_unchanged"], again["events_new"]) == (1, 0)
    assert observations(daemon) == EXPECTED


def send_live(payload: dict[str, Any]) -> None:
    done = run_send(json.dumps(payload).encode(), timeout=30, args=("--agent", "gemini"))
    assert done.returncode == 0 and done.stderr == b""


def test_after_live_capture_the_import_adds_nothing(daemon: Daemon, gemini_home: Path) -> None:
    daemon.start()
    path = session_in(gemini_home)
    for line in (GEMINI_DATA / "hooks-0.61.0.jsonl").read_text().splitlines():
        payload = json.loads(line)
        if payload["hook_event_name"] != "BeforeTool":  # not installed
            send_live(payload)
    live = observations(daemon)
    assert live[1:-1] == EXPECTED  # and the session's start and end
    report = imported(str(path))
    assert report["events_sent"] == 10 and report["events_new"] == 0  # every record was seen live
    assert observations(daemon) == live


def test_an_appended_session_file_is_read_from_where_the_last_run_stopped(daemon: Daemon, gemini_home: Path) -> None:
    daemon.start()
    path = session_in(gemini_home)
    lines = SESSION_FILE.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b"write_file__" in line)  # after the first command
    path.write_bytes(b"".join(lines[:cut]))
    part = imported()
    assert part["events_new"] == 2  # the prompt and the first command
    path.write_bytes(b"".join(lines))
    rest = imported()
    assert rest["events_new"] == 8 and rest["bad_files"] == []
    assert observations(daemon) == EXPECTED


def test_bad_session_files_are_reported_and_the_rest_is_imported(daemon: Daemon, gemini_home: Path) -> None:
    daemon.start()
    chats = session_in(gemini_home).parent
    (chats / "session-2026-11-25T16-00-bad00000.jsonl").write_bytes(b"\x00\x01binary")
    broken = chats / "session-2026-11-25T17-00-broken00.jsonl"
    cancelled = {"type": "gemini", "toolCalls": [{"id": "x", "name": "glob", "status": "cancelled"}]}
    broken.write_text('{"sessionId": "broken", "startTime": "2026-11-25T17:00:00Z"}\nnot json at all\n[1, 2]\n'
                      '{"type": "gemini", "toolCalls": "odd"}\n{"type": "user", "content": 7}\n'
                      + json.dumps(cancelled) + "\n")  # fmt: skip
    report = imported()
    reasons = {Path(b["path"]).name: b["reason"] for b in report["bad_files"]}
    assert reasons == {
        "session-2026-11-25T16-00-bad00000.jsonl": "binary file, not a transcript",
        "session-2026-11-25T17-00-broken00.jsonl": "1 invalid JSON line skipped",
    }
    assert report["events_new"] == 10 and observations(daemon) == EXPECTED
