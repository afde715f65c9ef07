"""The six MCP tools as a client calls them, in process: the real server object (`build_server`) over a
real store, through the mcp SDK's in-memory client session (the legacy handshake real agents use). The
same tools through the `nmem-mcp` bridge and a real daemon: tests/daemon/test_mcp.py."""

from __future__ import annotations

import inspect
import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent
from support.helpers import claude_bash, claude_edit, claude_event, claude_failure
from support.host import InProcessHost
from support.mcp_client import line_ids, session_ids
from support.store import filled

from nmemd.capture.ingest import Ingestor
from nmemd.mcp.server import Caller, build_server, caller_var
from nmemd.recall.context import build_context

pytestmark = pytest.mark.anyio

TOOLS = {"search", "timeline", "get_observations", "recent_context", "sessions", "file_history"}
S1, S2 = "sess-web-0001-aaaa", "sess-oth-0002-bbbb"
STEP_S = 30.0  # bound on any one call


@dataclass
class World:
    client: Client
    db: str
    web: str
    other: str

    def obs_id(self, where: str, params: tuple[object, ...] = ()) -> int:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            row = conn.execute(f"SELECT id FROM observations WHERE {where} ORDER BY id LIMIT 1", params).fetchone()
        finally:
            conn.close()
        assert row, where
        return int(row[0])

    async def call(self, name: str, args: dict[str, Any] | None = None) -> CallToolResult:
        with anyio.fail_after(STEP_S):
            return await self.client.call_tool(name, args or {})

    async def ok(self, name: str, args: dict[str, Any] | None = None) -> str:
        """The text the model reads: one text block and nothing beside it (no JSON copy)."""
        result = await self.call(name, args)
        assert len(result.content) == 1 and isinstance(result.content[0], TextContent), result.content
        assert not result.is_error, result.content[0].text
        assert result.structured_content is None, result.structured_content
        return result.content[0].text

    async def fails(self, name: str, args: dict[str, Any], expect: str = "") -> str:
        result = await self.call(name, args)
        assert result.is_error, (name, args, result)
        assert len(result.content) == 1 and isinstance(result.content[0], TextContent), result.content
        message = result.content[0].text
        assert expect.lower() in message.lower(), message
        assert "\n" not in message and "Traceback" not in message and "pydantic" not in message, message
        return message


def git_project(path: Path) -> str:
    (path / ".git").mkdir(parents=True)
    (path / "src").mkdir()
    return str(path)


def corpus(web: str, other: str) -> list[dict[str, Any]]:
    return [
        claude_event("SessionStart", S1, web, source="startup", model="claude-opus-4-6"),
        claude_event("UserPromptSubmit", S1, web, prompt="Fix the flaky zebra parser test"),
        claude_edit(S1, web, "src/parser.py", "def parse(zebra):\n    pass", "def parse(zebra):\n    return zebra"),
        claude_bash(S1, web, "pytest tests/test_parser.py", "3 passed in 0.12s"),
        claude_failure(S1, web, "make deploy", "Exit code 2\nerror: deploy key missing for zebra-prod"),
        claude_event("Stop", S1, web, stop_hook_active=False, last_assistant_message="The zebra parser test is fixed."),
        claude_event("UserPromptSubmit", S2, other, prompt="Plan the zebra migration for the other service"),
        claude_edit(S2, other, "src/zebra_migrate.py", "OLD = 1", "NEW = 2"),
    ]


@pytest.fixture(scope="module")
def app() -> Any:
    return build_server()  # the daemon builds one and keeps it (get_server); so does this module


@pytest.fixture
async def world(app: Any, tmp_path: Path) -> AsyncIterator[World]:
    web, other = git_project(tmp_path / "web"), git_project(tmp_path / "other")
    async with filled(corpus(web, other), start=time.time() - 600) as store:
        token = caller_var.set(Caller(daemon=InProcessHost(store.settings, Ingestor(store)), project=web))
        try:
            async with Client(app, mode="legacy") as client:
                yield World(client, store.settings.db, web, other)
        finally:
            caller_var.reset(token)


async def test_the_session_says_who_it_is_and_lists_six_read_only_tools_with_their_schemas(world: World) -> None:
    assert world.client.server_info and world.client.server_info.name == "nmem"
    assert world.client.instructions and "search" in world.client.instructions
    with anyio.fail_after(STEP_S):
        listed = await world.client.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    for tool in listed.tools:
        assert tool.description and tool.description == inspect.cleandoc(tool.description), tool.name
        assert tool.annotations and tool.annotations.read_only_hint, tool.name
        assert tool.input_schema["type"] == "object" and tool.output_schema is None, tool.name
    schemas = {t.name: t.input_schema for t in listed.tools}
    assert schemas["search"]["required"] == ["query"]
    assert schemas["get_observations"]["properties"]["ids"]["items"] == {"type": "integer", "minimum": 1}
    assert schemas["file_history"]["required"] == ["path"]


