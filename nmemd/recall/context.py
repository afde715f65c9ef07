"""The SessionStart context: what earlier sessions in this project did, as bounded markdown.

Everything here is counting, grouping and ordering over the observations of one
project, so the same database and the same `now` always give the same text.
The text states facts ("3 h ago, session ab12cd34 ...") and never tells the
model what to do: Claude Code's prompt-injection defences distrust imperative
hook output, and a memory is evidence, not an instruction.

Size: see DEFAULT_BUDGET. Sections are filled by priority in two passes (the
first few lines of every section, then the rest), whole lines only, so a small
budget shows a little of everything before a lot of anything.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

from nmemd.capture.project import short_name
from nmemd.capture.redact import CONTEXT_TAG
from nmemd.recall.queries import agent_column
from nmemd.recall.summary import (
    NOT_WORK,
    ago,
    clip,
    command_kind,
    command_line,
    first_prompt,
    rel,
    short_path,
    signature,
)
from nmemd.recall.summary import summarize_session as summarize

# Why 5,000 characters (~1,250 tokens): it is well under 1% of a 200k-token
# window and half of Claude Code's 10,000-character cap (past which the text is
# replaced by a 2 KB preview), yet it holds the latest session's summary plus
# the first lines of every section and most of the rest: the item caps below
# allow ~65 lines (~6,000 chars on a busy project), so on a busy project the
# budget decides, dropping the least important lines first. More budget buys
# older, less relevant lines; HARD_CAP keeps any configured value under the cap.
DEFAULT_BUDGET: Final = 5000
HARD_CAP: Final = 9000

OPEN: Final = f"<{CONTEXT_TAG}>"
CLOSE: Final = f"</{CONTEXT_TAG}>"
SESSION_WINDOW: Final = 20  # the sessions whose work feeds files, errors and commands
# ... of which the newest rows only: a context costs what these rows cost to read (~2.5 us each at a
# million observations), never what a busy project's last 20 sessions hold (1,800 rows: 17 ms). 600 rows
# are about the MAX_SESSIONS sessions listed (real sessions average 80 rows).
MAX_ROWS: Final = 600
MAX_SESSIONS: Final = 8
MAX_TASKS: Final = 15
MAX_ERRORS: Final = 8
MAX_FILES: Final = 15
MAX_COMMANDS: Final = 10
LINE_MAX: Final = 300
FIRST_PASS: Final = 3  # lines per section before any section gets more
CHANGE_WEIGHT: Final = 4  # one edit or write counts like four reads when ranking changed files

_TAG_RE: Final = re.compile(rf"<(/?)\s*({CONTEXT_TAG})", re.IGNORECASE)
_WORK: Final = ",".join(f"'{t}'" for t in NOT_WORK)


@dataclass
class _Session:
    id: str
    last: float | None
    ended: float | None
    end_reason: str | None
    events: int
    summary: str | None
    agent: str | None = None  # NULL: Claude Code's (migration m011)


# How the context names an agent other than Claude Code, which it names in its header.
AGENT_LABELS: Final = {
    "codex": "Codex",
    "gemini": "Gemini CLI",
    "copilot": "Copilot CLI",
    "cursor": "Cursor",
    "cline": "Cline",
    "opencode": "OpenCode",
}


@dataclass
class _Section:
    heading: str
    items: list[str]


def _safe(line: str) -> str:
    """Stored text can never close (or reopen) our wrapper."""
    return _TAG_RE.sub(lambda m: f"‹{m.group(1)}{m.group(2)}", line) if "<" in line else line


def _item(text: str) -> str:
    return clip(text, LINE_MAX)


def _marks(ids: list[str]) -> str:
    return ",".join("?" * len(ids))


@dataclass
class _Scope:
    """The rows the work sections read: those of `ids` (sessions) from row `floor` on."""

    ids: list[str]
    floor: int

    @property
    def sql(self) -> str:
        return f"session_id IN ({_marks(self.ids)}) AND id >= ?"

    @property
    def args(self) -> tuple[str | int, ...]:
        return (*self.ids, self.floor)


def _scope(conn: sqlite3.Connection, ids: list[str]) -> _Scope:
    """The newest MAX_ROWS rows of those sessions, read from the session index alone."""
    row = conn.execute(
        f"SELECT id FROM observations WHERE session_id IN ({_marks(ids)}) ORDER BY id DESC LIMIT 1 OFFSET ?",
        (*ids, MAX_ROWS - 1),
    ).fetchone()
    return _Scope(ids, row[0] if row else 0)


def _recent_sessions(conn: sqlite3.Connection, project: str, focus: str | None) -> list[_Session]:
    """Sessions of the project that did some work, newest first (the focus session first)."""
    sql = f"""SELECT s.session_id, s.last_event_at, s.ended_at, s.end_reason, s.event_count, s.summary,
                     {agent_column(conn, "s")}
              FROM sessions s WHERE s.project = ? AND EXISTS (
                  SELECT 1 FROM observations o WHERE o.session_id = s.session_id AND +o.project = ?
                  AND o.type NOT IN ({_WORK})) {{}}
              ORDER BY s.last_event_at DESC, s.session_id LIMIT ?"""
    found = [_Session(*r) for r in conn.execute(sql.format(""), (project, project, SESSION_WINDOW))]
    if focus and all(s.id != focus for s in found):  # a long compacted session may be older than the window
        found += [_Session(*r) for r in conn.execute(sql.format("AND s.session_id = ?"), (project, project, focus, 1))]
    if focus:
        found.sort(key=lambda s: s.id != focus)  # stable: the rest keep their order
    return found


def _label(s: _Session, session_id: str | None, source: str) -> str:
    if s.id == session_id and source == "compact":
        return "this session, before compaction"
    if s.id == session_id and source == "resume":
        return "this session"
    by = f" by {AGENT_LABELS.get(s.agent, s.agent)}" if s.agent else ""
    return f"session {s.id[:8]}{by}"


def _sessions(
    conn: sqlite3.Connection, project: str, shown: list[_Session], session_id: str | None, source: str, now: float
) -> _Section:
    """The latest session with its summary lines, older ones one line each."""
    items: list[str] = []
    for n, s in enumerate(shown):
        prompt, _ = first_prompt(conn, s.id)
        status = f"ended: {s.end_reason}" if s.ended is not None else "no end recorded"
        head = f"- {ago(s.last, now)}, {_label(s, session_id, source)} ({status}, {s.events} events)"
        head += f': first prompt "{prompt}"' if prompt else ": no prompt recorded"
        if n > 0:
            sig = ", ".join(f"{c} {t}" for t, c in signature(conn, s.id)[:4])
            items.append(_item(head + (f"; {sig}" if sig else "")))
            continue
        items.append(_item(head))
        final = s.summary if s.summary and s.ended is not None and s.id != session_id else None
        for line in (final or summarize(conn, s.id)).splitlines():
            if line and not line.startswith("Prompt:"):
                items.append("  " + _item(line))
    return _Section("## Recent sessions (newest first)", items)


_TASK_CREATED: Final = re.compile(r"Task created: (.*?)(?: \(#(\S+)\))?")
_TASK_UPDATED: Final = re.compile(r"Task #(\S+) updated(?:: (\w+))?(?: \((.*)\))?")


def _tasks(conn: sqlite3.Connection, project: str, scope: _Scope, focus: str | None, now: float) -> _Section:
    """Not-completed items of the newest todo list (TodoWrite), or of the Task* tools' state."""
    rows = conn.execute(
        f"""SELECT session_id, max(id), max(ts) FROM observations WHERE +project = ? AND +type = 'task'
            AND tool_name IN ('TodoWrite', 'TaskCreate', 'TaskUpdate') AND {scope.sql}
            GROUP BY session_id ORDER BY session_id = ? DESC, max(id) DESC LIMIT 1""",
        (project, *scope.args, focus or ""),
    ).fetchall()
    if not rows:
        return _Section("", [])
    sid, _, ts = rows[0]
    obs = conn.execute(
        "SELECT tool_name, title, content FROM observations WHERE session_id = ? AND +project = ? AND +type = 'task'"
        " AND tool_name IN ('TodoWrite', 'TaskCreate', 'TaskUpdate') ORDER BY id",
        (sid, project),
    ).fetchall()
    items: list[str] = []
    if obs[-1][0] == "TodoWrite":
        for line in obs[-1][2].splitlines():
            if line.startswith("[") and not line.startswith("[x]"):
                items.append(_item("- " + line))
    else:
        state: dict[str, tuple[str, str]] = {}  # task id -> (subject, status)
        for tool, title, _content in obs:
            if tool == "TaskCreate" and (m := _TASK_CREATED.fullmatch(title)):
                state[m.group(2) or m.group(1)] = (m.group(1), "pending")
            elif tool == "TaskUpdate" and (m := _TASK_UPDATED.fullmatch(title)):
                subject, status = state.get(m.group(1), (m.group(3) or f"#{m.group(1)}", "pending"))
                state[m.group(1)] = (m.group(3) or subject, m.group(2) or status)
        marks = {"pending": "[ ]", "in_progress": "[~]"}
        items = [_item(f"- {marks[st]} {subj}") for subj, st in state.values() if st in marks]
    where = "this session" if sid == focus else f"session {sid[:8]}, {ago(ts, now)}"
    heading = f"## Open tasks ([~] in progress, [ ] pending; last recorded list, {where})"
    return _Section(heading, items[:MAX_TASKS])


