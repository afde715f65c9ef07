"""An MCP client of nmem as an agent runs one: the real mcp `ClientSession` over the `nmem-mcp` bridge (stdio),
and the checks every tool reply gets (text only; one line per result, led by its `#id`)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from support.env import BIN

BRIDGE = str(BIN / "nmem-mcp")
STEP_S = 30.0  # bound on any single wait (the daemon's first MCP connection imports mcp, ~1-2 s)


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


async def ok(session: ClientSession, name: str, args: dict[str, Any] | None = None) -> str:
    """The text the model reads: one text block and nothing beside it (no JSON copy)."""
    result = await call(session, name, args)
    assert not result.is_error, text(result)
    assert result.structured_content is None, result.structured_content
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent), result.content
    return result.content[0].text


RESULT_LINE = re.compile(r"(?:→ |  )?#(\d+) [a-z]+ · ")


def line_ids(reply: str) -> list[int]:
    """The ids of a search/timeline/file_history reply: a header, then `#id type · ...` on every other line."""
    head, *lines = reply.split("\n")
    assert not RESULT_LINE.match(head), head
    ids = []
    for line in lines:
        m = RESULT_LINE.match(line)
        assert m, f"a result line without its id: {line!r}"
        ids.append(int(m.group(1)))
    return ids


def session_ids(reply: str) -> list[str]:
    """The sessions a `sessions` reply lists, in order."""
    return re.findall(r"^## (\S+) · ", reply, re.M)


async def fails(session: ClientSession, name: str, args: dict[str, Any], expect: str = "") -> str:
    result = await call(session, name, args)
    assert result.is_error, (name, args, result)
    message = text(result)
    assert expect.lower() in message.lower(), message
    assert len(result.content) == 1 and result.structured_content is None, result
    assert "\n" not in message and "Traceback" not in message and "pydantic" not in message, message
    return message
