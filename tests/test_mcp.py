"""Acceptance for recall over MCP: the real mcp client -> nmem-mcp (stdio) -> nmemd's MCP server.

Events go in through the real hook client (`nmem-send`) into a real daemon; the
six tools are then called through the real `ClientSession` over the bridge, the
way Claude Code would, and their structured results checked. No mocks.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import BIN, Daemon, run_send
from helpers import lock_pid, pid_running, ping, scalar, send_frame, wait_until
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from nmem_client import protocol
from nmemd.recall.context import build_context

BRIDGE = str(BIN / "nmem-mcp")
TOOLS = {"search", "timeline", "get_observations", "recent_context", "sessions", "file_history"}
STEP_S = 30.0  # bound on any single wait (the daemon's first MCP connection imports mcp, ~1-2 s)

pytestmark = pytest.mark.anyio


# --- real-shaped hook payloads ----------------------------------------------------------------


def _event(hook: str, session: str, cwd: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": session, "transcript_path": f"{cwd}/.claude/{session}.jsonl", "cwd": cwd,
            "permission_mode": "default", "hook_event_name": hook, **fields}  # fmt: skip


def _tool(session: str, cwd: str, name: str, inp: dict[str, Any], resp: Any) -> dict[str, Any]:
    return _event("PostToolUse", session, cwd, tool_name=name, tool_input=inp, tool_response=resp,
                  tool_use_id=f"toolu_{os.urandom(8).hex()}")  # fmt: skip


def _edit(session: str, cwd: str, rel: str, old: str, new: str) -> dict[str, Any]:
    path = f"{cwd}/{rel}"
    return _tool(session, cwd, "Edit", {"file_path": path, "old_string": old, "new_string": new},
                 {"filePath": path, "oldString": old, "newString": new, "replaceAll": False})  # fmt: skip


def _bash(session: str, cwd: str, command: str, stdout: str) -> dict[str, Any]:
    return _tool(session, cwd, "Bash", {"command": command, "description": ""},
                 {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False})  # fmt: skip


def _failure(session: str, cwd: str, command: str, error: str) -> dict[str, Any]:
    return _event("PostToolUseFailure", session, cwd, tool_name="Bash", tool_input={"command": command},
                  error=error, tool_use_id=f"toolu_{os.urandom(8).hex()}")  # fmt: skip


def git_project(path: Path) -> str:
    (path / ".git").mkdir(parents=True)
    (path / "src").mkdir()
    return str(path)


def feed(*events: dict[str, Any]) -> None:
    for event in events:
        done = run_send(json.dumps(event).encode())
        assert done.returncode == 0 and done.stderr == b"", done


# --- the client side --------------------------------------------------------------------------


def bridge_params(env: dict[str, str], project: str, **extra: str) -> StdioServerParameters:
    """What an MCP client config would say; stdio_client passes only a safe env subset plus this."""
    return StdioServerParameters(command=BRIDGE, env={**env, "CLAUDE_PROJECT_DIR": project, **extra}, cwd=project)


@asynccontextmanager
async def mcp_session(params: StdioServerParameters, errlog: Path) -> AsyncIterator[ClientSession]:
    with errlog.open("a") as err:
        async with stdio_client(params, errlog=err) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(STEP_S):
                init = await session.initialize()
            assert init.server_info.name == "nmem"
            assert init.instructions and "search" in init.instructions
            yield session


async def call(session: ClientSession, name: str, args: dict[str, Any] | None = None) -> CallToolResult:
    with anyio.fail_after(STEP_S):
        return await session.call_tool(name, args or {})


def text(result: CallToolResult) -> str:
    assert result.content and isinstance(result.content[0], TextContent)
    return result.content[0].text


async def ok(session: ClientSession, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    result = await call(session, name, args)
    assert not result.is_error, text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def fails(session: ClientSession, name: str, args: dict[str, Any], expect: str = "") -> str:
    result = await call(session, name, args)
    assert result.is_error, (name, args, result)
    message = text(result)
    assert expect.lower() in message.lower(), message
    return message


# --- the corpus -------------------------------------------------------------------------------

S1, S2 = "sess-web-0001-aaaa", "sess-oth-0002-bbbb"


def feed_corpus(web: str, other: str) -> None:
    feed(
        _event("SessionStart", S1, web, source="startup", model="claude-opus-4-6"),
        _event("UserPromptSubmit", S1, web, prompt="Fix the flaky zebra parser test"),
        _edit(S1, web, "src/parser.py", "def parse(zebra):\n    pass", "def parse(zebra):\n    return zebra.strip()"),
        _bash(S1, web, "pytest tests/test_parser.py", "3 passed in 0.12s"),
        _failure(S1, web, "make deploy", "Exit code 2\nerror: deploy key missing for zebra-prod"),
        _event("Stop", S1, web, stop_hook_active=False, last_assistant_message="The zebra parser test is fixed."),
        _event("UserPromptSubmit", S2, other, prompt="Plan the zebra migration for the other service"),
        _edit(S2, other, "src/zebra_migrate.py", "OLD = 1", "NEW = 2"),
    )


def obs_id(db: Path, where: str, params: tuple[object, ...] = ()) -> int:
    value = scalar(db, f"SELECT id FROM observations WHERE {where} ORDER BY id LIMIT 1", params)
    assert isinstance(value, int), where
    return value


# --- tests ------------------------------------------------------------------------------------


async def test_six_tools_over_the_bridge_with_a_running_daemon(
    daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path
) -> None:
    daemon.start()
    web, other = git_project(tmp_path / "web"), git_project(tmp_path / "other")
    feed_corpus(web, other)
    wait_until(lambda: scalar(daemon.db, "SELECT summary FROM sessions WHERE session_id = ?", (S1,)),
               timeout=STEP_S, message="the session summary after Stop")  # fmt: skip
    db = daemon.db
    edit_id = obs_id(db, "type = 'edit' AND session_id = ?", (S1,))
    error_id = obs_id(db, "type = 'error'")
    other_edit = obs_id(db, "type = 'edit' AND session_id = ?", (S2,))
    errlog = tmp_path / "bridge.err"

    async with mcp_session(bridge_params(nmem_env, web), errlog) as s:
        with anyio.fail_after(STEP_S):
            listed = await s.list_tools()
        assert {t.name for t in listed.tools} == TOOLS
        for tool in listed.tools:
            assert tool.description and len(tool.description) > 40, tool.name
            assert tool.input_schema["type"] == "object" and tool.output_schema, tool.name
            assert tool.annotations and tool.annotations.read_only_hint, tool.name
        schemas = {t.name: t.input_schema for t in listed.tools}
        assert schemas["search"]["required"] == ["query"]
        assert schemas["search"]["properties"]["limit"]["maximum"] <= 50
        assert schemas["get_observations"]["properties"]["ids"]["type"] == "array"
        assert schemas["file_history"]["required"] == ["path"]

        # search: compact lines with ids, scoped to the caller's project unless told otherwise
        found = await ok(s, "search", {"query": "zebra"})
        assert found["scope"] == web
        ids = {h["id"] for h in found["hits"]}
        assert edit_id in ids and error_id in ids and other_edit not in ids
        assert all(h["project"] == web for h in found["hits"])
        line = text(await call(s, "search", {"query": "zebra"}))
        assert f"#{error_id} error" in line and "get_observations" in line
        assert len(line) < 3000
        everywhere = await ok(s, "search", {"query": "zebra", "project": "*"})
        assert other_edit in {h["id"] for h in everywhere["hits"]}
        by_name = await ok(s, "search", {"query": "zebra", "project": "other"})
        other_prompt = obs_id(db, "type = 'prompt' AND session_id = ?", (S2,))
        assert {h["id"] for h in by_name["hits"]} == {other_edit, other_prompt}
        errors = await ok(s, "search", {"query": "zebra", "type": "error"})
        assert [h["id"] for h in errors["hits"]] == [error_id]
        in_file = await ok(s, "search", {"query": "zebra", "file": "src/parser.py"})
        assert [h["id"] for h in in_file["hits"]] == [edit_id]
        assert in_file["hits"][0]["path"] == "src/parser.py"
        by_session = await ok(s, "search", {"query": "zebra", "session_id": S1[:8], "since": "1h", "limit": 2})
        assert len(by_session["hits"]) == 2 and all(h["session_id"] == S1 for h in by_session["hits"])
        assert (await ok(s, "search", {"query": "zebra", "until": "2001-01-01"}))["hits"] == []

        # get_observations: the details, unknown ids listed as missing
        details = await ok(s, "get_observations", {"ids": [error_id, 999_999]})
        assert [o["id"] for o in details["observations"]] == [error_id] and details["missing"] == [999_999]
        full = details["observations"][0]
        assert "deploy key missing" in full["content"] and full["command"] == "make deploy"
        assert full["session_id"] == S1 and full["project"] == web
        assert "deploy key missing" in text(await call(s, "get_observations", {"ids": [error_id]}))

        # timeline: around an id, or around a query's best match, in that session's order
        around = await ok(s, "timeline", {"id": edit_id, "before": 1, "after": 2})
        assert around["anchor"] == edit_id and around["session_id"] == S1
        order = [h["id"] for h in around["items"]]
        assert order == sorted(order) and edit_id in order and len(order) == 4
        assert "→ #" in text(await call(s, "timeline", {"id": edit_id}))
        by_query = await ok(s, "timeline", {"query": "deploy key"})
        assert by_query["anchor"] == error_id

        # recent_context: the same text as at session start
        context = await ok(s, "recent_context")
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            expected = build_context(conn, web, source="startup")
        finally:
            conn.close()
        assert context == {"project": web, "context": expected}
        assert "zebra" in expected and text(await call(s, "recent_context")) == expected

        # sessions: the caller's project by default, '*' for all
        mine = await ok(s, "sessions")
        assert [x["session_id"] for x in mine["sessions"]] == [S1]
        assert mine["sessions"][0]["summary"] and "zebra" in mine["sessions"][0]["summary"]
        assert {x["session_id"] for x in (await ok(s, "sessions", {"project": "*"}))["sessions"]} == {S1, S2}

        # file_history: everything that touched a path (absolute or its tail)
        history = await ok(s, "file_history", {"path": "src/parser.py"})
        assert [h["id"] for h in history["hits"]] == [edit_id]
        assert (await ok(s, "file_history", {"path": f"{other}/src/zebra_migrate.py"}))["hits"] == []
        assert [h["id"] for h in (await ok(s, "file_history", {"path": "src/zebra_migrate.py", "project": other}))[
            "hits"]] == [other_edit]  # fmt: skip

        # errors are tool errors, and the session goes on
        await fails(s, "get_observations", {"ids": [999_998]}, "no observation")
        await fails(s, "get_observations", {"ids": []})
        await fails(s, "get_observations", {"ids": "all of them"})
        await fails(s, "timeline", {"id": 999_998}, "no observation")
        await fails(s, "timeline", {}, "give an observation id")
        await fails(s, "timeline", {"query": "nothingmatchesthis"}, "nothing matches")
        await fails(s, "search", {"query": ""}, "empty")
        await fails(s, "search", {"query": '"*" ( ) ^ -- ;'}, "nothing to search")
        await fails(s, "search", {"query": "zebra", "limit": 0})
        await fails(s, "search", {"query": "zebra", "limit": "many"})
        await fails(s, "search", {"query": "zebra", "type": "bogus"})
        await fails(s, "search", {"query": "zebra", "since": "the day before"}, "cannot read time")
        await fails(s, "search", {"query": "zebra", "project": "no-such-project"}, "no project named")
        await fails(s, "search", {"query": "zebra", "session_id": "nope-not-a-session"}, "no session")
        await fails(s, "search", {}, "query")
        await fails(s, "recent_context", {"project": "*"}, "one project")
        await fails(s, "file_history", {"path": ""})
        await fails(s, "sessions", {"limit": 10_000})
        await fails(s, "no_such_tool", {})
        hostile = await ok(s, "search", {"query": "zebra'; DROP TABLE observations; -- NEAR(x y) \x00 ^*"})
        assert isinstance(hostile["hits"], list)
        assert (await ok(s, "search", {"query": "zebra"}))["hits"] == found["hits"]

        # a second session at the same time has its own project scope
        async with mcp_session(bridge_params(nmem_env, other), errlog) as s2:
            theirs = await ok(s2, "sessions")
            assert [x["session_id"] for x in theirs["sessions"]] == [S2]
        assert [x["session_id"] for x in (await ok(s, "sessions"))["sessions"]] == [S1]

    assert errlog.read_text() == ""
    assert ping(daemon.socket) is not None  # the daemon never noticed any of it


async def test_the_bridge_starts_the_daemon_when_none_runs(nmem_env: dict[str, str], tmp_path: Path) -> None:
    web = git_project(tmp_path / "web")
    errlog = tmp_path / "bridge.err"
    sock = nmem_env["NMEM_SOCKET"]
    assert lock_pid(sock) is None
    try:
        async with mcp_session(bridge_params(nmem_env, web), errlog) as s:
            assert (await ok(s, "sessions"))["sessions"] == []
            empty = await call(s, "recent_context")
            assert not empty.is_error and "No recorded history" in text(empty)
            feed(_event("UserPromptSubmit", S1, web, prompt="remember the okapi"))
            hits = (await ok(s, "search", {"query": "okapi"}))["hits"]
            assert [h["type"] for h in hits] == ["prompt"]
        assert errlog.read_text() == ""
    finally:
        pid = lock_pid(sock)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            with anyio.fail_after(STEP_S + 5):
                await anyio.to_thread.run_sync(partial(wait_until, lambda: not pid_running(pid), STEP_S, "nmemd exit"))
    assert pid is not None, "the bridge did not start a daemon"


def _read_line(proc: subprocess.Popen[bytes], deadline: float) -> bytes:
    """One line from the bridge's stdout, or fail at `deadline` (raw os.read: no hidden buffering)."""
    assert proc.stdout is not None
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        assert left > 0, f"no reply line in time; got {buf!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 1)
            assert chunk, f"bridge closed stdout; got {buf!r}"
            buf += chunk
    return buf