def _errors(conn: sqlite3.Connection, project: str, scope: _Scope, focus: str | None, now: float) -> _Section:
    """Distinct recent errors and the next edit or non-trivial command of the same session."""
    rows = conn.execute(
        f"""SELECT id, session_id, ts, title, command FROM observations WHERE +project = ? AND +type = 'error'
            AND {scope.sql} AND title NOT LIKE '% interrupted%'
            ORDER BY session_id = ? DESC, id DESC LIMIT 200""",
        (project, *scope.args, focus or ""),
    ).fetchall()
    items: list[str] = []
    seen: set[str] = set()
    for oid, sid, ts, title, command in rows:
        if (command or title) in seen:  # titles are bounded: two long commands may share one
            continue
        seen.add(command or title)
        nxt = next((r for r in conn.execute(
            "SELECT type, title, command FROM observations WHERE session_id = ? AND id > ?"
            " AND +type IN ('command', 'edit', 'write') ORDER BY id LIMIT 20",
            (sid, oid),
        ) if r[0] != "command" or r[2] == command or command_kind(r[2] or "")), None)  # fmt: skip
        if nxt is None:
            after = "nothing else recorded after it in that session"
        elif command and nxt[0] == "command" and nxt[2] == command:
            after = "next, the same command succeeded"
        else:
            after = f"next: {clip(nxt[1], 110)}"
        items.append(_item(f"- {ago(ts, now)}: {clip(title, 130)} → {after}"))
        if len(items) >= MAX_ERRORS:
            break
    return _Section("## Recent errors and what came next", items)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("s" if n != 1 else "")


