"""What a session's rows say came of its work, as handoff lines: failures and what fixed them, the last
state of builds and tests, open tasks, the compaction summary's pending work and next step, what the
assistant concluded and decided.

Each line carries the ids of the observations it was read from, and none is made without one
(`handoff_line`). The handoff puts them together for one session; the SessionStart context takes some of
them across a project's recent sessions.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Final

from nmemd.recall.facts import CONCLUSION, error_lines
from nmemd.recall.queries import HandoffLine, marks
from nmemd.recall.text import clip, command_kind, command_line, rel, short_path
from nmemd.remembered import remembered

MAX_FAILURES: Final = 4
MAX_CHECKS: Final = 4
MAX_IDS: Final = 20  # ids kept per line: enough to open the work, bounded for a session of a thousand edits
FOLLOW_ROWS: Final = 60  # rows after a failure looked through for what fixed it
SESSION_ROWS: Final = 2000  # a session's newest rows read at most (a week-long session is still bounded)
WORK_TYPES: Final = ("prompt", "command", "error", "edit", "write")  # the rows `rows_of` reads
TASK_TOOLS: Final = ("TodoWrite", "TaskCreate", "TaskUpdate")  # the task rows `open_tasks` reads

# Failures that are the tool's own bookkeeping, not the work going wrong.
_NOISE: Final = re.compile(
    r"(?i)interrupted|doesn't want to proceed|was rejected|has not been read yet|has been modified since read"
    r"|user denied|permission to use .* has been denied|no changes to make|found \d+ matches of the string"
    r"|string to replace not found|file does not exist|is not running, so cannot be killed|no such tool"
)
CHECK_WORD: Final = re.compile(r"(?i)test|build|lint|check|tsc|mypy|ruff|clippy|vet|compile|spec")
_INSTALL: Final = re.compile(r"^\S+ (?:install|add|i|ci|sync|update|upgrade)\b")
_TEST_FAILED: Final = re.compile(r"(?i)\b[1-9]\d* (?:failed|failing|errors?)\b|\bFAILED\b|\bBUILD FAILED\b")
_CD: Final = re.compile(r"^\s*(?:cd\s+(?:\"[^\"]*\"|'[^']*'|\S+)\s*&&\s*|[A-Z_][A-Z0-9_]*=\S*\s+)+")  # both, any order
# What runs another command: the command it runs is the one that says what was done.
_WRAPPER: Final = re.compile(
    r"^(?:sudo|time|env|nohup|timeout\s+\S+|nix\s+develop(?:\s+\S+)*?\s+--command|nix-shell\s+--run|uv\s+run"
    r"|poetry\s+run|pipenv\s+run|npx|bunx|pnpm\s+exec|pnpm\s+dlx|yarn\s+dlx|bundle\s+exec|docker\s+compose\s+exec\s+\S+)"
    r"\s+[\"']?"
)
_SECTION: Final = re.compile(r"^\s*(?:\d+\.\s*)?\**\s*(Pending Tasks|(?:Optional )?Next Steps?)\s*\**\s*:?\s*\**\s*$",
                             re.IGNORECASE | re.MULTILINE)  # fmt: skip
_ANY_SECTION: Final = re.compile(r"^\s*\d+\.\s*\**[A-Z][\w /&-]{2,40}\**\s*:\s*\**\s*$", re.MULTILINE)


def handoff_line(kind: str, text: str, ids: Iterable[int]) -> HandoffLine | None:
    """A line of `kind` read from the observations `ids` (at most MAX_IDS kept); None without any."""
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
    return [
        Row(*r)
        for r in conn.execute(
            f"""SELECT * FROM (SELECT id, type, title, command, file_path, session_id, ts FROM observations
                WHERE {where} AND +type IN ({marks(WORK_TYPES)}) ORDER BY id DESC LIMIT ?) ORDER BY id""",
            (*args, *WORK_TYPES, limit),
        )
    ]


# --- failures and what fixed them ----------------------------------------------------------------


@remembered(4096)
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
    # Only the lines shown are written: the output of each is read and searched for what went wrong.
    shown = sorted(groups.items(), key=lambda kv: _rank(kv[1][-1][1]))[:limit]
    outputs = _contents(conn, list({r.id for _, g in shown for r in (g[0][1], g[-1][1])}), 4000)
    out: list[HandoffLine | None] = []
    for key, group in shown:
        n, last = group[-1]
        what = f"`{command_line(_CD.sub('', last.command), 80)}`" if last.command else clip(_tool_of(last.title), 80)
        texts = [_unsaid(outputs.get(r.id, ""), project) for r in (group[0][1], last)]
        said_ = _what_went_wrong(texts, said) or _said(last.title)
        ids = [r.id for _, r in group]
        times = f" ({len(group)} times)" if len(group) > 1 else ""
        fix = _fix(rows, n, key, last, project)
        if fix is None:
            text = f"{what} failed{times}: {said_}" if said_ else f"{what} failed{times}"
            out.append(handoff_line("failed", text + "; not seen passing after", ids))
        else:
            how, fix_ids = fix
            text = f"{what} failed{times}" + (f": {said_}" if said_ else "") + f" → {how}"
            out.append(handoff_line("fixed", text, ids + fix_ids))
    return out


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


def reports_failures(output: str) -> bool:
    """Whether a run's output reports failures its exit status did not ("2 failed" through `| tail`)."""
    return bool(_TEST_FAILED.search(output))


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
    return dict(conn.execute(f"SELECT id, substr(content, 1, ?) FROM observations WHERE id IN ({marks(ids)})",
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
        elif reports_failures(outputs.get(r.id, "")):
            state = "ran; its output reports failures"
        else:
            state = "passed"
        out.append(handoff_line("checks", f"`{command_line(r.command or '', 80)}` {state}", [r.id]))
    return out


# --- open tasks ----------------------------------------------------------------------------------

_TASK_CREATED: Final = re.compile(r"Task created: (.*?)(?: \(#(\S+)\))?")
_TASK_UPDATED: Final = re.compile(r"Task #(\S+) updated(?:: (\w+))?(?: \((.*)\))?")


def open_tasks(
    conn: sqlite3.Connection, session_id: str, project: str | None = None, ids: list[int] | None = None
) -> tuple[list[str], int]:
    """The not-completed items of the session's last todo list (TodoWrite), or of the Task* tools' state,
    as `[~] item` (in progress) and `[ ] item` (pending); and the id of the row that says so (0: none).
    `ids`: the session's task rows, when the caller has read them."""
    args: tuple[object, ...]
    if ids is not None:
        where, args = f"id IN ({marks(ids)})", tuple(ids)
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
    shown = {"pending": "[ ]", "in_progress": "[~]"}
    return [f"{shown[st]} {subj}" for subj, st in state.values() if st in shown], last_id


# --- the compaction summary's own pending work and next step ------------------------------------


def compaction(conn: sqlite3.Connection, session_id: str, ids: list[int] | None = None) -> list[HandoffLine | None]:
    """The compaction summary's pending tasks and next step, from the session's newest compaction."""
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
                out.append(handoff_line("pending", "; ".join(items), [oid]))
        else:
            step = " ".join(ln.strip() for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("```"))
            if step:
                out.append(handoff_line("next", clip(step, 240), [oid]))
    return out


# --- what the assistant concluded and decided ----------------------------------------------------


def concluded(
    conn: sqlite3.Connection, session_id: str, chars: int = 300, ids: list[int] | None = None
) -> HandoffLine | None:
    """The assistant's last message in the session, cut to `chars` (`ids`: its stop rows, when read)."""
    found = _newest(conn, [session_id], "stop", 3, chars * 4, ids)
    return handoff_line("concluded", clip(_unmarked(found[0][1]), chars), [found[0][0]]) if found else None


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
        for key, line in _stated(text):
            if key in seen:
                continue
            seen.add(key)
            out.append(handoff_line("learned", line, [oid]))
            break  # one sentence per message: the first that states it
        if len(out) >= limit:
            break
    return out


@remembered(256)
def _stated(text: str) -> tuple[tuple[str, str], ...]:
    """The sentences of a message that state a cause, a fix or a decision, as (key, line). Cached: every
    Stop's summary reads the session's last 30 messages again, and all but one are the same."""
    return tuple(
        (sentence.lower()[:80], clip(_unmarked(sentence), 240))
        for sentence in _sentences(text)
        if len(sentence.split()) >= 6 and not sentence.endswith(":") and CONCLUSION.search(sentence)
    )
