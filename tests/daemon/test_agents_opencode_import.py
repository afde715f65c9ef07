"""OpenCode sessions live and imported: the payloads nmem's plugin sends, through the real `send.py --agent
opencode` into a real daemon, then `nmem import-transcripts` over the same session in OpenCode's database adds
nothing; a session no plugin saw imports once, incrementally; bad files are reported. Data: the rows of a real
OpenCode 1.18.33 session (tests/data/opencode, recorded offline against a scripted API: bash, write, read,
edit, a failing bash, a grep that failed without ripgrep, a call of a tool it does not have), put back into a
database with OpenCode's own schema. The plugin's payloads are built from the same rows, as the plugin builds
them from the hooks (the hooks pass what the rows hold: tests/e2e/test_opencode.py checks it with the real CLI).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.helpers import imported
from support.payloads.opencode import SESSION, build_db, plugin_payloads


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    data = tmp_path / "xdg-data"
    (data / "opencode").mkdir(parents=True)
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    db = data / "opencode" / "opencode.db"
    build_db(db, project)
    return {"db": db, "project": project}


def send(payload: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
    """The hook client exactly as `nmem install --agent opencode` runs it."""
    return run_send(json.dumps(payload).encode(), timeout=30, args=("--agent", "opencode"))


def observations(daemon: Daemon) -> list[tuple[Any, ...]]:
    return db_rows(daemon.db, "SELECT hook_event, type, title, agent, tool_use_id FROM observations ORDER BY ts, id")


def test_live_plugin_events_then_the_import_store_each_event_once(daemon: Daemon, world: dict[str, Path]) -> None:
    daemon.start()
    for payload in plugin_payloads(world["project"]):
        done = send(payload)
        assert done.returncode == 0 and not done.stderr
    live = observations(daemon)
    titles = [t for _, _, t, _, _ in live]
    assert {a for *_, a, _ in live} == {"opencode"}
    assert "$ echo hello-oc && ls" in titles
    assert "Write notes.txt (created, 2 lines)" in titles and "Read notes.txt (2 lines)" in titles
    assert "Edit notes.txt (-1 +1 lines)" in titles
    assert "Bash failed (exit 1): false" in titles
    assert "Grep failed: ripgrep execution failed — gamma" in titles
    assert ("Stop", "stop") in {(e, t) for e, t, *_ in live}

    first = imported()  # the default: $XDG_DATA_HOME/opencode/opencode.db
    assert first["files"] == 1 and first["bad_files"] == []
    assert first["tool_calls"] == 7 and first["prompts"] == 1 and first["replies"] == 1
    assert first["events_new"] == 0, first
    assert observations(daemon) == live
    again = imported()
    assert again["events_sent"] == 0 and again["events_new"] == 0, again  # nothing changed: nothing read


def test_a_session_no_plugin_saw_imports_once_incrementally_and_bad_files_are_reported(
    daemon: Daemon, world: dict[str, Path], tmp_path: Path
) -> None:
    daemon.start()
    first = imported(str(world["db"]))
    assert first["events_new"] == 1 + 7 + 1, first  # the prompt, the seven tool calls, the reply
    rows = observations(daemon)
    assert {a for *_, a, _ in rows} == {"opencode"}
    assert ("UserPromptSubmit", "prompt") in {(e, t) for e, t, *_ in rows}
    assert len({k for *_, k in rows if k}) == 7
    assert imported(str(world["db"]))["events_new"] == 0

    # A second session, written later: the next run reads it, not the first one again.
    later = {SESSION: SESSION[:-4] + "LATE", "msg_": "msg_L", "prt_": "prt_L", "call_": "late_"}
    build_db(world["db"], world["project"], later)
    conn = sqlite3.connect(world["db"])
    with conn:
        conn.execute("UPDATE session SET time_updated = time_updated + 60000 WHERE id = ?", (later[SESSION],))
        conn.execute("UPDATE part SET time_updated = time_updated + 60000 WHERE session_id = ?", (later[SESSION],))
    conn.close()
    second = imported(str(world["db"]))
    assert second["events_new"] == 9 and second["tool_calls"] == 7, second

    bad = tmp_path / "bad" / "opencode.db"
    bad.parent.mkdir()
    bad.write_text("not a database at all\n" * 100)
    empty = tmp_path / "empty" / "opencode.db"
    empty.parent.mkdir()
    sqlite3.connect(empty).close()
    report = imported(str(bad), str(empty))
    reasons = {b["path"]: b["reason"] for b in report["bad_files"]}
    assert "not an SQLite database" in reasons[str(bad)] or "cannot open" in reasons[str(bad)]
    assert "not an OpenCode database (no table session)" in reasons[str(empty)]
