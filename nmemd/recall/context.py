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

import os
import re
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, TypeVar

from nmemd import registry
from nmemd.capture.project import short_name
from nmemd.capture.redact import CONTEXT_TAG
from nmemd.printable import printable
from nmemd.recall.handoff import LABELS, NOT_WORK, first_prompt, handoff, refs
from nmemd.recall.outcomes import CHECK_WORD, command_key, concluded, decisions, failures, open_tasks, rows_of
from nmemd.recall.queries import HandoffLine, agent_column, marks
from nmemd.recall.text import clip, command_kind, command_line, looks_around, rel, short_path
from nmemd.wording import ago, plural

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
MAX_ERRORS: Final = 12
MAX_FILES: Final = 15
MAX_COMMANDS: Final = 12
MAX_DECISIONS: Final = 6
LATEST_CHANGED: Final = 3  # files of the latest session's handoff (the files section lists the rest)
# The latest session's handoff lines, in the order shown: the first FIRST_PASS of them are what a small
# budget keeps (what was asked, how it ended, what comes next).
LATEST_KINDS: Final = ("asked", "concluded", "checks", "next", "pending", "tasks", "changed", "redirected")
LATEST_CHECKS: Final = 2  # its last build/test runs (the commands section lists the project's)
COMMAND_CHARS: Final = 110
HANDOFF_LINE: Final = 240  # a line of the latest session's handoff
LINE_MAX: Final = 300
FIRST_PASS: Final = 3  # lines per section before any section gets more
CHANGE_WEIGHT: Final = 4  # one edit or write counts like four reads when ranking changed files

_T = TypeVar("_T")
_TAG_RE: Final = re.compile(rf"<(/?)\s*({CONTEXT_TAG})", re.IGNORECASE)
_WORK: Final = ",".join(f"'{t}'" for t in NOT_WORK)


@dataclass
class _Session:
    id: str
    last: float | None
    ended: float | None
    end_reason: str | None
    events: int
    agent: str | None = None  # NULL: Claude Code's (migration m011)


@dataclass
class _Section:
    heading: str
    items: list[str]


def _safe(line: str) -> str:
    """Stored text can never close (or reopen) our wrapper, nor carry control characters."""
    line = printable(line)
    return _TAG_RE.sub(lambda m: f"‹{m.group(1)}{m.group(2)}", line) if "<" in line else line


def _item(text: str) -> str:
    return clip(text, LINE_MAX)


# A row of the project or of a folder under it (a session that `cd`ed into a package of its repository)...
_IN_TREE: Final = "+project = ? OR (+project > ? AND +project < ?)"
# ... or one its sessions stored elsewhere (a sibling checkout, another repository: `store.places`).
_IN: Final = (
    f"({_IN_TREE} OR (session_id, +project) IN (SELECT session_id, project FROM session_places WHERE launch = ?))"
)
_HAS_PLACES: Final = "SELECT 1 FROM schema_migrations WHERE name = 'm013_session_places'"


def _in(conn: sqlite3.Connection, project: str) -> tuple[str, tuple[str, ...]]:
    """The SQL that keeps the project's rows (`_IN`), and its parameters; a store from before m013 (a
    read-only CLI after an upgrade) has no places yet."""
    top = project.rstrip("/") or "/"
    tree = (top, top + "/", top + "0")  # '0' sorts right after '/'
    if conn.execute(_HAS_PLACES).fetchone():
        return _IN, (*tree, top)
    return f"({_IN_TREE})", tree


@dataclass
class _Scope:
    """The rows the work sections read: those of `ids` (sessions) from row `floor` on."""

    ids: list[str]
    floor: int

    @property
    def sql(self) -> str:
        return f"session_id IN ({marks(self.ids)}) AND id >= ?"

    @property
    def args(self) -> tuple[str | int, ...]:
        return (*self.ids, self.floor)


def _scope(conn: sqlite3.Connection, ids: list[str]) -> _Scope:
    """The newest MAX_ROWS rows of those sessions, read from the session index alone."""
    row = conn.execute(
        f"SELECT id FROM observations WHERE session_id IN ({marks(ids)}) ORDER BY id DESC LIMIT 1 OFFSET ?",
        (*ids, MAX_ROWS - 1),
    ).fetchone()
    return _Scope(ids, row[0] if row else 0)


