"""The six MCP tools' logic: each returns the text the model reads, and nothing else.

- Text only: a structured copy of the same facts would reach the model too (Claude
  Code shows `structuredContent` in place of the text when both are present), at
  twice the size. Programs have `nmem ... --json`.
- Progressive disclosure: `search`, `timeline`, `file_history` return one line per
  observation, each starting with `#<id>` (the id `get_observations` and `timeline`
  take); `sessions` names each session's first and last `#<id>`, and each line of its handoff ends
  with the ids it was read from;
  `get_observations` returns the details of a few ids.
- Each tool is a pure function over a SQLite connection (run on a reader
  thread by the server); a bad argument or an unanswerable question raises
  `ToolInputError`, which the server turns into a tool error (`is_error`).
"""

import datetime as dt
import re
import sqlite3
from typing import Final

from nmemd.capture.project import short_name
from nmemd.errors import ToolInputError
from nmemd.model import CLAUDE_CODE
from nmemd.recall import queries, search, snippets
from nmemd.recall.context import build_context
from nmemd.recall.handoff import fit, handoff
from nmemd.recall.text import clip, rel
from nmemd.recall.vocabulary import try_instead
from nmemd.wording import ago

SEARCH_MAX: Final = 50
HISTORY_MAX: Final = 100
SESSIONS_MAX: Final = 50
AROUND_MAX: Final = 50
IDS_MAX: Final = 20
DETAILS_BUDGET: Final = 40_000  # characters of content per get_observations call
TEXT_TITLE: Final = 160
SESSION_CHARS: Final = 1500  # of a session's handoff in the sessions tool (its most useful lines first)


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
    try:
        return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):  # year 1 or 10000, NaN: stored by an older version
        return None


def _scope(conn: sqlite3.Connection, project: str | None, default: str | None) -> str:
    """The project a call reads: the argument, else the caller's project, else all ('*')."""
    if project is None or not project.strip():
        return default or queries.ALL_PROJECTS
    if project.strip() == queries.ALL_PROJECTS:
        return queries.ALL_PROJECTS
    return queries.resolve_project(conn, project)


def _scope_label(scope: str) -> str:
    return "all projects" if scope == queries.ALL_PROJECTS else f"project {short_name(scope)} ({scope})"


# --- formatting -------------------------------------------------------------------------------


def ref(obs_id: int) -> str:
    """The one form an observation id takes in every line the model reads."""
    return f"#{obs_id}"


def _hit_line(hit: queries.Hit, now: float, mark: str = "", all_projects: bool = False) -> str:
    """`#id type · age · s:session · title · path · snippet`, leaving out what repeats the title; the
    snippet's matched words as ⟦word⟧, a ⟦ or ⟧ of the stored text doubled (`snippets.marked`)."""
    parts = [f"{mark}{ref(hit.id)} {hit.type}", ago(hit.ts, now), f"s:{hit.session_id[:8]}"]
    if hit.author:  # a teammate's (team memory)
        parts.append(f"by {hit.author}" + (f" with {hit.agent}" if hit.agent and hit.agent != CLAUDE_CODE else ""))
    if all_projects and hit.project:
        parts.append(f"[{short_name(hit.project)}]")
    title = clip(hit.title, TEXT_TITLE)
    parts.append(snippets.escaped(title))
    path = clip(rel(hit.file_path, hit.project), TEXT_TITLE) if hit.file_path else None
    if path and path not in title:
        parts.append(snippets.escaped(path))
    if hit.snippet and hit.snippet.strip("… ") not in hit.title:
        parts.append(snippets.marked(hit.snippet, hit.spans, TEXT_TITLE))
    line = " · ".join(parts) + (f" (×{hit.count})" if hit.count > 1 else "")
    return line + (f" (+{hit.similar} similar)" if hit.similar else "")


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s" if not word.endswith("h") else f"{n} {word}es"


def _no_results(what: str) -> str:
    return f"No {what}."


# --- the tools' logic (pure over a connection, run on a reader thread) ---------------------------


def search_tool(
    conn: sqlite3.Connection, default: str | None, query: str, project: str | None, type_: str | None,
    session_id: str | None, file: str | None, since: str | None, until: str | None, limit: int, now: float,
    agent: str | None = None,
) -> str:  # fmt: skip
    if not query.strip():
        raise ToolInputError("the query is empty: give one or more words to look for")
    scope = _scope(conn, project, default)
    filters = queries.Filters(
        project=scope,
        types=[type_] if type_ else [],
        session_id=queries.resolve_session(conn, session_id) if session_id else None,
        file=file.strip() if file and file.strip() else None,
        since=parse_time(since, now) if since else None,
        until=parse_time(until, now) if until else None,
        agent=agent,
    )
    hits = search.search(conn, query, filters, limit=limit, now=now)
    if not hits:
        tip = try_instead(
            scoped=scope != queries.ALL_PROJECTS, typed=bool(type_), every='project="*"', type_option="type="
        )
        return _no_results(f"matches for {query!r} in {_scope_label(scope)}") + f" To find more, {tip}."
    head = f"{_count(len(hits), 'match')} for {query!r} in {_scope_label(scope)}, best first:"
    every = scope == queries.ALL_PROJECTS
    return "\n".join([head, *(_hit_line(h, now, all_projects=every) for h in hits)])


