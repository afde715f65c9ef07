"""Read-side queries: details, timelines, sessions, file history, and the filters search shares.

Plain functions over a `sqlite3.Connection`, so the CLI can run them on a
read-only connection when no daemon runs and the daemon can run them in a
worker thread (`readers.run`) without touching its write connection.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sqlite3
import time
from collections.abc import Sequence, Sized
from typing import Any, TypeVar

import msgspec

from nmemd.capture.project import project_root
from nmemd.errors import QueryError
from nmemd.model import CLAUDE_CODE

MAX_TERMS = 32  # a 10,000-character query is cut to its first terms, not refused
MAX_TERM_CHARS = 200
MAX_LIMIT = 200
ALL_PROJECTS = "*"

_AT_PARAM = re.compile(r" - at `\$\.?([^`]*)`$")
S = TypeVar("S", bound=msgspec.Struct)


def convert_params(method: str, params: dict[str, Any], kind: type[S]) -> S:
    """Validate a method's params into `kind`; a bad one is a QueryError naming it."""
    try:
        return msgspec.convert(params, kind)
    except msgspec.ValidationError as exc:
        text = str(exc)
        at = _AT_PARAM.search(text)
        if at:
            text = f"parameter {at.group(1)!r}: {text[: at.start()]}"
        raise QueryError(f"{method}: {text}") from None


class Hit(msgspec.Struct, kw_only=True):
    """One compact search or timeline line: enough to decide whether to ask for details."""

    id: int
    type: str
    project: str | None
    session_id: str
    ts: float
    title: str
    file_path: str | None = None
    count: int = 1
    snippet: str | None = None  # plain text around the best matching line (`nmemd.recall.snippets`)
    spans: list[tuple[int, int]] = []  # the matched words in `snippet`: [start, end) offsets in code points
    score: float | None = None
    similar: int = 0  # near-identical hits folded into this one (search)
    author: str | None = None  # a teammate's (team memory); None: this user's own
    agent: str | None = None  # the teammate's coding agent, with `author`
    seq: int | None = None  # a hit the team server answered (not in the local store: id 0)


class Detail(msgspec.Struct, kw_only=True):
    """Everything stored about one observation."""

    id: int
    type: str
    project: str | None
    session_id: str
    ts: float
    last_ts: float
    count: int
    hook_event: str
    title: str
    content: str
    tool_name: str | None
    file_path: str | None
    command: str | None
    tool_use_id: str | None
    agent_id: str | None
    pinned: bool
    agent: str = CLAUDE_CODE
    author: str | None = None  # a teammate's row (team memory): who wrote it, on which machine
    machine: str | None = None


class HandoffLine(msgspec.Struct, kw_only=True):
    """One line of a session's handoff (`nmemd.recall.handoff`): its kind (asked, changed, fixed, failed,
    checks, tasks, pending, next, learned, concluded), its text, and the observations it was read from."""

    kind: str
    text: str
    ids: list[int]


class SessionRow(msgspec.Struct, kw_only=True):
    session_id: str
    project: str | None
    started_at: float | None
    last_event_at: float | None
    ended_at: float | None
    source: str | None
    end_reason: str | None
    event_count: int
    summary: str | None
    first_prompt: str | None = None
    agent: str = CLAUDE_CODE
    handoff: list[HandoffLine] = []  # read from its observations (`sessions` unless `handoff` is false)


