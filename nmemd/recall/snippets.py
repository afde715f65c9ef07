"""Snippets that hold the answer, and matched words marked so that no stored text can pass for a mark.

A hit's snippet is cut around the line of its content that matches the query best *and* carries a
fact: an error line, a path, a command, a number, an identifier. A person or a model reads the
line before deciding what to open, so the line should say the thing itself, not only that it is
near. The snippet is plain text with the matches as spans (character offsets, code points); each
reader marks them its own way (`marked`): bold on a terminal, `<mark>` in the viewer (escaping
everything else), and in a pipe or an MCP reply ⟦word⟧, with a ⟦ or ⟧ of the text itself doubled,
so `[100%]` from pytest stays `[100%]` and a single ⟦ always opens a mark.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from nmemd.remembered import Held, keep_cache, remembered

if TYPE_CHECKING:  # the CLI marks snippets without paying for the query parser's start
    from nmemd.recall.terms import Query

SNIPPET_CHARS: Final = 160  # the snippet's text, ellipses aside
SCAN_CHARS: Final = 8000  # of the content: where the answer of a long output is, in practice
MAX_MATCHES: Final = 400  # match positions collected at most (a word in every line of a long log)
OPEN: Final = "⟦"
CLOSE: Final = "⟧"
ELLIPSIS: Final = "…"

Span = tuple[int, int]

# What makes a line worth reading: it names what went wrong, a file, a command, a number or a name.
_ERRORISH: Final = re.compile(
    r"(?i)\b(?:error|errors|failed|failure|fatal|exception|traceback|cannot|can't|couldn't|could not|unable"
    r"|denied|refused|not found|no such|missing|invalid|unknown|undefined|panic|abort(?:ed)?|timed? ?out"
    r"|conflict|not allowed|forbidden|unauthori[sz]ed|requires?|expected|warning|deprecated)\b"
    r"|[a-z](?:Error|Exception)\b|\bin use\b|\balready (?:in use|exists|running|defined)\b|[⚠✗✘❌]"
)
_WARNING: Final = re.compile(r"(?i)^[\W\d:]*(?:warning|warn|deprecat|note|hint|info)\b")
_PASSING: Final = re.compile(r"^\s*(?:✓|✔|√|PASS\b|ok\b|\[ok\])")
# A conclusion stated in prose: what the cause was, what was decided, what fixed it.
CONCLUSION: Final = re.compile(
    r"(?i)\b(?:root cause|the (?:real |actual )?(?:issue|problem|cause|culprit|bug|fix|solution|reason) (?:is|was)"
    r"|turned out|caused by|because|due to|instead of|decided|decision|we(?:'ll| will) use|(?:i|we) (?:chose|picked)"
    r"|solution:|problem:|fixed by|the fix:|conclusion)"
)
# An error's name or code: TS18004, N818, E0425, SUBMODULE_TOKEN, AssertionError, CVE-2025-66478.
_CODE: Final = re.compile(
    r"\b(?:[A-Z]{1,5}\d{2,6}|[A-Z][A-Z0-9]*_[A-Z0-9_]+|[A-Z]\w*(?:Error|Exception)|CVE-\d{4}-\d+)\b"
)
_PATH: Final = re.compile(r"(?:[\w.@~-]+/)+[\w.@-]+|\b[\w-]+\.(?:[a-z]{1,5}|tsx|json|yaml|toml)\b")
_IDENT: Final = re.compile(r"\b[a-z]+[A-Z]\w*|\b\w+_\w+\b|\b\w+(?:::\w+)+|@[\w-]+/[\w.-]+|\b\w+@\d[\w.]*")
_NUMBER: Final = re.compile(r"\b\d+(?:[.:]\d+)+\b|\b\d{2,}\b|:\d{2,5}\b")
_COMMAND: Final = re.compile(r"^\s*(?:\$ |> |command: )|`[^`\n]{3,}`")
# Lines that say nothing: the exit status nmem already shows, progress bars, rules, blank decoration.
_EMPTY: Final = re.compile(r"^\s*(?:exit code \d+|command: .*|[-=_*#~.\s│|+]*)$", re.IGNORECASE)
_LINE: Final = re.compile(r"[^\n]+")


# What makes a line carry a fact, and how much: an error line most, then codes, paths, commands, names, numbers.
_FACT_WEIGHTS: Final = (
    (_ERRORISH, 1.0),
    (CONCLUSION, 1.0),
    (_CODE, 0.6),
    (_PATH, 0.5),
    (_COMMAND, 0.4),
    (_IDENT, 0.3),
    (_NUMBER, 0.2),
)


FACT_CAP: Final = 1.5  # the most a line's fact counts for when a snippet's line is chosen
_EPSILON: Final = 1e-9  # a bound must miss by more than rounding before a line is passed over

# What a line must hold for each pattern above to match it, tested in C before the regex engine reads the
# line (most lines hold few kinds of fact, and the regexes cost ~0.1 us a character): exact for an ASCII
# line, where IGNORECASE folds ASCII letters only (`low` is the line lowercased); a line with any other
# character is read by the regexes alone. A word added to a pattern needs its key here
# (tests/unit/test_snippets.py checks that the two agree).
_DIGITS: Final = tuple("0123456789")
_ERRORISH_KEYS: Final = (
    "error", "fail", "fatal", "exception", "traceback", "cannot", "can't", "couldn't", "could not", "unable",
    "denied", "refused", "not found", "no such", "missing", "invalid", "unknown", "undefined", "panic", "abort",
    "time", "conflict", "not allowed", "forbidden", "unauthori", "require", "expected", "warning", "deprecated",
    "in use", "already ",
)  # fmt: skip
_CONCLUSION_KEYS: Final = (
    "cause", "issue", "problem", "culprit", "bug", "fix", "solution", "reason", "turned out", "due to",
    "instead of", "decided", "decision", "ll use", "chose", "picked", "conclusion",
)  # fmt: skip


def _keys_held(line: str, low: str) -> int:
    """Which patterns of _FACT_WEIGHTS may match the ASCII `line` (`low`: it in lowercase), as bits in their
    order: the line holds what each needs (a capital letter for _CODE, a slash or a dot for _PATH...)."""
    capital = low != line
    return (
        (1 if any(map(low.__contains__, _ERRORISH_KEYS)) else 0)
        | (2 if any(map(low.__contains__, _CONCLUSION_KEYS)) else 0)
        | (4 if capital else 0)
        | (8 if "/" in line or "." in line else 0)
        | (16 if "`" in line or "$ " in line or "> " in line or "command: " in line else 0)
        | (32 if capital or "_" in line or "@" in line or "::" in line else 0)
        | (64 if any(map(line.__contains__, _DIGITS)) else 0)
    )


_Test = Callable[[str, str], bool]  # (a line, it in lowercase) -> whether a pattern matches it


def _plain(pattern: re.Pattern[str]) -> _Test:
    """The pattern read over the line."""
    return lambda line, low: pattern.search(line) is not None


def _low(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """A case-insensitive pattern as a case-sensitive one for the lowercase line: on an ASCII line the same
    answer (IGNORECASE folds ASCII letters as `lower()` does), in half the time."""
    assert pattern.flags & re.IGNORECASE and not re.search(r"\\[A-Z]", pattern.pattern)  # no \W, \S, \D to lower
    return re.compile(pattern.pattern.removeprefix("(?i)").lower())


def _lowered(pattern: re.Pattern[str]) -> _Test:
    """`_low(pattern)` read over the lowercase line."""
    low_pattern = _low(pattern)
    return lambda line, low: low_pattern.search(low) is not None


def _at_keys(pattern: re.Pattern[str], keys: tuple[str, ...]) -> _Test:
    """`_low(pattern)` tried only where one of `keys` stands in the lowercase line, and one character before
    (`[a-z]Error`): the same answer when every match of the pattern starts there (each alternative of
    _ERRORISH begins with one of its keys), without the regex engine trying each alternative at every
    character of the line (its alternatives start with `\\b`: it has no first character to look for)."""
    low_pattern = _low(pattern)
    match = low_pattern.match

    def test(line: str, low: str) -> bool:
        for key in keys:
            at = low.find(key)
            while at >= 0:
                if match(low, at) is not None or (at and match(low, at - 1) is not None):
                    return True
                at = low.find(key, at + 1)
        return False

    return test


_CAMEL: Final = ("a-zA-Z",)  # `_split`'s key for an alternative that needs a capital after a lowercase letter
_LOWER_UPPER: Final = re.compile(r"[A-Z](?<=[a-z][A-Z])")  # from each capital: ~4x cheaper than camelCase's own


def _split(*parts: tuple[tuple[str, ...] | None, str]) -> _Test:
    """A pattern as its alternatives, each searched alone and only in a line that holds one of its keys (None:
    no key; _CAMEL: a capital after a lowercase letter): the same answer as the whole pattern at a fraction of
    its cost (an alternation is tried at every position, and a word-long run that must end in an underscore
    backtracks through every word)."""
    compiled = tuple((keys, re.compile(pattern)) for keys, pattern in parts)

    def test(line: str, low: str) -> bool:
        for keys, pattern in compiled:
            if keys is _CAMEL:
                if low == line or _LOWER_UPPER.search(line) is None:
                    continue
            elif keys is not None and not any(map(line.__contains__, keys)):
                continue
            if pattern.search(line) is not None:
                return True
        return False

    return test


_ERRORISH_ASCII: Final = _at_keys(_ERRORISH, _ERRORISH_KEYS)
_ERRORISH_SIGNS: Final = ("⚠", "✗", "✘", "❌")  # never in an ASCII line
_ERRORISH_WIDE: Final = _at_keys(_ERRORISH, _ERRORISH_KEYS + _ERRORISH_SIGNS)


# An alternative that began with `\b` before a letter begins with the letter, the edge checked behind it
# (`[A-Z](?<!\w[A-Z])` is `\b[A-Z]`): the regex engine then skips to the letters it may start at, where it
# tried every character; and a test of a word beside a sign (`\w_\w`) starts at the sign.
def _tests(wide: bool) -> tuple[_Test, ...]:
    """The tests of _FACT_WEIGHTS' patterns, for an ASCII line or (`wide`) any other: its error signs (⚠) and
    a code's digits of any script (`\\d`) have no key."""
    return (
        _ERRORISH_WIDE if wide else _ERRORISH_ASCII,
        _lowered(CONCLUSION),
        _split(
            (None if wide else _DIGITS, r"[A-Z](?<!\w[A-Z])[A-Z]{0,4}\d{2,6}\b"),
            (("_",), r"[A-Z](?<!\w[A-Z])[A-Z0-9]*_[A-Z0-9_]+\b"),
            (("Error",), r"[A-Z](?<!\w[A-Z])\w*Error\b"),
            (("Exception",), r"[A-Z](?<!\w[A-Z])\w*Exception\b"),
            (("CVE-",), r"C(?<!\wC)VE-\d{4}-\d+\b"),
        ),
        _split(
            (("/",), r"/(?<=[\w.@~-]/)[\w.@-]"),  # a folder's last character, its slash, the next name's first
            # `\b[\w-]+\.[a-z]{1,5}\b` (tsx, json, yaml and toml are [a-z]{1,5} too) from its dot: a word's
            # character before it; or, after a hyphen, the whole pattern (its `\b` needs a word's character)
            ((".",), r"\.(?<=\w\.)[a-z]{1,5}\b"),
            (("-.",), r"\b[\w-]+\.[a-z]{1,5}\b"),
        ),
        _plain(_COMMAND),
        _split(
            (_CAMEL, r"[a-z](?<!\w[a-z])[a-z]*[A-Z]"),  # `\b[a-z]+[A-Z]`: its `\w*` may match nothing
            (("_",), r"_(?<=\w_)\w"),  # a word with an underscore inside it
            (("::",), r"::(?<=\w::)\w"),  # `\b\w+(?:::\w+)+`: a word's end before `::` follows a word's start
            (("@",), r"@[\w-]+/[\w.-]+"),
            (("@",), r"@(?<=\w@)\d"),  # `\b\w+@\d`
        ),
        _split(  # _NUMBER: `\b\d+(?:[.:]\d+)+\b` and `\b\d{2,}\b` from their first digit, then `:\d{2,5}\b`
            (None, r"\d(?<!\w\d)(?:\d*(?:[.:]\d+)+\b|\d+\b)"),
            ((":",), r":\d{2,5}\b"),
        ),
    )


