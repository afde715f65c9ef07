"""Handoff summaries: what a session was asked, what it changed, what broke and what fixed it, what is left.

What a later session (or a person coming back) needs before it goes on, computed from the stored
observations by counting, pairing and picking lines, never by a model: the same rows always give
the same handoff. Every line carries the ids of the observations it was read from (`nmem show ID`,
the MCP get_observations tool), and a line with no observation behind it is never made.

Read per session over the session index; the content of a row is read only where a line quotes it
(an error's output, the last todo list, the compaction summary, the last assistant message). Here:
what was asked and changed, the lines put together, fitted and rendered; what came of the work
(failures, checks, tasks, conclusions) is `outcomes`'.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from typing import Final

import msgspec

from nmemd.model import CLAUDE_CODE
from nmemd.recall.outcomes import (
    SESSION_ROWS,
    TASK_TOOLS,
    WORK_TYPES,
    Row,
    checks,
    compaction,
    concluded,
    decisions,
    failures,
    handoff_line,
    open_tasks,
)
from nmemd.recall.queries import HandoffLine, agent_column
from nmemd.recall.text import clip, rel, short_path

__all__ = [
    "NOT_WORK", "SUMMARY_MAX", "Handoff", "HandoffLine", "first_prompt", "fit", "handoff", "refs", "render_line",
    "summarize_session",
]  # fmt: skip

# What each line kind is called where a handoff is printed, in the order lines come.
LABELS: Final = {
    "asked": "Asked",
    "redirected": "Then asked",
    "changed": "Changed",
    "fixed": "Fixed",
    "failed": "Failed",
    "checks": "Last run",
    "tasks": "Open tasks",
    "pending": "Pending",
    "next": "Next step",
    "learned": "Learned",
    "concluded": "Concluded",
    "activity": "Recorded",
}
# A session's summary, stored on its row at Stop/SessionEnd and after an import (`summarize_session`):
# its handoff as whole `Label: text (#ids)` lines, bounded.
SUMMARY_MAX: Final = 1500
# Types that describe the session's bookkeeping rather than its work.
NOT_WORK: Final = ("session", "event", "notification")
MAX_REDIRECTS: Final = 3
MAX_FILES: Final = 6
MAX_TASKS: Final = 6
MAX_LEARNED: Final = 2
PROMPT_CHARS: Final = 160

_DELTA: Final = re.compile(r"\(-(\d+) \+(\d+) lines\)")
_WRITTEN: Final = re.compile(r"\((?:created|written|overwritten|updated)?,? ?(\d+) lines?\)")
_WORD: Final = re.compile(r"[a-z][a-z0-9_]{3,}")
# A follow-up that does not change the session's direction: agreement, "continue".
_FOLLOW_UP: Final = re.compile(
    r"(?i)^\s*(?:yes|yep|ok(?:ay)?|sure|great|thanks?|thank you|perfect|nice|good|go ahead|do it|proceed|continue"
    r"|keep going|go on|next|lgtm|y|n|no)\b[\s.!,]*\S{0,20}\s*$"
)
# A "prompt" no one typed: hook feedback, an interruption, a slash command's wrapper.
_NOT_ASKED: Final = re.compile(
    r"(?i)^(?:stop|bash operation|pretooluse:\w+|\w+ hook) feedback:|^\[request interrupted|^<[a-z][\w-]*>|^caveat:"
)


class Handoff(msgspec.Struct, kw_only=True):
    """A session's handoff: its lines in order (`LABELS`), each with the observations behind it."""

    session_id: str
    project: str | None
    agent: str
    lines: list[HandoffLine]

    def render(self, ids: bool = True) -> list[str]:
        """`Label: text (#id #id)` per line, as the CLI, the MCP tools and the context print it."""
        return [render_line(line, ids) for line in self.lines]


def render_line(line: HandoffLine, ids: bool = True) -> str:
    label = LABELS.get(line.kind, line.kind.capitalize())
    return f"{label}: {line.text}" + (f" ({refs(line.ids)})" if ids and line.ids else "")


def refs(ids: Iterable[int], shown: int = 3) -> str:
    """`#12 #15 #20` (the first and the last when there are more: `#12 … #90`)."""
    ids = list(ids)
    if len(ids) <= shown:
        return " ".join(f"#{i}" for i in ids)
    return " ".join(f"#{i}" for i in ids[: shown - 1]) + f" … #{ids[-1]}"


# Which kinds a bounded handoff keeps first: what was asked, what broke, where things stand, what is left.
PRIORITY: Final = ("asked", "fixed", "failed", "checks", "concluded", "tasks", "next", "pending", "changed",
                   "learned", "redirected", "activity")  # fmt: skip


