"""Acceptance for recall over MCP: the real mcp client -> nmem-mcp (stdio) -> nmemd's MCP server.

Events go in through the real hook client (`nmem-send`) into a real daemon; the
six tools are then called through the real `ClientSession` over the bridge, the
way Claude Code would, and the text the model reads is checked: text only, every
result line led by the `#id` that get_observations takes. No mocks.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.types import TextContent
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.env import UNSET_FOR_TESTS, isolated_env, remove_fallbacks
from support.helpers import (
    claude_bash,
    claude_edit,
    claude_event,
    claude_failure,
    lock_pid,
    pid_running,
    ping,
    scalar,
    send_frame,
    wait_until,
)
from support.mcp_client import BRIDGE, STEP_S, bridge_params, call, fails, line_ids, mcp_session, ok, session_ids, text

from nmem_client import bridge, protocol
from nmemd.mcp.transport import DRAIN_S
from nmemd.recall.context import build_context

TOOLS = {"search", "timeline", "get_observations", "recent_context", "sessions", "file_history"}

pytestmark = [pytest.mark.anyio, pytest.mark.xdist_group("mcp_corpus")]  # one worker starts `corpus` once


# --- real-shaped hook payloads ----------------------------------------------------------------


def git_project(path: Path) -> str:
    (path / ".git").mkdir(parents=True)
    (path / "src").mkdir()
    return str(path)


def feed(*events: dict[str, Any], env: dict[str, str] | None = None) -> None:
    for event in events:
        done = run_send(json.dumps(event).encode(), env=env)
        assert done.returncode == 0 and done.stderr == b"", done


# --- the corpus -------------------------------------------------------------------------------

S1, S2 = "sess-web-0001-aaaa", "sess-oth-0002-bbbb"


def feed_corpus(web: str, other: str, env: dict[str, str] | None = None) -> None:
    feed(
        claude_event("SessionStart", S1, web, source="startup", model="claude-opus-4-6"),
        claude_event("UserPromptSubmit", S1, web, prompt="Fix the flaky zebra parser test"),
        claude_edit(
            S1, web, "src/parser.py", "def parse(zebra):\n    pass", "def parse(zebra):\n    return zebra.strip()"
        ),
        claude_bash(S1, web, "pytest tests/test_parser.py", "3 passed in 0.12s"),
        claude_failure(S1, web, "make deploy", "Exit code 2\nerror: deploy key missing for zebra-prod"),
        claude_event("Stop", S1, web, stop_hook_active=False, last_assistant_message="The zebra parser test is fixed."),
        claude_event("UserPromptSubmit", S2, other, prompt="Plan the zebra migration for the other service"),
        claude_edit(S2, other, "src/zebra_migrate.py", "OLD = 1", "NEW = 2"),
        env=env,
    )


def obs_id(db: Path, where: str, params: tuple[object, ...] = ()) -> int:
    value = scalar(db, f"SELECT id FROM observations WHERE {where} ORDER BY id LIMIT 1", params)
    assert isinstance(value, int), where
    return value


# --- tests ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """A daemon holding the two sessions of `feed_corpus`, and the ids the tools should name."""

    daemon: Daemon
    env: dict[str, str]
    web: str
    other: str
    edit_id: int
    error_id: int
    other_edit: int
    other_prompt: int
    web_ids: set[int]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """One real daemon for the per-tool tests below: they only read, each through a bridge of its own."""
    root, short = tmp_path_factory.mktemp("mcp"), tempfile.mkdtemp(prefix="nm", dir="/tmp")
    env = isolated_env(root, short)
    daemon = Daemon(env, short)
    for key in UNSET_FOR_TESTS:
        daemon.env.pop(key, None)
    daemon.start()
    try:
        web, other = git_project(root / "web"), git_project(root / "other")
        feed_corpus(web, other, env)
        wait_until(lambda: scalar(daemon.db, "SELECT summary FROM sessions WHERE session_id = ?", (S1,)),
                   timeout=STEP_S, message="the session summary after Stop")  # fmt: skip
        db = daemon.db
        yield Corpus(
            daemon, env, web, other,
            edit_id=obs_id(db, "type = 'edit' AND session_id = ?", (S1,)),
            error_id=obs_id(db, "type = 'error'"),
            other_edit=obs_id(db, "type = 'edit' AND session_id = ?", (S2,)),
            other_prompt=obs_id(db, "type = 'prompt' AND session_id = ?", (S2,)),
            web_ids={r[0] for r in db_rows(db, "SELECT id FROM observations WHERE project = ?", (web,))},
        )  # fmt: skip
    finally:
        daemon.stop()
        remove_fallbacks(env["NMEM_HOME"], str(root), short)
        shutil.rmtree(short, ignore_errors=True)


@asynccontextmanager
async def tools(c: Corpus, tmp_path: Path, project: str = "") -> AsyncIterator[ClientSession]:
    """A session over a bridge of its own, started from `project` (the web one by default); the
    bridge says nothing on stderr and the daemon answers afterwards, whatever the test did."""
    errlog = tmp_path / "bridge.err"
    async with mcp_session(bridge_params(c.env, project or c.web), errlog) as s:
        yield s
    assert errlog.read_text() == ""
    assert ping(c.daemon.socket) is not None


async def test_the_six_tools_are_listed_read_only_with_their_schemas(corpus: Corpus, tmp_path: Path) -> None:
    async with tools(corpus, tmp_path) as s:
        with anyio.fail_after(STEP_S):
            listed = await s.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    for tool in listed.tools:
        assert tool.description and len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object", tool.name
        assert tool.annotations and tool.annotations.read_only_hint, tool.name
    schemas = {t.name: t.input_schema for t in listed.tools}
    assert schemas["search"]["required"] == ["query"]
    assert schemas["search"]["properties"]["limit"]["maximum"] <= 50
    assert schemas["get_observations"]["properties"]["ids"]["type"] == "array"
    assert schemas["get_observations"]["properties"]["ids"]["items"] == {"type": "integer", "minimum": 1}
    assert {"type": "integer", "minimum": 1} in schemas["timeline"]["properties"]["id"]["anyOf"]
    assert schemas["file_history"]["required"] == ["path"]


async def test_search_lists_ids_scoped_to_the_callers_project_unless_told(corpus: Corpus, tmp_path: Path) -> None:
    c = corpus
    async with tools(c, tmp_path) as s:
        found = await ok(s, "search", {"query": "zebra"})
        assert found.startswith(f"4 matches for 'zebra' in project web ({c.web}), best first:\n"), found
        ids = line_ids(found)
        assert c.edit_id in ids and c.error_id in ids and c.other_edit not in ids
        assert set(ids) <= c.web_ids
        assert f"#{c.error_id} error · " in found and len(found) < 1000
        everywhere = await ok(s, "search", {"query": "zebra", "project": "*"})
        assert c.other_edit in line_ids(everywhere) and "[other]" in everywhere
        by_name = await ok(s, "search", {"query": "zebra", "project": "other"})
        assert set(line_ids(by_name)) == {c.other_edit, c.other_prompt}
        assert line_ids(await ok(s, "search", {"query": "zebra", "type": "error"})) == [c.error_id]
        in_file = await ok(s, "search", {"query": "zebra", "file": "src/parser.py"})
        assert line_ids(in_file) == [c.edit_id] and " src/parser.py " in in_file
        by_session = await ok(s, "search", {"query": "zebra", "session_id": S1[:8], "since": "1h", "limit": 2})
        assert len(line_ids(by_session)) == 2 and by_session.count(f" · s:{S1[:8]} · ") == 2
        assert (await ok(s, "search", {"query": "zebra", "until": "2001-01-01"})).startswith("No matches")


async def test_get_observations_gives_the_details_and_names_unknown_ids(corpus: Corpus, tmp_path: Path) -> None:
    c = corpus
    async with tools(c, tmp_path) as s:
        details = await ok(s, "get_observations", {"ids": [c.error_id, 999_999]})
        block, unknown = details.split("\n\n")
        assert block.startswith(f"#{c.error_id} error · ") and unknown == "Unknown ids: #999999"
        assert "deploy key missing" in block and f"session {S1}" in block and f"project: {c.web}" in block
        as_shown = await ok(s, "get_observations", {"ids": [f"#{c.error_id}"]})  # "#id" as the lines show it
        assert as_shown.startswith(f"#{c.error_id} error · ")


async def test_timeline_shows_the_session_around_an_id_or_a_querys_best_match(corpus: Corpus, tmp_path: Path) -> None:
    c = corpus
    async with tools(c, tmp_path) as s:
        around = await ok(s, "timeline", {"id": c.edit_id, "before": 1, "after": 2})
        assert around.startswith(f"Session {S1} ({c.web}) around #{c.edit_id}, oldest first:")
        order = line_ids(around)
        assert order == sorted(order) and c.edit_id in order and len(order) == 4
        assert f"→ #{c.edit_id} edit · " in around
        assert f"→ #{c.error_id} error · " in await ok(s, "timeline", {"query": "deploy key"})


async def test_recent_context_is_the_text_given_at_session_start(corpus: Corpus, tmp_path: Path) -> None:
    async with tools(corpus, tmp_path) as s:
        context = await ok(s, "recent_context")
    conn = sqlite3.connect(f"file:{corpus.daemon.db}?mode=ro", uri=True)
    try:
        expected = build_context(conn, corpus.web, source="startup")
    finally:
        conn.close()
    assert "zebra" in expected and context == expected


async def test_sessions_lists_the_callers_project_or_all_with_first_and_last_ids(
    corpus: Corpus, tmp_path: Path
) -> None:
    async with tools(corpus, tmp_path) as s:
        mine = await ok(s, "sessions")
        assert session_ids(mine) == [S1] and "zebra" in mine.split("\n## ", 1)[1]
        rows = db_rows(corpus.daemon.db, "SELECT min(id), max(id) FROM observations WHERE session_id = ?", (S1,))
        first, last = rows[0]
        assert f"## {S1} · #{first} to #{last} · " in mine
        assert set(session_ids(await ok(s, "sessions", {"project": "*"}))) == {S1, S2}


async def test_file_history_finds_what_touched_a_path_absolute_or_its_tail(corpus: Corpus, tmp_path: Path) -> None:
    c = corpus
    async with tools(c, tmp_path) as s:
        assert line_ids(await ok(s, "file_history", {"path": "src/parser.py"})) == [c.edit_id]
        elsewhere = await ok(s, "file_history", {"path": f"{c.other}/src/zebra_migrate.py"})
        assert elsewhere.startswith("No observations")  # another project's file, from this one
        theirs = await ok(s, "file_history", {"path": "src/zebra_migrate.py", "project": c.other})
        assert line_ids(theirs) == [c.other_edit]


async def test_bad_arguments_are_one_line_tool_errors_and_the_session_goes_on(corpus: Corpus, tmp_path: Path) -> None:
    async with tools(corpus, tmp_path) as s:
        found = await ok(s, "search", {"query": "zebra"})
        await fails(s, "get_observations", {"ids": [999_998]}, "no observation")
        await fails(s, "get_observations", {"ids": []}, "ids: list should have at least 1 item")
        await fails(s, "get_observations", {"ids": "all of them"}, "ids: input should be a valid list")
        await fails(s, "get_observations", {"ids": ["x"] * 7}, "ids.4: input should be a valid integer")
        assert (await fails(s, "get_observations", {"ids": ["x"] * 7})).endswith("; 2 more")
        await fails(s, "timeline", {"id": 999_998}, "no observation")
        await fails(s, "timeline", {}, "give an observation id")
        await fails(s, "timeline", {"query": "nothingmatchesthis"}, "nothing matches")
        await fails(s, "search", {"query": ""}, "empty")
        await fails(s, "search", {"query": '"*" ( ) ^ -- ;'}, "nothing to search")
        await fails(s, "search", {"query": "zebra", "limit": 0}, "limit: input should be greater than or equal to 1")
        await fails(s, "search", {"query": "zebra", "limit": "many"}, "limit: input should be a valid integer")
        await fails(s, "search", {"query": "zebra", "type": "bogus"}, "type: input should be 'session', 'prompt'")
        await fails(s, "search", {"query": "zebra", "since": "the day before"}, "cannot read time")
        await fails(s, "search", {"query": "zebra", "project": "no-such-project"}, "no project named")
        await fails(s, "search", {"query": "zebra", "session_id": "nope-not-a-session"}, "no session")
        await fails(s, "search", {}, "invalid arguments: query: field required")
        await fails(s, "recent_context", {"project": "*"}, "one project")
        await fails(s, "file_history", {"path": ""}, "path: string should have at least 1 character")
        await fails(s, "sessions", {"limit": 10_000}, "limit: input should be less than or equal to 50")
        await fails(s, "no_such_tool", {})
        hostile = await ok(s, "search", {"query": "zebra'; DROP TABLE observations; -- NEAR(x y) \x00 ^*"})
        assert hostile.startswith("No matches") or line_ids(hostile)
        assert await ok(s, "search", {"query": "zebra"}) == found


async def test_a_second_session_at_the_same_time_has_its_own_project_scope(corpus: Corpus, tmp_path: Path) -> None:
    async with tools(corpus, tmp_path) as s:
        async with mcp_session(bridge_params(corpus.env, corpus.other), tmp_path / "bridge2.err") as s2:
            assert session_ids(await ok(s2, "sessions")) == [S2]
        assert session_ids(await ok(s, "sessions")) == [S1]
    assert (tmp_path / "bridge2.err").read_text() == ""


async def test_the_model_reads_text_only_and_every_line_has_an_id(
    daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path
) -> None:
    """What reaches the model: one text block (no structuredContent, no output schema a client would
    answer with a JSON copy), descriptions without docstring indentation, and an id on every result
    line that get_observations accepts."""
    daemon.start()
    web, other = git_project(tmp_path / "web"), git_project(tmp_path / "other")
    feed_corpus(web, other)
    feed(*(claude_bash(S1, web, f"grep -n zebra src/parser.py  # pass {n}", f"{n}:zebra") for n in range(12)))
    edit_id = obs_id(daemon.db, "type = 'edit' AND session_id = ?", (S1,))

    async with mcp_session(bridge_params(nmem_env, web), tmp_path / "bridge.err") as s:
        with anyio.fail_after(STEP_S):
            listed = await s.list_tools()
        for tool in listed.tools:
            assert tool.output_schema is None, tool.name
            assert tool.description == inspect.cleandoc(tool.description or ""), tool.name
            assert not any(line.startswith((" ", "\t")) for line in tool.description.splitlines()), tool.name
            assert "#" in tool.description, f"{tool.name}'s description does not say how ids look"

        search = await call(s, "search", {"query": "zebra", "limit": 50})
        assert not search.is_error and search.structured_content is None
        assert [type(c) for c in search.content] == [TextContent]
        shown = text(search)
        with pytest.raises(json.JSONDecodeError):
            json.loads(shown)
        assert "{" not in shown and '"id"' not in shown

        replies = [
            shown,
            await ok(s, "search", {"query": "zebra", "project": "*"}),
            await ok(s, "timeline", {"id": edit_id, "before": 50, "after": 50}),
            await ok(s, "file_history", {"path": "src/parser.py"}),
            await ok(s, "file_history", {"path": "parser.py", "project": "*"}),
        ]
        listed_ids = {i for reply in replies for i in line_ids(reply)}
        assert len(listed_ids) > 15  # the whole corpus, both projects
        spans = re.findall(r"^## \S+ · #(\d+)(?: to #(\d+))? · ", await ok(s, "sessions", {"project": "*"}), re.M)
        assert len(spans) == 2
        every = sorted(listed_ids | {int(i) for span in spans for i in span if i})
        for start in range(0, len(every), 20):
            batch = every[start : start + 20]
            details = await ok(s, "get_observations", {"ids": batch})
            assert "Unknown ids" not in details
            heads = [int(m) for m in re.findall(r"^#(\d+) [a-z]+ · ", details, re.M)]
            assert heads == batch


async def test_the_bridge_starts_the_daemon_when_none_runs(nmem_env: dict[str, str], tmp_path: Path) -> None:
    web = git_project(tmp_path / "web")
    errlog = tmp_path / "bridge.err"
    sock = nmem_env["NMEM_SOCKET"]
    assert lock_pid(sock) is None
    try:
        async with mcp_session(bridge_params(nmem_env, web), errlog) as s:
            assert (await ok(s, "sessions")).startswith("No sessions recorded")
            assert (await ok(s, "recent_context")).startswith("No recorded history")
            feed(claude_event("UserPromptSubmit", S1, web, prompt="remember the okapi"))
            found = await ok(s, "search", {"query": "okapi"})
            assert len(line_ids(found)) == 1 and " prompt · " in found
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


INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'


def _rpc(id_: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode() + b"\n"


@contextmanager
def _bridge(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`nmem-mcp` with its three pipes; killed if it is still running, and its pipes closed, on the way out."""
    proc = subprocess.Popen([BRIDGE], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None and not f.closed:
                f.close()


@pytest.mark.slow
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
    assert replies.pop(None)["error"]["code"] == -32700  # the line that is not JSON
    assert sorted(replies) == [1, 2, 3]
    assert replies[1]["result"]["serverInfo"]["name"] == "nmem"
    assert replies[2]["result"]["content"] == [
        {"type": "text", "text": f"No sessions recorded for project {tmp_path.name} ({tmp_path})."}
    ]
    assert "structuredContent" not in replies[2]["result"] and "structuredContent" not in replies[3]["result"]
    assert replies[3]["result"]["isError"] is True

    # the daemon stops under an open session: the bridge sees EOF and exits 0
    with _bridge(env) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(json.dumps(INIT).encode() + b"\n")
        proc.stdin.flush()
        reply = json.loads(_read_line(proc, time.monotonic() + STEP_S))
        assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "nmem"
        assert daemon.stop() == 0  # SIGTERM; open connections get the daemon's shutdown grace
        assert proc.wait(timeout=STEP_S) == 0
        assert proc.stderr.read() == b""


@contextmanager
def _silent_daemon(nmem_env: dict[str, str], project: Path) -> Iterator[tuple[subprocess.Popen[bytes], socket.socket]]:
    """A bridge whose "daemon" socket accepts it and never answers; yields the bridge and that connection."""
    env = {**os.environ, **nmem_env, "CLAUDE_PROJECT_DIR": str(project), "NMEM_AUTOSTART": "0"}
    os.makedirs(os.path.dirname(nmem_env["NMEM_SOCKET"]), mode=0o700, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(nmem_env["NMEM_SOCKET"])
    listener.listen(1)
    listener.settimeout(STEP_S)
    with listener, _bridge(env) as proc:
        silent, _ = listener.accept()
        silent.settimeout(STEP_S)
        with silent:
            yield proc, silent


def _leaves_without_a_word(proc: subprocess.Popen[bytes], silent: socket.socket) -> None:
    """Nothing but the session request reached the silent socket; when it closes: one line on stderr, exit 1."""
    assert proc.stderr is not None
    request = silent.recv(65536)
    assert request.startswith(b"NMEM1 mcp ") and b"jsonrpc" not in request  # the rest waits for the daemon
    silent.close()
    assert proc.wait(timeout=STEP_S) == 1
    assert proc.stderr.read().startswith(b"nmem-mcp: ")


def test_the_bridge_answers_the_handshake_while_the_daemon_is_still_silent(
    nmem_env: dict[str, str], tmp_path: Path
) -> None:
    """Codex 0.169 leaves out an optional MCP server that has not answered `initialize` and `tools/list`
    about a second into the session, and the daemon answers only after its mcp import (seconds on a busy
    machine): the bridge answers both itself, from nmem_client/mcp_handshake.json."""
    with _silent_daemon(nmem_env, tmp_path) as (proc, silent):
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({**INIT, "params": {**INIT["params"], "protocolVersion": "2025-06-18"}}).encode())
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        reply = json.loads(_read_line(proc, time.monotonic() + STEP_S))
        assert reply["id"] == 1 and reply["result"]["protocolVersion"] == "2025-06-18"
        assert reply["result"]["serverInfo"]["name"] == "nmem" and "search" in reply["result"]["instructions"]
        proc.stdin.write(INITIALIZED + _rpc(2, "tools/list", {}))
        proc.stdin.flush()
        listed = json.loads(_read_line(proc, time.monotonic() + STEP_S))
        assert listed["id"] == 2 and {t["name"] for t in listed["result"]["tools"]} == TOOLS
        _leaves_without_a_word(proc, silent)


def test_the_bridge_answers_what_claude_code_asks_first_while_the_daemon_is_still_silent(
    nmem_env: dict[str, str], tmp_path: Path
) -> None:
    """Claude Code 2.1.330 (2026-07-28) asks `server/discover`, opens `subscriptions/listen` and waits for its
    acknowledgement, asks `server/discover` again and the three lists before it offers the tools: all
    answered here while the daemon is silent (the listen itself waits for the daemon)."""
    sent = [
        ("server/discover", {}),
        ("subscriptions/listen", {"notifications": {"toolsListChanged": True, "promptsListChanged": True}}),
        ("server/discover", {}),
        ("prompts/list", {}),
        ("resources/list", {}),
        ("tools/list", {}),
    ]
    with _silent_daemon(nmem_env, tmp_path) as (proc, silent):
        assert proc.stdin is not None
        for n, (method, params) in enumerate(sent):
            proc.stdin.write(_rpc(n, method, {"_meta": MODERN, **params}))
        proc.stdin.flush()
        deadline = time.monotonic() + STEP_S
        got = [json.loads(_read_line(proc, deadline)) for _ in sent]
        assert [r.get("id", r.get("method")) for r in got] == [
            0, "notifications/subscriptions/acknowledged", 2, 3, 4, 5]  # fmt: skip
        assert got[1]["params"]["notifications"] == {"toolsListChanged": True, "promptsListChanged": True}
        assert got[0]["result"]["supportedVersions"] == ["2026-07-28"] and got[3]["result"]["prompts"] == []
        assert {t["name"] for t in got[5]["result"]["tools"]} == TOOLS
        _leaves_without_a_word(proc, silent)


def test_a_modern_session_through_a_real_daemon_gets_one_acknowledgement(
    daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path
) -> None:
    """The listen acknowledged by the bridge reaches the daemon too: its own acknowledgement is not passed on
    twice, the call is answered, and a `tools/list` once the daemon's session is open is the shipped one."""
    env = {**os.environ, **nmem_env, "CLAUDE_PROJECT_DIR": str(tmp_path)}
    daemon.start()
    with _bridge(env) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(_rpc(1, "server/discover", {"_meta": MODERN}))
        proc.stdin.write(
            _rpc(2, "subscriptions/listen", {"_meta": MODERN, "notifications": {"toolsListChanged": True}})
        )
        proc.stdin.write(_rpc(3, "tools/call", {"_meta": MODERN, "name": "sessions", "arguments": {}}))
        proc.stdin.flush()
        deadline = time.monotonic() + STEP_S
        got = [json.loads(_read_line(proc, deadline))]
        while got[-1].get("id") != 3:
            got.append(json.loads(_read_line(proc, deadline)))
        proc.stdin.write(_rpc(4, "tools/list", {"_meta": MODERN}))
        proc.stdin.close()
        got.append(json.loads(_read_line(proc, deadline)))
        assert proc.wait(timeout=STEP_S) == 0
        got += [json.loads(line) for line in proc.stdout.read().splitlines()]
        assert proc.stderr.read() == b""
        acks = [r for r in got if r.get("method") == "notifications/subscriptions/acknowledged"]
        assert len(acks) == 1 and acks[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 2
        assert "No sessions recorded" in next(r for r in got if r.get("id") == 3)["result"]["content"][0]["text"]
        shipped = json.loads(Path(bridge.HANDSHAKE_FILE).read_text(encoding="utf-8"))["modern"]["2026-07-28"]
        assert next(r for r in got if r.get("id") == 4)["result"] == shipped["tools/list"]


def test_the_daemon_answers_tools_list_as_the_bridge_does(
    daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path
) -> None:
    """Once the daemon's session is open, a `tools/list` goes to the daemon: its answer is the shipped one,
    and the daemon's reply to the bridge's own `initialize` never reaches the client."""
    env = {**os.environ, **nmem_env, "CLAUDE_PROJECT_DIR": str(tmp_path)}
    daemon.start()
    with _bridge(env) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(
            json.dumps(INIT).encode() + b"\n" + b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
        )
        proc.stdin.write(_rpc(2, "tools/call", {"name": "sessions", "arguments": {}}))
        proc.stdin.flush()
        deadline = time.monotonic() + STEP_S
        replies = [json.loads(_read_line(proc, deadline)) for _ in range(2)]
        assert [r["id"] for r in replies] == [1, 2]  # the call was answered: the daemon's session is open
        proc.stdin.write(_rpc(3, "tools/list", {}))
        proc.stdin.close()
        listed = json.loads(_read_line(proc, deadline))
        shipped = json.loads(Path(bridge.HANDSHAKE_FILE).read_text(encoding="utf-8"))
        assert listed["id"] == 3 and listed["result"] == shipped["tools/list"]
        assert proc.wait(timeout=STEP_S) == 0
        assert proc.stdout is not None and proc.stdout.read() == b"" and proc.stderr.read() == b""


def test_malformed_lines_get_json_rpc_errors(daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path) -> None:
    """Not JSON: -32700 with id null; an id without a method: -32600; an id past 2^63: -32600, no traceback;
    a lone surrogate in a request is replaced (U+FFFD) and the request answered (issue #16, finding 11)."""
    env = {**os.environ, **nmem_env, "CLAUDE_PROJECT_DIR": str(tmp_path)}
    daemon.start()
    script = (
        json.dumps(INIT).encode() + b"\n"
        + b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n'
        + b"not json at all\n"
        + b'{"jsonrpc": "2.0", "id": 5}\n'
        + b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call",'
        + b' "params": {"name": "search", "arguments": {"query": "caf\\ud800 zebra"}}}\n'
        + _rpc(2**63, "tools/call", {"name": "sessions", "arguments": {}})
        + _rpc(7, "tools/call", {"name": "sessions", "arguments": {}})
    )  # fmt: skip
    done = subprocess.run([BRIDGE], input=script, env=env, capture_output=True, timeout=STEP_S)
    assert done.returncode == 0 and done.stderr == b""
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {r["id"]: r for r in replies}
    assert by_id[None]["error"]["code"] == -32700
    assert by_id[5]["error"]["code"] == -32600
    assert by_id[2**63]["error"]["code"] == -32600
    assert "result" in by_id[6] and "content" in by_id[6]["result"]  # answered, not dropped
    assert "No sessions recorded" in by_id[7]["result"]["content"][0]["text"]  # the session goes on
    assert len(replies) == 6
    logs = Path(nmem_env["NMEM_HOME"], "logs")
    assert logs.is_dir() and not any("Traceback" in f.read_text(errors="replace") for f in logs.iterdir())


MODERN = {  # the 2026-07-28 per-request envelope Claude Code 2.1.330 sends
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def test_an_open_listen_request_does_not_keep_the_session_after_the_client_left(
    daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path
) -> None:
    """`subscriptions/listen` is answered only when its stream ends: the bridge must not wait on it at EOF
    (it did for the transport's whole 30 s drain, holding the session and the bridge process)."""
    env = {**os.environ, **nmem_env, "CLAUDE_PROJECT_DIR": str(tmp_path)}
    daemon.start()
    script = (
        _rpc(1, "server/discover", {"_meta": MODERN})
        + _rpc(2, "subscriptions/listen", {"_meta": MODERN, "notifications": {"toolsListChanged": True}})
        + _rpc(3, "tools/call", {"_meta": MODERN, "name": "sessions", "arguments": {}})
    )
    done = subprocess.run([BRIDGE], input=script, env=env, capture_output=True, timeout=DRAIN_S / 2)
    assert done.returncode == 0 and done.stderr == b""
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    answered = {r["id"]: r for r in replies if "id" in r}
    assert answered[1]["result"]["supportedVersions"] == ["2026-07-28"]
    assert "No sessions recorded" in answered[3]["result"]["content"][0]["text"]  # work in flight is still answered


def test_a_session_start_builds_the_mcp_server_before_the_first_connection(daemon: Daemon, tmp_path: Path) -> None:
    """The first MCP connection after a daemon start waited for the mcp import (~1 s): an agent session's
    start builds the server in the background, after its context went out."""
    daemon.start()
    body = {"session_id": "s-pre", "hook_event_name": "SessionStart", "source": "startup", "cwd": str(tmp_path)}
    assert run_send(json.dumps(body).encode()).returncode == 0
    log = daemon.home / "logs" / "nmemd.log"
    wait_until(lambda: log.exists() and "MCP server ready" in log.read_text(), STEP_S, "the MCP server built")


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


def test_the_daemon_side_of_a_session_ends_when_the_client_leaves(
    daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path
) -> None:
    """Issue #15: the MCP session closes once the client has gone (stdin closed, as Claude Code does at
    exit): the bridge exits and the daemon drops the session's connection, with `subscriptions/listen`
    still open. The time it takes is a figure in BENCHMARKS.md (bench/bench_mcp_close.py), not asserted."""
    env = {**os.environ, **nmem_env, "CLAUDE_PROJECT_DIR": str(tmp_path)}
    daemon.start()
    baseline = ping(daemon.socket)["connections"]
    with _bridge(env) as proc:
        assert proc.stdin is not None
        proc.stdin.write(_rpc(1, "server/discover", {"_meta": MODERN}))
        proc.stdin.flush()
        assert json.loads(_read_line(proc, time.monotonic() + STEP_S))["id"] == 1
        listen = {"_meta": MODERN, "notifications": {"toolsListChanged": True}}
        proc.stdin.write(_rpc(2, "subscriptions/listen", listen))
        proc.stdin.flush()
        wait_until(lambda: ping(daemon.socket)["connections"] > baseline, timeout=STEP_S, message="the session open")
        proc.stdin.close()  # the client leaves
        assert proc.wait(timeout=STEP_S) == 0
        wait_until(lambda: ping(daemon.socket)["connections"] == baseline, timeout=5.0, message="the session closed")
