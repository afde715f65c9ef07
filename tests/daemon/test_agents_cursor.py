"""Cursor's hooks into nmem (nmemd.agents.cursor.capture, nmemd.agents.cursor.setup).

Why no real Cursor: Cursor is a desktop editor, and its agent CLI (`cursor-agent`) is not on npm
(`npm view @cursor/cli`: 404) but downloaded by a script from cursor.com, signed in to a Cursor account
and served only by Cursor's own backend, so it cannot run offline against a local fake API. The payloads
here are built from Cursor's hooks documentation (cursor.com/docs/hooks, read November 2026): every field
name and value shape below is the documented one. They go through the real hook client, run as the
installed hooks run it (`python -I -S send.py --agent cursor`), into a real daemon.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from support.daemon import Daemon, run_send
from support.db import db_rows
from support.helpers import new_id, nmem
from support.payloads.cursor import PROJECT, common, session

from nmemd.agents.cursor import setup as cursor


def send(payload: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
    """The hook client exactly as `nmem install --agent cursor` runs it."""
    return run_send(json.dumps(payload).encode(), timeout=30, args=("--agent", "cursor"))


def test_a_documented_cursor_session_is_stored_with_its_agent_and_types(daemon: Daemon) -> None:
    daemon.start()
    conversation = "conv-" + new_id()[:12]
    for payload in session(conversation):
        done = send(payload)
        assert (done.returncode, done.stderr) == (0, b""), payload["hook_event_name"]
    rows = db_rows(daemon.db, "SELECT type, title, agent, project FROM observations WHERE session_id = ? ORDER BY id",
                   (conversation,))  # fmt: skip
    assert {r[2] for r in rows} == {"cursor"} and {r[3] for r in rows} == {PROJECT}
    assert [(r[0], r[1]) for r in rows] == [
        ("session", "Session started"),
        ("prompt", "make the walrus parser accept tabs"),
        ("command", "$ pytest -q tests/test_walrus.py"),
        ("edit", "Edit walrus.py (-1 +1 lines)"),
        ("mcp", "MCP nmem/search: query: walrus"),
        ("error", "Bash failed: Command timed out after 30s — make lint"),
        ("stop", "Stop: The walrus parser now splits on any whitespace."),
        ("compact", "Compacting (auto)"),
        ("session", "Session ended (user_close)"),
    ]  # a completed `stop` adds nothing: the reply came with afterAgentResponse
    assert db_rows(daemon.db, "SELECT agent, project FROM sessions WHERE session_id = ?", (conversation,)) == [
        ("cursor", PROJECT)
    ]


def test_the_same_cursor_events_sent_twice_are_stored_once(daemon: Daemon) -> None:
    daemon.start()
    conversation = "conv-" + new_id()[:12]
    events = session(conversation)
    for payload in events + events:
        assert send(payload).returncode == 0
    kinds = db_rows(daemon.db, "SELECT type, COUNT(*) FROM observations WHERE session_id = ? AND type IN "
                    "('prompt', 'command', 'edit', 'mcp', 'error', 'stop') GROUP BY type", (conversation,))  # fmt: skip
    assert dict(kinds) == {"prompt": 1, "command": 1, "edit": 1, "mcp": 1, "error": 1, "stop": 1}


def test_sessionstart_answers_cursors_additional_context_naming_earlier_work(daemon: Daemon) -> None:
    daemon.start()
    first = "conv-" + new_id()[:12]
    for payload in session(first)[:4]:
        assert send(payload).returncode == 0
    conversation = "conv-" + new_id()[:12]
    start = {**common(conversation, "gen-2", "sessionStart"), "session_id": conversation, "is_background_agent": False}
    done = send(start)
    assert done.returncode == 0 and done.stderr == b""
    reply = json.loads(done.stdout)
    assert list(reply) == ["additional_context"]  # Cursor's documented sessionStart output
    assert "make the walrus parser accept tabs" in reply["additional_context"]
    assert "pytest -q tests/test_walrus.py" in reply["additional_context"]
    prompt = {**common(start["conversation_id"], "gen-3", "beforeSubmitPrompt"), "prompt": "walrus again"}
    assert send(prompt).stdout == b""  # beforeSubmitPrompt takes no context: nothing is printed


def test_a_cursor_payload_without_a_workspace_is_kept_and_not_a_traceback(daemon: Daemon) -> None:
    daemon.start()
    for payload in ({"hook_event_name": "afterShellExecution", "conversation_id": 7, "workspace_roots": "nope",
                     "command": ["x"], "output": None},
                    {"hook_event_name": "afterFileEdit", "edits": "none"},
                    {"hook_event_name": "afterMCPExecution", "tool_input": "{not json", "result_json": 3}):  # fmt: skip
        done = send(payload)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    titles = [r[0] for r in db_rows(daemon.db, "SELECT title FROM observations WHERE agent = 'cursor'")]
    assert len(titles) == 3 and not any("extraction failed" in t for t in titles)


# --- nmem install / uninstall / doctor --agent cursor ------------------------------------------------------

USER_HOOKS = {
    "version": 1,
    "hooks": {
        "afterFileEdit": [{"command": "./hooks/format.sh"}],
        "beforeShellExecution": [{"command": "./hooks/audit.sh", "timeout": 5}],
    },
}
USER_MCP = {"mcpServers": {"linear": {"command": "linear-mcp", "args": ["--stdio"]}}}


def test_install_twice_then_uninstall_keeps_the_users_hooks_and_servers(nmem_env: dict[str, str]) -> None:
    folder = Path(nmem_env["NMEM_CURSOR_DIR"])
    folder.mkdir()
    (folder / "hooks.json").write_text(json.dumps(USER_HOOKS, indent=2))
    (folder / "mcp.json").write_text(json.dumps(USER_MCP, indent=2))
    first = nmem("install", "--agent", "cursor")
    assert first.returncode == 0 and "Traceback" not in first.stderr, first.stderr
    data = json.loads((folder / "hooks.json").read_text())
    assert data["version"] == 1
    for event in cursor.HOOKS:
        (ours,) = [h for h in data["hooks"][event] if cursor.is_ours(h)]
        assert ours["command"].endswith("nmem_client/send.py --agent cursor") and ours["timeout"] == 10
    assert data["hooks"]["afterFileEdit"][0] == USER_HOOKS["hooks"]["afterFileEdit"][0]  # theirs first, kept
    assert data["hooks"]["beforeShellExecution"] == USER_HOOKS["hooks"]["beforeShellExecution"]
    servers = json.loads((folder / "mcp.json").read_text())["mcpServers"]
    assert servers["linear"] == USER_MCP["mcpServers"]["linear"] and servers["nmem"]["command"].endswith("nmem-mcp")
    assert list(folder.glob("hooks.json.nmem-backup-*")) and list(folder.glob("mcp.json.nmem-backup-*"))
    again = nmem("install", "--agent", "cursor")
    assert again.returncode == 0 and again.stdout.count("already up to date") == 2, again.stdout
    doctor = nmem("doctor")
    assert "cursor hooks" in doctor.stdout and "10 hook events" in doctor.stdout, doctor.stdout
    gone = nmem("uninstall", "--agent", "cursor")
    assert gone.returncode == 0 and "Cursor hooks removed" in gone.stdout
    assert json.loads((folder / "hooks.json").read_text()) == USER_HOOKS
    assert json.loads((folder / "mcp.json").read_text()) == USER_MCP
    assert "cursor hooks" not in nmem("doctor").stdout


def test_installed_cursor_hook_command_stores_an_event(daemon: Daemon) -> None:
    """The command written into hooks.json, run through the shell as Cursor runs it, stores the event."""
    daemon.start()
    cursor.cursor_dir().mkdir(parents=True, exist_ok=True)  # Cursor is installed (nmem skips an agent that is not)
    assert nmem("install", "--agent", "cursor", "--no-mcp").returncode == 0
    data = json.loads((cursor.hooks_path()).read_text())
    (ours,) = [h for h in data["hooks"]["afterShellExecution"] if cursor.is_ours(h)]
    conversation = "conv-" + new_id()[:12]
    payload = {**common(conversation, "g", "afterShellExecution"), "command": "cargo build", "output": "ok"}
    done = subprocess.run(["/bin/sh", "-c", ours["command"]], input=json.dumps(payload).encode(), capture_output=True,
                          timeout=30)  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert db_rows(daemon.db, "SELECT type, title, agent FROM observations WHERE session_id = ?", (conversation,)) == [
        ("command", "$ cargo build", "cursor")
    ]


def test_a_bad_cursor_hooks_file_is_a_clear_error_and_left_alone(nmem_env: dict[str, str]) -> None:
    folder = Path(nmem_env["NMEM_CURSOR_DIR"])
    folder.mkdir()
    for text, message in (("[1, 2", "not valid JSON"), ('{"hooks": []}', '"hooks" is not an object'),
                          ('{"version": 2, "hooks": {}}', "version 1"),
                          ('{"hooks": {"stop": {}}}', '"hooks.stop" is not a list')):  # fmt: skip
        (folder / "hooks.json").write_text(text)
        done = nmem("install", "--agent", "cursor")
        assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert (folder / "hooks.json").read_text() == text
    assert nmem("install", "--agent", "cursor", "--project").returncode == 2
