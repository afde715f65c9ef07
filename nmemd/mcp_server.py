"""The MCP server inside the daemon, one session per `NMEM1 mcp` connection.

Why it looks like this:
- `import mcp` costs ~1 s, so this module is imported on the first MCP
  connection only (never on the hook path), and its own top level stays light:
  the mcp/pydantic import runs in a worker thread so the event loop keeps
  answering hooks meanwhile, and the server is built once, on first use.
- One server for the daemon, many connections: each connection's state (the
  daemon, the caller's project) rides in a ContextVar that the request tasks
  `Server.run` spawns inherit.
- Progressive disclosure: `search`, `timeline`, `file_history` return compact
  lines with ids; `get_observations` returns the details of a few ids.
- Every tool is read-only and runs its SQL on a reader thread (`readers.run`);
  a bad argument or an unanswerable question comes back as a tool error
  (`is_error`), never as a failed session.

`MCPServer` has no public stream-level `run`; we use its `_lowlevel_server`
(as mcp's migration guide says to), pinned by `mcp>=2.3,<3` and guarded by a test.
"""

import contextvars
import datetime as dt
import logging
import os
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar

import anyio
import anyio.abc
import anyio.to_thread
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from typing_extensions import TypedDict

from nmem_client import protocol
from nmemd import __version__, queries, readers
from nmemd.context import DEFAULT_BUDGET, build_context
from nmemd.errors import NmemError
from nmemd.model import ObservationType
from nmemd.project import project_root, short_name
from nmemd.summary import ago, clip, rel

if TYPE_CHECKING:
    from mcp.server import Server
    from mcp.server.mcpserver import MCPServer
    from mcp.shared.message import SessionMessage

    from nmemd.server import Daemon

LOG = logging.getLogger("nmemd.mcp")
SERVER_NAME: Final = "nmem"
MAX_LINE: Final = 8 * 1024 * 1024  # one JSON-RPC message; far above anything a client sends
WRITER_FLUSH_S: Final = 5.0
DRAIN_S: Final = 30.0  # after the client half-closes, how long its pending requests may take
SEARCH_MAX: Final = 50
HISTORY_MAX: Final = 100
SESSIONS_MAX: Final = 50
AROUND_MAX: Final = 50
IDS_MAX: Final = 20
DETAILS_BUDGET: Final = 40_000  # characters of content per get_observations call
TEXT_TITLE: Final = 160
INSTRUCTIONS: Final = (
    "nmem remembers earlier Claude Code sessions in this project: prompts, edits, commands, errors. "
    "Start with `search` (one compact line per observation, with its id), then `get_observations` for "
    "the details of the few ids that matter, or `timeline` for what happened around one. "
    "`recent_context` is the overview shown at session start; `sessions` lists recent sessions with "
    "summaries; `file_history` lists what touched a file. Everything is scoped to the current project "
    "unless `project` says otherwise ('*' for all projects)."
)

_SESSION_ID_PREFIX_MIN: Final = 4


# --- per-connection state ---------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who is asking: the daemon to read from and the project the bridge reported (None: unknown)."""

    daemon: "Daemon"
    project: str | None


_caller: contextvars.ContextVar[Caller] = contextvars.ContextVar("nmem_mcp_caller")


class ToolInputError(NmemError):
    """An argument the tool cannot use (bad time, unknown project, ambiguous session prefix)."""


# --- structured output (TypedDicts: pydantic derives the output schemas from them) ---------------


class HitOut(TypedDict):
    """One compact line: enough to decide whether to ask for details."""

    id: int
    type: str
    when: str
    ts: str
    project: str | None
    session_id: str
    title: str
    path: str | None
    snippet: str | None
    count: int


class SearchOut(TypedDict):
    scope: str
    query: str
    hits: list[HitOut]


class TimelineOut(TypedDict):
    anchor: int
    session_id: str
    project: str | None
    items: list[HitOut]


class ObservationOut(TypedDict):
    id: int
    type: str
    project: str | None
    session_id: str
    when: str
    ts: str
    last_ts: str
    count: int
    hook_event: str
    title: str
    content: str
    content_truncated: bool
    tool_name: str | None
    file_path: str | None
    command: str | None


class ObservationsOut(TypedDict):
    observations: list[ObservationOut]
    missing: list[int]


class ContextOut(TypedDict):
    project: str
    context: str


