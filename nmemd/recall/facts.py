"""What a line of output carries: an error, a stated cause, a code, a path, a command, a name, a number.

A snippet's line is chosen by the terms it matches and by the fact it carries (`snippets.cut`), and a
failure's summary keeps the lines that name what went wrong (`error_lines`). Each kind of fact is a
regex with a weight; the substrings each needs are tested first, in C, since most lines hold few kinds,
and short lines' weights are remembered (hits repeat lines, searches repeat hits).
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from nmemd.remembered import Held, keep_cache, remembered

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
EMPTY: Final = re.compile(r"^\s*(?:exit code \d+|command: .*|[-=_*#~.\s│|+]*)$", re.IGNORECASE)
LINE: Final = re.compile(r"[^\n]+")


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
EPSILON: Final = 1e-9  # a bound must miss by more than rounding before a line is passed over

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
    if EMPTY.match(line):
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


CACHED_LINE: Final = 600  # lines up to this long are remembered (`capped_fact`, `errorish_line`): 2 MB or so
_REMEMBERED_LINES: Final = 8192


def capped_fact(line: str, floor: float = -math.inf) -> float:
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
        if (bound := min(total + rest + EPSILON, FACT_CAP)) < floor:
            return bound, False
        if test(line, low):
            total += weight
            if total >= FACT_CAP:
                break
    return min(total, FACT_CAP), True


class _LineFacts:
    """Lines' capped fact weights, and bounds of those whose tests were cut short (`capped_fact`): each past
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


def errorish_line(line: str) -> bool:
    """`errorish`, remembered for a short line (a snippet's line and the one above it recur)."""
    return _remembered_errorish(line) if len(line) <= CACHED_LINE else errorish(line)


def error_lines(text: str, limit: int = 2, scan: int = 4000) -> list[str]:
    """The lines of a failure's output that say what went wrong, best first, at most `limit`: the
    earliest lines naming an error, preferring those with a code or a path (`TS18004`, `file.py:12`)."""
    scored: list[tuple[float, int, str]] = []
    seen: set[str] = set()
    for n, m in enumerate(LINE.finditer(text[:scan])):
        line = " ".join(m.group().split())
        if not line or line in seen or EMPTY.match(line) or _PASSING.match(line) or not errorish(line):
            continue
        seen.add(line)
        weight = 1.0 + (0.6 if _CODE.search(line) else 0.0) + (0.3 if _PATH.search(line) else 0.0)
        weight -= 0.9 if _WARNING.match(line) else 0.0  # a warning before the error is seldom the cause
        scored.append((-weight + n * 0.01, n, line))  # a line further down must say more to come first
    return [line for _, _, line in sorted(scored)[:limit]]