_ASCII_TESTS: Final = _tests(wide=False)
_Facts = tuple[tuple[_Test, float, float], ...]  # (test, its weight, its weight and those after it)


def _by_keys(tests: tuple[_Test, ...]) -> tuple[_Facts, ...]:
    """By the bits of `_keys_held`: the tests that may match, in order, with their weights."""
    out = []
    for keys in range(1 << len(_FACT_WEIGHTS)):
        held = [(test, weight) for bit, (test, (_, weight)) in enumerate(zip(tests, _FACT_WEIGHTS, strict=True))
                if keys >> bit & 1]  # fmt: skip
        out.append(tuple((test, weight, sum(w for _, w in held[i:])) for i, (test, weight) in enumerate(held)))
    return tuple(out)


_BY_KEYS: Final = _by_keys(_ASCII_TESTS)
_BY_KEYS_WIDE: Final = _by_keys(_tests(wide=True))
_NUMBER_KEY: Final = 64  # `_keys_held`'s bit of _NUMBER: `\d` is a digit of any script
# What IGNORECASE matches to an ASCII letter and `lower()` does not make one (a dotted and a dotless i, a
# long s), or makes two characters of (`İ`) or a letter of (the Kelvin sign), in Python's `re`: as that
# letter, a line lowercased reads as the case-insensitive pattern reads the line (tests/unit/test_snippets.py).
_FOLDS: Final = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def _facts_in(line: str) -> tuple[_Facts, str]:
    """The patterns of _FACT_WEIGHTS that may match `line` (it holds their keys), in order, as tests; none for
    an empty line. And the line in lowercase (the tests read it; a line with other than ASCII, its letters
    folded as IGNORECASE folds them: `_FOLDS`)."""
    if _EMPTY.match(line):
        return (), line
    if line.isascii():
        low = line.lower()
        return _BY_KEYS[_keys_held(line, low)], low
    low = line.translate(_FOLDS).lower()
    signs = 1 if any(map(line.__contains__, _ERRORISH_SIGNS)) else 0  # _ERRORISH's bit
    return _BY_KEYS_WIDE[_keys_held(line, low) | signs | _NUMBER_KEY], low


