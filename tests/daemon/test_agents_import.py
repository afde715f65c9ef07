"""`nmem import-transcripts` over Codex rollout files: the same observations as live capture, stored once,
incremental, bad files reported, never fatal. A real daemon and the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon
from support.db import db_rows
from support.env import SEND_SCRIPT
from support.helpers import imported
from support.payloads.codex import CODEX_DATA

SESSION = "01a2134e-5db3-7631-a0a4-3c81ac8df7e7"
ROLLOUT = CODEX_DATA / f"rollout-2026-11-25T15-23-52-{SESSION}.jsonl"


@pytest.fixture
def codex_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "codex"
    monkeypatch.setenv("CODEX_HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))  # no Claude Code history here
    return home


def rollout_in(codex_home: Path) -> Path:
    day = codex_home / "sessions" / "2026" / "11" / "25"
    day.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(ROLLOUT, day / ROLLOUT.name))


def observations(daemon: Daemon) -> list[tuple[Any, ...]]:
    return db_rows(daemon.db, "SELECT hook_event, type, title, agent FROM observations ORDER BY ts, id")


EXPECTED = [
    ("UserPromptSubmit", "prompt", "edit the notes", "codex"),
    ("PostToolUse", "command", "$ echo hello > notes.txt && cat notes.txt", "codex"),
    ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", "codex"),
    ("PostToolUseFailure", "error", "Bash failed (exit 2): ls missing-file", "codex"),
    ("Stop", "stop", "Stop: Edited notes.txt.", "codex"),
]


def test_a_rollout_imports_as_codex_observations_once(daemon: Daemon, codex_home: Path) -> None:
    daemon.start()
    rollout_in(codex_home)
    first = imported()  # the default: $CODEX_HOME/sessions
    assert (first["files"], first["events_new"], first["prompts"], first["tool_calls"], first["errors"]) == (
        1, 5, 1, 2, 1
    )  # fmt: skip
    assert first["bad_files"] == [] and first["sessions_summarized"] == 1
    assert observations(daemon) == EXPECTED
    session = db_rows(daemon.db, "SELECT agent, project, transcript_path, summary IS NOT NULL FROM sessions")
    assert session == [("codex", "/tmp/cx/work", str(codex_home / "sessions/2026/11/25" / ROLLOUT.name), 1)]
    again = imported()
    assert (again["files_unchanged"], again["events_new"]) == (1, 0)
    assert observations(daemon) == EXPECTED


def send_live(payload: dict[str, Any]) -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(SEND_SCRIPT), "--agent", "codex"],
        input=json.dumps(payload).encode(),
        env=os.environ.copy(),
        capture_output=True,
        timeout=30,
    )
    assert (done.returncode, done.stderr) == (0, b"")


def test_after_live_capture_the_import_adds_nothing(daemon: Daemon, codex_home: Path) -> None:
    daemon.start()
    path = rollout_in(codex_home)
    for line in (CODEX_DATA / "hooks-0.169.0.jsonl").read_text().splitlines():
        payload = json.loads(line)
        payload["transcript_path"] = str(path)
        send_live(payload)
    live = observations(daemon)
    # The hook's payload has no exit code: the failed command is an error because the rollout says so.
    assert ("PostToolUse", "error", "Bash failed (exit 2): ls missing-file", "codex") in live
    report = imported(str(path))
    assert report["events_sent"] == 5 and report["events_new"] == 0  # every record was seen live
    assert observations(daemon) == live


def test_an_appended_rollout_is_read_from_where_the_last_run_stopped(daemon: Daemon, codex_home: Path) -> None:
    daemon.start()
    path = rollout_in(codex_home)
    lines = ROLLOUT.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"custom_tool_call"' in line)  # the patch's call, without output
    path.write_bytes(b"".join(lines[: cut + 1]))
    part = imported()
    assert part["events_new"] == 2  # the prompt and the first command; the patch waits for its output
    path.write_bytes(b"".join(lines))
    rest = imported()
    assert rest["events_new"] == 3 and rest["bad_files"] == []
    assert observations(daemon) == EXPECTED


def test_bad_rollout_files_are_reported_and_the_rest_is_imported(daemon: Daemon, codex_home: Path) -> None:
    daemon.start()
    path = rollout_in(codex_home)
    day = path.parent
    (day / "rollout-2026-11-25T16-00-00-bad.jsonl").write_bytes(b"\x00\x01binary")
    broken = day / "rollout-2026-11-25T17-00-00-broken.jsonl"
    broken.write_text('{"timestamp": "2026-11-25T17:00:00Z", "type": "session_meta", "payload": {"id": "b"}}\n'
                      "not json at all\n[1, 2, 3]\n" '{"type": "response_item", "payload": "odd"}\n')  # fmt: skip
    report = imported()
    reasons = {Path(b["path"]).name: b["reason"] for b in report["bad_files"]}
    assert reasons == {
        "rollout-2026-11-25T16-00-00-bad.jsonl": "binary file, not a transcript",
        "rollout-2026-11-25T17-00-00-broken.jsonl": "1 invalid JSON line skipped",
    }
    assert report["events_new"] == 5 and observations(daemon) == EXPECTED


def test_an_older_rollout_shape_shell_calls_with_json_outputs(daemon: Daemon, codex_home: Path) -> None:
    """Codex before 0.169 (the documented shape): `shell` with an argv, its output a JSON string with the
    exit code in its metadata, `exec_command_end` events, `event_msg` `task_complete`."""
    daemon.start()
    day = codex_home / "sessions" / "2025" / "09" / "01"
    day.mkdir(parents=True)
    sid = "0198f3c2-aaaa-7bbb-8ccc-000000000001"
    lines = [
        {"type": "session_meta", "payload": {"id": sid, "cwd": "/home/dev/api", "git": {"branch": "main"}}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>\n<cwd>/home/dev/api</cwd></environment_context>"}]}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "run the api tests"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "shell", "call_id": "c1",
            "arguments": json.dumps({"command": ["bash", "-lc", "pytest tests/api -q"], "workdir": "/home/dev/api"})}},
        {"type": "event_msg", "payload": {"type": "exec_command_end", "call_id": "c1", "exit_code": 1,
            "stdout": "F.\nFAILED tests/api/test_users.py::test_create - KeyError: 'id'", "stderr": ""}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c1",
            "output": json.dumps({"output": "F.\nFAILED ...", "metadata": {"exit_code": 1}})}},
        {"type": "response_item", "payload": {"type": "local_shell_call", "call_id": "c2",
            "action": {"type": "exec", "command": ["git", "status", "--short"]}}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c2",
            "output": json.dumps({"output": " M api/users.py\n", "metadata": {"exit_code": 0}})}},
        {"type": "response_item", "payload": {"type": "function_call", "namespace": "mcp__nmem", "name": "search",
            "call_id": "c3", "arguments": json.dumps({"query": "users id"})}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "c3",
            "output": [{"type": "input_text", "text": "1 match for 'users id'"}]}},
        {"type": "compacted", "payload": {"message": "Summary: the users test fails on a missing id."}},
        {"type": "event_msg", "payload": {"type": "task_complete", "last_agent_message": "test_create fails: no id."}},
    ]  # fmt: skip
    path = day / f"rollout-2025-09-01T10-00-00-{sid}.jsonl"
    path.write_text("".join(json.dumps({"timestamp": f"2025-09-01T10:00:{i:02d}Z", **line}) + "\n"
                            for i, line in enumerate(lines)))  # fmt: skip
    report = imported()
    assert report["events_new"] == 6 and report["bad_files"] == []
    rows = db_rows(daemon.db, "SELECT type, title, agent FROM observations ORDER BY ts, id")
    assert rows == [
        ("prompt", "run the api tests", "codex"),
        ("error", "Bash failed (exit 1): pytest tests/api -q", "codex"),
        ("command", "$ git status --short", "codex"),
        ("mcp", "MCP nmem/search: query: users id", "codex"),  # named as its live hook names it
        ("compact", "Compacted (auto)", "codex"),
        ("stop", "Stop: test_create fails: no id.", "codex"),
    ]
    error = db_rows(daemon.db, "SELECT content FROM observations WHERE type = 'error'")[0][0]
    assert "KeyError: 'id'" in str(error)
    assert db_rows(daemon.db, "SELECT git_branch, agent FROM sessions") == [("main", "codex")]