class SessionOut(TypedDict):
    session_id: str
    project: str | None
    when: str
    started_at: str | None
    last_event_at: str | None
    ended: bool
    end_reason: str | None
    events: int
    first_prompt: str | None
    summary: str | None


class SessionsOut(TypedDict):
    scope: str
    sessions: list[SessionOut]


class FileHistoryOut(TypedDict):
    scope: str
    path: str
    hits: list[HitOut]


# --- argument handling ------------------------------------------------------------------------

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d|day|days|w|wk|weeks?)\s*(?:ago)?\s*$", re.I)
_UNIT_S: Final = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "day": 86400,
                  "days": 86400, "w": 604800, "wk": 604800, "week": 604800, "weeks": 604800}  # fmt: skip


def parse_time(text: str, now: float) -> float:
    """An ISO date/time (local unless it says otherwise), an age like '3d' or '12h', or epoch seconds."""
    raw = text.strip()
    m = _AGE.match(raw)
    if m:
        return now - float(m.group(1)) * _UNIT_S[m.group(2).lower()]
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        raise ToolInputError(
            f"cannot read time {text!r}: use an ISO date like 2025-06-01 or 2025-06-01T14:30, or an age like 3d, 12h"
        ) from None


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _resolve_project(conn: sqlite3.Connection, wanted: str) -> str:
    """An absolute path is normalized like hooks do; a bare name must match one known project."""
    if os.path.isabs(wanted):
        return project_root(wanted) or wanted
    name = wanted.strip().rstrip("/")
    rows = conn.execute(
        "SELECT DISTINCT project FROM sessions WHERE project = ? OR project LIKE ? ESCAPE '\\' LIMIT 10",
        (name, "%/" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")),
    ).fetchall()
    found = sorted({r[0] for r in rows if r[0] and (r[0] == name or short_name(r[0]) == name)})
    if len(found) == 1:
        return str(found[0])
    if not found:
        raise ToolInputError(f"no project named {wanted!r}; give its absolute path, or '*' for all projects")
    raise ToolInputError(f"{wanted!r} names several projects ({', '.join(found)}); give the absolute path")


def _resolve_session(conn: sqlite3.Connection, wanted: str) -> str:
    """A full session id, or a unique prefix of one (the compact lines show 8 characters)."""
    wanted = wanted.strip()
    if conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (wanted,)).fetchone():
        return wanted
    if len(wanted) < _SESSION_ID_PREFIX_MIN:
        raise ToolInputError(f"no session {wanted!r} (a prefix needs at least {_SESSION_ID_PREFIX_MIN} characters)")
    rows = conn.execute(
        "SELECT session_id FROM sessions WHERE substr(session_id, 1, ?) = ? LIMIT 2", (len(wanted), wanted)
    ).fetchall()
    if len(rows) == 1:
        return str(rows[0][0])
    raise ToolInputError(f"no session {wanted!r}" if not rows else f"session prefix {wanted!r} is ambiguous")


def _scope(conn: sqlite3.Connection, project: str | None, default: str | None) -> str:
    """The project a call reads: the argument, else the caller's project, else all ('*')."""
    if project is None or not project.strip():
        return default or queries.ALL_PROJECTS
    if project.strip() == queries.ALL_PROJECTS:
        return queries.ALL_PROJECTS
    return _resolve_project(conn, project.strip())


def _scope_label(scope: str) -> str:
    return "all projects" if scope == queries.ALL_PROJECTS else f"project {short_name(scope)} ({scope})"


# --- formatting -------------------------------------------------------------------------------


def _hit_out(hit: queries.Hit, now: float) -> HitOut:
    return HitOut(
        id=hit.id,
        type=hit.type,
        when=ago(hit.ts, now),
        ts=_iso(hit.ts) or "",
        project=hit.project,
        session_id=hit.session_id,
        title=hit.title,
        path=rel(hit.file_path, hit.project) if hit.file_path else None,
        snippet=hit.snippet,
        count=hit.count,
    )


def _hit_line(h: HitOut, mark: str = "", all_projects: bool = False) -> str:
    """`#id type · age · s:session · title · path · snippet`, leaving out what repeats the title."""
    parts = [f"{mark}#{h['id']} {h['type']}", h["when"], f"s:{h['session_id'][:8]}"]
    if all_projects and h["project"]:
        parts.append(f"[{short_name(h['project'])}]")
    parts.append(clip(h["title"], TEXT_TITLE))
    if h["path"] and h["path"] not in h["title"]:
        parts.append(h["path"])
    snippet = h["snippet"]
    if snippet and snippet.replace("[", "").replace("]", "").strip("… ") not in h["title"]:
        parts.append(clip(snippet, TEXT_TITLE))
    line = " · ".join(parts)
    return line + (f" (×{h['count']})" if h["count"] > 1 else "")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s" if not word.endswith("h") else f"{n} {word}es"