def _weight(line: str, low: str, facts: _Facts, cap: float = FACT_CAP) -> float:
    """The weights of `facts` that match `line` (`low`: it in lowercase), summed in order; the patterns
    left are not read once the sum reaches `cap` (FACT_CAP: all a fact counts for)."""
    total = 0.0
    for test, weight, _ in facts:
        if test(line, low):
            total += weight
            if total >= cap:
                break
    return total


CACHED_LINE: Final = 600  # lines up to this long are remembered (`_capped_fact`, `_errorish_line`): 2 MB or so
_REMEMBERED_LINES: Final = 8192


def _capped_fact(line: str, floor: float = -math.inf) -> float:
    """`line`'s fact weight up to FACT_CAP, what a snippet's line is chosen by; or, when less than `floor` is
    all it can carry, a bound of it below `floor` (the line cannot win: its tests left are not read). Cached:
    hits repeat lines (a test run's, a command's output), and searches repeat hits."""
    if len(line) > CACHED_LINE:
        return _fact_of(line, floor)[0]
    fact = _LINE_FACTS.exact.get(line)
    if fact is not None:
        _LINE_FACTS.exact.move_to_end(line)  # the least recently read are dropped first
        return fact
    bound = _LINE_FACTS.bounds.get(line)
    if bound is not None and bound < floor:
        return bound
    fact, exact = _fact_of(line, floor)
    _LINE_FACTS.keep(line, fact, exact)
    return fact


