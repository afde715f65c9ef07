"""The daemon's one MCP server: built once on first use, its six tools registered.

Why it looks like this:
- `import mcp` costs ~1 s, so the mcp/pydantic import runs in a worker thread
  (the event loop keeps answering hooks meanwhile) and the server is built
  once, on first use; every later connection reuses it.
- One server for the daemon, many connections: each connection's state (the
  daemon, the caller's project) rides in a ContextVar that the request tasks
  `Server.run` spawns inherit.
- Every tool is read-only and runs its SQL on a reader thread (`readers.run`);
  our errors come back as tool errors (`is_error`), never as a failed session.

`MCPServer` has no public stream-level `run`; we use its `_lowlevel_server`
(as mcp's migration guide says to), pinned by `mcp>=2.3,<3` and guarded by a test.
"""

import contextvars
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

import anyio.to_thread

from nmemd import __version__
from nmemd.errors import NmemError
from nmemd.mcp.tools import (
    AROUND_MAX,
    HISTORY_MAX,
    IDS_MAX,
    SEARCH_MAX,
    SESSIONS_MAX,
    ContextOut,
    FileHistoryOut,
    ObservationsOut,
    SearchOut,
    SessionsOut,
    TimelineOut,
    context_tool,
    file_history_tool,
    observations_tool,
    search_tool,
    sessions_tool,
    timeline_tool,
)
from nmemd.model import ObservationType
from nmemd.recall.context import DEFAULT_BUDGET
from nmemd.store import readers

if TYPE_CHECKING:
    from mcp.server import Server
    from mcp.server.mcpserver import MCPServer

    from nmemd.capture.host import Host

SERVER_NAME: Final = "nmem"
INSTRUCTIONS: Final = (
    "nmem remembers earlier Claude Code sessions in this project: prompts, edits, commands, errors. "
    "Start with `search` (one compact line per observation, with its id), then `get_observations` for "
    "the details of the few ids that matter, or `timeline` for what happened around one. "
    "`recent_context` is the overview shown at session start; `sessions` lists recent sessions with "
    "summaries; `file_history` lists what touched a file. Everything is scoped to the current project "
    "unless `project` says otherwise ('*' for all projects)."
)


# --- per-connection state ---------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who is asking: the daemon to read from and the project the bridge reported (None: unknown)."""

    daemon: "Host"
    project: str | None


caller_var: contextvars.ContextVar[Caller] = contextvars.ContextVar("nmem_mcp_caller")


# --- the server -------------------------------------------------------------------------------

T = TypeVar("T")
_server: "MCPServer[Any] | None" = None


def _import_mcp() -> None:
    """The ~1 s import, done on a worker thread so the loop keeps serving hooks."""
    import mcp.server.mcpserver  # noqa: F401
    import pydantic  # noqa: F401


async def get_server() -> "MCPServer[Any]":
    """The daemon's MCP server, built on first use (every later connection reuses it)."""
    global _server
    if _server is None:
        await anyio.to_thread.run_sync(_import_mcp)
        if _server is None:  # no await since the check: another connection may have built it meanwhile
            _server = build_server()
    return _server


def lowlevel(app: "MCPServer[Any]") -> "Server[Any]":
    """The object with `.run(read, write, init_options)`: MCPServer keeps it private (mcp<3 pinned)."""
    return app._lowlevel_server


async def _run_tool(fn: Callable[..., tuple[str, T]], *args: object) -> tuple[str, T]:
    """Run a tool's query on a reader thread; our errors become the model's tool errors."""
    from mcp.server.mcpserver.exceptions import ToolError

    caller = caller_var.get()
    caller.daemon.last_activity = time.monotonic()
    await caller.daemon.ingestor.store.searchable()
    try:
        return await readers.run(caller.daemon.settings.db, fn, caller.project, *args)
    except NmemError as exc:  # QueryError, ToolInputError, StorageError: the model can act on the message
        raise ToolError(str(exc)) from None
    except UnicodeError:  # a lone surrogate in an argument cannot reach SQLite
        raise ToolError("the arguments must be valid Unicode text") from None