def _no_results(what: str) -> str:
    return f"No {what}."


# --- the tools' logic (pure over a connection, run on a reader thread) ---------------------------


def search_tool(
    conn: sqlite3.Connection, default: str | None, query: str, project: str | None, type_: str | None,
    session_id: str | None, file: str | None, since: str | None, until: str | None, limit: int, now: float,
) -> tuple[str, SearchOut]:  # fmt: skip
    if not query.strip():
        raise ToolInputError("the query is empty: give one or more words to look for")
    scope = _scope(conn, project, default)
    filters = queries.Filters(
        project=scope,
        types=[type_] if type_ else [],
        session_id=_resolve_session(conn, session_id) if session_id else None,
        file=file.strip() if file and file.strip() else None,
        since=parse_time(since, now) if since else None,
        until=parse_time(until, now) if until else None,
    )
    hits = [_hit_out(h, now) for h in queries.search(conn, query, filters, limit=limit, now=now)]
    out = SearchOut(scope=scope, query=query, hits=hits)
    if not hits:
        return _no_results(f"matches for {query!r} in {_scope_label(scope)}"), out
    head = f"{_count(len(hits), 'match')} for {query!r} in {_scope_label(scope)}, best first:"
    foot = "Details: get_observations(ids=[...]); surroundings: timeline(id=...)."
    every = scope == queries.ALL_PROJECTS
    return "\n".join([head, *(_hit_line(h, all_projects=every) for h in hits), foot]), out


def timeline_tool(
    conn: sqlite3.Connection, default: str | None, anchor: int | None, query: str | None, project: str | None,
    before: int, after: int, now: float,
) -> tuple[str, TimelineOut]:  # fmt: skip
    if anchor is None:
        if query is None or not query.strip():
            raise ToolInputError("give an observation id, or a query whose best match is the anchor")
        scope = _scope(conn, project, default)
        top = queries.search(conn, query, queries.Filters(project=scope), limit=1, now=now)
        if not top:
            raise ToolInputError(f"nothing matches {query!r} in {_scope_label(scope)}")
        anchor = top[0].id
    items = queries.timeline(conn, anchor, before=before, after=after)
    hits = [_hit_out(h, now) for h in items]
    at = next(h for h in items if h.id == anchor)
    out = TimelineOut(anchor=anchor, session_id=at.session_id, project=at.project, items=hits)
    head = f"Session {at.session_id} ({at.project or 'no project'}) around #{anchor}, oldest first:"
    lines = [_hit_line(h, "→ " if h["id"] == anchor else "  ") for h in hits]
    return "\n".join([head, *lines]), out


def observations_tool(
    conn: sqlite3.Connection, default: str | None, ids: list[int], now: float
) -> tuple[str, ObservationsOut]:
    wanted = list(dict.fromkeys(ids))
    details = queries.get_observations(conn, wanted)
    found = {d.id for d in details}
    missing = [i for i in wanted if i not in found]
    if not details:
        raise ToolInputError(f"no observation with id {', '.join(map(str, missing))}")
    budget = DETAILS_BUDGET
    observations: list[ObservationOut] = []
    blocks: list[str] = []
    for d in details:
        room = max(budget, 200)  # past the budget, each observation still shows its first lines
        content = d.content if len(d.content) <= room else d.content[: room - 1] + "…"
        budget -= len(content)
        o = ObservationOut(
            id=d.id, type=d.type, project=d.project, session_id=d.session_id, when=ago(d.ts, now),
            ts=_iso(d.ts) or "", last_ts=_iso(d.last_ts) or "", count=d.count, hook_event=d.hook_event,
            title=d.title, content=content, content_truncated=content != d.content, tool_name=d.tool_name,
            file_path=d.file_path, command=d.command,
        )  # fmt: skip
        observations.append(o)
        meta = [f"#{d.id} {d.type}", f"{o['ts']} ({o['when']})", f"session {d.session_id}", d.hook_event]
        if d.tool_name:
            meta.append(f"tool {d.tool_name}")
        if d.count > 1:
            meta.append(f"×{d.count} until {o['last_ts']}")
        block = [" · ".join(meta), f"title: {d.title}"]
        if d.project:
            block.append(f"project: {d.project}")
        if d.file_path:
            block.append(f"file: {d.file_path}")
        if d.command and d.command not in d.title:
            block.append(f"command: {d.command}")
        if content and content != d.title:
            block.append(content + (" [cut]" if o["content_truncated"] else ""))
        blocks.append("\n".join(block))
    if missing:
        blocks.append(f"Unknown ids: {', '.join(map(str, missing))}")
    return "\n\n".join(blocks), ObservationsOut(observations=observations, missing=missing)