def _recent_sessions(conn: sqlite3.Connection, project: str, focus: str | None) -> list[_Session]:
    """Sessions of the project that did some work, newest first (the focus session first)."""
    sql = f"""SELECT s.session_id, s.last_event_at, s.ended_at, s.end_reason, s.event_count,
                     {agent_column(conn, "s")}
              FROM sessions s WHERE s.project = ? AND EXISTS (
                  SELECT 1 FROM observations o WHERE o.session_id = s.session_id
                  AND o.type NOT IN ({_WORK})) {{}}
              ORDER BY s.last_event_at DESC, s.session_id LIMIT ?"""
    # A session started here is this project's work wherever it did it (a subfolder, a sibling: `store.places`).
    found = [_Session(*r) for r in conn.execute(sql.format(""), (project, SESSION_WINDOW))]
    if focus and all(s.id != focus for s in found):  # a long compacted session may be older than the window
        found += [_Session(*r) for r in conn.execute(sql.format("AND s.session_id = ?"), (project, focus, 1))]
    if focus:
        found.sort(key=lambda s: s.id != focus)  # stable: the rest keep their order
    return found


def _label(s: _Session, session_id: str | None, source: str) -> str:
    if s.id == session_id and source == "compact":
        return "this session, before compaction"
    if s.id == session_id and source == "resume":
        return "this session"
    by = f" by {registry.label(s.agent)}" if s.agent else ""  # Claude Code's sessions are named in the header
    return f"session {s.id[:8]}{by}"


def _status(s: _Session) -> str:
    return (f"ended: {s.end_reason}" if s.ended is not None else "no end recorded") + f", {plural(s.events, 'event')}"


def _with_ids(line: HandoffLine, limit: int = LINE_MAX) -> str:
    """A handoff line as the context prints it: its label, its text cut to fit, its first ids."""
    ids = f" ({refs(line.ids, 2)})" if line.ids else ""
    label = LABELS.get(line.kind, line.kind.capitalize()) + ": "
    return "- " + label + clip(line.text, limit - len(label) - len(ids) - 2) + ids


def _latest(s: _Session, items: tuple[str, ...], session_id: str | None, source: str, now: float) -> _Section:
    """The latest session's handoff: what was asked, how it ended, what is left, what it changed."""
    heading = f"## Latest session: {ago(s.last, now)}, {_label(s, session_id, source)} ({_status(s)})"
    return _Section(heading, list(items))


def _latest_items(conn: sqlite3.Connection, recent: list[_Session]) -> tuple[_Session, tuple[str, ...]]:
    """The session whose handoff the context shows (`_with_handoff`), and its lines."""
    s, lines = _with_handoff(conn, recent)
    capped = {"changed": LATEST_CHANGED, "checks": LATEST_CHECKS}
    shown = [line for kind in LATEST_KINDS for line in [x for x in lines if x.kind == kind][: capped.get(kind)]]
    if not shown:
        prompt, _ = first_prompt(conn, s.id)
        shown = [HandoffLine(kind="asked", text=f'"{clip(prompt, 200)}"', ids=[])] if prompt else []
    return s, tuple(_with_ids(line, HANDOFF_LINE) for line in shown)


def _with_handoff(
    conn: sqlite3.Connection, recent: list[_Session], tries: int = 3
) -> tuple[_Session, list[HandoffLine]]:
    """The newest session (of the first `tries`) whose handoff says more than what it recorded (a session
    of subagent events or a compaction only), with that handoff; else the newest."""
    first: tuple[_Session, list[HandoffLine]] | None = None
    for s in recent[:tries]:
        lines = handoff(conn, s.id, (*LATEST_KINDS, "activity")).lines
        if any(line.kind != "activity" for line in lines):
            return s, lines
        first = first or (s, lines)
    return first or (recent[0], [])


def _earlier(shown: list[_Session], said: tuple[str, ...], session_id: str | None, source: str,
             now: float) -> _Section:  # fmt: skip
    """Older sessions, one line each: what was asked and how it ended (`said`: by `_asked_and_concluded`)."""
    items = [
        _item(f"- {ago(s.last, now)}, {_label(s, session_id, source)} ({_status(s)}){tail}")
        for s, tail in zip(shown, said, strict=True)
    ]
    return _Section("## Earlier sessions (newest first)", items)