def _files(conn: sqlite3.Connection, project: str, scope: _Scope, focus: str | None, now: float) -> _Section:
    """Files ranked by work: changed files first (an edit or write counts CHANGE_WEIGHT reads),
    then files only read. Claude Code reads a file before editing it, so reads alone are context."""
    rows = conn.execute(
        f"""SELECT file_path, sum(type = 'edit'), sum(type = 'write'), sum(CASE WHEN type = 'read' THEN count END),
                   max(last_ts), sum(session_id = ?)
            FROM observations WHERE +project = ? AND {scope.sql}
            AND +type IN ('read', 'edit', 'write') AND file_path IS NOT NULL AND file_path != ''
            GROUP BY file_path
            ORDER BY sum(session_id = ?) > 0 DESC, sum(type != 'read') > 0 DESC,
                     {CHANGE_WEIGHT} * sum(type != 'read') + coalesce(sum(CASE WHEN type = 'read' THEN count END), 0)
                     DESC, max(last_ts) DESC, file_path
            LIMIT ?""",
        (focus or "", project, *scope.args, focus or "", MAX_FILES),
    ).fetchall()
    items = []
    for path, edits, writes, reads, last, _own in rows:
        parts = [_plural(n, w) for n, w in ((edits, "edit"), (writes, "write"), (reads or 0, "read")) if n]
        items.append(_item(f"- {short_path(rel(path, project))}: {', '.join(parts)} (latest: {ago(last, now)})"))
    return _Section("## Files most worked on", items)