def context_tool(
    conn: sqlite3.Connection, default: str | None, project: str | None, budget: int
) -> tuple[str, ContextOut]:
    scope = _scope(conn, project, default)
    if scope == queries.ALL_PROJECTS:
        raise ToolInputError("recent_context needs one project: give its path (no project is known for this session)")
    text = build_context(conn, scope, source="startup", budget=budget)
    shown = text or f"No recorded history for {_scope_label(scope)} yet."
    return shown, ContextOut(project=scope, context=text)


def sessions_tool(
    conn: sqlite3.Connection, default: str | None, project: str | None, limit: int, now: float
) -> tuple[str, SessionsOut]:
    scope = _scope(conn, project, default)
    rows = queries.sessions(conn, scope, limit=limit)
    out = SessionsOut(
        scope=scope,
        sessions=[
            SessionOut(
                session_id=r.session_id,
                project=r.project,
                when=ago(r.last_event_at or r.started_at, now),
                started_at=_iso(r.started_at),
                last_event_at=_iso(r.last_event_at),
                ended=r.ended_at is not None,
                end_reason=r.end_reason,
                events=r.event_count,
                first_prompt=r.first_prompt,
                summary=r.summary,
            )
            for r in rows
        ],
    )
    if not rows:
        return _no_results(f"sessions recorded for {_scope_label(scope)}"), out
    blocks = [f"{_count(len(rows), 'session')} in {_scope_label(scope)}, most recent first:"]
    for s in out["sessions"]:
        state = f"ended ({s['end_reason']})" if s["ended"] and s["end_reason"] else "ended" if s["ended"] else "open"
        head = f"## {s['session_id']} · last activity {s['when']} · {s['events']} events · {state}"
        if scope == queries.ALL_PROJECTS and s["project"]:
            head += f" · {s['project']}"
        block = [head]
        if s["summary"]:
            block.append(s["summary"])
        elif s["first_prompt"]:
            block.append(f"Prompt: {clip(s['first_prompt'], 220)}")
        blocks.append("\n".join(block))
    return "\n\n".join(blocks), out


def file_history_tool(
    conn: sqlite3.Connection, default: str | None, path: str, project: str | None, limit: int, now: float
) -> tuple[str, FileHistoryOut]:
    scope = _scope(conn, project, default)
    if not path.strip():
        raise ToolInputError("the path is empty")
    hits = [_hit_out(h, now) for h in queries.file_history(conn, path, queries.Filters(project=scope), limit=limit)]
    out = FileHistoryOut(scope=scope, path=path.strip(), hits=hits)
    if not hits:
        return _no_results(f"observations touching {path.strip()!r} in {_scope_label(scope)}"), out
    head = f"{_count(len(hits), 'observation')} touching {path.strip()!r} in {_scope_label(scope)}, newest first:"
    every = scope == queries.ALL_PROJECTS
    return "\n".join([head, *(_hit_line(h, all_projects=every) for h in hits)]), out


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

    caller = _caller.get()
    caller.daemon.last_activity = time.monotonic()
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
        settings = _caller.get().daemon.settings
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


# --- transport: socket bytes <-> the memory streams Server.run() consumes -----------------------