def fit(lines: list[HandoffLine], limit: int, line_max: int = 300) -> list[str]:
    """Rendered lines (each cut to `line_max`) within `limit` chars in all, whole lines only, kept by
    PRIORITY and printed in their own order (a long session's twelfth changed file goes first)."""
    rendered = [_fit_line(line, line_max) for line in lines]
    order = sorted(range(len(lines)), key=lambda n: (PRIORITY.index(lines[n].kind) if lines[n].kind in PRIORITY
                                                      else len(PRIORITY), n))  # fmt: skip
    kept: set[int] = set()
    size = 0
    for n in order:
        if size + len(rendered[n]) + 1 <= limit + 1:
            kept.add(n)
            size += len(rendered[n]) + 1
    return [rendered[n] for n in sorted(kept)]


def _fit_line(line: HandoffLine, line_max: int) -> str:
    ids = f" ({refs(line.ids)})"
    label = LABELS.get(line.kind, line.kind.capitalize()) + ": "
    return label + clip(line.text, max(20, line_max - len(label) - len(ids))) + ids


def _session_rows(conn: sqlite3.Connection, session_id: str) -> list[Row]:
    """The session's newest SESSION_ROWS rows of every kind a line is built from, oldest first, in one read
    of its index (a session's rows come sorted from it, never in order): the line builders take the ids
    they quote from these, so a long session is read once. Not the agent's words (no line quotes them):
    every Stop summarizes its session, and they are half of a long session's rows."""
    rows = [
        Row(*r)
        for r in conn.execute(
            """SELECT id, type, title, command, file_path, session_id, ts, tool_name FROM observations
                WHERE session_id = ? AND +type NOT IN ('session', 'event', 'notification', 'assistant', 'thinking')
                ORDER BY ts DESC, id DESC LIMIT ?""",
            (session_id, SESSION_ROWS),
        )
    ]
    rows.sort(key=lambda r: r.id)
    return rows


def handoff(conn: sqlite3.Connection, session_id: str, kinds: Iterable[str] | None = None) -> Handoff:
    """The handoff of one session (no lines when it did nothing worth handing on); of those `kinds` of
    lines only, when given (what is not asked for is not read)."""
    want = set(LABELS if kinds is None else kinds)
    head = conn.execute(
        f"SELECT project, {agent_column(conn, 's')} FROM sessions s WHERE session_id = ?", (session_id,)
    ).fetchone()
    project, agent = (head[0], head[1]) if head else (None, None)
    every = _session_rows(conn, session_id)
    rows = [r for r in every if r.type in WORK_TYPES]
    of = {t: [r.id for r in every if r.type == t] for t in ("stop", "compact")}
    tasks = [r.id for r in every if r.type == "task" and r.tool_name in TASK_TOOLS]
    lines: list[HandoffLine | None] = []
    if want & {"asked", "redirected"}:
        lines += _asked(conn, session_id)
    if "changed" in want:
        lines += _changed(rows, project)
    if want & {"fixed", "failed"}:
        lines += failures(conn, rows, project)
    if "checks" in want:
        lines += checks(conn, rows)
    if "tasks" in want:
        items, task_id = open_tasks(conn, session_id, ids=tasks)
        more = "; …" if len(items) > MAX_TASKS else ""
        lines.append(handoff_line("tasks", "; ".join(items[:MAX_TASKS]) + more, [task_id]))
    if want & {"pending", "next"}:
        lines += compaction(conn, session_id, of["compact"])
    if "learned" in want:
        lines += decisions(conn, [session_id], MAX_LEARNED, skip_last=True, ids=of["stop"])
    if "concluded" in want:
        lines.append(concluded(conn, session_id, ids=of["stop"]))
    if not any(lines) and "activity" in want:
        lines.append(_activity(conn, session_id))
    kept = [x for x in lines if x and x.kind in want]
    return Handoff(session_id=session_id, project=project, agent=agent or CLAUDE_CODE, lines=kept)


def _activity(conn: sqlite3.Connection, session_id: str) -> HandoffLine | None:
    """For a session with no prompt, change, failure or message: what it recorded, by type (subagents
    that ran, a compaction), with its first and last observation."""
    rows = conn.execute(
        "SELECT type, sum(count), min(id), max(id) FROM observations WHERE session_id = ? AND type != 'session'"
        " GROUP BY type ORDER BY sum(count) DESC, type",
        (session_id,),
    ).fetchall()
    if not rows:
        return None
    text = ", ".join(f"{n} {t}" for t, n, _, _ in rows) + "; no prompt, change or message recorded"
    return handoff_line("activity", text, [min(r[2] for r in rows), max(r[3] for r in rows)])


