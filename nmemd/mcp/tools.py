"""The six MCP tools' logic and their structured results.

- Progressive disclosure: `search`, `timeline`, `file_history` return compact
  lines with ids; `get_observations` returns the details of a few ids.
- Each tool is a pure function over a SQLite connection (run on a reader
  thread by the server); a bad argument or an unanswerable question raises
  `ToolInputError`, which the server turns into a tool error (`is_error`).
- The result structs are TypedDicts: pydantic derives the output schemas from them.
"""

import datetime as dt
import os
import re
import sqlite3
from typing import Final

from typing_extensions import TypedDict

from nmemd.capture.project import project_root, short_name
from nmemd.errors import ToolInputError
from nmemd.recall import queries
from nmemd.recall.context import build_context
from nmemd.recall.summary import ago, clip, rel

SEARCH_MAX: Final = 50
HISTORY_MAX: Final = 100
SESSIONS_MAX: Final = 50
AROUND_MAX: Final = 50
IDS_MAX: Final = 20
DETAILS_BUDGET: Final = 40_000  # characters of content per get_observations call
TEXT_TITLE: Final = 160

_SESSION_ID_PREFIX_MIN: Final = 4


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
