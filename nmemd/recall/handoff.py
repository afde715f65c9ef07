"""Handoff summaries: what a session was asked, what it changed, what broke and what fixed it, what is left.

What a later session (or a person coming back) needs before it goes on, computed from the stored
observations by counting, pairing and picking lines, never by a model: the same rows always give
the same handoff. Every line carries the ids of the observations it was read from (`nmem show ID`,
the MCP get_observations tool), and a line with no observation behind it is never made.

Read per session over the session index; the content of a row is read only where a line quotes it
(an error's output, the last todo list, the compaction summary, the last assistant message).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import Final

import msgspec

from nmemd.recall.queries import HandoffLine, agent_column
from nmemd.recall.snippets import CONCLUSION, error_lines
from nmemd.recall.summary import clip, command_kind, command_line, rel, short_path

__all__ = ["Handoff", "HandoffLine", "Row", "checks", "concluded", "decisions", "failures", "fit", "handoff",
           "open_tasks", "rows_of"]  # fmt: skip

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
MAX_REDIRECTS: Final = 3
MAX_FILES: Final = 6
MAX_FAILURES: Final = 4
MAX_CHECKS: Final = 4
MAX_TASKS: Final = 6
MAX_LEARNED: Final = 2
MAX_IDS: Final = 20  # ids kept per line: enough to open the work, bounded for a session of a thousand edits
PROMPT_CHARS: Final = 160
FOLLOW_ROWS: Final = 60  # rows after a failure looked through for what fixed it
SESSION_ROWS: Final = 2000  # a session's newest rows read at most (a week-long session is still bounded)
_TYPES: Final = ("prompt", "command", "error", "edit", "write")

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
# Failures that are the tool's own bookkeeping, not the work going wrong.
_NOISE: Final = re.compile(
    r"(?i)interrupted|doesn't want to proceed|was rejected|has not been read yet|has been modified since read"
    r"|user denied|permission to use .* has been denied|no changes to make|found \d+ matches of the string"
    r"|string to replace not found|file does not exist|is not running, so cannot be killed|no such tool"
)
CHECK_WORD: Final = re.compile(r"(?i)test|build|lint|check|tsc|mypy|ruff|clippy|vet|compile|spec")
_INSTALL: Final = re.compile(r"^\S+ (?:install|add|i|ci|sync|update|upgrade)\b")
_TEST_FAILED: Final = re.compile(r"(?i)\b[1-9]\d* (?:failed|failing|errors?)\b|\bFAILED\b|\bBUILD FAILED\b")
_CD: Final = re.compile(r"^\s*(?:cd\s+(?:\"[^\"]*\"|'[^']*'|\S+)\s*&&\s*|(?:[A-Z_][A-Z0-9_]*=\S*\s+)+)")
# What runs another command: the command it runs is the one that says what was done.
_WRAPPER: Final = re.compile(
    r"^(?:sudo|time|env|nohup|timeout\s+\S+|nix\s+develop(?:\s+\S+)*?\s+--command|nix-shell\s+--run|uv\s+run"
    r"|poetry\s+run|pipenv\s+run|npx|bunx|pnpm\s+exec|pnpm\s+dlx|yarn\s+dlx|bundle\s+exec|docker\s+compose\s+exec\s+\S+)"
    r"\s+[\"']?"
)
_SECTION: Final = re.compile(r"^\s*(?:\d+\.\s*)?\**\s*(Pending Tasks|(?:Optional )?Next Steps?)\s*\**\s*:?\s*\**\s*$",
                             re.IGNORECASE | re.MULTILINE)  # fmt: skip
_ANY_SECTION: Final = re.compile(r"^\s*\d+\.\s*\**[A-Z][\w /&-]{2,40}\**\s*:\s*\**\s*$", re.MULTILINE)


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


def _line(kind: str, text: str, ids: Iterable[int]) -> HandoffLine | None:
    kept = sorted(set(ids))
    if not kept or not text:
        return None  # no line without an observation behind it
    if len(kept) > MAX_IDS:
        kept = kept[: MAX_IDS - 1] + kept[-1:]
    return HandoffLine(kind=kind, text=text, ids=kept)


@dataclass
class Row:
    """What the line builders read of an observation (its content only where a line quotes it)."""

    id: int
    type: str
    title: str
    command: str | None
    file_path: str | None
    session_id: str
    ts: float
    tool_name: str | None = None


def rows_of(conn: sqlite3.Connection, where: str, args: Iterable[object], limit: int = SESSION_ROWS) -> list[Row]:
    """The newest `limit` prompts, commands, errors, edits and writes matching `where`, oldest first."""
    marks = ",".join("?" * len(_TYPES))
    return [
        Row(*r)
        for r in conn.execute(
            f"""SELECT * FROM (SELECT id, type, title, command, file_path, session_id, ts FROM observations
                WHERE {where} AND +type IN ({marks}) ORDER BY id DESC LIMIT ?) ORDER BY id""",
            (*args, *_TYPES, limit),
        )
    ]


def _session_rows(conn: sqlite3.Connection, session_id: str) -> list[Row]:
    """The session's newest SESSION_ROWS rows of every kind, oldest first, in one read of its index (a
    session's rows come sorted from it, never in order): the line builders take the ids they quote from
    these, so a long session is read once."""
    rows = [
        Row(*r)
        for r in conn.execute(
            """SELECT id, type, title, command, file_path, session_id, ts, tool_name FROM observations
                WHERE session_id = ? AND +type NOT IN ('session', 'event', 'notification')
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
    rows = [r for r in every if r.type in _TYPES]
    of = {t: [r.id for r in every if r.type == t] for t in ("stop", "compact")}
    tasks = [r.id for r in every if r.type == "task" and r.tool_name in _TASK_TOOLS]
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
        lines.append(_line("tasks", "; ".join(items[:MAX_TASKS]) + more, [task_id]))
    if want & {"pending", "next"}:
        lines += _compaction(conn, session_id, of["compact"])
    if "learned" in want:
        lines += decisions(conn, [session_id], MAX_LEARNED, skip_last=True, ids=of["stop"])
    if "concluded" in want:
        lines.append(concluded(conn, session_id, ids=of["stop"]))
    if not any(lines) and "activity" in want:
        lines.append(_activity(conn, session_id))
    kept = [x for x in lines if x and x.kind in want]
    return Handoff(session_id=session_id, project=project, agent=agent or "claude-code", lines=kept)


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
    return _line("activity", text, [min(r[2] for r in rows), max(r[3] for r in rows)])


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
    out: list[HandoffLine | None] = [_line("asked", f'"{clip(first, PROMPT_CHARS)}"', [first_id])]
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
        out.append(_line("redirected", f'"{clip(title, PROMPT_CHARS)}"', [oid]))
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
        out.append(_line("changed", f"{name} ({_delta(changes)})", [c.id for c in changes]))
    rest = ranked[MAX_FILES:]
    if rest:
        ids = [c.id for _, changes in rest for c in changes]
        names = ", ".join(short_path(rel(p, project), 40) for p, _ in rest[:4]) + (", …" if len(rest) > 4 else "")
        out.append(_line("changed", f"{len(rest)} more files ({len(ids)} changes): {names}", ids))
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


