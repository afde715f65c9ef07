"""Copilot CLI sessions live and imported: its hook payloads through the real `send.py --agent copilot`
into a real daemon (the SessionStart reply in Copilot's form), then `nmem import-transcripts` over the same
session's events.jsonl adds nothing; a session seen by no hook imports once. Data: a real Copilot CLI
1.0.102 session (tests/data/copilot; nmemd.agents.copilot.capture says how it was recorded)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.helpers import imported
from support.payloads.copilot import DATA, EVENTS, SESSION, hook_ids


@pytest.fixture
def copilot_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "copilot"
    (home / "session-state" / SESSION).mkdir(parents=True)
    shutil.copy(EVENTS, home / "session-state" / SESSION / "events.jsonl")
    monkeypatch.setenv("COPILOT_HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    return home


def send(payload: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
    """The hook client exactly as `nmem install --agent copilot` runs it."""
    return run_send(json.dumps(payload).encode(), timeout=30, args=("--agent", "copilot"))


def observations(daemon: Daemon) -> list[tuple[Any, ...]]:
    return db_rows(daemon.db, "SELECT hook_event, type, agent, tool_use_id FROM observations ORDER BY ts, id")


def test_live_hooks_then_the_import_store_each_event_once(daemon: Daemon, copilot_home: Path) -> None:
    daemon.start()
    lines = (DATA / "hooks-1.0.102.jsonl").read_text().splitlines()
    for line in lines:
        done = send(json.loads(line))
        assert done.returncode == 0 and not done.stderr
    live = observations(daemon)
    kept = [r for r in live if r[0] in ("UserPromptSubmit", "PostToolUse", "PostToolUseFailure")]
    assert [r[0] for r in kept] == [
        "UserPromptSubmit",
        "PostToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "PostToolUse",
    ]
    assert {r[2] for r in live} == {"copilot"}
    assert [r[3] for r in kept[1:]] == hook_ids()  # keyed by the hook's time: Copilot writes events.jsonl later
    first = imported()  # the default: $COPILOT_HOME/session-state
    assert first["bad_files"] == [] and first["files"] == 1
    # The prompt, the four calls and the turn's end (its Stop hook's time) were all seen live.
    assert (first["events_sent"], first["events_new"]) == (6, 0), first
    assert observations(daemon) == live
    assert imported()["events_new"] == 0


def test_a_session_no_hook_saw_imports_once_and_bad_files_are_reported(daemon: Daemon, copilot_home: Path,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    daemon.start()
    first = imported()
    assert (first["files"], first["prompts"], first["tool_calls"], first["errors"]) == (1, 1, 4, 1)
    rows = observations(daemon)
    assert [r[3] for r in rows if r[3]] == hook_ids()  # the file's hook.start records name each call's hook
    assert [r[0] for r in rows] == ["UserPromptSubmit", "PostToolUse", "PostToolUse", "PostToolUseFailure",
                                    "PostToolUse", "Stop"]  # fmt: skip
    assert {r[2] for r in rows} == {"copilot"}
    assert imported()["events_new"] == 0
    bad = tmp_path / "bad" / "x" / "events.jsonl"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x00\x01 not json\n")
    done = imported(str(bad))
    assert done["events_new"] == 0