CLIENT_INFO = {"name": "raw-test", "version": "0"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": CLIENT_INFO}}  # fmt: skip


def _rpc(id_: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode() + b"\n"


def test_bridge_exit_paths(daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path) -> None:
    env = {**os.environ, **nmem_env, "CLAUDE_PROJECT_DIR": str(tmp_path)}
    # no daemon and no autostart: one line on stderr, exit 1, nothing on stdout
    done = subprocess.run([BRIDGE], input=b"", env={**env, "NMEM_AUTOSTART": "0"}, capture_output=True, timeout=20)
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.startswith(b"nmem-mcp: nmemd is not running") and done.stderr.count(b"\n") == 1

    daemon.start()
    # a scripted client writes everything, then closes stdin: every request is still answered, then exit 0
    script = (
        json.dumps(INIT).encode() + b"\n"
        + b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\nnot json at all\n\n'
        + _rpc(2, "tools/call", {"name": "sessions", "arguments": {}})
        + _rpc(3, "tools/call", {"name": "search", "arguments": {"query": ""}})
    )  # fmt: skip
    done = subprocess.run([BRIDGE], input=script, env=env, capture_output=True, timeout=STEP_S)
    assert done.returncode == 0 and done.stderr == b""
    replies = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert sorted(replies) == [1, 2, 3]
    assert replies[1]["result"]["serverInfo"]["name"] == "nmem"
    assert replies[2]["result"]["structuredContent"] == {"scope": str(tmp_path), "sessions": []}
    assert replies[3]["result"]["isError"] is True

    # the daemon stops under an open session: the bridge sees EOF and exits 0
    proc = subprocess.Popen([BRIDGE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        reply = json.loads(_read_line(proc, time.monotonic() + STEP_S))
        assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "nmem"
        assert daemon.stop() == 0  # SIGTERM; open connections get the daemon's shutdown grace
        assert proc.wait(timeout=STEP_S) == 0
        assert proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None and not f.closed:
                f.close()


def test_invalid_mcp_requests_are_refused(daemon: Daemon) -> None:
    daemon.start()
    bodies = (b"[1]", b"{not json", b'{"project": 5}', b'{"project": "relative/path"}', b'{"project": "/a\\u0000b"}')
    for body in bodies:
        status, reply = send_frame(daemon.socket, protocol.KIND_MCP, protocol.NO_EVENT_ID, body)
        assert (status, reply.split(b" ")[0]) == (b"ERR", b"invalid"), body
    assert ping(daemon.socket) is not None


def test_bridge_imports_only_the_standard_library() -> None:
    code = "import sys, nmem_client.bridge; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30, check=True)
    leaked = {m for m in out.stdout.split() if m.split(".")[0] in ("mcp", "anyio", "nmemd", "pydantic", "msgspec")}
    assert not leaked


def test_mcp_server_private_entry_point_is_still_there() -> None:
    """We serve MCPServer over our socket through its `_lowlevel_server` (no public stream-level run in mcp 2.x)."""
    from mcp.server import Server

    from nmemd.mcp import build_server, lowlevel

    major, minor = (int(x) for x in version("mcp").split(".")[:2])
    assert major == 2 and minor >= 3, "the pin says mcp>=2.3,<3: re-check _lowlevel_server on a new major"
    server = lowlevel(build_server())
    assert isinstance(server, Server)
    assert callable(server.run) and server.create_initialization_options().server_name == "nmem"
