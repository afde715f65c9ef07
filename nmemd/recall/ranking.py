"""How search orders what its lookups found: BM25 computed here on the candidates' own text.

Each term's idf comes from the lookups (estimated from how densely its newest matches lie); a
row's title, path and command are counted for every candidate, its content for the best of them
only (content is most of the bytes, and reading it most of a search's time). Rows that hold more
of the terms rank first (coverage), weighted by the kind of observation, the question's hints
("which file did we edit": edits), the prompt of the row's turn and recency.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any, Final

from nmemd.recall import vocabulary
from nmemd.recall.facts import CONCLUSION
from nmemd.recall.queries import HIT_COLUMNS, Hit, marks
from nmemd.recall.snippets import SCAN_CHARS
from nmemd.recall.terms import Query, occurrences
from nmemd.recall.text import command_kind
from nmemd.remembered import remembered

# How much an observation type matters when ranking equally relevant text. What changed the
# code (edits, writes) and what went wrong (errors) answer most questions; reads and todo
# snapshots restate them and recur, so they rank below.
TYPE_WEIGHT: Final[dict[str, float]] = {
    "error": 1.3,
    "edit": 1.3,
    "write": 1.3,
    "prompt": 1.1,
    "command": 1.15,
    "compact": 1.1,
    "stop": 1.1,
    "assistant": 0.8,
    "thinking": 0.3,
    "agent": 1.0,
    "mcp": 0.9,
    "search": 0.85,
    "fetch": 0.85,
    "task": 0.75,
    "read": 0.75,
    "tool": 0.7,
    "session": 0.6,
    "event": 0.5,
    "notification": 0.4,
}
# A build, test or lint command answers "how do we run X"; `ls`, `cat`, `grep` only looked around.
COMMAND_KIND_WEIGHT: Final = (0.8, 1.0, 1.2)  # by summary.command_kind: trivial, other, build/test
HINT_BOOST: Final = 1.6  # "which file did we edit": an edit beats a read of the same file
# "why did it fail": what the agent said between its tool calls (its diagnosis) before the tool rows
SAID: Final = ("assistant", "thinking")
WHY_BOOST: Final = 1.5
CAUSE_BOOST: Final = 1.5  # and of its words, those that state a cause ("because", "due to", "the root cause")
FIELD_WEIGHTS: Final = (4.0, 1.0, 1.0, 2.5, 2.5)  # title, content, file_path's folders and its name, command
PART_WEIGHT: Final = 0.5  # a word as part of an identifier (camelCase, kebab-case), against the word itself
HINT_WORD_WEIGHT: Final = 0.5  # a word that names a kind of work ("error", "command"), against another word
NEAR_WEIGHT: Final = 1.0  # two query words side by side, against one word's own weight
TURN_WEIGHT: Final = 0.3  # the turn's prompt, for the words a row lacks (`_turn_prompts`)
K1: Final = 1.2  # BM25's term-frequency saturation
_K1_PLUS_1: Final = K1 + 1  # BM25's numerator factor, once (the same float as computed per term)
B: Final = 0.5  # and its length normalisation (less than 0.75: long outputs hold answers too)
AVERAGE_CHARS: Final = 1200.0  # a typical observation's text, for the length normalisation
RECENCY_HALF_LIFE_DAYS: Final = 14.0
RESCORE: Final = 90  # best candidates ranked on their title, path and command (a turn's rows crowd 60)
WITH_CONTENT: Final = 20  # the best of those ranked again with their content
SCORED_CHARS: Final = 2000  # of each field: term frequency saturates long before, and regexes cost per char

_COMMIT: Final = re.compile(r"\s*(?:cd\s+\S+\s*&&\s*)?git\s+commit\b")


@dataclass(slots=True)
class Candidate:
    """A row some lookup returned, and which (`lookups.candidates`)."""

    found_by: set[int] = field(default_factory=set)  # the lookups (term indexes) that returned it
    all_terms: bool = False  # returned by the all-terms lookup


def unsaid(project: str | None) -> str:
    """The project's own path, lowercase, when the search is in one project: every row there may
    name it ("warning: Git tree '/home/me/skypilot-flake' is dirty"), so its words say nothing."""
    top = (project or "").rstrip("/\\").lower()
    return top if len(top) > 1 else ""


def rank(
    conn: sqlite3.Connection,
    query: Query,
    found: dict[int, Candidate],
    idf: list[float],
    now: float,
    unsaid: str = "",
) -> tuple[list[Hit], dict[int, str]]:
    """BM25 over title, content, path and command, computed here on the best candidates' text; and the
    content read of the best of them, by id: its first SCAN_CHARS, what their snippets read (SQLite reads
    a value whole, so the read costs what its first SCORED_CHARS cost), of which SCORED_CHARS count here.
    `unsaid`: text not counted."""
    if not found:
        return [], {}
    idf = [w * HINT_WORD_WEIGHT if term.hint else w for term, w in zip(query.terms, idf, strict=True)]

    best = _roughly_best(found, idf)
    rows = {
        r[0]: r
        for r in conn.execute(
            f"SELECT {HIT_COLUMNS}, o.last_ts, o.command FROM observations o WHERE o.id IN ({marks(best)})", best
        )
    }
    # Two passes: title, path and command for every candidate, with the prompt of its turn (a terse
    # command that its turn asked for is not cut here), then the content of the best of them (content
    # is most of the bytes a row holds, and reading it is most of a search's time).
    counter = _Counter(query, unsaid)
    alike: dict[tuple[str, str | None, str | None], _Counted] = {}  # a third of the rows repeat another's fields
    short: dict[int, _Counted] = {}
    for rowid, r in rows.items():
        fields = r[5], r[6], r[9]  # what `_short_fields` reads
        counted = alike.get(fields)
        if counted is None:
            counted = alike[fields] = counter.short(r)
        short[rowid] = counted  # shared: read only (the content's pass counts into a copy)
    facts = _Facts(query, idf, now)
    asked = _turn_prompts(conn, query, facts.lacking(rows, found, short))
    first = {rowid: _score(found[rowid], r, short[rowid], facts, asked.get(rowid)) for rowid, r in rows.items()}
    scored = {rowid: score for rowid, score in first.items() if score is not None}
    top = sorted(scored, key=scored.__getitem__)[:WITH_CONTENT]  # stable: ties in the rows' order
    contents = dict(
        conn.execute(
            f"SELECT id, substr(content, 1, ?) FROM observations WHERE id IN ({marks(top)})", [SCAN_CHARS, *top]
        ).fetchall()
    )
    hits: list[Hit] = []
    for rowid, r in rows.items():
        content = contents.get(rowid)
        if content is None:
            score = first[rowid]
        else:
            whole = counter.add(short[rowid], FIELD_WEIGHTS[1], content)
            score = _score(found[rowid], r, whole, facts, asked.get(rowid), content)
        if score is None:
            continue
        hits.append(
            Hit(
                id=r[0], type=r[1], project=r[2], session_id=r[3], ts=r[4], title=r[5], file_path=r[6],
                count=r[7], score=round(score, 4),
            )
        )  # fmt: skip
    hits.sort(key=_ID, reverse=True)  # the newest first among equal scores: the sort below is stable
    hits.sort(key=_SCORE)
    return hits, contents


def _roughly_best(found: dict[int, Candidate], idf: list[float]) -> list[int]:
    """The RESCORE candidates found by the lookups of most weight, the newest first among equals: by
    (-weight, -rowid), a candidate's weight the idf of the terms whose lookups found it, summed (all the
    terms' for the rows holding them all: one sum for all of those)."""
    every = sum(idf[i] for i in range(len(idf)))
    if len(idf) == 1 and every > 0:  # one term: every candidate weighs `every` (its lookup found it) or 0
        held = [rowid for rowid, cand in found.items() if cand.all_terms or cand.found_by]
        held.sort(reverse=True)
        if len(held) < RESCORE and len(held) < len(found):
            held += sorted(found.keys() - set(held), reverse=True)
        return held[:RESCORE]
    weight: dict[int, float] = {}
    sums: dict[tuple[int, ...], float] = {}  # by the terms that found a candidate, in its set's order
    for rowid, cand in found.items():
        if cand.all_terms:
            weight[rowid] = -every
            continue
        by = tuple(cand.found_by)
        w = sums.get(by)
        if w is None:
            w = sums[by] = -sum(map(idf.__getitem__, by))
        weight[rowid] = w
    best = sorted(weight, reverse=True)
    best.sort(key=weight.__getitem__)  # stable: ints and floats compared, not tuples
    return best[:RESCORE]