def _asked_and_concluded(conn: sqlite3.Connection, shown: list[_Session]) -> tuple[str, ...]:
    """What each session was asked and how it concluded, as the end of its `_earlier` line."""
    out: list[str] = []
    for s in shown:
        prompt, _ = first_prompt(conn, s.id)
        tail = f': asked "{clip(prompt, 100)}"' if prompt else ": no prompt recorded"
        end = concluded(conn, s.id, 110)
        if end is not None:
            tail += f"; concluded: {end.text} ({refs(end.ids)})"
        out.append(tail)
    return tuple(out)


def _tasks(found: tuple[str, float, tuple[str, ...], int] | None, focus: str | None, now: float) -> _Section:
    """Not-completed items of the newest todo list (TodoWrite), or of the Task* tools' state (`_open_tasks`)."""
    if found is None:
        return _Section("", [])
    sid, ts, items, task_id = found
    where = "this session" if sid == focus else f"session {sid[:8]}, {ago(ts, now)}"
    heading = f"## Open tasks ([~] in progress, [ ] pending; last recorded list, {where}, #{task_id})"
    return _Section(heading, [_item(f"- {item}") for item in items][:MAX_TASKS])


def _open_tasks(
    conn: sqlite3.Connection, project: str, scope: _Scope, focus: str | None
) -> tuple[str, float, tuple[str, ...], int] | None:
    """The session of the newest task list, its time, its open items and the id of the row that says so."""
    mine, args = _in(conn, project)
    rows = conn.execute(
        f"""SELECT session_id, max(id), max(ts) FROM observations WHERE {mine} AND +type = 'task'
            AND tool_name IN ('TodoWrite', 'TaskCreate', 'TaskUpdate') AND {scope.sql}
            GROUP BY session_id ORDER BY session_id = ? DESC, max(id) DESC LIMIT 1""",
        (*args, *scope.args, focus or ""),
    ).fetchall()
    if not rows:
        return None
    sid, _, ts = rows[0]
    found, task_id = open_tasks(conn, sid, project)
    return sid, ts, tuple(found), task_id


# The sections say the same until a row of the recent sessions is written, merged or deleted, however many
# sessions start meanwhile: what each reads is kept per (store, project, the recent sessions and their
# state) and read again only when one of those changes; what depends on the time (`ago`) or on the
# session asking is written from it each time.
KEPT: Final = 256
_kept: OrderedDict[tuple[object, ...], object] = OrderedDict()
_kept_lock = threading.Lock()
_DELETED: Final = """SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'observations'), 0)
    - (SELECT coalesce(sum(n), 0) FROM counts WHERE name > 'type:' AND name < 'type;')"""
_HAS_COUNTS: Final = "SELECT 1 FROM schema_migrations WHERE name = 'm015_counts'"


def _scope_state(conn: sqlite3.Connection, scope: _Scope, recent: list[_Session]) -> tuple[object, ...] | None:
    """What the sections change with: the store (its file), the recent sessions as listed (a row merged into
    another counts as an event of its session), the scope, its newest row (a row written gets a larger id
    than any before), how many rows it holds (a row deleted lowers it), and how many rows the store ever
    deleted (ids are never reused: the largest ever given less the rows there are; a row deleted out of
    the scope, by retention or purge, changes what a whole session's handoff says). None for a store
    without a file, or from before the counts the last needs (nothing is kept)."""
    path = next((r[2] for r in conn.execute("PRAGMA database_list") if r[1] == "main"), "")
    if not path or not conn.execute(_HAS_COUNTS).fetchone():
        return None
    try:
        inode = os.stat(path).st_ino
    except OSError:
        return None
    newest, count = conn.execute(f"SELECT max(id), count(*) FROM observations WHERE {scope.sql}", scope.args).fetchone()
    deleted = conn.execute(_DELETED).fetchone()[0]
    sessions = tuple((s.id, s.last, s.ended, s.end_reason, s.events, s.agent) for s in recent)
    return (path, inode, sessions, scope.floor, newest, count, deleted)


