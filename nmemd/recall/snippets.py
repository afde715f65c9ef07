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

import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from nmemd.recall.facts import CONCLUSION, EMPTY, EPSILON, FACT_CAP, LINE, capped_fact, errorish_line

if TYPE_CHECKING:  # the CLI marks snippets without paying for the query parser's start
    from nmemd.recall.terms import Query

SNIPPET_CHARS: Final = 160  # the snippet's text, ellipses aside
SCAN_CHARS: Final = 8000  # of the content: where the answer of a long output is, in practice
MAX_MATCHES: Final = 400  # match positions collected at most (a word in every line of a long log)
OPEN: Final = "⟦"
CLOSE: Final = "⟧"
ELLIPSIS: Final = "…"

Span = tuple[int, int]


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
        return None if EMPTY.match(text[start:end]) else (start, end)
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
        if EMPTY.match(text[start:end]):
            continue
        near = text[max(start, first - 100) : min(end, first + 200)]  # a long line's fact is near its match
        if best is None:
            best = [None, order, start, end, score, near]
            continue
        floor = best[0] - score - cause - EPSILON
        fact = capped_fact(near, floor)  # exact unless below the floor
        if fact < floor:
            continue  # it loses whatever else it holds
        total = score + fact + (cause if why and CONCLUSION.search(near) else 0.0)
        if total > best[0] or (total == best[0] and order < best[1]):
            best = [total, order, start, end, score, near]
    return None if best is None else (best[2], best[3])


def _total(score: float, near: str, why: bool, cause: float) -> float:
    """A candidate line's total: its matches' score, its fact, and a stated cause when the question asks why."""
    return score + capped_fact(near) + (cause if why and CONCLUSION.search(near) else 0.0)


def _best_fact(text: str, lines: int = 200) -> tuple[int, int] | None:
    """The (start, end) of the line carrying the most of a fact among the first `lines`; None: no fact."""
    best: tuple[float, int, int] | None = None
    for n, m in enumerate(LINE.finditer(text)):
        if n >= lines or (best is not None and best[0] >= FACT_CAP - n * 0.002):
            break  # no line from here on can score more than the best one
        # a bound below the floor loses (its score is below the best's, or not above 0), as its fact would
        score = capped_fact(m.group(), (best[0] if best is not None else 0.0) + n * 0.002 - EPSILON) - n * 0.002
        if score > 0 and (best is None or score > best[0]):
            best = (score, *m.span())
    return None if best is None else (best[1], best[2])


def _with_error_above(text: str, line: tuple[int, int]) -> tuple[int, int]:
    """The line, from the start of the line above it when that one names an error and it does not (a
    compiler's `N818 Exception name ...` above its `--> src/safety.py:19:7`)."""
    start, end = line
    if start == 0 or errorish_line(text[start:end]):
        return line
    above_end = start - 1
    while above_end > 0 and text[above_end - 1] == "\n":  # blank lines between
        above_end -= 1
    above = text.rfind("\n", 0, above_end) + 1
    before = text[above:above_end]
    if 0 < len(before) <= 120 and not EMPTY.match(before) and errorish_line(before):
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