def _turn_prompts(conn: sqlite3.Connection, query: Query, rows: dict[int, Any]) -> dict[int, _Asked]:
    """The prompt of each candidate's turn (its first SCORED_CHARS), by candidate id, its terms counted
    when `_score` asks (only for the words a row lacks); one per prompt, which a turn's rows share.

    A command or an edit seldom repeats the words of what it was for ("start the app":
    `uv run streamlit run app.py`); the prompt that asked for it does."""
    pairs = [x for rowid, r in rows.items() if r[1] != "prompt" for x in (rowid, r[3])]
    if not pairs:
        return {}
    slots = -(-len(pairs) // 2 // _TURN_SLOTS) * _TURN_SLOTS  # a few statements to cache, not one per count
    turn = conn.execute(_turn_sql(slots), pairs + [None] * (2 * slots - len(pairs))).fetchall()
    prompts = {p for _, p in turn if p is not None}
    asked = {
        r[0]: _Asked(query, f"{r[1]} {r[2]}"[:SCORED_CHARS].lower())  # the title and the content's head joined
        for r in conn.execute(
            "SELECT id, title, substr(content, 1, ?) FROM observations WHERE id IN (SELECT value FROM json_each(?))",
            (SCORED_CHARS, json.dumps(sorted(prompts))),
        )
    }
    return {rowid: asked[p] for rowid, p in turn if p in asked}


_TURN_SLOTS: Final = 16


@lru_cache(maxsize=16)
def _turn_sql(slots: int) -> str:
    """The prompt that began each (id, session) pair's turn: the session's last before the row. Bound as
    values, not one JSON array (its items parsed again for each of their fields: 1.7x the time)."""
    values = ", ".join(["(?, ?)"] * slots)
    return (
        f"WITH c(id, session) AS (VALUES {values}) SELECT c.id, (SELECT max(p.observation_id) FROM prompts p"
        " WHERE p.session_id = c.session AND p.observation_id < c.id) FROM c"
    )


class _Asked:
    """A turn's prompt (lowercase), each term's count in it made at its first use."""

    __slots__ = ("_counts", "_terms", "low")

    def __init__(self, query: Query, low: str) -> None:
        self._terms = query.terms
        self._counts: list[int | None] = [None] * len(query.terms)
        self.low = low

    def __getitem__(self, i: int) -> int:
        n = self._counts[i]
        if n is None:
            n = self._counts[i] = self._terms[i].count(self.low)
        return n


@dataclass(slots=True)
class _Counted:
    """A row's term frequencies over the fields read so far, and their length: the second pass adds
    the content to what the first pass counted in the title, path and command."""

    tf: list[float]
    length: int
    near: list[float] = field(default_factory=list)  # by `Query.neighbours`: the pair standing together


# A field's text counted once (`_Counter.counts`): its length, each term's count as (term, PART_WEIGHT or
# not, count), and each neighbour pair's count (standing together).
_Counts = tuple[int, tuple[tuple[int, bool, float], ...], tuple[tuple[int, int], ...]]


class _Counter:
    """Each term's weighted frequency in a search's fields, less what the text `unsaid` holds. A word
    inside an identifier (clientId, skypilot-simple) counts PART_WEIGHT of a word standing alone. Made once
    per search: what each term needs (its gate, its pattern when it has only one), and the short texts
    counted already, by text (rows repeat titles, folders and commands)."""

    __slots__ = ("_neighbours", "_no_pairs", "_no_tf", "_plan", "_seen", "_unsaid")

    def __init__(self, query: Query, unsaid: str) -> None:
        plan = []
        for i, term in enumerate(query.terms):
            alternatives = term.matchers
            lone = alternatives[0][0] if len(alternatives) == 1 and len(alternatives[0]) == 1 else None
            plan.append((i, term.gate, lone, term, bool(term.camel)))
        self._plan = tuple(plan)
        self._neighbours = query.neighbours
        self._no_tf = [0.0] * len(query.terms)
        self._no_pairs = [0.0] * len(self._neighbours)
        self._seen: dict[str, _Counts] = {}
        self._unsaid = unsaid

    def short(self, r: Sequence[Any]) -> _Counted:
        """A row's title, path and command (`_short_fields`)."""
        tf, near = list(self._no_tf), list(self._no_pairs)
        length = 0
        seen = self._seen
        for w, text in _short_fields(r):
            if not text:
                continue
            counts = seen.get(text)
            if counts is None:
                counts = seen[text] = self.counts(text)
            length += _weighed(tf, near, w, counts)
        return _Counted(tf, length, near)

    def add(self, into: _Counted, w: float, text: str) -> _Counted:
        """`into`'s frequencies with `text`'s added at weight `w` (a row's content after its short fields)."""
        tf, near = list(into.tf), list(into.near)
        if not text:
            return _Counted(tf, into.length, near)
        return _Counted(tf, into.length + _weighed(tf, near, w, self.counts(text)), near)

    def counts(self, text: str) -> _Counts:
        """One field's counts, before its weight applies."""
        raw = text[:SCORED_CHARS]
        low = raw.lower()
        unsaid = self._unsaid
        if unsaid and unsaid in low:
            raw = _unsaid_out(raw, low, unsaid)
            low = raw.lower()
        terms: list[tuple[int, bool, float]] = []
        neighbours = self._neighbours
        here = [0] * len(self._plan) if neighbours else None  # each term's count, for the pairs
        for i, gate, lone, term, camel in self._plan:
            if gate not in low:
                continue  # none of its forms, nor it as a camelCase part (`Term.count`'s first test, without a call)
            n = occurrences(lone, low) if lone is not None else term.count(low)
            if n:
                parts = min(n, term.kebab_parts(low)) if camel and "-" in low else 0
                terms.append((i, True, min(n, 20) - (1 - PART_WEIGHT) * min(parts, 20)))
                if here is not None:
                    here[i] = n
            elif camel and term.text_lower in low and (n := term.parts_in(raw)):
                terms.append((i, False, min(n, 20)))  # `createServerClient` holds "client"
        if here is None or len(terms) < 2:  # a pair needs two of the words
            return len(low), tuple(terms), ()
        pairs: list[tuple[int, int]] = []
        for k, (i, j, together) in enumerate(neighbours):
            if here[i] and here[j] and (n := occurrences(together, low)):
                pairs.append((k, min(n, 20)))
        return len(low), tuple(terms), tuple(pairs)


def _weighed(tf: list[float], near: list[float], w: float, counts: _Counts) -> int:
    """A field's `counts` added into `tf` and `near` at its weight `w`; its length."""
    for i, whole, n in counts[1]:
        tf[i] += w * n if whole else PART_WEIGHT * w * n
    for k, m in counts[2]:
        near[k] += w * m
    return counts[0]


def _unsaid_out(raw: str, low: str, unsaid: str) -> str:
    """`raw` with each `unsaid` in it, in any case, as a slash. An ASCII text by `low`'s offsets (`lower()`
    keeps them, and folds as IGNORECASE does there: the regex, without a literal to scan for, tries every
    position); any other by the regex."""
    if not raw.isascii():
        return _without(unsaid).sub("/", raw)
    parts: list[str] = []
    at = 0
    found = low.find(unsaid)
    while found >= 0:
        parts += (raw[at:found], "/")
        at = found + len(unsaid)
        found = low.find(unsaid, at)
    parts.append(raw[at:])
    return "".join(parts)


@lru_cache(maxsize=64)
def _without(unsaid: str) -> re.Pattern[str]:
    return re.compile(re.escape(unsaid), re.IGNORECASE)


def _short_fields(r: Sequence[Any]) -> tuple[tuple[float, str | None], ...]:
    """Title, the path's folders and its name (a word in a folder says less than the file's own name),
    and the command, with their weights."""
    path = r[6] or ""
    name_at = path.rfind("/") + 1
    w = FIELD_WEIGHTS
    return ((w[0], r[5]), (w[2], path[:name_at]), (w[3], path[name_at:]), (w[4], r[9]))


class _Facts:
    """What `_score` asks of the query and the search for every row, made once per search: each term's
    index, idf and the words it stands for as a bitmask, the neighbour pairs, the words coverage counts,
    and by row type its weight and the hint verbs it stands for (`vocabulary.named_by_type`)."""

    __slots__ = ("asks_why", "now", "pairs", "query", "stands", "types", "word_mask", "words")

    def __init__(self, query: Query, idf: list[float], now: float) -> None:
        self.query = query
        self.now = now
        self.stands = tuple((i, idf[i], _mask(term.covers or (i,))) for i, term in enumerate(query.terms))
        self.pairs = tuple((k, min(idf[i], idf[j])) for k, (i, j, _) in enumerate(query.neighbours))
        self.words = query.words
        self.word_mask = _mask(query.word_indexes)
        self.asks_why = query.asks_why
        self.types: dict[str, tuple[float, int]] = {}  # `of_type`'s, by type

    def of_type(self, row_type: str) -> tuple[float, int]:
        """A row type's weight (with the question's hint) and the words its kind says, as a bitmask."""
        known = self.types.get(row_type)
        if known is None:
            weight = TYPE_WEIGHT.get(row_type, 1.0) * (HINT_BOOST if row_type in self.query.type_hints else 1.0)
            known = self.types[row_type] = (weight, _mask(vocabulary.named_by_type(self.query, row_type)))
        return known

    def lacking(self, rows: dict[int, Any], found: dict[int, Candidate], short: dict[int, _Counted]) -> dict[int, Any]:
        """The rows that may lack a word: only for those does their turn's prompt count (`_score`)."""
        words = self.query.word_indexes
        out = {}
        for rowid, r in rows.items():
            cand = found[rowid]
            if cand.all_terms or words <= cand.found_by:
                continue
            if not words <= cand.found_by | {i for i, tf in enumerate(short[rowid].tf) if tf}:
                out[rowid] = r
        return out


def _mask(indexes: Iterable[int]) -> int:
    return sum(1 << i for i in set(indexes))


_ID: Final = attrgetter("id")
_SCORE: Final = attrgetter("score")
_ONE_LESS_B: Final = 1 - B


def _score(
    cand: Candidate,
    r: Sequence[Any],
    counted: _Counted,
    facts: _Facts,
    asked: _Asked | None = None,
    content: str | None = None,
) -> float | None:
    """Negative (lower is better), as FTS5 ranks; None: it holds none of the words.

    `asked`: each term's count in the prompt of the row's turn, a field of low weight for the words
    the row lacks (`_turn_prompts`). `content`: the row's content read (its head), when it was: with
    the title, what the agent said, for its words that state a cause. `facts`: the query's and the
    search's, made once per search (`_Facts`)."""
    length_norm = K1 * (_ONE_LESS_B + B * (counted.length / AVERAGE_CHARS))
    relevance = 0.0
    covered = 0
    tfs = counted.tf
    found_all, found_by = cand.all_terms, cand.found_by
    for i, w, stands_for in facts.stands:
        tf = tfs[i]
        if not tf and (found_all or i in found_by):
            tf = FIELD_WEIGHTS[1]  # the index found it in content not read yet, or past the scored part
        if tf:
            relevance += w * tf * _K1_PLUS_1 / (tf + length_norm)
            covered |= stands_for
    if not relevance:
        return None  # found through another term's lookup only, and holds none of the words
    if facts.pairs:
        near = counted.near
        for k, least in facts.pairs:
            if m := near[k]:
                relevance += NEAR_WEIGHT * least * m * _K1_PLUS_1 / (m + length_norm)
    if asked is not None:
        for i, w, stands_for in facts.stands:
            if covered & stands_for != stands_for and (n := asked[i]):
                tf = TURN_WEIGHT * min(n, 20)
                relevance += w * tf * _K1_PLUS_1 / (tf + length_norm)
                covered |= stands_for
    row_type = r[1]
    # "which file did we change": an edit says "Edit"
    weight, kind_says = facts.types.get(row_type) or facts.of_type(row_type)
    words = facts.word_mask
    coverage = (covered & words).bit_count() / facts.words
    if kind_says:
        coverage += vocabulary.KIND_COVERAGE * (kind_says & words & ~covered).bit_count() / facts.words
    age_days = max(0.0, facts.now - r[8]) / 86400.0
    recency = 1.0 + 1.0 / (1.0 + age_days / RECENCY_HALF_LIFE_DAYS)
    if facts.asks_why and row_type in SAID:
        weight *= WHY_BOOST
        said = r[5] if content is None else f"{r[5]} {content}"  # only here: most rows are not said
        if CONCLUSION.search(said[:SCORED_CHARS]):
            weight *= CAUSE_BOOST
    if row_type == "command" and r[9]:
        weight *= command_weight(r[9])
    # coverage counts most: all the words before some of them
    score: float = -relevance * weight * recency * (0.15 + 0.85 * coverage**2)
    return score


@remembered(4096)
def command_weight(command: str) -> float:
    """Build and test commands above trivial ones; a commit's message restates the work it records,
    and the rows that did the work answer better. Cached: hits repeat commands."""
    return COMMAND_KIND_WEIGHT[0 if _COMMIT.match(command) else command_kind(command)]