def _kept_value(name: str, state: tuple[object, ...] | None, build: Callable[[], _T]) -> _T:
    """`build()`, or what it returned for the same `name` and `state` (see KEPT): immutable values only."""
    if state is None:
        return build()
    key = (name, *state)
    with _kept_lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
            return kept  # type: ignore[return-value]  # what `build` returned for this name
    value = build()
    with _kept_lock:
        _kept[key] = value
        while len(_kept) > KEPT:
            _kept.popitem(last=False)
    return value


def _kept_section(name: str, state: tuple[object, ...] | None, build: Callable[[], _Section]) -> _Section:
    """`build()`, or what it returned for the same `name` and `state`, as a section of its own."""

    def frozen() -> tuple[str, tuple[str, ...]]:
        section = build()
        return section.heading, tuple(section.items)

    heading, items = _kept_value(name, state, frozen)
    return _Section(heading, list(items))


def _fixes(conn: sqlite3.Connection, project: str, scope: _Scope) -> _Section:
    """What failed in the recent sessions and what came after it and passed (builds and tests first)."""
    mine, args = _in(conn, project)
    rows = rows_of(conn, f"{mine} AND {scope.sql}", (*args, *scope.args), MAX_ROWS)
    lines = [line for line in failures(conn, rows, project, MAX_ERRORS, said=2) if line]
    return _Section("## Failures and what fixed them", [_with_ids(line) for line in lines])


def _decisions(conn: sqlite3.Connection, scope: _Scope) -> _Section:
    """Causes, fixes and decisions the assistant stated in its messages, newest first."""
    stops = [r[0] for r in conn.execute(
        f"SELECT id FROM observations WHERE {scope.sql} AND +type = 'stop' ORDER BY id DESC LIMIT 40", scope.args
    )]  # fmt: skip
    lines = [line for line in decisions(conn, scope.ids, MAX_DECISIONS, scan=40, ids=stops) if line]
    items = [_item(f"- {line.text} ({refs(line.ids)})") for line in lines]
    return _Section("## Causes and decisions stated by the assistant (newest first)", items)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("s" if n != 1 else "")


_FileRow = tuple[str, int, int, int | None, float, int]  # path, edits, writes, reads, latest, own


def _files(rows: tuple[_FileRow, ...], project: str, now: float) -> _Section:
    """Files ranked by work (`_file_rows`), each with its edits, writes, reads and when it was last worked on."""
    items = []
    for path, edits, writes, reads, last, _own in rows:
        parts = [_plural(n, w) for n, w in ((edits, "edit"), (writes, "write"), (reads or 0, "read")) if n]
        items.append(_item(f"- {short_path(rel(path, project))}: {', '.join(parts)} (latest: {ago(last, now)})"))
    return _Section("## Files most worked on", items)


def _file_rows(conn: sqlite3.Connection, project: str, scope: _Scope, focus: str | None) -> tuple[_FileRow, ...]:
    """Files ranked by work: changed files first (an edit or write counts CHANGE_WEIGHT reads),
    then files only read. Claude Code reads a file before editing it, so reads alone are context."""
    mine, args = _in(conn, project)
    rows = conn.execute(
        f"""SELECT file_path, sum(type = 'edit'), sum(type = 'write'), sum(CASE WHEN type = 'read' THEN count END),
                   max(last_ts), sum(session_id = ?)
            FROM observations WHERE {mine} AND {scope.sql}
            AND +type IN ('read', 'edit', 'write') AND file_path IS NOT NULL AND file_path != ''
            GROUP BY file_path
            ORDER BY sum(session_id = ?) > 0 DESC, sum(type != 'read') > 0 DESC,
                     {CHANGE_WEIGHT} * sum(type != 'read') + coalesce(sum(CASE WHEN type = 'read' THEN count END), 0)
                     DESC, max(last_ts) DESC, file_path
            LIMIT ?""",
        (focus or "", *args, *scope.args, focus or "", MAX_FILES),
    ).fetchall()
    return tuple(rows)


_CommandRun = tuple[str, bool, int, float, int]  # its first line, failed, runs, latest, its newest row's id
_FLAG: Final = re.compile(r"(?<!\S)--?[a-z][\w-]*")