def build_server() -> "MCPServer[Any]":
    """Register the six tools. Parameter types and Field metadata become the input schemas."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
    from pydantic import Field

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    app: MCPServer[Any] = MCPServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS)
    root.handlers[:] = handlers  # MCPServer configures logging with rich; the daemon already did
    root.setLevel(level)
    if level > logging.DEBUG:
        logging.getLogger("mcp").setLevel(logging.WARNING)  # per-request INFO lines would flood nmemd.log

    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    def result(text: str, data: Any) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)

    Project = Annotated[
        str | None,
        Field(description="Absolute project path (or its directory name); omit for the current project; '*' for all."),
    ]

    @app.tool(annotations=read_only)
    async def search(
        query: Annotated[
            str,
            Field(
                description='Words that must all appear; "quoted phrase"; trailing * for a prefix.', max_length=10_000
            ),
        ],
        project: Project = None,
        type: Annotated[ObservationType | None, Field(description="Only this kind of observation.")] = None,
        session_id: Annotated[
            str | None, Field(description="Only this session (full id or a prefix of 4+ chars).")
        ] = None,
        file: Annotated[
            str | None, Field(description="Only observations of this file (absolute path or its tail).")
        ] = None,
        since: Annotated[
            str | None,
            Field(description="Not before: ISO date/time (2025-06-01, 2025-06-01T14:30) or an age (30m, 12h, 3d, 2w)."),
        ] = None,
        until: Annotated[str | None, Field(description="Not after: same forms as since.")] = None,
        limit: Annotated[int, Field(ge=1, le=SEARCH_MAX, description="How many lines.")] = 10,
    ) -> Annotated[CallToolResult, SearchOut]:
        """Full-text search of this project's memory (prompts, edits, commands, errors, reads, ...).

        Returns one compact line per observation, best match first: id, type, age, session, title,
        path, snippet. Cheap; use it first, then get_observations(ids) for details or timeline(id)
        for what happened around one.
        """
        now = time.time()
        return result(*await _run_tool(search_tool, query, project, type, session_id, file, since, until, limit, now))

    @app.tool(annotations=read_only)
    async def timeline(
        id: Annotated[int | None, Field(ge=1, description="The observation to center on (an id from search).")] = None,
        query: Annotated[
            str | None, Field(description="Or: center on the best match of this search.", max_length=10_000)
        ] = None,
        project: Project = None,
        before: Annotated[int, Field(ge=0, le=AROUND_MAX, description="Observations before it.")] = 5,
        after: Annotated[int, Field(ge=0, le=AROUND_MAX, description="Observations after it.")] = 5,
    ) -> Annotated[CallToolResult, TimelineOut]:
        """What happened just before and after one observation, in its session, as compact lines.

        Give `id` (from search), or `query` to center on its best match in the project.
        """
        now = time.time()
        return result(*await _run_tool(timeline_tool, id, query, project, before, after, now))

    @app.tool(annotations=read_only)
    async def get_observations(
        ids: Annotated[
            list[int],
            Field(
                min_length=1, max_length=IDS_MAX, description="Observation ids from search, timeline or file_history."
            ),
        ],
    ) -> Annotated[CallToolResult, ObservationsOut]:
        """Everything stored about a few observations: full content, command, file, tool, times.

        Ask only for the ids that matter; unknown ids are listed as missing.
        """
        now = time.time()
        return result(*await _run_tool(observations_tool, ids, now))

    @app.tool(annotations=read_only)
    async def recent_context(project: Project = None) -> Annotated[CallToolResult, ContextOut]:
        """The project overview shown at session start: recent sessions and their summaries, open
        tasks, recent errors and what fixed them, files touched, commands that worked."""
        settings = caller_var.get().daemon.settings
        budget = settings.context_budget or DEFAULT_BUDGET
        return result(*await _run_tool(context_tool, project, budget))

    @app.tool(annotations=read_only)
    async def sessions(
        project: Project = None,
        limit: Annotated[int, Field(ge=1, le=SESSIONS_MAX, description="How many sessions.")] = 10,
    ) -> Annotated[CallToolResult, SessionsOut]:
        """Recent sessions of the project, newest first, each with its summary (first prompt, activity,
        files edited, commands, errors, last message)."""
        now = time.time()
        return result(*await _run_tool(sessions_tool, project, limit, now))

    @app.tool(annotations=read_only)
    async def file_history(
        path: Annotated[
            str, Field(min_length=1, max_length=4096, description="A file path: absolute, or its tail (src/app.py).")
        ],
        project: Project = None,
        limit: Annotated[int, Field(ge=1, le=HISTORY_MAX, description="How many lines.")] = 20,
    ) -> Annotated[CallToolResult, FileHistoryOut]:
        """Everything that touched a file (reads, edits, writes, errors, searches), newest first,
        as compact lines with ids."""
        now = time.time()
        return result(*await _run_tool(file_history_tool, path, project, limit, now))

    return app