async def test_search_is_scoped_to_the_callers_project_unless_told(world: World) -> None:
    w = world
    edit, error = w.obs_id("type = 'edit' AND session_id = ?", (S1,)), w.obs_id("type = 'error'")
    other_edit = w.obs_id("type = 'edit' AND session_id = ?", (S2,))
    found = await w.ok("search", {"query": "zebra"})
    assert found.startswith(f"4 matches for 'zebra' in project web ({w.web}), best first:\n"), found
    ids = line_ids(found)
    assert edit in ids and error in ids and other_edit not in ids
    assert other_edit in line_ids(await w.ok("search", {"query": "zebra", "project": "*"}))
    assert line_ids(await w.ok("search", {"query": "zebra", "type": "error"})) == [error]
    assert line_ids(await w.ok("search", {"query": "zebra", "file": "src/parser.py"})) == [edit]
    assert (await w.ok("search", {"query": "zebra", "until": "2001-01-01"})).startswith("No matches")


async def test_get_observations_and_timeline_name_what_the_lines_show(world: World) -> None:
    w = world
    edit, error = w.obs_id("type = 'edit' AND session_id = ?", (S1,)), w.obs_id("type = 'error'")
    details = await w.ok("get_observations", {"ids": [f"#{error}", 999_999]})  # "#id" as the lines show it
    block, unknown = details.split("\n\n")
    assert block.startswith(f"#{error} error · ") and unknown == "Unknown ids: #999999"
    assert "deploy key missing" in block and f"session {S1}" in block and f"project: {w.web}" in block
    around = await w.ok("timeline", {"id": edit, "before": 1, "after": 2})
    assert around.startswith(f"Session {S1} ({w.web}) around #{edit}, oldest first:")
    order = line_ids(around)
    assert order == sorted(order) and edit in order and len(order) == 4 and f"→ #{edit} edit · " in around
    assert f"→ #{error} error · " in await w.ok("timeline", {"query": "deploy key"})


async def test_recent_context_sessions_and_file_history(world: World) -> None:
    w = world
    context = await w.ok("recent_context")
    conn = sqlite3.connect(f"file:{w.db}?mode=ro", uri=True)
    try:
        assert "zebra" in context and context == build_context(conn, w.web, source="startup")
    finally:
        conn.close()
    mine = await w.ok("sessions")
    assert session_ids(mine) == [S1]
    assert set(session_ids(await w.ok("sessions", {"project": "*"}))) == {S1, S2}
    edit = w.obs_id("type = 'edit' AND session_id = ?", (S1,))
    assert line_ids(await w.ok("file_history", {"path": "src/parser.py"})) == [edit]
    theirs = await w.ok("file_history", {"path": "src/zebra_migrate.py", "project": w.other})
    assert line_ids(theirs) == [w.obs_id("type = 'edit' AND session_id = ?", (S2,))]


async def test_bad_arguments_are_one_line_tool_errors_and_the_session_goes_on(world: World) -> None:
    w = world
    found = await w.ok("search", {"query": "zebra"})
    await w.fails("get_observations", {"ids": [999_998]}, "no observation")
    await w.fails("get_observations", {"ids": []}, "ids: list should have at least 1 item")
    assert (await w.fails("get_observations", {"ids": ["x"] * 7})).endswith("; 2 more")
    await w.fails("timeline", {}, "give an observation id")
    await w.fails("search", {"query": ""}, "empty")
    await w.fails("search", {"query": "zebra", "limit": 0}, "limit: input should be greater than or equal to 1")
    await w.fails("search", {"query": "zebra", "since": "the day before"}, "cannot read time")
    await w.fails("search", {"query": "zebra", "project": "no-such-project"}, "no project named")
    await w.fails("search", {}, "invalid arguments: query: field required")
    await w.fails("recent_context", {"project": "*"}, "one project")
    await w.fails("no_such_tool", {})
    hostile = await w.ok("search", {"query": "zebra'; DROP TABLE observations; -- NEAR(x y) \x00 ^*"})
    assert hostile.startswith("No matches") or line_ids(hostile)
    assert await w.ok("search", {"query": "zebra"}) == found
