"""The daemon's one MCP server: built once on first use, its six tools registered.

Why it looks like this:
- `import mcp` costs ~1 s, so the mcp/pydantic import runs in a worker thread
  (the event loop keeps answering hooks meanwhile) and the server is built
  once, on first use; every later connection reuses it.
- One server for the daemon, many connections: each connection's state (the
  daemon, the caller's project) rides in a ContextVar that the request tasks
  `Server.run` spawns inherit.
- Every tool is read-only and runs its SQL on a reader thread (`readers.run`);
  our errors come back as tool errors (`is_error`), never as a failed session,
  and arguments the input schema refuses as one line naming each field (not pydantic's dump).
- The model reads the text and only the text: tools are registered with
  `structured_output=False` (no output schema, no `structuredContent`), since a
  client shows the model the JSON copy too, or instead (Claude Code does).
- Descriptions are the docstrings without their indentation (the SDK sends
  `__doc__` as it is).

`MCPServer` has no public stream-level `run`; we use its `_lowlevel_server`
(as mcp's migration guide says to), pinned by `mcp>=2.3,<3` and guarded by a test.
"""

import contextvars
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import anyio.to_thread

from nmemd import __version__
from nmemd.errors import NmemError
from nmemd.mcp.tools import (
    AROUND_MAX,
    HISTORY_MAX,
    IDS_MAX,
    SEARCH_MAX,
    SESSIONS_MAX,
    context_tool,
    file_history_tool,
    observations_tool,
    search_tool,
    sessions_tool,
    timeline_tool,
)
from nmemd.model import ObservationType
from nmemd.printable import printable
from nmemd.recall.context import DEFAULT_BUDGET
from nmemd.store import readers

if TYPE_CHECKING:
    from mcp.server import Server
    from mcp.server.mcpserver import MCPServer
    from pydantic import ValidationError

    from nmemd.capture.host import Host