def timeline_tool(
    conn: sqlite3.Connection, default: str | None, anchor: int | None, query: str | None, project: str | None,
    before: int, after: int, now: float,
) -> str:  # fmt: skip
    if anchor is None:
        if query is None or not query.strip():
            raise ToolInputError("give an observation id, or a query whose best match is the anchor")
        scope = _scope(conn, project, default)
        top = search.search(conn, query, queries.Filters(project=scope), limit=1, now=now)
        if not top:
            raise ToolInputError(f"nothing matches {query!r} in {_scope_label(scope)}")
        anchor = top[0].id
    items = queries.timeline(conn, anchor, before=before, after=after)
    at = next(h for h in items if h.id == anchor)
    head = f"Session {at.session_id} ({at.project or 'no project'}) around {ref(anchor)}, oldest first:"
    lines = [_hit_line(h, now, "→ " if h.id == anchor else "  ") for h in items]
    return "\n".join([head, *lines])


def observations_tool(conn: sqlite3.Connection, default: str | None, ids: list[int], now: float) -> str:
    wanted = list(dict.fromkeys(ids))
    details = queries.get_observations(conn, wanted)
    found = {d.id for d in details}
    missing = [i for i in wanted if i not in found]
    if not details:
        raise ToolInputError(f"no observation with id {', '.join(map(ref, missing))}")
    budget = DETAILS_BUDGET
    blocks: list[str] = []
    for d in details:
        room = max(budget, 200)  # past the budget, each observation still shows its first lines
        content = d.content if len(d.content) <= room else d.content[: room - 1] + "…"
        budget -= len(content)
        meta = [f"{ref(d.id)} {d.type}", f"{_iso(d.ts)} ({ago(d.ts, now)})", f"session {d.session_id}", d.hook_event]
        if d.tool_name:
            meta.append(f"tool {d.tool_name}")
        if d.count > 1:
            meta.append(f"×{d.count} until {_iso(d.last_ts)}")
        block = [" · ".join(meta), f"title: {d.title}"]
        if d.project:
            block.append(f"project: {d.project}")
        if d.file_path:
            block.append(f"file: {d.file_path}")
        if d.command and d.command not in d.title:
            block.append(f"command: {d.command}")
        if content and content != d.title:
            block.append(content + (" [cut]" if content != d.content else ""))
        blocks.append("\n".join(block))
    if missing:
        blocks.append(f"Unknown ids: {', '.join(map(ref, missing))}")
    return "\n\n".join(blocks)


def context_tool(conn: sqlite3.Connection, default: str | None, project: str | None, budget: int) -> str:
    scope = _scope(conn, project, default)
    if scope == queries.ALL_PROJECTS:
        raise ToolInputError("recent_context needs one project: give its path (no project is known for this session)")
    text = build_context(conn, scope, source="startup", budget=budget)
    return text or f"No recorded history for {_scope_label(scope)} yet."


def _session_spans(conn: sqlite3.Connection, session_ids: list[str]) -> dict[str, tuple[int, int]]:
    """Each session's first and last observation id: where timeline(id) starts walking it."""
    rows = conn.execute(
        f"SELECT session_id, min(id), max(id) FROM observations WHERE session_id IN ({queries.marks(session_ids)})"
        " GROUP BY session_id",
        session_ids,
    ).fetchall()
    return {sid: (first, last) for sid, first, last in rows}


def sessions_tool(conn: sqlite3.Connection, default: str | None, project: str | None, limit: int, now: float) -> str:
    scope = _scope(conn, project, default)
    rows = queries.sessions(conn, scope, limit=limit)
    if not rows:
        return _no_results(f"sessions recorded for {_scope_label(scope)}")
    spans = _session_spans(conn, [r.session_id for r in rows])
    blocks = [f"{_count(len(rows), 'session')} in {_scope_label(scope)}, most recent first:"]
    for r in rows:
        ended = r.ended_at is not None
        state = f"ended ({r.end_reason})" if ended and r.end_reason else "ended" if ended else "open"
        head = f"## {r.session_id}"
        if r.session_id in spans:
            first, last = spans[r.session_id]
            head += f" · {ref(first)}" if first == last else f" · {ref(first)} to {ref(last)}"
        head += f" · last activity {ago(r.last_event_at or r.started_at, now)} · {_count(r.event_count, 'event')}"
        head += f" · {state} · {r.agent}"
        if scope == queries.ALL_PROJECTS and r.project:
            head += f" · {r.project}"
        block = [head, *fit(handoff(conn, r.session_id).lines, SESSION_CHARS)]
        if len(block) == 1 and r.first_prompt:
            block.append(f"Asked: {clip(r.first_prompt, 220)}")
        blocks.append("\n".join(snippets.escaped(line) for line in block))
    return "\n\n".join(blocks)


def file_history_tool(
    conn: sqlite3.Connection, default: str | None, path: str, project: str | None, limit: int, now: float
) -> str:
    scope = _scope(conn, project, default)
    if not path.strip():
        raise ToolInputError("the path is empty")
    hits = queries.file_history(conn, path, queries.Filters(project=scope), limit=limit)
    if not hits:
        return _no_results(f"observations touching {path.strip()!r} in {_scope_label(scope)}")
    head = f"{_count(len(hits), 'observation')} touching {path.strip()!r} in {_scope_label(scope)}, newest first:"
    every = scope == queries.ALL_PROJECTS
    return "\n".join([head, *(_hit_line(h, now, all_projects=every) for h in hits)])