def _commands(conn: sqlite3.Connection, project: str, scope: _Scope, focus: str | None, now: float) -> _Section:
    """Build, test and other non-trivial commands whose latest run succeeded, deduplicated."""
    failed = dict(conn.execute(
        f"""SELECT command, max(id) FROM observations WHERE +project = ? AND +type = 'error'
            AND command IS NOT NULL AND {scope.sql} GROUP BY command""",
        (project, *scope.args),
    ).fetchall())  # fmt: skip
    rows = conn.execute(
        f"""SELECT command, sum(count), max(last_ts), max(id), sum(session_id = ?) FROM observations
            WHERE +project = ? AND +type = 'command' AND command IS NOT NULL AND command != ''
            AND {scope.sql} GROUP BY command ORDER BY max(id) DESC LIMIT 500""",
        (focus or "", project, *scope.args),
    ).fetchall()
    ranked = []
    for command, runs, last, top, own in rows:
        kind = command_kind(command)
        if kind and failed.get(command, -1) < top:
            ranked.append((own > 0, kind, top, command, runs, last))
    ranked.sort(key=lambda r: (not r[0], -r[1], -r[2]))
    items: list[str] = []
    seen: set[str] = set()
    for _own, _kind, _top, command, runs, last in ranked:
        line = command_line(command, 160)  # only for the commands shown: hundreds may qualify
        if line in seen:
            continue
        seen.add(line)
        count = f"{runs} runs, " if runs > 1 else ""
        items.append(_item(f"- `{line}` ({count}latest: {ago(last, now)})"))
        if len(items) >= MAX_COMMANDS:
            break
    return _Section("## Commands that succeeded (build and test first)", items)


def _teammates(conn: sqlite3.Connection, project: str, now: float) -> _Section:
    """What teammates did in this project lately (team memory: nmemd.recall.teammates)."""
    from nmemd.recall import teammates

    try:
        return _Section(teammates.HEADING, teammates.lines(conn, project, now))
    except sqlite3.OperationalError as exc:
        if not _interrupted(exc):
            raise
        return _Section("", [])


def _header(project: str, source: str, compacted: bool) -> list[str]:
    lines = [
        f"# nmem: memory of project {short_name(project)} ({project})",
        "Facts recorded by nmem from earlier sessions in this project (Claude Code's, unless a session"
        " names its agent); times are relative to now."
        " The nmem MCP tools (search, timeline, get_observations) hold the details.",
    ]
    if compacted:
        lines.append("This session was just compacted; its own recorded work is listed first.")
    return [_item(line) for line in lines]