def _fact_of(line: str, floor: float = -math.inf) -> tuple[float, bool]:
    """The line's capped fact weight and True; or a bound of it below `floor` and False, its tests cut short
    once what they found plus the weights of those left (`_Facts`' third item) cannot reach `floor`."""
    facts, low = _facts_in(line)
    total = 0.0
    for test, weight, rest in facts:
        if (bound := min(total + rest + _EPSILON, FACT_CAP)) < floor:
            return bound, False
        if test(line, low):
            total += weight
            if total >= FACT_CAP:
                break
    return min(total, FACT_CAP), True


class _LineFacts:
    """Lines' capped fact weights, and bounds of those whose tests were cut short (`_capped_fact`): each past
    _REMEMBERED_LINES drops its least recently read (an OrderedDict: a dict's first item, once deleted items
    pile up before it, takes ~5 us to find); emptied by `forget_stored_text`."""

    def __init__(self) -> None:
        self.exact: OrderedDict[str, float] = OrderedDict()
        self.bounds: OrderedDict[str, float] = OrderedDict()

    def keep(self, line: str, fact: float, exact: bool) -> None:
        held = self.exact if exact else self.bounds
        if len(held) >= _REMEMBERED_LINES:
            held.popitem(last=False)
        held[line] = fact
        if exact:
            self.bounds.pop(line, None)

    def cache_clear(self) -> None:
        self.exact.clear()
        self.bounds.clear()

    def cache_info(self) -> Held:
        return Held(len(self.exact) + len(self.bounds))


