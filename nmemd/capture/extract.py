"""Turn one raw Claude Code hook payload into typed, redacted observations.

Extraction is parsing, not an LLM: fast, free and reproducible. It runs for
every event inside the daemon's event loop, so it never raises (any JSON value
is accepted; any field may be absent or of the wrong type) and it bounds every
string *before* formatting it, so a 20 MB tool response costs a slice, not a
copy. Every stored string goes through `strip_private` then `redact`.

Prompt choice: `<ide_opened_file>`, `<ide_selection>` (any `<ide_*>`) and
`<system-reminder>` blocks are dropped from prompts. They are editor state
injected by the client, not what the user asked, and would swamp search.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from functools import lru_cache
from itertools import islice
from typing import Any, Final

import msgspec

from nmemd.capture.project import project_root
from nmemd.capture.redact import redact, redact_tail, sensitive_key, strip_private
from nmemd.errors import InvalidEvent
from nmemd.jsonsafe import loads_replacing_surrogates, may_hold_surrogate
from nmemd.model import (
    AGENT_ALIASES,
    COMPACT_MAX,
    CONTENT_MAX,
    REPLY_MAX,
    TITLE_MAX,
    Extracted,
    Observation,
    ObservationType,
    reply_key,
    stored_agent,
)

_SLACK: Final = 200  # raw chars kept past a mid-line bound so `key = "a value"` is whole when redacted
_COUNT_MAX: Final = 4_000_000  # count hidden lines only in tails shorter than this
_ID_MAX: Final = 200
_PATH_MAX: Final = 4096
_CMD_MAX: Final = 2000
_LEAF_MAX: Final = 300  # one string inside a generic summary
_TOKEN_RUN: Final = re.compile(r"[A-Za-z0-9_.+/=%-]*")
_IDE_RE: Final = re.compile(
    r"<(ide_[a-z_]{1,40}|system-reminder)(?:\s[^<>]{0,200})?>.*?(?:</\1\s*>|\Z)", re.DOTALL | re.IGNORECASE
)
_COMMON_KEYS: Final = frozenset(
    {"session_id", "transcript_path", "cwd", "hook_event_name", "permission_mode", "effort", "prompt_id",
     "nmem_agent", "nmem_exit_code", "turn_id"}
)  # fmt: skip
_AGENT_NAME: Final = re.compile(r"[a-z0-9-]{1,32}")
_TODO_MARK: Final = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}
# An error keeps its head and its tail: what failed and how it began, then the verdict, which tools
# print last (pytest's FAILED lines and summary, a traceback's final exception, a compiler's count).
# In the real corpus 90 % of error outputs are under 60 lines and 3.2 KB, so these bounds (100
# lines, 8 KB) keep them whole; the tail gets the larger share because the answer is there.
ERROR_HEAD: Final = (3000, 40)  # chars, lines
ERROR_TAIL: Final = (5000, 60)
# A command that succeeded keeps its head and its tail too, in less room: a test run, a build, an
# install print their verdict last ("200 passed, 3 skipped", the last warning, a summary line).
OUTPUT_HEAD: Final = (700, 10)
OUTPUT_TAIL: Final = (1000, 12)
STDERR_HEAD: Final = (400, 6)
STDERR_TAIL: Final = (600, 10)
MCP_HEAD: Final = (800, 15)
MCP_TAIL: Final = (1200, 25)
_PRIVATE_OPEN: Final = re.compile(r"<(?:private|nmem-context)", re.IGNORECASE)

# --- small helpers -----------------------------------------------------------------------


def _s(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _i(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _d(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _l(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def _cut(s: str, n: int) -> int:
    """Index <= n to cut `s` at: before a newline, else after a space, else before the token
    that straddles n (a secret is never split into a prefix too short to be recognised)."""
    if len(s) <= n:
        return len(s)
    i = s.rfind("\n", n // 2, n)
    if i >= 0:
        return i
    j = s.rfind(" ", max(0, n - 200), n)
    if j > 0:
        return j + 1
    run = _TOKEN_RUN.match(s[max(0, n - 4000) : n][::-1])
    return n - (run.end() if run else 0)


def _nth_newline(s: str, count: int, bound: int) -> int:
    """Index of the `count`-th newline of `s` if it is before `bound`, else len(s)."""
    if s.count("\n", 0, bound) < count:  # the common case, in one pass
        return len(s)
    idx = -1
    for _ in range(count):
        idx = s.find("\n", idx + 1, bound)
        if idx < 0:
            return len(s)
    return idx


def _clean(raw: object, limit: int = CONTENT_MAX, max_lines: int = 0, *, prompt: bool = False) -> str:
    """strip_private + redact, bounded to `limit` chars (and `max_lines`) with a marker."""
    if not isinstance(raw, str) or not raw:
        return ""
    n = len(raw)
    c = _nth_newline(raw, max_lines, limit) if max_lines else n
    if c > limit:  # cut on a line end when one is near; mid-line keeps slack for secrets at the cut
        i = raw.rfind("\n", limit // 2, limit)
        c = i if i >= 0 else _cut(raw, limit + _SLACK)
    text = strip_private(raw[:c] if c < n else raw)
    if prompt and "<" in text:
        text = _IDE_RE.sub("", text)
    text = redact(text).rstrip().lstrip("\r\n")
    k = _nth_newline(text, max_lines, len(text)) if max_lines else len(text)
    if len(text) > limit:
        k = min(k, _cut(text, limit - 32))
    if k >= len(text) and c >= n:
        return text
    shown = text[:k].rstrip()
    hidden_chars = len(text) - k + n - c
    lines = text.count("\n", k) + raw.count("\n", c, c + _COUNT_MAX)
    more = "+" if n - c > _COUNT_MAX else ""
    marker = f"… ({lines}{more} more lines)" if lines else f"… ({hidden_chars} more chars)"
    if not shown:
        return marker
    at_line = text[k] == "\n" if k < len(text) else c < n and raw[c] == "\n"
    return f"{shown}\n{marker}" if at_line else f"{shown} {marker}"


def _tail_start(s: str, n: int) -> int:
    """Index >= len(s) - n where a tail of `s` of at most `n` chars may start: after a newline, else
    after a space, else after the token that straddles it (a secret is never cut to an unknown suffix)."""
    start = len(s) - n
    if start <= 0:
        return 0
    i = s.find("\n", start, start + n // 2)
    if i >= 0:
        return i + 1
    j = s.find(" ", start, start + 200)
    if j >= 0:
        return j + 1
    run = _TOKEN_RUN.match(s, start)
    return min(len(s), run.end() if run else start)


def _clean_ends(raw: object, head: tuple[int, int] = ERROR_HEAD, tail: tuple[int, int] = ERROR_TAIL) -> str:
    """`_clean` that keeps the first and the last lines of a long text (chars, lines of each), with a
    marker saying what was cut between them."""
    if not isinstance(raw, str) or not raw:
        return ""
    (head_chars, head_lines), (tail_chars, tail_lines) = head, tail
    n = len(raw)
    if n <= head_chars + tail_chars and raw.count("\n") < head_lines + tail_lines:
        return _clean(raw, head_chars + tail_chars, head_lines + tail_lines)
    if _PRIVATE_OPEN.search(raw):  # a private block may span the cut: remove it whole first (rare)
        raw = strip_private(raw)
        n = len(raw)
        if n <= head_chars + tail_chars and raw.count("\n") < head_lines + tail_lines:
            return _clean(raw, head_chars + tail_chars, head_lines + tail_lines)
    # The tail: its last `tail_lines` lines within `tail_chars`, starting on a line (or token) boundary.
    t = _tail_start(raw, tail_chars)
    k = n
    for _ in range(tail_lines):
        k = raw.rfind("\n", t, k)
        if k < 0:
            break
    if k >= t and k > 0:
        t = k + 1
    # The head: its first `head_lines` lines within `head_chars`, cut as `_clean` cuts.
    h = _nth_newline(raw, head_lines, head_chars)
    if h > head_chars:
        i = raw.rfind("\n", head_chars // 2, head_chars)
        h = i if i >= 0 else _cut(raw, head_chars)
    if h >= t:  # the two overlap: nothing to cut
        return _clean(raw, n, 0)
    shown_head = redact(raw[:h]).rstrip().lstrip("\r\n")
    shown_tail = redact_tail(redact(raw[t:])).strip("\r\n").rstrip()
    # whole lines between the head's last newline and the tail's first line, counted in a bounded window
    lines = raw.count("\n", h, min(t, h + _COUNT_MAX)) - 1
    more = "+" if t - h > _COUNT_MAX else ""
    marker = f"… ({lines}{more} lines cut) …" if lines > 0 else f"… ({t - h} chars cut) …"
    return "\n".join(p for p in (shown_head, marker, shown_tail) if p)


def _one_line(text: str, limit: int = TITLE_MAX) -> str:
    t = " ".join(text[: limit * 4].split())
    return t if len(t) <= limit else t[: limit - 1].rstrip() + "…"


def _line(raw: object, limit: int) -> str:
    """One cleaned line of at most `limit` chars; short ones cached (ids, paths, names repeat)."""
    if not isinstance(raw, str) or not raw:
        return ""
    if len(raw) <= 512:
        return _line_cached(raw, limit)
    return _one_line(_clean(raw, limit), limit)


@lru_cache(maxsize=4096)
def _line_cached(raw: str, limit: int) -> str:
    return _one_line(_clean(raw, limit), limit)


def _first_line(text: str) -> str:
    for line in text[:4000].splitlines():
        if line.strip():
            return line.strip()
    return ""


def _short(text: str, limit: int) -> str:
    """One line of cleaned text, at most `limit` chars."""
    return _one_line(_first_line(text), limit)


def _rel(path: str, root: str | None) -> str:
    """`path` relative to `root` when under it; long paths keep their tail."""
    if root and len(path) > len(root) + 1 and path.startswith(root) and path[len(root)] == "/":
        path = path[len(root) + 1 :]
    return path if len(path) <= 120 else "…" + path[-119:]


def _count_lines(text: str) -> int:
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def _patch_stats(patch: object) -> tuple[int, int] | None:
    """(removed, added) line counts from a structuredPatch, None if it has no hunks."""
    hunks = [h for h in _l(patch)[:500] if isinstance(h, dict)]
    if not hunks:
        return None
    minus = plus = 0
    for h in hunks:
        for line in _l(h.get("lines"))[:20000]:
            if isinstance(line, str) and line:
                minus += line[0] == "-"
                plus += line[0] == "+"
    return minus, plus


def _render(v: object, limit: int, depth: int = 0) -> str:
    """A compact, bounded, redacted text rendering of any JSON value."""
    if isinstance(v, str):
        return _line(v, min(limit, _LEAF_MAX))
    if v is None or isinstance(v, bool | int | float):
        return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)[:40]
    if depth >= 4:
        return "{…}" if isinstance(v, dict) else "[…]"
    parts: list[str] = []
    used = 0
    if isinstance(v, dict):
        for n, (k, val) in enumerate(v.items()):
            if n >= 20 or used >= limit:
                parts.append(f"… +{len(v) - n} keys")
                break
            key = _line(str(k), 60)
            fam = sensitive_key(key) if isinstance(k, str) else None
            shown = (
                f"[REDACTED:{fam}]" if fam and val not in (None, "", False) else _render(val, limit - used, depth + 1)
            )
            parts.append(f"{key}: {shown}")
            used += len(parts[-1]) + 2
        return "\n".join(parts) if depth == 0 else "{" + ", ".join(parts) + "}"
    if isinstance(v, list | tuple):
        for n, item in enumerate(v):
            if n >= 10 or used >= limit:
                parts.append(f"… +{len(v) - n} more")
                break
            parts.append(_render(item, limit - used, depth + 1))
            used += len(parts[-1]) + 2
        return "[" + ", ".join(parts) + "]"
    return type(v).__name__


def _summary(v: object, limit: int = CONTENT_MAX) -> str:
    text = _render(v, limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _obs(type_: ObservationType, title: str, content: str = "", limit: int = CONTENT_MAX, **kw: Any) -> Observation:
    return Observation(type=type_, title=_one_line(title) or type_, content=content[:limit], **kw)


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


# --- tools (PostToolUse) -----------------------------------------------------------------


class _Tool:
    """One tool call: name, input, response and the project root for relative paths."""

    __slots__ = ("name", "inp", "resp", "root")

    def __init__(self, name: str, inp: dict[str, Any], resp: object, root: str | None) -> None:
        self.name, self.inp, self.resp, self.root = name, inp, resp, root

    def path(self) -> str:
        raw = self.inp.get("file_path") or self.inp.get("notebook_path") or self.inp.get("path")
        resp = _d(self.resp)
        raw = raw or resp.get("filePath") or _d(resp.get("file")).get("filePath")
        return _line(raw, _PATH_MAX)


def _read(t: _Tool) -> Observation:
    path = t.path()
    resp = _d(t.resp)
    f = _d(resp.get("file"))
    kind = _s(resp.get("type")) or "text"
    offset, limit = _i(t.inp.get("offset")), _i(t.inp.get("limit"))
    num, start, total = _i(f.get("numLines")), _i(f.get("startLine")), _i(f.get("totalLines"))
    content = f.get("content")
    if num and isinstance(content, str) and content.endswith("\n") and content.count("\n") + 1 == num:
        # Claude Code counts the empty "line" after a file's final newline: a 3-line file reads as 4.
        total = total - 1 if total == num else total
        num -= 1
    if kind == "text" and num is not None:
        first = start or 1
        whole = first == 1 and total in (None, num)
        detail = f"{num} lines" if whole else f"lines {first}-{first + num - 1}" + (f" of {total}" if total else "")
    elif kind == "text":
        detail = f"from line {offset or 1}" + (f", limit {limit}" if limit else "") if offset or limit else ""
    elif kind == "notebook":
        detail = f"notebook, {len(_l(f.get('cells')))} cells"
    else:
        detail = "unchanged" if kind == "file_unchanged" else _line(kind, 40)
    extra = "truncated by token cap" if f.get("truncatedByTokenCap") else ""
    return _obs(
        "read",
        f"Read {_rel(path, t.root)}" + (f" ({detail})" if detail else ""),
        _join(detail, extra),
        file_path=path,
        dedup_key=f"read:{path}:{'' if offset is None else offset}:{'' if limit is None else limit}",
    )


def _write(t: _Tool) -> Observation:
    path = t.path()
    resp = _d(t.resp)
    kind = _s(resp.get("type"))
    body = _s(t.inp.get("content")) or _s(resp.get("content")) or ""
    state = {"create": "created", "update": "updated"}.get(kind or "", "written")
    detail = f"{state}, {_count_lines(body)} lines"
    stats = _patch_stats(resp.get("structuredPatch"))
    if kind == "update" and stats:
        detail += f", -{stats[0]} +{stats[1]}"
    return _obs(
        "write",
        f"Write {_rel(path, t.root)} ({detail})",
        _join(detail, _clean(body, 1200, 15)),
        file_path=path,
    )


def _edit(t: _Tool) -> Observation:
    path = t.path()
    resp = _d(t.resp)
    if t.name == "NotebookEdit":
        mode = _s(t.inp.get("edit_mode")) or _s(resp.get("edit_mode")) or "replace"
        cell = _s(t.inp.get("cell_id")) or _s(resp.get("cell_id")) or "?"
        new = _s(t.inp.get("new_source")) or ""
        head = f"cell {_line(cell, 60)}, {_line(mode, 20)}"
        content = _join(head, "+++ new", _clean(new, 700, 12))
        return _obs("edit", f"Edit {_rel(path, t.root)} ({head})", content, file_path=path)
    if t.name == "MultiEdit":
        edits = [e for e in _l(t.inp.get("edits"))[:1000] if isinstance(e, dict)]
    else:
        edits = [
            {
                "old_string": t.inp.get("old_string", resp.get("oldString")),
                "new_string": t.inp.get("new_string", resp.get("newString")),
            }
        ]
    stats = _patch_stats(resp.get("structuredPatch"))
    if stats is None:
        olds = [_count_lines(_s(e.get("old_string")) or "") for e in edits]
        news = [_count_lines(_s(e.get("new_string")) or "") for e in edits]
        stats = (sum(olds), sum(news))
    diff = f"-{stats[0]} +{stats[1]} lines"
    head = f"{len(edits)} edits, {diff}" if t.name == "MultiEdit" else diff
    if t.inp.get("replace_all") or resp.get("replaceAll"):
        head += ", replace all"
    excerpts = [
        _join("--- old", _clean(e.get("old_string"), 600, 12), "+++ new", _clean(e.get("new_string"), 600, 12))
        for e in edits[:3]
    ]
    return _obs("edit", f"Edit {_rel(path, t.root)} ({head})", _join(head, *excerpts), file_path=path)


def _bash(t: _Tool) -> Observation:
    cmd = _clean(t.inp.get("command"), _CMD_MAX)
    resp = t.resp
    r = _d(resp)
    stdout = _s(r.get("stdout")) if r else _s(resp)
    flags = [
        "interrupted" if r.get("interrupted") is True else "",
        "background" if r.get("backgroundTaskId") or t.inp.get("run_in_background") is True else "",
    ]
    status = _line(r.get("returnCodeInterpretation"), 200)
    content = _join(
        _clean(t.inp.get("description"), 300),
        ", ".join(f for f in [*flags, status] if f),
        "stderr:\n" + err if (err := _clean_ends(r.get("stderr"), STDERR_HEAD, STDERR_TAIL)) else "",
        "stdout:\n" + out if (out := _clean_ends(stdout, OUTPUT_HEAD, OUTPUT_TAIL)) else "",
    )
    suffix = "".join(f" ({f})" for f in flags if f)
    return _obs("command", f"$ {_short(cmd, TITLE_MAX)}{suffix}", content, command=cmd, dedup_key=f"cmd:{cmd}")


def _grep(t: _Tool) -> Observation:
    pattern = _line(t.inp.get("pattern"), 300)
    path = _line(t.inp.get("path"), _PATH_MAX)
    glob = _line(t.inp.get("glob") or t.inp.get("type"), 200)
    resp = _d(t.resp)
    mode = _s(t.inp.get("output_mode")) or _s(resp.get("mode")) or "files_with_matches"
    mode = _line(mode, 40)
    if mode == "content":
        hits = f"{_i(resp.get('numLines')) or 0} lines"
    elif mode == "count":
        hits = f"{_i(resp.get('numMatches')) or _i(resp.get('numLines')) or 0} matches"
    else:
        hits = f"{_i(resp.get('numFiles')) or 0} files"
    where = (f" in {_rel(path, t.root)}" if path else "") + (f" [{glob}]" if glob else "")
    files = [_rel(_line(f, 500), t.root) for f in _l(resp.get("filenames"))[:20]]
    content = _join(f"{mode}: {hits}", "\n".join(f for f in files if f), _clean(resp.get("content"), 1000, 12))
    return _obs(
        "search",
        f"Grep '{_one_line(pattern, 100)}'{where} ({hits})",
        content,
        dedup_key=f"grep:{pattern}:{path}:{glob}:{mode}",
    )


def _glob(t: _Tool) -> Observation:
    pattern = _line(t.inp.get("pattern"), 300)
    path = _line(t.inp.get("path"), _PATH_MAX)
    resp = _d(t.resp)
    names = _l(resp.get("filenames"))
    count = _i(resp.get("numFiles"))
    hits = f"{len(names) if count is None else count} files" + (", truncated" if resp.get("truncated") else "")
    files = [_rel(_line(f, 500), t.root) for f in names[:20]]
    where = f" in {_rel(path, t.root)}" if path else ""
    return _obs(
        "search",
        f"Glob '{_one_line(pattern, 100)}'{where} ({hits})",
        _join(hits, "\n".join(f for f in files if f)),
        dedup_key=f"glob:{pattern}:{path}",
    )


def _web_search(t: _Tool) -> Observation:
    query = _line(t.inp.get("query") or _d(t.resp).get("query"), 300)
    links = [
        c for r in _l(_d(t.resp).get("results"))[:50] for c in _l(_d(r).get("content"))[:50] if isinstance(c, dict)
    ]
    lines = [_line(f"{c.get('title', '')} — {c.get('url', '')}", 300) for c in links[:10]]
    return _obs(
        "search",
        f"Web search '{query}' ({len(links)} results)",
        "\n".join(lines),
        dedup_key=f"websearch:{query}",
    )


def _web_fetch(t: _Tool) -> Observation:
    resp = _d(t.resp)
    url = _line(t.inp.get("url") or resp.get("url"), 2000)
    code, size = _i(resp.get("code")), _i(resp.get("bytes"))
    text = _line(resp.get("codeText"), 40)
    parts = [f"{code} {text}".strip() if code is not None else "", f"{size} bytes" if size is not None else ""]
    detail = ", ".join(p for p in parts if p)
    content = _join(detail, _clean(t.inp.get("prompt"), 500), _clean(resp.get("result"), 1500, 30))
    title = f"Fetch {url}" + (f" ({detail})" if detail else "")
    return _obs("fetch", title, content, dedup_key=f"fetch:{url}")


def _agent(t: _Tool) -> Observation:
    resp = _d(t.resp)
    kind = _line(t.inp.get("subagent_type"), 100)
    desc = _line(t.inp.get("description") or resp.get("description"), 300)
    status = _line(resp.get("status"), 40)
    agent = _line(resp.get("agentId"), _ID_MAX)
    texts = [_s(b.get("text")) or "" for b in _l(resp.get("content"))[:20] if isinstance(b, dict)]
    uses, tokens, ms = (_i(resp.get(k)) for k in ("totalToolUseCount", "totalTokens", "totalDurationMs"))
    stats = [
        f"{uses} tool uses" if uses else "",
        f"{tokens} tokens" if tokens else "",
        f"{ms / 1000:.1f} s" if ms else "",
    ]
    content = _join(
        ", ".join(x for x in (f"agent {agent}" if agent else "", status, *stats) if x),
        _clean(t.inp.get("prompt"), 600, 10),
        "result:\n" + res if (res := _clean("\n".join(texts), 1500)) else "",
    )
    title = "Agent" + (f" {kind}" if kind else "") + (f": {desc}" if desc else "") + (f" ({status})" if status else "")
    return _obs("agent", title, content)


def _todos(t: _Tool) -> Observation:
    items = [x for x in (_l(t.inp.get("todos")) or _l(_d(t.resp).get("newTodos")))[:10000] if isinstance(x, dict)]
    counts: dict[str, int] = {}
    lines: list[str] = []
    current = ""
    for x in items:
        status = _s(x.get("status")) or "?"
        counts[status] = counts.get(status, 0) + 1
        text = _line(x.get("content"), 300)
        if status == "in_progress" and not current:
            current = text
        if len(lines) < 50:
            extra = ", ".join(str(x[k])[:20] for k in ("priority", "id") if isinstance(x.get(k), str | int))
            mark = _TODO_MARK.get(status, f"[{_line(status, 20)}]")
            lines.append(f"{mark} {text}" + (f" ({extra})" if extra else ""))
    summary = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items())
    title = f"Todos {counts.get('completed', 0)}/{len(items)} done" + (f"; now: {current}" if current else "")
    return _obs("task", title, _join(_line(summary, 300), "\n".join(lines)))


def _task_tool(t: _Tool) -> Observation:
    resp = _d(t.resp)
    task = _d(resp.get("task"))
    tid = _line(str(t.inp.get("taskId") or task.get("id") or resp.get("taskId") or ""), 60)
    subject = _line(t.inp.get("subject") or task.get("subject"), 200)
    status = _line(t.inp.get("status"), 40)
    if t.name == "TaskCreate":
        title = f"Task created: {subject}" + (f" (#{tid})" if tid else "")
    elif t.name == "TaskUpdate":
        title = f"Task #{tid} updated" + (f": {status}" if status else "") + (f" ({subject})" if subject else "")
    elif t.name == "TaskList":
        tasks = _l(resp.get("tasks"))
        title = "Task list" + (f" ({len(tasks)} tasks)" if tasks else "")
    else:
        title = f"Task #{tid}" + (f": {subject}" if subject else "")
    content = _join(_clean(t.inp.get("description"), 1000), _summary(t.resp, 1500) if t.resp else "")
    return _obs("task", title, content)


def _mcp_result(resp: object) -> str:
    if isinstance(resp, dict) and isinstance(resp.get("content"), list):
        resp = resp["content"]
    if isinstance(resp, list):
        parts = []
        for b in resp[:20]:
            bd = _d(b)
            text = _s(bd.get("text")) if bd else _s(b)
            parts.append(text if text is not None else f"[{_s(bd.get('type')) or type(b).__name__}]")
        return _clean_ends("\n".join(p[:3000] if len(parts) > 1 else p for p in parts), MCP_HEAD, MCP_TAIL)
    if isinstance(resp, str):
        return _clean_ends(resp, MCP_HEAD, MCP_TAIL)
    return _summary(resp, 2000) if resp is not None else ""


def _mcp(t: _Tool) -> Observation:
    server, _, tool = t.name[5:].partition("__")
    server, tool = _line(server, 80), _line(tool, 80)
    args = _summary(t.inp, 1200) if t.inp else ""
    result = _mcp_result(t.resp)
    title = f"MCP {server}/{tool}" + (f": {_one_line(args, 120)}" if args else "")
    return _obs("mcp", title, _join("args: " + args if args else "", "result:\n" + result if result else ""))


def _tool_search(t: _Tool) -> Observation:
    query = _line(t.inp.get("query"), 300)
    return _obs("search", f"Tool search '{query}'", _summary(t.resp, 1000), dedup_key=f"toolsearch:{query}")


def _generic_tool(t: _Tool) -> Observation:
    inp = _summary(t.inp, 1500) if t.inp else ""
    resp = _summary(t.resp, 2000) if t.resp not in (None, "", {}, []) else ""
    name = _line(t.name, 100)
    title = f"Tool {name}" + (f": {_one_line(inp, 150)}" if inp else "")
    return _obs(
        "tool", title, _join("input: " + inp if inp else "", "response: " + resp if resp else ""), tool_name=name
    )


_TOOLS: Final[dict[str, Callable[[_Tool], Observation]]] = {
    "Read": _read, "NotebookRead": _read, "Write": _write, "Edit": _edit, "MultiEdit": _edit,
    "NotebookEdit": _edit, "Bash": _bash, "Grep": _grep, "Glob": _glob, "WebSearch": _web_search,
    "WebFetch": _web_fetch, "Task": _agent, "Agent": _agent, "TodoWrite": _todos, "TaskCreate": _task_tool,
    "TaskUpdate": _task_tool, "TaskList": _task_tool, "TaskGet": _task_tool, "ToolSearch": _tool_search,
}  # fmt: skip


def _tool_obs(t: _Tool) -> Observation:
    fn = _TOOLS.get(t.name) or (_mcp if t.name.startswith("mcp__") else _generic_tool)
    obs = fn(t)
    obs.tool_name = obs.tool_name or _line(t.name, 100)
    return obs


def _subject(t: _Tool, cmd: str | None = None) -> str:
    """What a tool call is about, for error and generic titles (`cmd`: the command, cleaned)."""
    if cmd is not None or "command" in t.inp:
        return _short(cmd if cmd is not None else _clean(t.inp.get("command"), 500), 150)
    if any(k in t.inp for k in ("file_path", "notebook_path")):
        return _rel(t.path(), t.root)
    for key in ("url", "pattern", "query", "description"):
        if isinstance(t.inp.get(key), str):
            return _short(_clean(t.inp[key], 300), 150)
    return ""


# --- events ------------------------------------------------------------------------------


def _f(p: dict[str, Any], key: str, limit: int = _ID_MAX) -> str | None:
    """A short payload field, cleaned; None when absent or empty (`_line`, inlined: several per event)."""
    raw = p.get(key)
    if not isinstance(raw, str) or not raw:
        return None
    return (_line_cached(raw, limit) if len(raw) <= 512 else _one_line(_clean(raw, limit), limit)) or None


def _session_start(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    ex.source, ex.model = _f(p, "source", 40), _f(p, "model")
    extra = [f"{k}: {v}" for k in ("source", "model", "agent_type", "session_title") if (v := _f(p, k))]
    return [_obs("session", "Session started" + (f" ({ex.source})" if ex.source else ""), "\n".join(extra))]


def _session_end(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    ex.end_reason = _f(p, "reason", 40)
    return [_obs("session", "Session ended" + (f" ({ex.end_reason})" if ex.end_reason else ""))]


def _prompt(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    text = _clean(p.get("prompt"), CONTENT_MAX, prompt=True)
    return [_obs("prompt", _short(text, TITLE_MAX) or "(empty prompt)", text)]


def _last_message(p: dict[str, Any], ex: Extracted, limit: int = CONTENT_MAX) -> str:
    """The turn's final assistant text, cleaned to `limit`; the session row keeps CONTENT_MAX of it."""
    raw = p.get("last_assistant_message")
    msg = _clean(raw, limit)
    if len(msg) > CONTENT_MAX:
        ex.last_assistant_message = msg[: _cut(msg, CONTENT_MAX - 2)].rstrip() + " …"
    else:
        ex.last_assistant_message = msg or None
    return msg