def resolve_project(conn: sqlite3.Connection, wanted: str) -> str:
    """A project given as a path (mapped to its git top-level, as hooks map cwd), its folder name or a
    unique path suffix (`immunize`, `org/immunize`) among the projects that have sessions."""
    wanted = wanted.strip()
    if os.path.isabs(wanted):
        return project_root(wanted) or wanted
    name = wanted.rstrip("/")
    if not name:
        raise QueryError("the project is empty: give its path or name")
    rows = conn.execute(
        "SELECT DISTINCT project FROM sessions WHERE project = ? OR project LIKE ? ESCAPE '\\' LIMIT 50",
        (name, "%/" + name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")),
    ).fetchall()
    found = sorted({r[0] for r in rows if r[0] and (r[0] == name or r[0].endswith("/" + name))})
    if len(found) == 1:
        return str(found[0])
    if not found:
        raise QueryError(f"no project named {wanted!r}; give its path, or '*' for all projects")
    names = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
    raise QueryError(f"{wanted!r} names several projects ({names}); give more of its path")


SESSION_PREFIX_MIN = 4


def resolve_session(conn: sqlite3.Connection, wanted: str) -> str:
    """A full session id, or a unique prefix of one (lines show its first 8 characters)."""
    wanted = wanted.strip()
    if conn.execute("SELECT 1 FROM sessions WHERE session_id = ?", (wanted,)).fetchone():
        return wanted
    if len(wanted) < SESSION_PREFIX_MIN:
        raise QueryError(f"no session {wanted!r} (a prefix needs at least {SESSION_PREFIX_MIN} characters)")
    rows = conn.execute(
        "SELECT session_id FROM sessions WHERE substr(session_id, 1, ?) = ? LIMIT 2", (len(wanted), wanted)
    ).fetchall()
    if len(rows) == 1:
        return str(rows[0][0])
    raise QueryError(f"no session {wanted!r}" if not rows else f"session prefix {wanted!r} is ambiguous")


class Filters(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Narrow a query. `project="*"` (or None) means every project."""

    project: str | None = None
    types: list[str] = []
    session_id: str | None = None
    file: str | None = None
    since: float | None = None
    until: float | None = None
    agent: str | None = None  # a registry name; "claude-code": the rows with no agent
    author: str | None = None  # a teammate's rows (team memory); one's own name: one's own rows too
    mine: bool = False  # only this user's own rows (no teammate's)


def agent_column(conn: sqlite3.Connection, alias: str) -> str:
    """`<alias>.agent`, or NULL on a store the daemon has not migrated to m011 yet (a read-only CLI
    after an upgrade): every row there is Claude Code's."""
    found = conn.execute("SELECT 1 FROM pragma_table_info('observations') WHERE name = 'agent'").fetchone()
    return f"{alias}.agent" if found else "NULL"


def author_column(conn: sqlite3.Connection) -> str:
    """`author`, or NULL on a store from before team memory (migration m012): all its rows are one's own."""
    found = conn.execute("SELECT 1 FROM pragma_table_info('observations') WHERE name = 'author'").fetchone()
    return "author" if found else "NULL"


def agent_clause(agent: str, alias: str) -> tuple[str, list[Any]]:
    """The SQL that keeps one agent's rows: Claude Code's store no name (migration m011)."""
    from nmemd import registry
    from nmemd.model import stored_agent

    stored = stored_agent(registry.canonical(agent))
    return (f"{alias}.agent IS NULL", []) if stored is None else (f"{alias}.agent = ?", [stored])


_TERM = re.compile(r'"([^"]*)"|(\S+)')
_WORDISH = re.compile(r"\w", re.UNICODE)


def fts_query(text: str) -> str:
    """Turn user text into a safe FTS5 query: every term quoted, AND-ed.

    `"exact phrase"` stays a phrase, a trailing `*` keeps prefix search, and
    every FTS5 operator character is inert inside quotes. Raises QueryError
    when nothing searchable is left.
    """
    from nmemd.recall.terms import plain  # its regexes and word lists cost the CLI's start ~10 ms

    parts: list[str] = []
    for match in _TERM.finditer(plain(text)):
        phrase, word = match.group(1), match.group(2)
        raw = phrase if phrase is not None else word
        prefix = phrase is None and raw.endswith("*") and len(raw) > 1
        raw = raw.rstrip("*") if prefix else raw
        raw = raw[:MAX_TERM_CHARS]
        if not _WORDISH.search(raw):
            continue
        quoted = '"' + raw.replace('"', '""') + '"'
        parts.append(quoted + ("*" if prefix else ""))
        if len(parts) >= MAX_TERMS:
            break
    if not parts:
        raise QueryError("the query has nothing to search for (no letters or digits)")
    return " ".join(parts)


def filter_clauses(filters: Filters, alias: str = "o") -> tuple[list[str], list[Any]]:
    """The WHERE clauses (joined with AND) and their parameters that select the rows `filters` names."""
    clauses: list[str] = []
    params: list[Any] = []
    # With a session given, its index is the way in (a session is small); the unary `+` keeps SQLite
    # from walking a whole project's or type's index instead, as it may before `PRAGMA optimize`.
    hint = "+" if filters.session_id else ""
    if filters.project and filters.project != ALL_PROJECTS:
        clauses.append(f"{hint}{alias}.project = ?")
        params.append(filters.project)
    if filters.types:
        clauses.append(f"{hint}{alias}.type IN ({','.join('?' * len(filters.types))})")
        params.extend(filters.types)
    if filters.session_id:
        clauses.append(f"{alias}.session_id = ?")
        params.append(filters.session_id)
    if filters.file:
        clauses.append(f"({alias}.file_path = ? OR {alias}.file_path LIKE ? ESCAPE '\\')")
        escaped = filters.file.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params.extend([filters.file, "%" + escaped])
    if filters.since is not None:
        clauses.append(f"{alias}.ts >= ?")
        params.append(filters.since)
    if filters.until is not None:
        clauses.append(f"{alias}.ts <= ?")
        params.append(filters.until)
    if filters.agent:
        clause, values = agent_clause(filters.agent, alias)
        clauses.append(clause)
        params.extend(values)
    if filters.mine:
        clauses.append(f"{alias}.author IS NULL")
    if filters.author:
        clauses.append(f"({alias}.author = ? OR ({alias}.author IS NULL AND ? IN (SELECT member FROM team_projects)))")
        params.extend([filters.author, filters.author])
    return clauses, params


def teammates_of(conn: sqlite3.Connection, hits: Sequence[Hit]) -> None:
    """Fill `agent` of every hit, as `show` gives it (issue #37, 4: search said null), and `author` of
    the hits that are teammates' rows (team memory, migration m012)."""
    ids = [h.id for h in hits if h.id]
    if not ids:
        return
    where = f" FROM observations o WHERE o.id IN ({','.join('?' * len(ids))})"
    try:
        rows = conn.execute("SELECT o.id, o.author, o.agent" + where, ids).fetchall()
    except sqlite3.OperationalError:  # a store from before migrations m011 and m012 (a read-only CLI's)
        schema = "SELECT name FROM pragma_table_info('observations') WHERE name IN ('author', 'agent')"
        have = {r[0] for r in conn.execute(schema)}
        rows = conn.execute(
            f"SELECT o.id, {'o.author' if 'author' in have else 'NULL'}, {'o.agent' if 'agent' in have else 'NULL'}"
            + where,
            ids,
        ).fetchall()
    found = {r[0]: r for r in rows}
    for hit in hits:
        if r := found.get(hit.id):
            hit.agent = r[2] or CLAUDE_CODE
            if r[1] is not None:
                hit.author = r[1]


def marks(values: Sized) -> str:
    """One `?` per value, for `IN (...)`."""
    return ",".join("?" * len(values))


def checked_limit(limit: int) -> int:
    """A row limit as asked, at most MAX_LIMIT; QueryError below 1."""
    if limit < 1:
        raise QueryError("limit must be at least 1")
    return min(limit, MAX_LIMIT)


HIT_COLUMNS = "o.id, o.type, o.project, o.session_id, o.ts, o.title, o.file_path, o.count"


def _hit(r: Sequence[Any], **extra: Any) -> Hit:
    """A Hit from a row that starts with `HIT_COLUMNS`."""
    return Hit(
        id=r[0], type=r[1], project=r[2], session_id=r[3], ts=r[4], title=r[5], file_path=r[6], count=r[7], **extra
    )


_DETAIL_COLUMNS = (
    "id, type, project, session_id, ts, last_ts, count, hook_event, title, content, tool_name, file_path,"
    " command, tool_use_id, agent_id, pinned"
)


def get_observations(conn: sqlite3.Connection, ids: Sequence[int]) -> list[Detail]:
    """Full details, in the order asked; unknown ids are simply absent."""
    if not ids:
        return []
    unique = list(dict.fromkeys(int(i) for i in ids))[:MAX_LIMIT]
    team = "author, machine" if author_column(conn) == "author" else "NULL, NULL"
    columns = f"{_DETAIL_COLUMNS}, {agent_column(conn, 'observations')}, {team}"
    rows = conn.execute(f"SELECT {columns} FROM observations WHERE id IN ({marks(unique)})", unique).fetchall()
    by_id = {r[0]: r for r in rows}
    return [_detail(by_id[i]) for i in unique if i in by_id]


def _detail(r: Sequence[Any]) -> Detail:
    return Detail(
        id=r[0],
        type=r[1],
        project=r[2],
        session_id=r[3],
        ts=r[4],
        last_ts=r[5],
        count=r[6],
        hook_event=r[7],
        title=r[8],
        content=r[9],
        tool_name=r[10],
        file_path=r[11],
        command=r[12],
        tool_use_id=r[13],
        agent_id=r[14],
        pinned=bool(r[15]),
        agent=r[16] or CLAUDE_CODE,
        author=r[17],
        machine=r[18],
    )


def _hits(rows: Sequence[Sequence[Any]]) -> list[Hit]:
    return [_hit(r) for r in rows]


def _with_authors(conn: sqlite3.Connection, hits: list[Hit]) -> list[Hit]:
    teammates_of(conn, hits)
    return hits


def timeline(conn: sqlite3.Connection, anchor: int, before: int = 5, after: int = 5) -> list[Hit]:
    """What happened in the anchor's session just before and after it (anchor included)."""
    row = conn.execute("SELECT session_id FROM observations WHERE id = ?", (anchor,)).fetchone()
    if row is None:
        raise QueryError(f"no observation with id {anchor}")
    session = row[0]
    earlier = conn.execute(
        f"SELECT {HIT_COLUMNS} FROM observations o WHERE o.session_id = ? AND o.id < ? ORDER BY o.id DESC LIMIT ?",
        (session, anchor, max(0, min(before, MAX_LIMIT))),
    ).fetchall()
    later = conn.execute(
        f"SELECT {HIT_COLUMNS} FROM observations o WHERE o.session_id = ? AND o.id >= ? ORDER BY o.id LIMIT ?",
        (session, anchor, max(0, min(after, MAX_LIMIT)) + 1),
    ).fetchall()
    return _with_authors(conn, _hits(list(reversed(earlier)) + list(later)))


def file_history(conn: sqlite3.Connection, path: str, filters: Filters | None = None, limit: int = 50) -> list[Hit]:
    """Everything that touched a path (exact, or any path ending with it), newest first."""
    if not path.strip():
        raise QueryError("file path is empty")
    f = msgspec.structs.replace(filters or Filters(), file=path.strip())
    clauses, params = filter_clauses(f)
    rows = conn.execute(
        f"SELECT {HIT_COLUMNS} FROM observations o WHERE {' AND '.join(clauses)} ORDER BY o.ts DESC, o.id DESC LIMIT ?",
        [*params, checked_limit(limit)],
    ).fetchall()
    return _hits(rows)


def recent(
    conn: sqlite3.Connection, filters: Filters | None = None, limit: int = 50, before: int | None = None
) -> list[Hit]:
    """The newest observations matching the filters (older than observation `before`: the next page);
    with no filter, the newest stored (imports store old rows late)."""
    clauses, params = filter_clauses(filters or Filters())
    if not clauses:  # every project: newest stored first, the rowid's order (no sort of the whole table)
        order = "o.id DESC"
        if before is not None:
            clauses.append("o.id < ?")
            params.append(before)
    else:  # along the filter's (project|session|type, ts) index
        order = "o.ts DESC, o.id DESC"
        if before is not None:  # below that row's (ts, id): a page ends where the next begins, ties included
            clauses.append("(o.ts, o.id) < (SELECT ts, id FROM observations WHERE id = ?)")
            params.append(before)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
        f"SELECT {HIT_COLUMNS} FROM observations o {where} ORDER BY {order} LIMIT ?", [*params, checked_limit(limit)]
    ).fetchall()
    return _with_authors(conn, _hits(rows))


def sessions(
    conn: sqlite3.Connection,
    project: str | None = None,
    limit: int = 10,
    before: float | None = None,
    agent: str | None = None,
) -> list[SessionRow]:
    """Recent sessions with their summaries and first prompt, newest first (last active before
    `before`: the next page; of one agent, when given)."""
    clauses: list[str] = []
    params: list[Any] = []
    if project and project != ALL_PROJECTS:
        clauses.append("s.project = ?")
        params.append(project)
    if before is not None:
        clauses.append("s.last_event_at < ?")
        params.append(before)
    if agent:
        clause, values = agent_clause(agent, "s")
        clauses.append(clause)
        params.extend(values)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    # The page is sorted on (rowid, time) alone, then read whole with its first prompt: asked of every
    # session before the sort, with its summary, that cost 66 ms over 11,000 sessions. The limit is written
    # in (a checked int): bound as a parameter, SQLite read every session's row, summaries and all (13 ms
    # at 11,000 sessions), instead of the covering index of (project, last_event_at) (1.5 ms).
    size = checked_limit(limit)
    rows = conn.execute(
        f"""SELECT s.session_id, s.project, s.started_at, s.last_event_at, s.ended_at, s.source, s.end_reason,
                   s.event_count, s.summary,
                   (SELECT o.title FROM prompts p JOIN observations o ON o.id = p.observation_id
                     WHERE p.session_id = s.session_id ORDER BY p.prompt_number LIMIT 1), {agent_column(conn, "s")}
            FROM (SELECT s.rowid AS r FROM sessions s {where} ORDER BY s.last_event_at DESC LIMIT {size:d}) page
            JOIN sessions s ON s.rowid = page.r
            ORDER BY s.last_event_at DESC""",
        params,
    ).fetchall()
    return [
        SessionRow(
            session_id=r[0],
            project=r[1],
            started_at=r[2],
            last_event_at=r[3],
            ended_at=r[4],
            source=r[5],
            end_reason=r[6],
            event_count=r[7],
            summary=r[8],
            first_prompt=r[9],
            agent=r[10] or CLAUDE_CODE,
        )
        for r in rows
    ]


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_SPAN_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def when(value: str) -> float:
    """A `since`/`until` bound: `30m`, `2h`, `7d`, `1w` ago, or an ISO date/time (local time)."""
    span = _SPAN.match(value)
    if span:
        return time.time() - float(span.group(1)) * _SPAN_S[span.group(2)]
    try:
        return dt.datetime.fromisoformat(value.strip()).timestamp()
    except (ValueError, OverflowError, OSError):  # not a date, or one the platform cannot convert
        raise QueryError(f"{value!r} is neither a span (30m, 2h, 7d) nor a date (2026-02-01)") from None
