"""Reading one field of a hook payload: any JSON value, bounded, private blocks stripped, redacted.

Every agent's extraction builds its observations with these (`capture/tools.py` for a tool call, each
agent's `nmemd/agents/<name>/capture.py` for the rest). They never raise: any field may be absent or of
the wrong type, and a string is bounded *before* it is formatted, so a 20 MB tool response costs a slice, not a copy.
"""

from __future__ import annotations

import re
from typing import Any, Final

from nmemd.capture.redact import redact, redact_tail, sensitive_key, strip_private
from nmemd.model import CONTENT_MAX, TITLE_MAX, Observation, ObservationType
from nmemd.remembered import remembered

_SLACK: Final = 200  # raw chars kept past a mid-line bound so `key = "a value"` is whole when redacted
_COUNT_MAX: Final = 4_000_000  # count hidden lines only in tails shorter than this
ID_MAX: Final = 200
PATH_MAX: Final = 4096
CMD_MAX: Final = 2000
_LEAF_MAX: Final = 300  # one string inside a generic summary
_TOKEN_RUN: Final = re.compile(r"[A-Za-z0-9_.+/=%-]*")
_IDE_RE: Final = re.compile(
    r"<(ide_[a-z_]{1,40}|system-reminder)(?:\s[^<>]{0,200})?>.*?(?:</\1\s*>|\Z)", re.DOTALL | re.IGNORECASE
)
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


def str_or_none(v: object) -> str | None:
    return v if isinstance(v, str) else None


def int_or_none(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def dict_or_empty(v: object) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def list_or_empty(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def cut_index(s: str, n: int) -> int:
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


def clean_text(raw: object, limit: int = CONTENT_MAX, max_lines: int = 0, *, prompt: bool = False) -> str:
    """strip_private + redact, bounded to `limit` chars (and `max_lines`) with a marker."""
    if not isinstance(raw, str) or not raw:
        return ""
    n = len(raw)
    c = _nth_newline(raw, max_lines, limit) if max_lines else n
    if c > limit:  # cut on a line end when one is near; mid-line keeps slack for secrets at the cut
        i = raw.rfind("\n", limit // 2, limit)
        c = i if i >= 0 else cut_index(raw, limit + _SLACK)
    text = strip_private(raw[:c] if c < n else raw)
    if prompt and "<" in text:
        text = _IDE_RE.sub("", text)
    text = redact(text).rstrip().lstrip("\r\n")
    k = _nth_newline(text, max_lines, len(text)) if max_lines else len(text)
    if len(text) > limit:
        k = min(k, cut_index(text, limit - 32))
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


def clean_head_tail(raw: object, head: tuple[int, int] = ERROR_HEAD, tail: tuple[int, int] = ERROR_TAIL) -> str:
    """`clean_text` that keeps the first and the last lines of a long text (chars, lines of each), with a
    marker saying what was cut between them."""
    if not isinstance(raw, str) or not raw:
        return ""
    (head_chars, head_lines), (tail_chars, tail_lines) = head, tail
    n = len(raw)
    if n <= head_chars + tail_chars and raw.count("\n") < head_lines + tail_lines:
        return clean_text(raw, head_chars + tail_chars, head_lines + tail_lines)
    if _PRIVATE_OPEN.search(raw):  # a private block may span the cut: remove it whole first (rare)
        raw = strip_private(raw)
        n = len(raw)
        if n <= head_chars + tail_chars and raw.count("\n") < head_lines + tail_lines:
            return clean_text(raw, head_chars + tail_chars, head_lines + tail_lines)
    # The tail: its last `tail_lines` lines within `tail_chars`, starting on a line (or token) boundary.
    t = _tail_start(raw, tail_chars)
    k = n
    for _ in range(tail_lines):
        k = raw.rfind("\n", t, k)
        if k < 0:
            break
    if k >= t and k > 0:
        t = k + 1
    # The head: its first `head_lines` lines within `head_chars`, cut as `clean_text` cuts.
    h = _nth_newline(raw, head_lines, head_chars)
    if h > head_chars:
        i = raw.rfind("\n", head_chars // 2, head_chars)
        h = i if i >= 0 else cut_index(raw, head_chars)
    if h >= t:  # the two overlap: nothing to cut
        return clean_text(raw, n, 0)
    shown_head = redact(raw[:h]).rstrip().lstrip("\r\n")
    shown_tail = redact_tail(redact(raw[t:])).strip("\r\n").rstrip()
    # whole lines between the head's last newline and the tail's first line, counted in a bounded window
    lines = raw.count("\n", h, min(t, h + _COUNT_MAX)) - 1
    more = "+" if t - h > _COUNT_MAX else ""
    marker = f"… ({lines}{more} lines cut) …" if lines > 0 else f"… ({t - h} chars cut) …"
    return "\n".join(p for p in (shown_head, marker, shown_tail) if p)


def one_line(text: str, limit: int = TITLE_MAX) -> str:
    t = " ".join(text[: limit * 4].split())
    return t if len(t) <= limit else t[: limit - 1].rstrip() + "…"


def clean_line(raw: object, limit: int) -> str:
    """One cleaned line of at most `limit` chars; short ones cached (ids, paths, names repeat)."""
    if not isinstance(raw, str) or not raw:
        return ""
    if len(raw) <= 512:
        return _line_cached(raw, limit)
    return one_line(clean_text(raw, limit), limit)


@remembered(4096)
def _line_cached(raw: str, limit: int) -> str:
    return one_line(clean_text(raw, limit), limit)


def _first_line(text: str) -> str:
    for line in text[:4000].splitlines():
        if line.strip():
            return line.strip()
    return ""


def short_line(text: str, limit: int) -> str:
    """One line of cleaned text, at most `limit` chars."""
    return one_line(_first_line(text), limit)


def relative_path(path: str, root: str | None) -> str:
    """`path` relative to `root` when under it; long paths keep their tail."""
    if root and len(path) > len(root) + 1 and path.startswith(root) and path[len(root)] == "/":
        path = path[len(root) + 1 :]
    return path if len(path) <= 120 else "…" + path[-119:]


def _render(v: object, limit: int, depth: int = 0) -> str:
    """A compact, bounded, redacted text rendering of any JSON value."""
    if isinstance(v, str):
        return clean_line(v, min(limit, _LEAF_MAX))
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
            key = clean_line(str(k), 60)
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


def json_summary(v: object, limit: int = CONTENT_MAX) -> str:
    text = _render(v, limit)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def observation(
    type_: ObservationType, title: str, content: str = "", limit: int = CONTENT_MAX, **kw: Any
) -> Observation:
    return Observation(type=type_, title=one_line(title) or type_, content=content[:limit], **kw)


def join_lines(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def short_field(p: dict[str, Any], key: str, limit: int = ID_MAX) -> str | None:
    """A short payload field, cleaned; None when absent or empty (`clean_line`, inlined: several per event)."""
    raw = p.get(key)
    if not isinstance(raw, str) or not raw:
        return None
    return (_line_cached(raw, limit) if len(raw) <= 512 else one_line(clean_text(raw, limit), limit)) or None