_LINE_FACTS: Final = keep_cache(_LineFacts())


def fact_weight(line: str) -> float:
    """How much of a fact one line carries (the sum of _FACT_WEIGHTS it matches; 0 for an empty line)."""
    facts, low = _facts_in(line)
    return _weight(line, low, facts, cap=math.inf)


def errorish(line: str) -> bool:
    """Whether the line names something that went wrong (`_ERRORISH`), its keys tested first (`_keys_held`)."""
    if not line.isascii():
        return _ERRORISH.search(line) is not None
    low = line.lower()
    return any(map(low.__contains__, _ERRORISH_KEYS)) and _ERRORISH_ASCII(line, low)  # most lines hold no key


_remembered_errorish: Final = remembered(4096)(errorish)


def _errorish_line(line: str) -> bool:
    """`errorish`, remembered for a short line (a snippet's line and the one above it recur)."""
    return _remembered_errorish(line) if len(line) <= CACHED_LINE else errorish(line)


def error_lines(text: str, limit: int = 2, scan: int = 4000) -> list[str]:
    """The lines of a failure's output that say what went wrong, best first, at most `limit`: the
    earliest lines naming an error, preferring those with a code or a path (`TS18004`, `file.py:12`)."""
    scored: list[tuple[float, int, str]] = []
    seen: set[str] = set()
    for n, m in enumerate(_LINE.finditer(text[:scan])):
        line = " ".join(m.group().split())
        if not line or line in seen or _EMPTY.match(line) or _PASSING.match(line) or not errorish(line):
            continue
        seen.add(line)
        weight = 1.0 + (0.6 if _CODE.search(line) else 0.0) + (0.3 if _PATH.search(line) else 0.0)
        weight -= 0.9 if _WARNING.match(line) else 0.0  # a warning before the error is seldom the cause
        scored.append((-weight + n * 0.01, n, line))  # a line further down must say more to come first
    return [line for _, _, line in sorted(scored)[:limit]]


class Match(NamedTuple):
    start: int
    end: int
    term: int  # the query term's index
    weight: float  # a word that names a kind of work ("error") weighs half


def _start(match: Match) -> int:
    return match.start