def _reply(p: dict[str, Any], ex: Extracted) -> str:
    """The final message of a turn, whole up to REPLY_MAX: searchable, and keyed so that a transcript
    import of the same turn (`nmemd.history.transcripts`) is stored once."""
    msg = _last_message(p, ex, REPLY_MAX)
    raw = p.get("last_assistant_message")
    if msg and isinstance(raw, str) and ex.session_id != "unknown":
        ex.natural_key = reply_key(ex.session_id, raw)
    return msg


def _stop(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    msg = _reply(p, ex)
    hook = " (stop hook active)" if p.get("stop_hook_active") is True else ""
    return [_obs("stop", f"Stop{hook}" + (f": {_short(msg, 150)}" if msg else ""), msg, limit=REPLY_MAX)]


def _subagent(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    started = p.get("hook_event_name") == "SubagentStart"
    msg = "" if started else _reply(p, ex)
    kind, agent = _f(p, "agent_type", 100), _f(p, "agent_id")
    title = "Subagent" + (f" {kind}" if kind else "") + (" started" if started else " stopped")
    title += f" ({agent})" if agent else ""
    # Claude Code's own helpers (`/compact` runs two) say `agent_type: ""`; a Task subagent names its type,
    # and versions before agent_type send none: only the former is not the agent's work.
    internal = p.get("agent_type") == ""
    return [_obs("event" if internal else "agent", title + (f": {_short(msg, 120)}" if msg else ""), msg,
                 limit=REPLY_MAX)]  # fmt: skip


def _stop_failure(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    msg = _last_message(p, ex)
    err = _f(p, "error", 200) or "unknown error"
    details = p.get("error_details")
    detail = _clean(details, 1500) if isinstance(details, str) else _summary(details, 1500) if details else ""
    return [_obs("error", f"Stop failed: {err}", _join(detail, msg))]


def _notification(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    kind = _f(p, "notification_type", 60)
    msg = _clean(p.get("message"), 1000)
    title = "Notification" + (f" ({kind})" if kind else "") + (f": {_short(msg, 150)}" if msg else "")
    return [_obs("notification", title, _join(_f(p, "title", 200) or "", msg))]


def _pre_compact(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    trigger = _f(p, "trigger", 40)
    return [_obs("compact", "Compacting" + (f" ({trigger})" if trigger else ""), _clean(p.get("custom_instructions")))]


def _post_compact(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    trigger = _f(p, "trigger", 40)
    summary = _clean(p.get("compact_summary"), COMPACT_MAX)  # whole: its last sections say what comes next
    return [_obs("compact", "Compacted" + (f" ({trigger})" if trigger else ""), summary, limit=COMPACT_MAX)]


def _post_tool(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    name = _s(p.get("tool_name")) or "unknown"
    return [_tool_obs(_Tool(name, _d(p.get("tool_input")), p.get("tool_response"), root))]


def _tool_failure(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    t = _Tool(_s(p.get("tool_name")) or "unknown", _d(p.get("tool_input")), None, root)
    name = _line(t.name, 100)
    error = _clean_ends(p.get("error"))
    first = _short(error, 150)
    cmd = _clean(t.inp.get("command"), _CMD_MAX) or None
    subject = _subject(t, cmd)
    if p.get("is_interrupt") is True:
        title = f"{name} interrupted" + (f": {subject}" if subject else "")
    elif (m := re.fullmatch(r"Exit code (-?\d+)", first)) and subject:
        title = f"{name} failed (exit {m.group(1)}): {subject}"
    else:
        title = f"{name} failed: {first or 'error'}" + (f" — {subject}" if subject else "")
    path = t.path() or None
    where = f"command: {cmd}" if cmd else f"file: {path}" if path else ""
    content = _join(where, error)
    return [_obs("error", title, content, limit=len(content), tool_name=name, command=cmd, file_path=path)]


def _generic_event(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    event = _line(_s(p.get("hook_event_name")) or "unknown", 100)
    name = _s(p.get("tool_name"))
    subject = _subject(_Tool(name, _d(p.get("tool_input")), None, root)) if name else ""
    tool = _line(name, 100) if name else None
    title = event + (f" {tool}" if tool else "") + (f": {subject}" if subject else "")
    rest = {k: v for k, v in islice(p.items(), 100) if k not in _COMMON_KEYS}
    return [_obs("event", title, _summary(rest), tool_name=tool)]


_EVENTS: Final[dict[str, Callable[[dict[str, Any], Extracted, str | None], list[Observation]]]] = {
    "SessionStart": _session_start, "SessionEnd": _session_end, "UserPromptSubmit": _prompt,
    "PostToolUse": _post_tool, "PostToolUseFailure": _tool_failure, "PreCompact": _pre_compact,
    "PostCompact": _post_compact, "Stop": _stop, "SubagentStop": _subagent, "SubagentStart": _subagent,
    "Notification": _notification, "StopFailure": _stop_failure,
}  # fmt: skip


def _skipped(tool: object, skip: frozenset[str]) -> bool:
    if not skip or not isinstance(tool, str):
        return False
    return tool in skip or any(tool.startswith(s + "__") for s in skip if s.startswith("mcp__"))


def agent_of(p: dict[str, Any]) -> str | None:
    """The agent the hook client named (`nmem_agent`, from `send.py --agent NAME`); None for Claude Code,
    for none, and for anything that is not a plain name."""
    raw = p.get("nmem_agent")
    if not isinstance(raw, str) or not _AGENT_NAME.fullmatch(raw):
        return None
    return stored_agent(AGENT_ALIASES.get(raw, raw))


def _extract(payload: object, skip_tools: frozenset[str]) -> Extracted:
    if not isinstance(payload, dict):
        title = f"Non-object hook payload ({type(payload).__name__})"
        return Extracted(
            hook_event="unknown", session_id="unknown", observations=[_obs("event", title, _summary(payload, 1000))]
        )
    p: dict[str, Any] = payload
    if (agent := agent_of(p)) in _NORMALIZED:  # its events under Claude Code's names and fields first
        p = _own_module(str(agent)).normalized(p)
    raw_cwd = _s(p.get("cwd"))
    cwd = _line(raw_cwd, _PATH_MAX) or None
    project = project_root(raw_cwd) if raw_cwd and len(raw_cwd) <= _PATH_MAX else raw_cwd
    root = _line(project, _PATH_MAX) or None
    event = _s(p.get("hook_event_name")) or "unknown"
    ex = Extracted(
        hook_event=_line(event, 100) or "unknown",
        session_id=_f(p, "session_id") or "unknown",
        agent=agent_of(p),
        cwd=cwd,
        project=root,
        transcript_path=_f(p, "transcript_path", _PATH_MAX),
        agent_id=_f(p, "agent_id"),
        tool_use_id=_f(p, "tool_use_id"),
        prompt_id=_f(p, "prompt_id") if event in _KEYED_BY_PROMPT_ID else None,
        # Not every version's startup SessionStart names the model; later events of the session may.
        # A subagent's event names the subagent's model, not the session's.
        model=_f(p, "model") if not p.get("agent_id") else None,
    )
    if _skipped(p.get("tool_name"), skip_tools):
        return ex
    if ex.agent in _OWN_MODULES:  # what the agent sends differently, read by its own module
        own = _own_module(ex.agent).observations(p, ex, root)
        if own is not None:
            ex.observations = own
            return ex
    ex.observations = _EVENTS.get(event, _generic_event)(p, ex, root)
    return ex


# The agents whose payloads their own module reads (nmemd.capture.<agent>), imported on first use;
# of those, the ones whose events are renamed to Claude Code's before anything else reads them.
_OWN_MODULES: Final = frozenset({"codex", "gemini", "copilot", "cursor", "cline", "opencode"})
_NORMALIZED: Final = frozenset({"gemini", "cursor", "cline"})


def _own_module(agent: str) -> Any:
    """The module that reads an agent's payloads where they differ from Claude Code's."""
    return importlib.import_module(f"nmemd.capture.{agent}")


# Events whose `prompt_id` (Claude Code 2.1.196+) names them in the transcript too: a prompt, and a
# compaction (its PreCompact and PostCompact carry the id of the summary line, `promptId`).
_KEYED_BY_PROMPT_ID: Final = frozenset({"UserPromptSubmit", "PreCompact", "PostCompact"})


def extract(payload: object, *, skip_tools: frozenset[str] = frozenset()) -> Extracted:
    """All nmem keeps of one hook event: session fields and redacted observations. Never raises."""
    try:
        return _extract(payload, skip_tools)
    except Exception as exc:  # a parser bug must never lose the event or crash the daemon
        p = _d(payload)
        event = _one_line(_s(p.get("hook_event_name")) or "unknown", 100)
        session = _one_line(_s(p.get("session_id")) or "unknown", _ID_MAX)
        title = f"{event} (extraction failed: {type(exc).__name__})"
        return Extracted(
            hook_event=redact(event), session_id=redact(session), agent=agent_of(p),
            observations=[_obs("event", redact(title))],
        )  # fmt: skip


# --- hook payloads -------------------------------------------------------------------------------

_decoder = msgspec.json.Decoder()


def decode_event(body: bytes) -> dict[str, Any]:
    """Parse a hook payload; raise InvalidEvent for anything that is not JSON we can hold."""
    if not body.strip():
        raise InvalidEvent("empty payload")
    try:
        payload = _decoder.decode(body)
    except RecursionError as exc:
        raise InvalidEvent("payload nested too deeply") from exc
    except UnicodeDecodeError as exc:
        raise InvalidEvent("payload is not valid UTF-8") from exc
    except msgspec.DecodeError as exc:
        if not may_hold_surrogate(body):
            raise InvalidEvent(f"payload is not valid JSON: {exc}") from exc
        try:  # a lone surrogate (a string cut inside an emoji): keep the event, U+FFFD for the character
            payload = loads_replacing_surrogates(body)
        except RecursionError as exc2:
            raise InvalidEvent("payload nested too deeply") from exc2
        except ValueError:
            raise InvalidEvent(f"payload is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidEvent(f"payload is a JSON {type(payload).__name__}, not an object")
    return payload


def extract_event(body: bytes, skip_tools: frozenset[str]) -> Extracted:
    """A hook payload's bytes to what nmem keeps of it; raise InvalidEvent for a payload it refuses."""
    return extract(decode_event(body), skip_tools=skip_tools)