# --- failures and what fixed them ----------------------------------------------------------------


@lru_cache(maxsize=4096)
def command_key(command: str) -> str:
    """What makes two runs "the same command": its first line without a leading `cd X &&` or variables,
    up to its third word (`npm run build`, `pytest -q tests/x.py` and `pytest -q` differ; reruns match)."""
    line = _CD.sub("", command_line(command, 300))
    inner = _WRAPPER.sub("", line, count=1)
    while inner != line:
        line, inner = inner, _WRAPPER.sub("", inner, count=1)
    return " ".join(line.split()[: 2 if _INSTALL.match(line) else 3])


def failures(
    conn: sqlite3.Connection, rows: list[Row], project: str | None, limit: int = MAX_FAILURES, said: int = 1
) -> list[HandoffLine | None]:
    """Each distinct failure, with what came after it in its session and succeeded: the same command
    passing (and the files edited before it did), or an edit of the file a failed edit meant to change;
    with the `said` lines of its output that say what went wrong. Builds and tests first, then the latest."""
    failures = [(n, r) for n, r in enumerate(rows) if r.type == "error" and not _NOISE.search(r.title)]
    if not failures:
        return []
    groups: dict[str, list[tuple[int, Row]]] = {}
    for n, r in failures:
        key = command_key(r.command) if r.command else f"{r.title[:60]}|{r.file_path or ''}"
        groups.setdefault(key, []).append((n, r))
    outputs = _contents(conn, list({r.id for g in groups.values() for r in (g[0][1], g[-1][1])}), 4000)
    out: list[tuple[tuple[int, int], HandoffLine | None]] = []
    for key, group in groups.items():
        n, last = group[-1]
        what = f"`{command_line(_CD.sub('', last.command), 80)}`" if last.command else clip(_tool_of(last.title), 80)
        texts = [_unsaid(outputs.get(r.id, ""), project) for r in (group[0][1], last)]
        said_ = _what_went_wrong(texts, said) or _said(last.title)
        ids = [r.id for _, r in group]
        times = f" ({len(group)} times)" if len(group) > 1 else ""
        fix = _fix(rows, n, key, last, project)
        if fix is None:
            text = f"{what} failed{times}: {said_}" if said_ else f"{what} failed{times}"
            out.append((_rank(last), _line("failed", text + "; not seen passing after", ids)))
        else:
            how, fix_ids = fix
            text = f"{what} failed{times}" + (f": {said_}" if said_ else "") + f" → {how}"
            out.append((_rank(last), _line("fixed", text, ids + fix_ids)))
    out.sort(key=lambda x: x[0])
    return [line for _, line in out[:limit]]