@asynccontextmanager
async def _line_transport(
    stream: anyio.abc.ByteStream, buffered: BufferedByteReceiveStream
) -> AsyncIterator[
    tuple["MemoryObjectReceiveStream[SessionMessage | Exception]", "MemoryObjectSendStream[SessionMessage]"]
]:
    """One JSON-RPC message per line each way, exactly like the stdio transport (the bridge is a byte pump).

    When the client half-closes (the bridge's stdin reached EOF), requests it
    already sent are answered before the session ends: the SDK would otherwise
    cancel them with "Connection closed" the moment the read side closes.
    """
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse, jsonrpc_message_adapter

    read_tx, read_rx = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_tx, write_rx = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    settled = anyio.Event()  # after EOF: every request answered (or the writer gave up)
    in_flight: set[object] = set()
    eof = False

    def answered(request_id: object) -> None:
        in_flight.discard(request_id)
        if eof and not in_flight:
            settled.set()

    async def reader() -> None:
        nonlocal eof
        async with read_tx:
            while True:
                try:
                    line = await buffered.receive_until(b"\n", MAX_LINE)
                except (anyio.IncompleteRead, anyio.EndOfStream):
                    eof = True  # the client is done sending; let the answers it waits for go out first
                    if in_flight and not writer_done.is_set():
                        with anyio.move_on_after(DRAIN_S):
                            await settled.wait()
                    return  # closing read_tx ends Server.run()
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    return  # the peer vanished: nobody is left to answer
                except anyio.DelimiterNotFound as exc:
                    await read_tx.send(exc)
                    return
                if not line.strip():
                    continue
                try:
                    message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # the session answers with a parse error and goes on
                    await read_tx.send(exc)
                    continue
                if isinstance(message, JSONRPCRequest):
                    in_flight.add(message.id)
                elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
                    answered((message.params or {}).get("requestId"))  # a cancelled request gets no answer
                await read_tx.send(SessionMessage(message))

    async def writer() -> None:
        try:
            async with write_rx:
                async for sm in write_rx:
                    data = sm.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stream.send(data.encode() + b"\n")
                    if isinstance(sm.message, JSONRPCResponse | JSONRPCError):
                        answered(sm.message.id)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # the peer went away
        finally:
            writer_done.set()
            settled.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_rx, write_tx
        finally:
            await write_tx.aclose()  # Server.run() closes it too; closing twice is fine
            with anyio.move_on_after(WRITER_FLUSH_S, shield=True):
                await writer_done.wait()  # the last replies reach the socket before we close it
            tg.cancel_scope.cancel()  # reader() may still wait for bytes that will never come


def _parse_body(body: bytes) -> str | None:
    """`{"project": "/abs/path" | null}` -> the project root (hooks map cwd the same way), or None."""
    try:
        request = msgspec.json.decode(body) if body.strip() else {}
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise ToolInputError("the mcp request body is not JSON") from None
    if not isinstance(request, dict):
        raise ToolInputError('expected {"project": "/abs/path" | null}')
    project = request.get("project")
    if project is None or project == "":
        return None
    if not isinstance(project, str) or not os.path.isabs(project) or "\0" in project:
        raise ToolInputError("project must be an absolute path or null")
    return project_root(project)


async def _reply(stream: anyio.abc.ByteStream, data: bytes) -> bool:
    try:
        await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return False
    return True


async def serve_connection(
    daemon: "Daemon", stream: anyio.abc.SocketStream, buffered: BufferedByteReceiveStream, body: bytes
) -> None:
    """Answer OK, then speak MCP (JSON-RPC lines) on `stream` until the peer leaves."""
    try:
        project = _parse_body(body)
    except ToolInputError as exc:
        LOG.warning("refused an MCP connection: %s", exc)
        await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, str(exc)))
        return
    try:
        app = await get_server()
    except Exception:
        LOG.exception("cannot start the MCP server")
        await _reply(stream, protocol.encode_error(protocol.ERR_INTERNAL, "the MCP server is unavailable"))
        return
    if not await _reply(stream, protocol.encode_ok(b"")):
        return
    server = lowlevel(app)
    token = _caller.set(Caller(daemon=daemon, project=project))
    LOG.info("MCP session opened (project %s)", project or "unknown")
    try:
        async with anyio.create_task_group() as session:

            async def end_when_daemon_stops() -> None:
                await daemon.stopping.wait()  # an open MCP session must not hold up a shutdown
                session.cancel_scope.cancel()

            session.start_soon(end_when_daemon_stops)
            async with _line_transport(stream, buffered) as (read_rx, write_tx):
                await server.run(read_rx, write_tx, server.create_initialization_options())
            session.cancel_scope.cancel()
    except Exception:  # one broken session must never take the daemon with it
        LOG.exception("MCP session failed")
    finally:
        _caller.reset(token)
        LOG.info("MCP session closed")