def matches(query: Query, low: str) -> list[Match]:
    """Every match of the query's terms in `low` (lowercase text), in order, at most MAX_MATCHES."""
    found: list[Match] = []
    for i, weight, key, tail, edged in query.matchers:  # as `terms.matcher` made them, once per query
        at = low.find(key)  # in C, faster than the regex engine's own scan for it: most texts lack most words
        if at < 0:
            continue
        for m in tail.finditer(low, at):  # every match starts with `key`
            s, e = m.span()
            if e > s and not (edged and s and low[s - 1].isalnum()):
                found.append(_new_match(Match, (s, e, i, weight)))  # NamedTuple's own __new__ is Python's
                if len(found) >= MAX_MATCHES:
                    return sorted(found)
    found.sort()
    return found


_new_match: Final = tuple.__new__


def terms_in(query: Query, low: str) -> set[int]:
    """The indexes of the query's terms that match in `low` (lowercase text): `matches`' terms, read only up to
    each term's first match."""
    held: set[int] = set()
    for i, _, key, tail, edged in query.matchers:
        if i in held or (at := low.find(key)) < 0:
            continue
        for m in tail.finditer(low, at):
            s, e = m.span()
            if e > s and not (edged and s and low[s - 1].isalnum()):
                held.add(i)
                break
    return held


# A question about a cause ("why did the build fail?"): a line stating one answers it.
ASKS_WHY: Final = re.compile(r"(?i)\b(?:why|cause[sd]?|reason|how come|what (?:broke|went wrong|was wrong))\b")


def cut(
    query: Query, content: str, title: str = "", limit: int = SNIPPET_CHARS, why: bool = False
) -> tuple[str, list[Span]] | None:
    """The snippet of `content` for `query`, with its matches' spans; None when there is nothing to show.

    The line scored highest by the distinct terms it matches (those the `title` lacks count double: the
    line is printed beside the title) plus the fact it carries; without any match in the content (the
    title or the path matched), the line carrying the most of a fact. An error line just above the chosen
    line is shown with it (`N818 Exception name ...` above `--> src/safety.py:19:7`). `why`: the question
    asks for a cause, and a line that states one ("Root cause: ...") counts as much as a matched term."""
    if not content:
        return None
    text = content[:SCAN_CHARS]
    found = matches(query, text.lower())
    shown = terms_in(query, title.lower()) if title and found else set()
    line = _best_matching(text, found, shown, why) if found else _best_fact(text)
    if line is None:
        return None
    lo, hi = _window(text, _with_error_above(text, line), found, limit)
    return _collapse(content, lo, hi, found)


def _best_matching(text: str, found: list[Match], shown: set[int], why: bool = False) -> tuple[int, int] | None:
    """The (start, end) of the line whose matches and fact score highest (only lines with a match are read;
    the fact of those only that could still win: a term outweighs any fact)."""
    lines: dict[int, tuple[int, int, dict[int, float]]] = {}  # line start -> (end, first match, term -> weight)
    end = -1
    terms: dict[int, float] = {}
    for f in found:  # in text order: a line's matches one after another
        at = f.start
        if at > end:  # past the line of the match before
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            terms = {}
            lines[start] = (end, at, terms)
        weight = f.weight * (0.5 if f.term in shown else 1.0)
        if terms.get(f.term, 0.0) < weight:
            terms[f.term] = weight
    if len(lines) == 1:  # half the hits: the line is chosen whatever it holds
        return None if _EMPTY.match(text[start:end]) else (start, end)
    ranked = sorted(  # best score first, of equal ones the first in text order (`order`)
        (start / SCAN_CHARS - 2.0 * sum(terms.values()), order, start, end, first)
        for order, (start, (end, first, terms)) in enumerate(lines.items())
    )
    top = -ranked[0][0]
    cause = 2.0 if why else 0.0  # what a line stating a cause adds, when the question asks for one
    # The line of the highest total, the first in text order of equal ones. Read best score first: a line
    # whose score plus the most a fact adds cannot reach the best total so far is not read, nor any after it.
    # The best line's own fact is read only when another line could reach it (one line with a match, or the
    # others a term behind, is chosen without: a new line's fact tests cost ~15 us).
    best: list[Any] | None = None  # [total (None: not read yet), order, start, end, score, near]
    for negated, order, start, end, first in ranked:
        score = -negated
        if score < top - (3.5 if why else 1.5):
            break
        if best is not None:
            reach = score + FACT_CAP + cause
            if reach < best[4]:
                break  # short of the best line's score alone: so is every line after it
            if best[0] is None:
                best[0] = _total(best[4], best[5], why, cause)
            if reach <= best[0]:
                if reach < best[0]:
                    break
                if order > best[1]:
                    continue  # it could only tie, and the earlier line wins a tie
        if _EMPTY.match(text[start:end]):
            continue
        near = text[max(start, first - 100) : min(end, first + 200)]  # a long line's fact is near its match
        if best is None:
            best = [None, order, start, end, score, near]
            continue
        floor = best[0] - score - cause - _EPSILON
        fact = _capped_fact(near, floor)  # exact unless below the floor
        if fact < floor:
            continue  # it loses whatever else it holds
        total = score + fact + (cause if why and CONCLUSION.search(near) else 0.0)
        if total > best[0] or (total == best[0] and order < best[1]):
            best = [total, order, start, end, score, near]
    return None if best is None else (best[2], best[3])