# --- asked ---------------------------------------------------------------------------------------


def _asked(conn: sqlite3.Connection, session_id: str) -> list[HandoffLine | None]:
    """The first prompt, and later ones that turned the session elsewhere: long enough to be a request,
    not a follow-up, sharing little of their words with what was asked before."""
    prompts = conn.execute(
        "SELECT o.id, o.title FROM prompts p JOIN observations o ON o.id = p.observation_id"
        " WHERE p.session_id = ? ORDER BY p.prompt_number LIMIT 500",
        (session_id,),
    ).fetchall()
    prompts = [(i, t) for i, t in prompts if t and not _NOT_ASKED.search(t)]
    if not prompts:
        return []
    first_id, first = prompts[0]
    out: list[HandoffLine | None] = [handoff_line("asked", f'"{clip(first, PROMPT_CHARS)}"', [first_id])]
    known = set(_WORD.findall(first.lower()))
    turns: list[tuple[float, int, str]] = []
    for oid, title in prompts[1:]:
        words = set(_WORD.findall(title.lower()))
        if len(words) < 4 or not _asks(title):
            continue
        new = len(words - known) / len(words)
        known |= words
        if new >= 0.6:
            turns.append((-new, oid, title))
    for _, oid, title in sorted(sorted(turns)[:MAX_REDIRECTS], key=lambda t: t[1]):
        out.append(handoff_line("redirected", f'"{clip(title, PROMPT_CHARS)}"', [oid]))
    return out


def _asks(prompt: str) -> bool:
    """A prompt that asks for something: not a follow-up ("continue"), nor pasted output (`➜ git:(main)`)."""
    first = prompt.lstrip()[:1]
    return (first.isalnum() or first in "@/\"'") and not _FOLLOW_UP.search(prompt) and not _NOT_ASKED.search(prompt)


# --- changed -------------------------------------------------------------------------------------


def _changed(rows: list[Row], project: str | None) -> list[HandoffLine | None]:
    """Each file edited or written, most changed first: edits, lines removed and added."""
    files: dict[str, list[Row]] = {}
    for r in rows:
        if r.type in ("edit", "write") and r.file_path:
            files.setdefault(r.file_path, []).append(r)
    ranked = sorted(files.items(), key=lambda kv: (-len(kv[1]), -kv[1][-1].id))
    out: list[HandoffLine | None] = []
    for path, changes in ranked[:MAX_FILES]:
        name = short_path(rel(path, project), 80)
        out.append(handoff_line("changed", f"{name} ({_delta(changes)})", [c.id for c in changes]))
    rest = ranked[MAX_FILES:]
    if rest:
        ids = [c.id for _, changes in rest for c in changes]
        names = ", ".join(short_path(rel(p, project), 40) for p, _ in rest[:4]) + (", …" if len(rest) > 4 else "")
        out.append(handoff_line("changed", f"{len(rest)} more files ({len(ids)} changes): {names}", ids))
    return out


def _delta(changes: list[Row]) -> str:
    edits = sum(1 for c in changes if c.type == "edit")
    writes = len(changes) - edits
    removed = added = 0
    created = False
    for c in changes:
        if m := _DELTA.search(c.title):
            removed, added = removed + int(m.group(1)), added + int(m.group(2))
        elif m := _WRITTEN.search(c.title):
            added += int(m.group(1))
            created = created or "created" in c.title
    if created and writes == 1 and not edits:
        return f"created, {added} line" + ("s" if added != 1 else "")
    parts = [f"{edits} edit" + ("s" if edits != 1 else "")] if edits else []
    if writes:
        parts.append("created" if created and writes == 1 else f"{writes} write" + ("s" if writes != 1 else ""))
    if removed or added:
        parts.append(f"+{added} -{removed} lines")
    return ", ".join(parts)


def first_prompt(conn: sqlite3.Connection, session_id: str) -> tuple[str | None, int]:
    """The session's first prompt title and how many prompts it had."""
    rows = conn.execute(
        "SELECT o.title FROM prompts p JOIN observations o ON o.id = p.observation_id"
        " WHERE p.session_id = ? ORDER BY p.prompt_number",
        (session_id,),
    ).fetchall()
    return (rows[0][0] if rows else None), len(rows)


def summarize_session(conn: sqlite3.Connection, session_id: str) -> str:
    """The session's handoff (`nmemd.recall.handoff`) as whole `Label: text (#ids)` lines, at most
    SUMMARY_MAX chars, the most useful kinds kept first ("" when it did nothing worth saying)."""
    return "\n".join(fit(handoff(conn, session_id).lines, SUMMARY_MAX))