SERVER_NAME: Final = "nmem"
ARGUMENT_ERRORS_SHOWN: Final = 5  # the first few are enough to correct a call
INSTRUCTIONS: Final = (
    "nmem remembers earlier coding-agent sessions (Claude Code, Codex) in this project: prompts, edits, commands,"
    " errors. "
    "Start with `search` (one compact line per observation, starting with its id, e.g. #123), then "
    "`get_observations` for the details of the few ids that matter, or `timeline` for what happened around one. "
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


async def _run_tool(fn: Callable[..., str], *args: object) -> str:
    """Run a tool's query on a reader thread; our errors become the model's tool errors."""
    from mcp.server.mcpserver.exceptions import ToolError

    caller = caller_var.get()
    caller.daemon.last_activity = time.monotonic()
    await caller.daemon.ingestor.store.searchable()
    try:
        daemon = caller.daemon
        text = await readers.query(daemon.settings.db, daemon.ingestor.busy, fn, caller.project, *args)
        return printable(text)  # a teammate's row is data: no escape sequence reaches the model's client
    except NmemError as exc:  # QueryError, ToolInputError, StorageError: the model can act on the message
        raise ToolError(str(exc)) from None
    except UnicodeError:  # a lone surrogate in an argument cannot reach SQLite
        raise ToolError("the arguments must be valid Unicode text") from None


def _strip_hash(value: object) -> object:
    """`"#123"` -> `"123"`: an id copied from a line as it is shown still works."""
    return value.strip().removeprefix("#") if isinstance(value, str) else value


def invalid_arguments(tool: str, exc: "ValidationError") -> str:
    """One clause per refused argument, without pydantic's type codes, echoed input and links."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    problems = []
    for err in errors[:ARGUMENT_ERRORS_SHOWN]:
        where = ".".join(str(part) for part in err["loc"]) or "arguments"
        problems.append(f"{where}: {err['msg'][:1].lower()}{err['msg'][1:]}")
    if len(errors) > len(problems):
        problems.append(f"{len(errors) - len(problems)} more")
    return f"Error executing tool {tool}: invalid arguments: " + "; ".join(problems)


def build_server() -> "MCPServer[Any]":
    """Register the six tools. Parameter types and Field metadata become the input schemas."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
    from pydantic import BeforeValidator, Field, ValidationError

    from nmemd import registry

    # The registry's agents when the server is built, an agent registered since included: the schema's enum.
    AgentName: Any = Literal[registry.names()]

    class NmemServer(MCPServer[Any]):
        async def call_tool(
            self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
        ) -> CallToolResult | InputRequiredResult:
            """Arguments the schema refuses: say which and why in a line, not pydantic's multi-line dump."""
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                if isinstance(exc.__cause__, ValidationError):
                    raise ToolError(invalid_arguments(name, exc.__cause__)) from exc.__cause__
                raise

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    app = NmemServer(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS)
    root.handlers[:] = handlers  # MCPServer configures logging with rich; the daemon already did
    root.setLevel(level)
    if level > logging.DEBUG:
        logging.getLogger("mcp").setLevel(logging.WARNING)  # per-request INFO lines would flood nmemd.log

    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)

    def tool(fn: Callable[..., Any]) -> Callable[..., Any]:
        """Text only (no output schema, no structuredContent); the docstring without its indentation."""
        app.add_tool(fn, description=inspect.getdoc(fn), annotations=read_only, structured_output=False)
        return fn

    Project = Annotated[
        str | None,
        Field(description="Absolute project path (or its directory name); omit for the current project; '*' for all."),
    ]
    ObsId = Annotated[int, Field(ge=1), BeforeValidator(_strip_hash)]  # the constraint first: "minimum" in the schema

    @tool
    async def search(
        query: Annotated[
            str,
            Field(
                description='A question or keywords: rows holding more of the words rank first; "quoted phrase";'
                " trailing * for a prefix.",
                max_length=10_000,
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
        agent: Annotated[
            AgentName | None,
            Field(description="Only what this coding agent did."),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=SEARCH_MAX, description="How many lines.")] = 10,
    ) -> str:
        """Full-text search of this project's memory (prompts, edits, commands, errors, reads, ...).

        Returns a header line, then one line per observation, best match first:
        `#id type · age · s:session · title · path · snippet`, the snippet's matched words ⟦marked⟧.
        The number after `#` is the id that
        get_observations(ids) and timeline(id) take. Cheap; use it first, then get_observations for
        the details of the few ids that matter.
        """
        now, now_mono = time.time(), time.monotonic()
        text = await _run_tool(search_tool, query, project, type, session_id, file, since, until, limit, now, agent)
        caller = caller_var.get()
        sync = getattr(caller.daemon, "team", None)  # the daemon's TeamSync (team memory)
        if sync is not None and sync.links and not (type or session_id or file or since or until or agent):
            from nmemd.team import search as team_search  # the server answers what the local store lacks

            text = await team_search.mcp_lines(caller.daemon, text, query, project or caller.project, limit, now_mono)
        return printable(text)

    @tool
    async def timeline(
        id: Annotated[
            ObsId | None, Field(description="The observation to center on: the number after # in a result line.")
        ] = None,
        query: Annotated[
            str | None, Field(description="Or: center on the best match of this search.", max_length=10_000)
        ] = None,
        project: Project = None,
        before: Annotated[int, Field(ge=0, le=AROUND_MAX, description="Observations before it.")] = 5,
        after: Annotated[int, Field(ge=0, le=AROUND_MAX, description="Observations after it.")] = 5,
    ) -> str:
        """What happened just before and after one observation, in its session, oldest first.

        Give `id` (from a `#id` in any result), or `query` to center on its best match in the project.
        Returns a header line, then one line per observation like search's, `→` marking the center;
        each starts with the `#id` that get_observations takes.
        """
        now = time.time()
        return await _run_tool(timeline_tool, id, query, project, before, after, now)

    @tool
    async def get_observations(
        ids: Annotated[
            list[ObsId],
            Field(
                min_length=1,
                max_length=IDS_MAX,
                description="Observation ids: the numbers after # in search, timeline, file_history or sessions.",
            ),
        ],
    ) -> str:
        """Everything stored about a few observations: full content, command, file, tool, times.

        Ask only for the ids that matter (`#123` in a result line is id 123); unknown ids are listed
        as missing.
        """
        now = time.time()
        return await _run_tool(observations_tool, ids, now)

    @tool
    async def recent_context(project: Project = None) -> str:
        """The project overview shown at session start: recent sessions and their summaries, open
        tasks, recent errors and what followed them, files most worked on, commands that worked.

        Its lines sum up many observations and carry no ids: search, sessions or file_history give
        the `#id`s to ask get_observations about.
        """
        settings = caller_var.get().daemon.settings
        budget = settings.context_budget or DEFAULT_BUDGET
        return await _run_tool(context_tool, project, budget)

    @tool
    async def sessions(
        project: Project = None,
        limit: Annotated[int, Field(ge=1, le=SESSIONS_MAX, description="How many sessions.")] = 10,
    ) -> str:
        """Recent sessions of the project, newest first, each with its handoff: what was asked, files
        changed, what failed and what fixed it, the last build/test runs, open tasks, the conclusion;
        each line ends with the ids it was read from.

        Each session's header names its first and last observation (`#id`): timeline(id) from there
        walks the session, get_observations takes the id; search(session_id=...) looks inside one.
        """
        now = time.time()
        return await _run_tool(sessions_tool, project, limit, now)

    @tool
    async def file_history(
        path: Annotated[
            str, Field(min_length=1, max_length=4096, description="A file path: absolute, or its tail (src/app.py).")
        ],
        project: Project = None,
        limit: Annotated[int, Field(ge=1, le=HISTORY_MAX, description="How many lines.")] = 20,
    ) -> str:
        """Everything that touched a file (reads, edits, writes, errors, searches), newest first.

        Returns a header line, then one line per observation like search's, each starting with the
        `#id` that get_observations and timeline take.
        """
        now = time.time()
        return await _run_tool(file_history_tool, path, project, limit, now)

    return app
