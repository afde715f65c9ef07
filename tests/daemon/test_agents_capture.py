"""The agent of every observation and session (issue #19): named by the hook command, stored on every path.

A real daemon, the real hook client run as hooks run it (`python -I -S send.py --agent codex`),
the inbox when no daemon runs, and the CLI's and the MCP tool's filters over what was stored (how the
client names the agent and extraction reads it, in process: tests/unit/test_agents_extract.py).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from typing import Any

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.helpers import new_id, nmem, wait_until
from support.payloads.codex import CODEX_DATA

from nmemd.mcp import tools
from nmemd.recall import queries


def codex_payloads() -> list[dict[str, Any]]:
    """The hook payloads of a real Codex CLI 0.169.0 session (tests/data/codex, see its README)."""
    lines = (CODEX_DATA / "hooks-0.169.0.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def send(payload: dict[str, Any], *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """The hook client exactly as `nmem install --agent codex` runs it."""
    return run_send(json.dumps(payload).encode(), env, timeout=30, args=args)


def _session(tag: str, cwd: str = "/tmp/nmem-agents-project") -> dict[str, Any]:
    return {"session_id": f"{tag}-{new_id()[:12]}", "cwd": cwd, "transcript_path": "/tmp/none.jsonl"}


def test_codex_events_are_stored_with_their_agent_and_claude_code_events_without(daemon: Daemon) -> None:
    daemon.start()
    codex, claude = _session("codex"), _session("claude")
    events = [
        ({**codex, "hook_event_name": "UserPromptSubmit", "prompt": "rename the parser"}, ("--agent", "codex")),
        ({**codex, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": "call_1",
          "tool_input": {"command": "pytest -q"}, "tool_response": "3 passed\n"}, ("--agent", "codex")),
        ({**claude, "hook_event_name": "UserPromptSubmit", "prompt": "rename the lexer"}, ()),
    ]  # fmt: skip
    for payload, args in events:
        done = send(payload, *args)
        assert (done.returncode, done.stderr) == (0, b"")
    rows = db_rows(daemon.db, "SELECT session_id, agent FROM observations ORDER BY id")
    assert rows == [(codex["session_id"], "codex")] * 2 + [(claude["session_id"], None)]
    sessions = dict(db_rows(daemon.db, "SELECT session_id, agent FROM sessions"))
    assert sessions == {codex["session_id"]: "codex", claude["session_id"]: None}


def test_the_inbox_keeps_the_agent_and_the_drain_stores_it_once(daemon: Daemon) -> None:
    codex = _session("inbox")
    payload = {**codex, "hook_event_name": "UserPromptSubmit", "prompt": "waiting in the inbox"}
    done = send(payload, "--agent", "codex", env={"NMEM_AUTOSTART": "0"})
    assert (done.returncode, done.stderr) == (0, b"")
    inbox = db_rows(daemon.db, "SELECT payload FROM inbox")
    assert len(inbox) == 1 and json.loads(bytes(inbox[0][0]))["nmem_agent"] == "codex"  # type: ignore[arg-type]
    daemon.start()
    wait_until(lambda: not db_rows(daemon.db, "SELECT 1 FROM inbox"), 20, "the inbox was not drained")
    assert db_rows(daemon.db, "SELECT agent FROM observations WHERE session_id = ?", (codex["session_id"],)) == [
        ("codex",)
    ]
    assert db_rows(daemon.db, "SELECT agent FROM sessions WHERE session_id = ?", (codex["session_id"],)) == [("codex",)]


def _store_two_agents(daemon: Daemon) -> tuple[str, str]:
    daemon.start()
    cwd = "/tmp/nmem-agents-shared"
    codex, claude = _session("cx", cwd), _session("cc", cwd)
    for s, args in ((codex, ("--agent", "codex")), (claude, ())):
        for payload in (
            {**s, "hook_event_name": "UserPromptSubmit", "prompt": "fix the flaky websocket test"},
            {**s, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": new_id()[:10],
             "tool_input": {"command": "pytest tests/test_websocket.py"}, "tool_response": "1 passed\n"},
        ):  # fmt: skip
            assert send(payload, *args).returncode == 0
    return codex["session_id"], claude["session_id"]


def test_search_and_sessions_filter_and_show_the_agent(daemon: Daemon) -> None:
    codex, claude = _store_two_agents(daemon)
    for agent, session in (("codex", codex), ("claude-code", claude), ("claude", claude)):
        found = nmem("search", "websocket", "--all", "--agent", agent, "--json")
        assert found.returncode == 0, found.stderr
        hits = [json.loads(line) for line in found.stdout.splitlines()]
        assert hits and {h["session_id"] for h in hits} == {session}
        listed = nmem("sessions", "--all", "--agent", agent, "--json")
        assert [json.loads(line)["session_id"] for line in listed.stdout.splitlines()] == [session]
    both = nmem("sessions", "--all", "--json")
    assert {json.loads(line)["agent"] for line in both.stdout.splitlines()} == {"codex", "claude-code"}
    table = nmem("sessions", "--all")
    assert "codex" in table.stdout and "claude-code" in table.stdout
    first = json.loads(nmem("search", "websocket", "--all", "--agent", "codex", "--json").stdout.splitlines()[0])
    shown = nmem("show", str(first["id"]))
    assert "codex" in shown.stdout


def test_an_unknown_agent_is_a_clear_error(daemon: Daemon) -> None:
    _store_two_agents(daemon)
    for args in (("search", "websocket", "--all", "--agent", "aider"), ("sessions", "--agent", "nobody")):
        done = nmem(*args)
        assert done.returncode != 0
        assert "unknown agent" in done.stderr and "codex" in done.stderr
        assert "Traceback" not in done.stderr


def test_the_mcp_search_tool_filters_by_agent(daemon: Daemon) -> None:
    codex, claude = _store_two_agents(daemon)
    daemon.stop()
    conn = sqlite3.connect(f"file:{daemon.db}?mode=ro", uri=True)
    try:
        now = time.time()
        text = tools.search_tool(conn, None, "websocket", "*", None, None, None, None, None, 10, now, "codex")
        assert f"s:{codex[:8]}" in text and f"s:{claude[:8]}" not in text and "similar" not in text
        text = tools.search_tool(conn, None, "websocket", "*", None, None, None, None, None, 10, now, None)
        assert "(+1 similar)" in text  # the other agent's same prompt and command, folded into one line each
        listed = tools.sessions_tool(conn, None, "*", 10, now)
        assert "codex" in listed and "claude-code" in listed
        assert [r.session_id for r in queries.sessions(conn, "*", agent="codex")] == [codex]
    finally:
        conn.close()


def test_a_store_not_migrated_to_m011_yet_is_read_as_claude_codes(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade, before the daemon starts again, the CLI reads the old store read-only."""
    _, claude = _store_two_agents(daemon)
    daemon.stop()
    conn = sqlite3.connect(daemon.db)
    try:
        conn.executescript(
            "DELETE FROM observations WHERE agent IS NOT NULL; DELETE FROM sessions WHERE agent IS NOT NULL;"
            " ALTER TABLE observations DROP COLUMN agent; ALTER TABLE sessions DROP COLUMN agent;"
            " DELETE FROM schema_migrations WHERE name = 'm011_agent';"
        )
    finally:
        conn.close()
    monkeypatch.setenv("NMEM_AUTOSTART", "0")
    listed = nmem("sessions", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(json.loads(x)["session_id"], json.loads(x)["agent"]) for x in listed.stdout.splitlines()] == [
        (claude, "claude-code")
    ]
    assert nmem("sessions", "--all", "--agent", "codex", "--json").stdout == ""
    found = nmem("search", "websocket", "--all", "--agent", "claude", "--json")
    hits = [json.loads(x) for x in found.stdout.splitlines()]
    assert found.returncode == 0 and hits and {h["session_id"] for h in hits} == {claude}
    assert nmem("search", "websocket", "--all", "--agent", "codex", "--json").stdout == ""
    shown = nmem("show", str(hits[0]["id"]))
    assert shown.returncode == 0 and "claude-code" in shown.stdout
    assert not db_rows(daemon.db, "SELECT 1 FROM schema_migrations WHERE name = 'm011_agent'")  # read only


def test_a_claude_code_session_after_codex_gets_codex_work_by_name(daemon: Daemon) -> None:
    """The same repository is one project whichever agent worked in it: Claude Code's next session
    is told what Codex did there, and that Codex did it."""
    daemon.start()
    cwd = "/tmp/nmem-agents-handover"
    codex = _session("cx", cwd)
    for payload in (
        {**codex, "hook_event_name": "UserPromptSubmit", "prompt": "make the okapi exporter skip empty batches"},
        {**codex, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": new_id()[:10],
         "tool_input": {"command": "pytest tests/test_exporter.py"}, "tool_response": "3 passed\n"},
    ):  # fmt: skip
        assert send(payload, "--agent", "codex").returncode == 0
    start = {**_session("cc", cwd), "hook_event_name": "SessionStart", "source": "startup"}
    done = send(start)
    assert done.returncode == 0 and done.stderr == b""
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "by Codex" in context and "make the okapi exporter skip empty batches" in context
    assert "pytest tests/test_exporter.py" in context