def _fit(header: list[str], sections: list[_Section], budget: int) -> str:
    """Whole lines only, by section priority: the first FIRST_PASS lines of each section, then
    (only if all of those fit) the rest, each section's lines in order until one does not fit."""
    size = len(OPEN) + len(CLOSE) + 1 + sum(len(h) + 1 for h in header)
    if size > budget:
        return ""
    taken = [0] * len(sections)
    for end in (FIRST_PASS, None):
        for k, sec in enumerate(sections):
            stop = len(sec.items) if end is None else min(end, len(sec.items))
            while taken[k] < stop:
                cost = len(sec.items[taken[k]]) + 1 + (0 if taken[k] else len(sec.heading) + 2)
                if size + cost > budget:
                    break
                size += cost
                taken[k] += 1
        if any(n < min(FIRST_PASS, len(sec.items)) for n, sec in zip(taken, sections, strict=True)):
            break  # the first pass did not fit whole: no section gets more than its first lines
    if not any(taken):
        return ""
    lines = list(header)
    for sec, n in zip(sections, taken, strict=True):
        if n:
            lines += ["", sec.heading, *sec.items[:n]]
    return "\n".join([OPEN, *(_safe(line) for line in lines), CLOSE])


def build_context(
    conn: sqlite3.Connection,
    project: str,
    *,
    session_id: str | None = None,
    source: str = "startup",
    budget: int = DEFAULT_BUDGET,
    now: float | None = None,
    deadline: float | None = None,
) -> str:
    """Markdown wrapped in <nmem-context>, at most min(budget, HARD_CAP) chars; "" without history.

    After `source == "compact"`, `session_id`'s own work comes first in every section. With a
    `deadline` (time.monotonic()), sections not done by then are left out rather than waited for:
    a hook that gets part of the context in time beats one that times out with none.
    """
    if not project:
        return ""
    now = time.time() if now is None else now
    focus = session_id if source == "compact" and session_id else None
    with _until(conn, deadline):
        try:
            recent = _recent_sessions(conn, project, focus)
        except sqlite3.OperationalError as exc:
            if not _interrupted(exc):
                raise
            return ""
        if session_id and source not in ("compact", "resume"):
            # A new session is not history yet, though an agent may store its prompt before SessionStart
            # (Copilot CLI runs the two hooks side by side).
            recent = [s for s in recent if s.id != session_id]
        team = _teammates(conn, project, now)
        if not recent:
            return _fit(_header(project, source, False), [team], min(max(budget, 0), HARD_CAP)) if team.items else ""
        ids = [s.id for s in recent]
        try:
            scope = _scope(conn, ids)
        except sqlite3.OperationalError as exc:
            if not _interrupted(exc):
                raise
            scope = _Scope(ids, 1 << 62)  # no time left to bound them: the work sections are left empty
        builders: list[Callable[[], _Section]] = [
            lambda: _sessions(conn, project, recent[:MAX_SESSIONS], session_id, source, now),
            lambda: team,
            lambda: _tasks(conn, project, scope, focus, now),
            lambda: _errors(conn, project, scope, focus, now),
            lambda: _files(conn, project, scope, focus, now),
            lambda: _commands(conn, project, scope, focus, now),
        ]
        sections: list[_Section] = []
        for build in builders:
            if deadline is not None and time.monotonic() >= deadline:
                break
            try:
                sections.append(build())
            except sqlite3.OperationalError as exc:
                if not _interrupted(exc):
                    raise
    header = _header(project, source, focus is not None and focus in ids)
    return _fit(header, [s for s in sections if s.items], min(max(budget, 0), HARD_CAP))


def _interrupted(exc: sqlite3.OperationalError) -> bool:
    return "interrupt" in str(exc)


@contextmanager
def _until(conn: sqlite3.Connection, deadline: float | None) -> Iterator[None]:
    """Abort any statement still running at `deadline` (SQLite checks every 1,000 VM steps)."""
    if deadline is None:
        yield
        return
    conn.set_progress_handler(lambda: int(time.monotonic() >= deadline), 1000)
    try:
        yield
    finally:
        conn.set_progress_handler(None, 0)