def _total(score: float, near: str, why: bool, cause: float) -> float:
    """A candidate line's total: its matches' score, its fact, and a stated cause when the question asks why."""
    return score + _capped_fact(near) + (cause if why and CONCLUSION.search(near) else 0.0)


def _best_fact(text: str, lines: int = 200) -> tuple[int, int] | None:
    """The (start, end) of the line carrying the most of a fact among the first `lines`; None: no fact."""
    best: tuple[float, int, int] | None = None
    for n, m in enumerate(_LINE.finditer(text)):
        if n >= lines or (best is not None and best[0] >= FACT_CAP - n * 0.002):
            break  # no line from here on can score more than the best one
        # a bound below the floor loses (its score is below the best's, or not above 0), as its fact would
        score = _capped_fact(m.group(), (best[0] if best is not None else 0.0) + n * 0.002 - _EPSILON) - n * 0.002
        if score > 0 and (best is None or score > best[0]):
            best = (score, *m.span())
    return None if best is None else (best[1], best[2])


def _with_error_above(text: str, line: tuple[int, int]) -> tuple[int, int]:
    """The line, from the start of the line above it when that one names an error and it does not (a
    compiler's `N818 Exception name ...` above its `--> src/safety.py:19:7`)."""
    start, end = line
    if start == 0 or _errorish_line(text[start:end]):
        return line
    above_end = start - 1
    while above_end > 0 and text[above_end - 1] == "\n":  # blank lines between
        above_end -= 1
    above = text.rfind("\n", 0, above_end) + 1
    before = text[above:above_end]
    if 0 < len(before) <= 120 and not _EMPTY.match(before) and _errorish_line(before):
        return above, end
    return line