def _unsaid(text: str, project: str | None) -> str:
    """`text` without the project's own path (`/home/me/app/src/x.py` -> `src/x.py`): it says nothing there
    and takes the room of what does."""
    top = (project or "").rstrip("/")
    if len(top) < 2 or top not in text:
        return text
    return text.replace(top + "/", "").replace(top, ".")


def _what_went_wrong(outputs: list[str], lines: int, chars: int = 170) -> str:
    """Up to `lines` error lines of a failure, the first run's first (what went wrong at the start), then
    the last run's (what was still wrong), within `chars`."""
    found: list[str] = []
    for text in outputs:
        for line in error_lines(text, lines):
            if line not in found:
                found.append(line)
    found = found[:lines] if len(outputs) == 1 or len(found) <= lines else [found[0], found[-1]]
    if not found:
        return ""
    first = clip(found[0], chars if len(found) == 1 else max(chars - 60, chars * 2 // 3))
    rest = chars - len(first) - 3
    return first + (f" / {clip(found[1], rest)}" if len(found) > 1 and rest >= 30 else "")


def _rank(failed: Row) -> tuple[int, int]:
    """Builds and tests first, then other commands, then tools, then looking around (`ls`, `stat`) that
    failed; the latest first within each."""
    kind = {2: 0, 1: 1}.get(command_kind(failed.command), 3) if failed.command else 2
    return (kind, -failed.id)


def _fix(rows: list[Row], n: int, key: str, failed: Row, project: str | None) -> tuple[str, list[int]] | None:
    edits: list[Row] = []
    after = (r for r in islice(rows, n + 1, None) if r.session_id == failed.session_id)
    for _, r in zip(range(FOLLOW_ROWS), after, strict=False):
        if r.type in ("edit", "write") and r.file_path:
            if not failed.command and r.file_path == failed.file_path:
                return f"then {r.type} {short_path(rel(r.file_path, project), 60)} succeeded", [r.id]
            edits.append(r)
        elif r.type == "command" and failed.command and r.command and command_key(r.command) == key:
            if not edits:
                return "passed when run again", [r.id]
            names = list(dict.fromkeys(short_path(rel(e.file_path or "", project), 50) for e in edits))
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            return f"fixed by editing {shown}; then it passed", [e.id for e in edits[-5:]] + [r.id]
        elif r.type == "error" and failed.command and r.command and command_key(r.command) == key:
            edits = []  # failed again: what came before did not fix it
    return None


def _tool_of(title: str) -> str:
    """`Edit failed: ... — path` -> `Edit of path`; other tools keep their title's head."""
    head, _, tail = title.partition(" failed")
    return f"{head} of {tail.rsplit(' — ', 1)[-1]}" if " — " in tail else head


def _said(title: str) -> str:
    """What a failure's title says after its command or tool ("Bash failed (exit 1): cmd" says nothing more)."""
    _, _, rest = title.partition(" failed")
    rest = rest.split(" — ", 1)[0].lstrip(":( ").strip()
    return "" if rest.startswith("exit") else clip(rest, 140)


def _contents(conn: sqlite3.Connection, ids: list[int], chars: int) -> dict[int, str]:
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    return dict(conn.execute(f"SELECT id, substr(content, 1, ?) FROM observations WHERE id IN ({marks})",
                             (chars, *ids)).fetchall())  # fmt: skip


# --- the last state of build and tests -----------------------------------------------------------


def checks(conn: sqlite3.Connection, rows: list[Row], limit: int = MAX_CHECKS) -> list[HandoffLine | None]:
    """The last run of each build, test, lint or check command, and whether it passed (its exit status;
    an agent that reports none, by what its output says: "2 failed")."""
    last: dict[str, Row] = {}
    for r in reversed(rows):
        if r.type in ("command", "error") and r.command and (kind := command_kind(r.command)):
            key = command_key(r.command)
            if kind == 1 and not CHECK_WORD.search(key):
                continue  # `python -m py_compile x.py` checks; `git push` does not
            if key not in last and not key.startswith("echo ") and not _NOISE.search(r.title):
                last[key] = r
    if not last:
        return []
    # tests, builds and linters before installs and the rest; the latest first within each
    shown = sorted(last.items(), key=lambda kv: (not CHECK_WORD.search(kv[0]), -kv[1].id))[:limit]
    outputs = _contents(conn, [r.id for _, r in shown if r.type == "command"], 3000)
    out: list[HandoffLine | None] = []
    for _, r in shown:
        if r.type == "error":
            state = "failed"
        elif _TEST_FAILED.search(outputs.get(r.id, "")):
            state = "ran; its output reports failures"
        else:
            state = "passed"
        out.append(_line("checks", f"`{command_line(r.command or '', 80)}` {state}", [r.id]))
    return out


# --- open tasks ----------------------------------------------------------------------------------

_TASK_CREATED: Final = re.compile(r"Task created: (.*?)(?: \(#(\S+)\))?")
_TASK_UPDATED: Final = re.compile(r"Task #(\S+) updated(?:: (\w+))?(?: \((.*)\))?")


_TASK_TOOLS: Final = ("TodoWrite", "TaskCreate", "TaskUpdate")


def open_tasks(
    conn: sqlite3.Connection, session_id: str, project: str | None = None, ids: list[int] | None = None
) -> tuple[list[str], int]:
    """The not-completed items of the session's last todo list (TodoWrite), or of the Task* tools' state,
    as `[~] item` (in progress) and `[ ] item` (pending); and the id of the row that says so (0: none).
    `ids`: the session's task rows, when the caller has read them."""
    args: tuple[object, ...]
    if ids is not None:
        where, args = f"id IN ({','.join('?' * len(ids))})", tuple(ids)
    else:
        where = "session_id = ? AND +type = 'task' AND tool_name IN ('TodoWrite', 'TaskCreate', 'TaskUpdate')"
        args = (session_id,)
    if project is not None:
        where += " AND +project = ?"
        args += (project,)
    obs = conn.execute(f"SELECT id, tool_name, title, content FROM observations WHERE {where} ORDER BY id", args)
    rows = obs.fetchall()
    if not rows:
        return [], 0
    last_id, tool, _, content = rows[-1]
    if tool == "TodoWrite":
        items = [line for line in content.splitlines() if line.startswith("[") and not line.startswith("[x]")]
        return items, last_id
    state: dict[str, tuple[str, str]] = {}  # task id -> (subject, status)
    for _, tool, title, _ in rows:
        if tool == "TaskCreate" and (m := _TASK_CREATED.fullmatch(title)):
            state[m.group(2) or m.group(1)] = (m.group(1), "pending")
        elif tool == "TaskUpdate" and (m := _TASK_UPDATED.fullmatch(title)):
            subject, status = state.get(m.group(1), (m.group(3) or f"#{m.group(1)}", "pending"))
            state[m.group(1)] = (m.group(3) or subject, m.group(2) or status)
    marks = {"pending": "[ ]", "in_progress": "[~]"}
    return [f"{marks[st]} {subj}" for subj, st in state.values() if st in marks], last_id


# --- the compaction summary's own pending work and next step ------------------------------------


def _compaction(conn: sqlite3.Connection, session_id: str, ids: list[int] | None = None) -> list[HandoffLine | None]:
    found = _newest(conn, [session_id], "compact", 3, 12_000, ids)
    if not found:
        return []
    oid, text = found[0]
    out: list[HandoffLine | None] = []
    for m in _SECTION.finditer(text):
        body = text[m.end() :]
        end = _ANY_SECTION.search(body)
        body = body[: end.start() if end else 2000]
        body = body.split("\nPlease continue the conversation", 1)[0]
        if m.group(1).lower().startswith("pending"):
            items = [ln.strip(" -*•\t") for ln in body.splitlines() if ln.strip(" -*•\t")]
            items = [clip(i, 100) for i in items if not i.startswith("```")][:5]
            if items and not (len(items) == 1 and items[0].lower().startswith(("none", "no "))):
                out.append(_line("pending", "; ".join(items), [oid]))
        else:
            step = " ".join(ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("```"))
            if step:
                out.append(_line("next", clip(step, 240), [oid]))
    return out


# --- what the assistant concluded and decided ----------------------------------------------------


def concluded(
    conn: sqlite3.Connection, session_id: str, chars: int = 300, ids: list[int] | None = None
) -> HandoffLine | None:
    """The assistant's last message in the session, cut to `chars` (`ids`: its stop rows, when read)."""
    found = _newest(conn, [session_id], "stop", 3, chars * 4, ids)
    return _line("concluded", clip(_unmarked(found[0][1]), chars), [found[0][0]]) if found else None


_MARKUP: Final = re.compile(r"^\s*#{1,6}\s+|\*\*|__|^\s*```\w*\s*$|^\s*[-|: ]+\|[-|: ]*$", re.MULTILINE)


def _unmarked(text: str) -> str:
    """A message without its markdown's headings, bold marks, code fences and table rules: on one line
    they are noise."""
    return _MARKUP.sub("", text)


def _newest(
    conn: sqlite3.Connection,
    session_ids: list[str],
    type_: str,
    limit: int,
    chars: int,
    known: list[int] | None = None,
) -> list[tuple[int, str]]:
    """(id, its content's first `chars`) of the sessions' newest `limit` rows of a type, newest first, the
    empty ones left out; `known`: those rows' ids, when the caller has read them. The ids first, then
    the content of those only: a filter on the content would read every row, long outputs included."""
    ids: list[int] = list(known or [])
    for sid in session_ids if known is None else ():  # each along the session's index
        ids += [r[0] for r in conn.execute(
            "SELECT id FROM observations WHERE session_id = ? AND +type = ? ORDER BY ts DESC, id DESC LIMIT ?",
            (sid, type_, limit),
        )]  # fmt: skip
    ids = sorted(ids, reverse=True)[:limit]
    texts = _contents(conn, ids, chars)
    return [(i, texts[i]) for i in ids if texts.get(i)]


_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+")


def _sentences(text: str) -> Iterator[str]:
    """Each line's sentences, whitespace folded, list marks and emphasis stripped (linear in the text)."""
    for line in text.splitlines():
        for part in _SENTENCE_END.split(line):
            part = " ".join(part.split()).strip(" -*#>")
            if part:
                yield part


def decisions(
    conn: sqlite3.Connection,
    session_ids: list[str],
    limit: int,
    skip_last: bool = False,
    scan: int = 30,
    ids: list[int] | None = None,
) -> list[HandoffLine | None]:
    """Sentences of the assistant's messages that state a cause, a fix or a decision ("The root cause
    was ...", "... instead of ..."), newest first, at most `limit`, each once; `skip_last`: not from the
    session's last message (its conclusion says it whole)."""
    if not session_ids or limit <= 0:
        return []
    rows = _newest(conn, session_ids, "stop", scan, 4000, ids)
    if skip_last:
        rows = rows[1:]
    out: list[HandoffLine | None] = []
    seen: set[str] = set()
    for oid, text in rows:
        for sentence in _sentences(text):
            if len(sentence.split()) < 6 or sentence.endswith(":") or not CONCLUSION.search(sentence):
                continue
            key = sentence.lower()[:80]
            if key in seen:
                continue
            seen.add(key)
            out.append(_line("learned", clip(_unmarked(sentence), 240), [oid]))
            break  # one sentence per message: the first that states it
        if len(out) >= limit:
            break
    return out