def _commands(runs: tuple[_CommandRun, ...], now: float) -> _Section:
    """Build, test and other non-trivial commands (`_command_runs`), each with how its last run ended."""
    items = []
    for line, failed, n, last, top in runs:
        count = f"{n} runs, " if n > 1 else ""
        items.append(_item(f"- `{line}`: {'failed' if failed else 'passed'} ({count}{ago(last, now)}, #{top})"))
    return _Section("## Build, test and run commands (how each last ended; build and test first)", items)


def _command_runs(conn: sqlite3.Connection, project: str, scope: _Scope, focus: str | None) -> tuple[_CommandRun, ...]:
    """Build, test and other non-trivial commands, each with how its last run ended (build and test
    first, then the latest), deduplicated by their first line."""
    mine, args = _in(conn, project)
    rows = conn.execute(
        f"""SELECT command, sum(CASE WHEN type = 'command' THEN count ELSE 0 END), max(last_ts), max(id),
                   sum(session_id = ?), max(CASE WHEN type = 'error' THEN id END) FROM observations
            WHERE {mine} AND +type IN ('command', 'error') AND command IS NOT NULL AND command != ''
            AND {scope.sql} GROUP BY command ORDER BY max(id) DESC LIMIT 500""",
        (focus or "", *args, *scope.args),
    ).fetchall()
    ranked = []
    for command, runs, last, top, own, failed in rows:
        kind = command_kind(command)
        if kind and not looks_around(command):
            checks = bool(CHECK_WORD.search(command_key(command)))
            ranked.append((own > 0, checks, kind, top, command, runs, last, failed == top))
    ranked.sort(key=lambda r: (not r[0], not r[1], -r[2], -r[3]))
    out: list[_CommandRun] = []
    seen: set[tuple[str, ...]] = set()
    for *_, top, command, runs, last, failed in ranked:
        # `pnpm test --run x` and `pnpm test --run y`: one way to test, shown once; `gh run view 1` and
        # `gh run view 2 --log-failed` are two
        key = (command_key(command), *sorted(set(_FLAG.findall(command_line(command, 300)))))
        if key in seen:
            continue
        seen.add(key)
        # its first line only for the commands shown: hundreds may qualify
        out.append((command_line(command, COMMAND_CHARS), failed, runs, last, top))
        if len(out) >= MAX_COMMANDS:
            break
    return tuple(out)


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
        # Outcomes before counts: how the latest session ended, what broke and what fixed it, how the
        # project is built and tested, what was decided; then older sessions, open tasks, files.
        chosen: list[_Session] = []  # the session whose handoff is shown (the others are listed)
        states: list[tuple[object, ...] | None] = []

        def state() -> tuple[object, ...] | None:
            if not states:
                states.append(_scope_state(conn, scope, recent))
            return states[0]

        def latest() -> _Section:
            s, items = _kept_value(f"latest\0{project}", state(), lambda: _latest_items(conn, recent))
            chosen.append(s)
            return _latest(s, items, session_id, source, now)

        def earlier() -> _Section:
            shown = [s for s in recent[:MAX_SESSIONS] if s not in chosen]
            key = f"earlier\0{project}\0" + "\0".join(s.id for s in shown)
            said = _kept_value(key, state(), lambda: _asked_and_concluded(conn, shown))
            return _earlier(shown, said, session_id, source, now)

        builders: list[Callable[[], _Section]] = [
            latest,
            lambda: team,  # teammates lately (team memory)
            lambda: _kept_section(f"fixes\0{project}", state(), lambda: _fixes(conn, project, scope)),
            lambda: _commands(
                _kept_value(
                    f"commands\0{project}\0{focus}", state(), lambda: _command_runs(conn, project, scope, focus)
                ),
                now,
            ),
            lambda: _kept_section(f"decisions\0{project}", state(), lambda: _decisions(conn, scope)),
            earlier,
            lambda: _tasks(
                _kept_value(f"tasks\0{project}\0{focus}", state(), lambda: _open_tasks(conn, project, scope, focus)),
                focus,
                now,
            ),
            lambda: _files(
                _kept_value(f"files\0{project}\0{focus}", state(), lambda: _file_rows(conn, project, scope, focus)),
                project,
                now,
            ),
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