def _window(text: str, line: tuple[int, int], found: list[Match], limit: int) -> tuple[int, int]:
    """`limit` chars of `text` for the line: the line from its start when it fits, with what follows it
    (never what precedes it: the line is the point); in a long line, the stretch holding the most
    matches, from a little before the first."""
    start, end = line
    while start < end and text[start].isspace():
        start += 1
    if end - start <= limit:
        return start, _word_end(text, min(len(text), start + limit), start)
    inside = found[bisect_left(found, start, key=_start) : bisect_left(found, end, key=_start)]
    lo = start
    if inside:
        starts = [f.start for f in inside]
        held = []  # (the matches within `limit` of one, from it on; its start negated)
        for f in inside:
            reach = f.start + limit
            at = bisect_left(starts, f.start)
            held.append((sum(1 for g in inside[at : bisect_left(starts, reach, at)] if g.end <= reach), -f.start))
        first = -max(held)[1]
        lo = _word_start(text, max(start, first - limit // 4), start)
    return lo, _word_end(text, min(end, lo + limit), lo)


def _word_start(text: str, at: int, floor: int) -> int:
    """`at`, moved back to the start of its word when that is near."""
    space = text.rfind(" ", floor, at + 1)
    return space + 1 if space >= 0 and at - space < 20 else at


def _word_end(text: str, at: int, floor: int) -> int:
    """`at`, moved back to the end of the previous word when it falls inside one (and that is near)."""
    if at >= len(text) or not (text[at - 1].isalnum() and text[at].isalnum()):
        return at
    space = max(text.rfind(" ", max(floor, at - 20), at), text.rfind("\n", max(floor, at - 20), at))
    return space if space > floor else at


def _collapse(content: str, lo: int, hi: int, found: list[Match]) -> tuple[str, list[Span]]:
    """content[lo:hi] with each whitespace run as one space (none at its ends), an ellipsis where it was
    cut, and the spans of the matches inside it, in the new text's offsets."""
    seg = content[lo:hi]
    inside = found[bisect_left(found, lo, key=_start) : bisect_left(found, hi, key=_start)]

    def moved(p: int) -> int:  # where seg[p] (not a space) lands: after the words before it, one space apart
        words = seg[:p].split()
        return len(" ".join(words)) + seg[p - 1].isspace() if words else 0

    text = " ".join(seg.split())  # each whitespace run as one space, none at the ends (`\s` is `str.isspace`)
    head = ELLIPSIS if lo > 0 else ""
    tail = ELLIPSIS if hi < len(content) else ""
    spans: list[Span] = []
    same = len(text) == len(seg)  # no run of two spaces, none at the ends: every character stays where it was
    for f in inside:
        if f.end > hi or seg[f.start - lo].isspace() or seg[f.end - 1 - lo].isspace():
            continue
        s, e = (f.start - lo, f.end - lo) if same else (moved(f.start - lo), moved(f.end - 1 - lo) + 1)
        if 0 <= s < e <= len(text):
            spans.append((s + len(head), e + len(head)))
    return head + text + tail, merged(spans)


def merged(spans: Iterable[Sequence[int]]) -> list[Span]:
    """Spans sorted, overlapping and touching ones joined."""
    out: list[Span] = []
    for s, e in sorted((int(x[0]), int(x[1])) for x in spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def escaped(text: str) -> str:
    """A ⟦ or ⟧ of the text itself doubled: what remains single is a mark."""
    return text.replace(OPEN, OPEN * 2).replace(CLOSE, CLOSE * 2) if OPEN in text or CLOSE in text else text


def marked(text: str, spans: Iterable[Sequence[int]], limit: int | None = None) -> str:
    """`text` with its spans as ⟦…⟧ and every other ⟦ or ⟧ doubled (`escaped`); cut to about `limit`
    chars of text first, at a word, never inside a mark."""
    spans = merged(spans)
    if limit is not None and len(text) > limit:
        cut_at = text.rfind(" ", limit // 2, limit)
        cut_at = cut_at if cut_at > 0 else limit - 1
        for s, e in spans:
            if s < cut_at < e:
                cut_at = s
        text = text[:cut_at].rstrip() + ELLIPSIS
        spans = [(s, e) for s, e in spans if e <= cut_at]
    parts: list[str] = []
    at = 0
    for s, e in spans:
        if s < at or e > len(text):
            continue
        parts += [escaped(text[at:s]), OPEN, escaped(text[s:e]), CLOSE]
        at = e
    parts.append(escaped(text[at:]))
    return "".join(parts)


def parts(text: str, spans: Iterable[Sequence[int]]) -> list[tuple[str, bool]]:
    """`text` split at its spans: (piece, matched) in order, for readers that style the matches."""
    out: list[tuple[str, bool]] = []
    at = 0
    for s, e in merged(spans):
        if s < at or e > len(text):
            continue
        if s > at:
            out.append((text[at:s], False))
        out.append((text[s:e], True))
        at = e
    if at < len(text):
        out.append((text[at:], False))
    return out
