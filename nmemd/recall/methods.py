"""The read methods, shared by both transports: validated params plus a function of a read-only connection.

The daemon runs them on a reader thread (`daemon.rpc.dispatch`); the CLI runs the very same
`run_query` itself when no daemon answers, so both transports give one answer. Nothing here
imports the write path, so a read command starts fast.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

import msgspec

from nmemd import registry
from nmemd.errors import QueryError, StorageError, UnknownMethod
from nmemd.model import CLAUDE_CODE, OBSERVATION_TYPES
from nmemd.recall import queries, search
from nmemd.recall.queries import Filters

# --- read methods --------------------------------------------------------------------------------

Limit = Annotated[int, msgspec.Meta(ge=1)]
Count = Annotated[int, msgspec.Meta(ge=0)]
RowId = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]  # beyond SQLite's integer range is an error, not a crash


class SearchParams(Filters, kw_only=True, forbid_unknown_fields=True):
    """The search's filters, its words and how many hits."""

    query: str
    limit: Limit = 20
    team: bool = False  # team memory: {"hits": [...], "notes": [...]}, the team server asked too (daemon.rpc)


class ShowParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    ids: Annotated[list[RowId], msgspec.Meta(min_length=1, max_length=queries.MAX_LIMIT)]


class TimelineParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    id: RowId
    before: Count = 5
    after: Count = 5


class SessionsParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    project: str | None = None
    limit: Limit = 10
    before: float | None = None  # last active before this time: the next page
    agent: str | None = None
    handoff: bool = True  # each session's handoff too (a read of each session's rows; false: without)


class FileHistoryParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    path: str
    project: str | None = None
    limit: Limit = 50


class RecentParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    project: str | None = None
    limit: Limit = 50
    before: RowId | None = None  # older than this observation: the next page


class ContextParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    project: Annotated[str, msgspec.Meta(min_length=1)]
    session_id: str | None = None
    source: str = "startup"
    budget: Count | None = None


def _known_types(types: list[str]) -> list[str]:
    unknown = [t for t in types if t not in OBSERVATION_TYPES]
    if unknown:
        raise QueryError(f"unknown type {unknown[0]!r} (known: {', '.join(OBSERVATION_TYPES)})")
    return types


def known_agent(agent: str | None) -> str | None:
    """`agent` when nmem knows it ("claude" is Claude Code); a QueryError naming the known ones if not."""
    if agent is None:
        return None
    spec = registry.get(agent)
    if spec is None:
        raise QueryError(f"unknown agent {agent!r} (known: {', '.join(registry.names())})")
    return spec.name


def _before_m011(conn: sqlite3.Connection, agent: str | None) -> bool:
    """A store not migrated to m011 yet (a read-only CLI after an upgrade) holds Claude Code's rows only:
    True when asking it for another agent's (the answer is nothing)."""
    return agent not in (None, CLAUDE_CODE) and queries.agent_column(conn, "o") == "NULL"


def _search(conn: sqlite3.Connection, p: SearchParams) -> Any:
    agent = known_agent(p.agent)
    if _before_m011(conn, agent):
        return []
    if agent == CLAUDE_CODE and queries.agent_column(conn, "o") == "NULL":
        agent = None
    filters = Filters(
        project=p.project,
        types=_known_types(p.types),
        session_id=p.session_id,
        file=p.file,
        since=p.since,
        until=p.until,
        agent=agent,
        author=p.author,
        mine=p.mine,
    )
    if (p.author or p.mine) and queries.author_column(conn) == "NULL":
        if p.author:
            return {"hits": [], "notes": []} if p.team else []  # a store from before team memory: only one's own rows
        filters.mine = False
    hits = search.search(conn, p.query, filters, p.limit)
    return {"hits": hits, "notes": []} if p.team else hits


def _show(conn: sqlite3.Connection, p: ShowParams) -> Any:
    return queries.get_observations(conn, p.ids)


def _timeline(conn: sqlite3.Connection, p: TimelineParams) -> Any:
    return queries.timeline(conn, p.id, p.before, p.after)


def _sessions(conn: sqlite3.Connection, p: SessionsParams) -> Any:
    from nmemd.recall.handoff import handoff

    agent = known_agent(p.agent)
    if _before_m011(conn, agent):
        return []
    if queries.agent_column(conn, "s") == "NULL":
        agent = None
    rows = queries.sessions(conn, p.project, p.limit, p.before, agent=agent)
    for row in rows if p.handoff else ():
        row.handoff = handoff(conn, row.session_id).lines
    return rows


class HandoffParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    session_id: Annotated[str, msgspec.Meta(min_length=1)]  # or a unique prefix of at least 4 characters


def _handoff(conn: sqlite3.Connection, p: HandoffParams) -> Any:
    """One session's handoff (`nmem show SESSION`)."""
    from nmemd.recall.handoff import handoff

    return handoff(conn, queries.resolve_session(conn, p.session_id))


def _file_history(conn: sqlite3.Connection, p: FileHistoryParams) -> Any:
    return queries.file_history(conn, p.path, Filters(project=p.project), p.limit)


def _recent(conn: sqlite3.Connection, p: RecentParams) -> Any:
    return queries.recent(conn, Filters(project=p.project), p.limit, p.before)


def _context(conn: sqlite3.Connection, p: ContextParams) -> Any:
    """What SessionStart would inject for a project (`nmem context`, MCP `recent_context`)."""
    from nmemd.capture.project import project_root
    from nmemd.recall.context import DEFAULT_BUDGET, build_context

    project = project_root(p.project) or p.project
    budget = DEFAULT_BUDGET if p.budget is None else p.budget
    text = build_context(conn, project, session_id=p.session_id, source=p.source, budget=budget)
    return {"project": project, "context": text}


class ProjectParams(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1)]


def _project(conn: sqlite3.Connection, p: ProjectParams) -> Any:
    """A project's path from its path, folder name or a unique suffix (`nmem ... --project NAME`)."""
    return {"project": queries.resolve_project(conn, p.name)}


class Query(NamedTuple):
    params: type[msgspec.Struct]
    run: Callable[[sqlite3.Connection, Any], Any]


QUERIES: dict[str, Query] = {
    "search": Query(SearchParams, _search),
    "show": Query(ShowParams, _show),
    "timeline": Query(TimelineParams, _timeline),
    "sessions": Query(SessionsParams, _sessions),
    "file_history": Query(FileHistoryParams, _file_history),
    "recent": Query(RecentParams, _recent),
    "context": Query(ContextParams, _context),
    "project": Query(ProjectParams, _project),
    "handoff": Query(HandoffParams, _handoff),
}


def parse_params(method: str, params: dict[str, Any]) -> msgspec.Struct:
    """Validate params for a read method; a bad one is a QueryError naming it."""
    query = QUERIES.get(method)
    if query is None:
        raise UnknownMethod(f"unknown method {method!r}")
    return queries.convert_params(method, params, query.params)


def execute(conn: sqlite3.Connection, method: str, parsed: msgspec.Struct) -> Any:
    try:
        return QUERIES[method].run(conn, parsed)
    except sqlite3.Error as exc:
        raise StorageError(f"{method} failed: {exc}") from exc


def run_query(conn: sqlite3.Connection, method: str, params: dict[str, Any]) -> Any:
    """Validate and run one read method on `conn` (the CLI's path when no daemon runs)."""
    return execute(conn, method, parse_params(method, params))
