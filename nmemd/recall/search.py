"""Full-text search that answers questions, at a cost that does not grow with the matches.

A query's terms (`terms.parse`) are looked up once all together and once each. Every
lookup reads FTS5's matches newest first and stops after a fixed number, so a word in a
third of a million rows costs what a rare word costs. The best candidates are scored here,
BM25 over their title, content, path and command with each term's idf estimated from how
densely its newest matches lie: rows that hold more of the terms rank first (coverage),
weighted by what kind of observation it is, by the question's hints ("which file did we
edit": edits) and by recency. Near-identical rows (the same command run again,
successive todo snapshots) fold into the best of them, with a count.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

import msgspec

from nmemd.errors import QueryError
from nmemd.recall import snippets
from nmemd.recall.queries import ALL_PROJECTS, HIT_COLUMNS, Filters, Hit, checked_limit, filter_clauses, teammates_of
from nmemd.recall.summary import command_kind
from nmemd.recall.terms import Query, Term, occurrences, parse
from nmemd.store import fts

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
FIELD_WEIGHTS: Final = (4.0, 1.0, 1.0, 2.5, 2.5)  # title, content, file_path's folders and its name, command
PART_WEIGHT: Final = 0.5  # a word as part of an identifier (camelCase, kebab-case), against the word itself
HINT_WORD_WEIGHT: Final = 0.5  # a word that names a kind of work ("error", "command"), against another word
NEAR_WEIGHT: Final = 1.0  # two query words side by side, against one word's own weight
TURN_WEIGHT: Final = 0.3  # the turn's prompt, for the words a row lacks (`_turn_prompts`)
K1: Final = 1.2  # BM25's term-frequency saturation
B: Final = 0.5  # and its length normalisation (less than 0.75: long outputs hold answers too)
AVERAGE_CHARS: Final = 1200.0  # a typical observation's text, for the length normalisation
RECENCY_HALF_LIFE_DAYS: Final = 14.0
PER_LOOKUP: Final = 200  # newest matches taken per lookup (all terms, then each term)
SCAN_LIMIT: Final = 2000  # matches a filtered lookup reads at most before giving up on older ones
PHRASE_PAGE: Final = 200  # rows holding a phrase's words, checked for the phrase at a time (store/fts.py)
# Rows holding a phrase's words checked at most (their text is read: ~5-15 ms a page at a million rows).
PHRASE_SCAN: Final = 600
LITERAL_SCAN: Final = 600  # rows holding an identifier's or path's words checked for it as typed (in C)
RARITY_PROBE: Final = 64  # a word's newest rowids read to tell how rare it is (`_Newest.rows_holding`)
LITERAL_CONTENT_SCAN: Final = 200  # of which the content is read, when titles, paths and commands fall short
RESCORE: Final = 60  # best candidates ranked on their title, path and command
LITERAL_ENOUGH: Final = RESCORE  # rows whose title, path or command hold a literal: its content is not read then
ALL_TERMS_AT_MOST: Final = 3  # terms in the lookup of rows holding them all (the rarest)
ENOUGH_CANDIDATES: Final = 200  # a filtered search stops looking up its common words with this many
WITH_CONTENT: Final = 20  # the best of those ranked again with their content
SCORED_CHARS: Final = 2000  # of each field: term frequency saturates long before, and regexes cost per char
# Lookups still running after this are cut short and the rest is ranked: an FTS5 prefix query has to
# merge every token under its prefix ("co*": ~0.25 s at a million rows), and a memory must answer.
# A person or a tool call can wait that long for a two-letter prefix; a hook gets less (replies).
TIME_BUDGET_S: Final = 1.0

_DIGITS: Final = re.compile(r"\d+")
_COMMIT: Final = re.compile(r"\s*(?:cd\s+\S+\s*&&\s*)?git\s+commit\b")
_SPACE: Final = re.compile(r"\s+")


@dataclass
class _Candidate:
    found_by: set[int] = field(default_factory=set)  # the lookups (term indexes) that returned it
    all_terms: bool = False  # returned by the all-terms lookup


def search(
    conn: sqlite3.Connection,
    text: str,
    filters: Filters | None = None,
    limit: int = 20,
    now: float | None = None,
    budget_s: float = TIME_BUDGET_S,
) -> list[Hit]:
    """Ranked hits for `text` (words, phrases, `prefix*`, identifiers, paths), best first.

    Lookups still running after `budget_s` are cut short and what they found is ranked."""
    filters = filters or Filters()
    query = parse(text)
    limit = checked_limit(limit)
    now = time.time() if now is None else now
    deadline = time.monotonic() + budget_s
    conn.set_progress_handler(lambda: int(time.monotonic() >= deadline), 1000)
    try:
        found, idf = _candidates(conn, query, filters)
        conn.set_progress_handler(None, 0)  # the budget is for lookups; ranking what they found is bounded
        hits, contents = _rank(conn, query, found, idf, now, _unsaid(filters))
    except sqlite3.OperationalError as exc:
        raise QueryError(f"search failed: {exc}") from exc
    except UnicodeEncodeError:
        raise QueryError("a filter is not valid Unicode text") from None
    finally:
        conn.set_progress_handler(None, 0)
    best = _fold(hits)[:limit]
    teammates_of(conn, best)
    _snippets(conn, query, best, contents, bool(snippets.ASKS_WHY.search(text)))
    return best


def _snippets(conn: sqlite3.Connection, query: Query, hits: list[Hit], contents: dict[int, str], why: bool) -> None:
    """Each shown hit's snippet (only for what is shown: it costs a regex per word over the content). Ranking
    read the first SCORED_CHARS of the best rows; the line that answers may be further down a long output."""
    longer = [h.id for h in hits if h.id not in contents or len(contents[h.id]) >= SCORED_CHARS]
    if longer:
        rows = conn.execute(
            f"SELECT id, substr(content, 1, ?) FROM observations WHERE id IN ({_marks(longer)})",
            [snippets.SCAN_CHARS, *longer],
        )
        contents = {**contents, **dict(rows.fetchall())}
    for hit in hits:
        cut = snippets.cut(query, contents.get(hit.id) or "", hit.title, why=why)
        if cut is not None:
            hit.snippet, hit.spans = cut


def _candidates(conn: sqlite3.Connection, query: Query, filters: Filters) -> tuple[dict[int, _Candidate], list[float]]:
    """Rows found by any lookup, and each term's inverse document frequency (estimated, see `_idf`)."""
    found: dict[int, _Candidate] = {}
    top = conn.execute("SELECT max(rowid) FROM observations_fts").fetchone()[0] or 0
    bottom = conn.execute("SELECT min(rowid) FROM observations_fts").fetchone()[0] or 0
    total = max(top - bottom + 1, 1)
    filtered = bool(_filters_sql(filters)[0])
    newest_of = _Newest(conn, _project_match(conn, filters), top, total)
    idf: list[float] = []
    checked: list[bool] = []  # the term's rows are its candidates already (a plain word, no filter)
    for i, term in enumerate(query.terms):
        try:
            # The idf needs only the index's count of rows holding the term's words: one read of at most
            # PER_LOOKUP rowids. Unfiltered, a plain word's rows are its candidates too (the same read).
            relaxed = fts.relax(term.fts)
            checked.append(not filtered and relaxed is None)
            if len(query.terms) == 1 and not checked[-1]:
                idf.append(1.0)  # a lone term's idf scales every row alike: its own lookup below is all it needs
                continue
            newest = newest_of(relaxed.match if relaxed else term.fts, PER_LOOKUP)
            idf.append(_idf(newest, top, total))
            if checked[-1]:
                for rowid in newest:
                    found.setdefault(rowid, _Candidate()).found_by.add(i)
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc):
                raise
            idf.append(0.0)  # past the time budget: rank what was found
            checked.append(True)
    if query.words > 1:
        # Rows holding every word, or the rarest ALL_TERMS_AT_MOST of them: FTS5 intersects every doclist
        # of an AND to its end when few rows hold them all (a pasted command line of 13 words: 18 ms for
        # none), and the rarest few are about as selective at a fraction of the cost.
        words = sorted((i for i, t in enumerate(query.terms) if not t.covers), key=lambda i: -idf[i])
        rarest = words[:ALL_TERMS_AT_MOST]
        try:
            literal = not any(query.terms[i].phrase for i in rarest)
            match = " AND ".join(query.terms[i].fts for i in rarest)
            for rowid in _lookup(newest_of, match, filters, literal=literal):
                cand = found.setdefault(rowid, _Candidate())
                cand.all_terms = cand.all_terms or len(rarest) == len(words)
                cand.found_by.update(rarest)
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc):
                raise
    # A filtered word, a phrase, an identifier or a path costs a lookup of its own (up to SCAN_LIMIT rows
    # read, or its words' rows checked for it as typed): the rarest terms first, and the common ones
    # only while candidates are short of what ranking takes (their rows weigh least in `_rank`).
    for i in sorted(range(len(query.terms)), key=lambda i: -idf[i]):
        term = query.terms[i]
        try:
            if not checked[i] and len(found) < ENOUGH_CANDIDATES:
                for rowid in _lookup(newest_of, term.fts, filters, literal=not term.phrase):
                    found.setdefault(rowid, _Candidate()).found_by.add(i)
            if term.grams:  # inside an unspaced run: the pairs index
                for rowid in _lookup(newest_of, term.grams, filters, table="observations_grams"):
                    found.setdefault(rowid, _Candidate()).found_by.add(i)
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc):
                raise
    return found, idf


def _idf(newest: list[int], top: int, total: int) -> float:
    """BM25's idf from a term's newest PER_LOOKUP matches: all of them when fewer, else their density.

    FTS5's own bm25() counts every row holding each term before it scores one, so its cost grows with
    the matches (20 ms for a word in a fifth of a million rows); ids grow with time, so the span the
    newest matches cover tells how common a term is without reading the rest. The same rows are the
    term's candidates when no filter applies: one lookup, not two."""
    if (
        isinstance(newest, _Capped) and newest.read_down_to and len(newest) < PER_LOOKUP
    ):  # a phrase checked on its newest candidates
        df = min(float(total), len(newest) * total / max(top - newest.read_down_to + 1, 1))
    elif len(newest) < PER_LOOKUP:
        df = float(len(newest))
    else:
        df = min(float(total), PER_LOOKUP * total / max(top - newest[-1] + 1, 1))
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


class _Newest:
    """The newest rowids of each FTS5 expression, read from the index once per search: a term's
    filtered lookup and its idf take the same rows."""

    def __init__(self, conn: sqlite3.Connection, project: str | None = None, top: int = 0, total: int = 1) -> None:
        self.conn = conn
        self.project = project  # the filter's project in the index's terms (`_project_match`)
        self.top, self.total = top, total  # the index's newest rowid and its span, for `rows_holding`
        self._read: dict[tuple[str, str], tuple[list[int], int]] = {}  # (table, match) -> (rowids, limit)

    def read(self, match: str, table: str = "observations_fts") -> list[int] | None:
        """Every row holding `match`, if an earlier read got them all (it returned fewer than it asked)."""
        have = self._read.get((table, match))
        return have[0] if have is not None and len(have[0]) < have[1] else None

    def rows_holding(self, word: str) -> float:
        """About how many rows hold `word` (an FTS5 string): from the span of its newest RARITY_PROBE."""
        ids = self(word, RARITY_PROBE)
        if len(ids) < RARITY_PROBE:
            return float(len(ids))
        return RARITY_PROBE * self.total / max(self.top - ids[-1] + 1, 1)

    def narrow(self, quoted: list[str]) -> list[str]:
        """The rarest of a phrase's words, or its rarest two when the rarest is in more rows than a
        literal lookup reads (`fts.Relaxed.narrowed`)."""
        by_rarity = sorted(quoted, key=self.rows_holding)
        return by_rarity[:1] if self.rows_holding(by_rarity[0]) <= LITERAL_SCAN else by_rarity[:2]

    def __call__(self, match: str, limit: int, table: str = "observations_fts") -> list[int]:
        have = self._read.get((table, match))
        if have is not None and (have[1] >= limit or len(have[0]) < have[1]):  # enough, or all there is
            return have[0][:limit]
        sql = f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?"
        ids = [r[0] for r in self.conn.execute(sql, (match, limit))]
        self._read[(table, match)] = (ids, limit)
        return ids


def _lookup(
    newest_of: _Newest, match: str, filters: Filters, table: str = "observations_fts", literal: bool = False
) -> list[int]:
    """The newest matches of one FTS5 expression, filtered, bounded: FTS5 streams rowids newest first.

    `literal`: its phrases are identifiers and paths, looked for as typed (`_literal_lookup`).

    With a project, a rare expression's rows are all read and filtered here (a few hundred rowids);
    a common one's come from the index's project terms (m010), which cost a seek into the project's
    long doclist per match (1.5 ms for a word in 31 of its rows) but stop at the page."""
    scoped = bool(newest_of.project and filters.project and table == "observations_fts")
    relaxed = fts.relax(match) if table == "observations_fts" else None
    literals = [fts.literal(p) for p in relaxed.phrases] if relaxed is not None and literal else []
    if relaxed is not None and literals and all(literals):
        narrowed = relaxed.narrowed(newest_of.narrow)
        if scoped and len(newest_of(narrowed, LITERAL_SCAN)) == LITERAL_SCAN:
            narrowed = f"({narrowed}) AND {newest_of.project}"
            filters = msgspec.structs.replace(filters, project=None)
        return _literal_lookup(newest_of, narrowed, [x for x in literals if x], filters)
    if scoped:
        every = newest_of.read(match) if relaxed is None else None
        if every is not None:  # the idf's read had all its rows: keep the project's
            return _filtered(newest_of.conn, every, filters)
        match = f"({match}) AND {newest_of.project}"
        filters = msgspec.structs.replace(filters, project=None)
        relaxed = fts.relax(match)
    if relaxed is not None:
        return _phrase_lookup(newest_of.conn, relaxed, filters)
    clauses, params = _filters_sql(filters)
    if not clauses:
        return newest_of(match, PER_LOOKUP, table)
    sql = f"""SELECT f.rowid FROM (
                  SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?) f
              JOIN observations o ON o.id = f.rowid
              WHERE {" AND ".join(clauses)} LIMIT ?"""
    return [r[0] for r in newest_of.conn.execute(sql, (match, SCAN_LIMIT, *params, PER_LOOKUP))]


def _filtered(conn: sqlite3.Connection, ids: list[int], filters: Filters) -> list[int]:
    """Those of `ids` that pass the filters, newest first."""
    clauses, params = _filters_sql(filters)
    sql = (
        "SELECT o.id FROM observations o WHERE o.id IN (SELECT value FROM json_each(?))"
        f" AND {' AND '.join(clauses)} ORDER BY o.id DESC"
    )
    return [r[0] for r in conn.execute(sql, (json.dumps(ids), *params))]


def _phrase_lookup(conn: sqlite3.Connection, relaxed: fts.Relaxed, filters: Filters) -> list[int]:
    """The newest rows that hold each phrase (`save_hook`, `src/auth.ts`) in order (store/fts.py).

    The index gives the newest rows holding all its words, a page at a time; each row's title, path
    and command are checked first, its content only when they do not hold the phrase. Within the
    PHRASE_SCAN newest such rows the answer is the positional index's; older ones are not looked at."""
    clauses, params = _filters_sql(filters)
    where = "".join(f" AND {c}" for c in clauses)
    check = fts.PhraseCheck(relaxed)
    out = _Capped()
    below = None
    scanned = 0
    while len(out) < PER_LOOKUP:
        if scanned >= PHRASE_SCAN and below is not None:
            out.read_down_to = below  # older candidates were not checked: `_idf` estimates from density
            break
        bound = "" if below is None else " AND rowid < ?"
        ids = [
            r[0]
            for r in conn.execute(
                f"SELECT rowid FROM observations_fts WHERE observations_fts MATCH ?{bound} ORDER BY rowid DESC LIMIT ?",
                (relaxed.match, *(() if below is None else (below,)), PHRASE_PAGE),
            )
        ]
        if not ids:
            break
        scanned += len(ids)
        below = ids[-1]
        rows = conn.execute(
            f"SELECT o.id, o.title, o.file_path, o.command FROM observations o WHERE o.id IN ({_marks(ids)}){where}",
            [*ids, *params],
        ).fetchall()
        check.add(rows)
        rest = [r[0] for r in rows if not check.holds(r[0])]
        if rest:
            sql, args = relaxed.prefilter("content")
            check.add(
                conn.execute(
                    f"SELECT id, content FROM observations WHERE id IN ({_marks(rest)}){' AND ' + sql if sql else ''}",
                    [*rest, *args],
                )
            )
        out.extend(sorted((r[0] for r in rows if check.holds(r[0])), reverse=True))
        if len(ids) < PHRASE_PAGE:
            break
    del out[PER_LOOKUP:]
    return out


def _literal_lookup(newest_of: _Newest, match: str, literals: list[fts.Literal], filters: Filters) -> list[int]:
    """The newest rows where each identifier or path stands as typed in one field (`fts.Literal`).

    Rows holding every word come from the index, LITERAL_SCAN newest at most. SQLite keeps those whose
    title, path or command hold each literal; when they are not PER_LOOKUP yet, the content of the newest
    LITERAL_CONTENT_SCAN too (the rows holding common words are long: 5 KB on average for `types index
    ts`). Python checks word edges on the few SQLite kept."""
    clauses, params = _filters_sql(filters)
    ids = newest_of(match, LITERAL_SCAN)
    out = _Capped()
    if len(ids) == LITERAL_SCAN:
        out.read_down_to = ids[-1]  # older rows were not looked at: `_idf` estimates from density
    if not ids:
        return out
    short = ("o.title", "o.file_path", "o.command")
    where = "".join(f" AND {c}" for c in clauses)
    held: set[int] = set()
    for fields, scope in ((short, ids), (("o.content",), ids[:LITERAL_CONTENT_SCAN])):
        likes = " AND ".join("(" + " OR ".join(f"{f} LIKE ? ESCAPE '\\'" for f in fields) + ")" for _ in literals)
        # Content is long: its head only comes back (lowering all of it in SQLite cost twice the LIKE);
        # a literal the LIKE found past the head is taken as found there.
        shown = ", ".join(f"lower({f})" for f in fields) if fields is short else f"substr(o.content, 1, {SCORED_CHARS})"
        rows = newest_of.conn.execute(
            f"SELECT o.id, {shown} FROM observations o WHERE o.id IN (SELECT value FROM json_each(?))"
            f"{where} AND {likes}",
            (json.dumps(scope), *params, *(lit.like for lit in literals for _ in fields)),
        ).fetchall()
        if fields is short:
            held.update(r[0] for r in rows if all(any(lit.holds(t) for t in r[1:]) for lit in literals))
        else:
            heads = [(r[0], r[1].lower()) for r in rows]
            held.update(i for i, head in heads if all(lit.text not in head or lit.holds(head) for lit in literals))
        if len(held) >= LITERAL_ENOUGH:
            break
    out.extend(sorted(held, reverse=True)[:PER_LOOKUP])
    return out


class _Capped(list[int]):
    """A phrase lookup's rows; `read_down_to` > 0 when it stopped at PHRASE_SCAN candidates, not at the last."""

    read_down_to: int = 0


_INDEXED_BY_PROJECT: Final = "SELECT 1 FROM schema_migrations WHERE name = 'm010_project_in_index'"
SUBPROJECTS: Final = 64  # folders under a project with rows of their own, asked of the index by name


def _one_project(filters: Filters) -> str | None:
    """The project the search is narrowed to, or None for every project."""
    return filters.project if filters.project and filters.project != ALL_PROJECTS else None


def _project_match(conn: sqlite3.Connection, filters: Filters) -> str | None:
    """The project filter as index terms: the project's and those of the folders under it that have
    rows (a session that `cd`ed into one), or None without a project or with too many of them."""
    project = _one_project(filters)
    if not project or not conn.execute(_INDEXED_BY_PROJECT).fetchone():
        return None  # a store the daemon has not migrated yet (a read-only CLI): rows are filtered as read
    top = project.rstrip("/") or "/"
    under = [
        r[0]
        for r in conn.execute(  # one index seek per folder: a skip-scan of observations(project, ts)
            """WITH RECURSIVE under(p) AS (
                   SELECT min(project) FROM observations WHERE project > ?1 AND project < ?2
                   UNION ALL
                   SELECT (SELECT min(project) FROM observations WHERE project > under.p AND project < ?2)
                   FROM under WHERE under.p IS NOT NULL)
               SELECT p FROM under WHERE p IS NOT NULL LIMIT ?3""",
            (top + "/", top + "0", SUBPROJECTS + 1),
        )
    ]
    if len(under) > SUBPROJECTS:
        return None
    return "(" + " OR ".join(f'"{fts.scope_token(p)}"' for p in [top, *under]) + ")"


def _filters_sql(filters: Filters) -> tuple[list[str], list[Any]]:
    """`filter_clauses`, except that a project also takes the folders under it (a session that `cd`ed into one)."""
    project = _one_project(filters)
    clauses, params = filter_clauses(Filters(**{**_as_dict(filters), "project": None}))
    if project:
        top = project.rstrip("/") or "/"
        clauses.insert(0, "(o.project = ? OR (o.project > ? AND o.project < ?))")
        params[0:0] = [top, top + "/", top + "0"]  # '0' sorts right after '/'
    return clauses, params


def _as_dict(filters: Filters) -> dict[str, Any]:
    return {name: getattr(filters, name) for name in filters.__struct_fields__}


def _unsaid(filters: Filters) -> str:
    """The project's own path, lowercase, when the search is in one project: every row there may
    name it ("warning: Git tree '/home/me/skypilot-flake' is dirty"), so its words say nothing."""
    top = (_one_project(filters) or "").rstrip("/\\").lower()
    return top if len(top) > 1 else ""


def _rank(
    conn: sqlite3.Connection,
    query: Query,
    found: dict[int, _Candidate],
    idf: list[float],
    now: float,
    unsaid: str = "",
) -> tuple[list[Hit], dict[int, str]]:
    """BM25 over title, content, path and command, computed here on the best candidates' text; and the
    content read (its first SCORED_CHARS) of the best of them, by id. `unsaid`: text not counted."""
    if not found:
        return [], {}
    idf = [w * HINT_WORD_WEIGHT if term.hint else w for term, w in zip(query.terms, idf, strict=True)]

    def rough(kv: tuple[int, _Candidate]) -> tuple[float, int]:
        cand = kv[1]
        weight = sum(idf[i] for i in range(len(idf))) if cand.all_terms else sum(idf[i] for i in cand.found_by)
        return (-weight, -kv[0])

    best = [rowid for rowid, _ in sorted(found.items(), key=rough)[:RESCORE]]
    rows = {
        r[0]: r
        for r in conn.execute(
            f"SELECT {HIT_COLUMNS}, o.last_ts, o.command FROM observations o WHERE o.id IN ({_marks(best)})", best
        )
    }
    # Two passes: title, path and command for every candidate, with the prompt of its turn (a terse
    # command that its turn asked for is not cut here), then the content of the best of them (content
    # is most of the bytes a row holds, and reading it is most of a search's time).
    short = {rowid: _count(query, _short_fields(r), unsaid=unsaid) for rowid, r in rows.items()}
    words = query.word_indexes
    lacking = {  # rows that may lack a word: only for those does their turn's prompt count (`_score`)
        rowid: r
        for rowid, r in rows.items()
        if not found[rowid].all_terms
        and not words <= found[rowid].found_by | {i for i, tf in enumerate(short[rowid].tf) if tf}
    }
    asked = _turn_prompts(conn, query, lacking)
    first = {
        rowid: _score(query, found[rowid], idf, r, short[rowid], now, asked.get(rowid)) for rowid, r in rows.items()
    }
    top = sorted((rowid for rowid in first if first[rowid] is not None), key=lambda i: first[i] or 0.0)
    top = top[:WITH_CONTENT]
    contents = dict(
        conn.execute(
            f"SELECT id, substr(content, 1, ?) FROM observations WHERE id IN ({_marks(top)})", [SCORED_CHARS, *top]
        ).fetchall()
    )
    hits: list[Hit] = []
    for rowid, r in rows.items():
        content = contents.get(rowid)
        if content is None:
            score = first[rowid]
        else:
            whole = _count(query, ((FIELD_WEIGHTS[1], content),), into=short[rowid], unsaid=unsaid)
            score = _score(query, found[rowid], idf, r, whole, now, asked.get(rowid))
        if score is None:
            continue
        hits.append(
            Hit(
                id=r[0], type=r[1], project=r[2], session_id=r[3], ts=r[4], title=r[5], file_path=r[6],
                count=r[7], score=round(score, 4),
            )
        )  # fmt: skip
    hits.sort(key=lambda h: (h.score or 0.0, -h.id))
    return hits, contents


def _turn_prompts(conn: sqlite3.Connection, query: Query, rows: dict[int, Any]) -> dict[int, tuple[int, ...]]:
    """How often each term occurs in the prompt of each candidate's turn (its first SCORED_CHARS), by
    candidate id; counted once per prompt, which a turn's rows share.

    A command or an edit seldom repeats the words of what it was for ("start the app":
    `uv run streamlit run app.py`); the prompt that asked for it does."""
    pairs = [[rowid, r[3]] for rowid, r in rows.items() if r[1] != "prompt"]
    if not pairs:
        return {}
    turn = conn.execute(
        """SELECT json_extract(c.value, '$[0]'), (
                      SELECT max(p.observation_id) FROM prompts p WHERE p.session_id = json_extract(c.value, '$[1]')
                      AND p.observation_id < json_extract(c.value, '$[0]'))
           FROM json_each(?) c""",
        (json.dumps(pairs),),
    ).fetchall()
    prompts = {p for _, p in turn if p is not None}
    counts = {
        r[0]: tuple(term.count(r[1].lower()) for term in query.terms)
        for r in conn.execute(
            "SELECT id, substr(title || ' ' || content, 1, ?) FROM observations"
            " WHERE id IN (SELECT value FROM json_each(?))",
            (SCORED_CHARS, json.dumps(sorted(prompts))),
        )
    }
    return {rowid: counts[p] for rowid, p in turn if p in counts}


def _marks(ids: list[int]) -> str:
    return ",".join("?" * len(ids))


@dataclass
class _Counted:
    """A row's term frequencies over the fields read so far, and their length: the second pass adds
    the content to what the first pass counted in the title, path and command."""

    tf: list[float]
    length: int
    near: list[float] = field(default_factory=list)  # by `Query.neighbours`: the pair standing together


def _count(
    query: Query, fields: Iterable[tuple[float, str | None]], into: _Counted | None = None, unsaid: str = ""
) -> _Counted:
    """Each term's weighted frequency in `fields` ((weight, text) pairs), added to `into`'s, less what
    the text `unsaid` holds (`_unsaid`). A word inside an identifier (clientId, skypilot-simple) counts
    PART_WEIGHT of a word standing alone."""
    neighbours = query.neighbours
    if into is None:
        counted = _Counted([0.0] * len(query.terms), 0, [0.0] * len(neighbours))
    else:
        counted = _Counted(list(into.tf), into.length, list(into.near))
    tf = counted.tf
    for w, text in fields:
        if not text:
            continue
        raw = text[:SCORED_CHARS]
        low = raw.lower()
        if unsaid and unsaid in low:
            raw = _without(unsaid).sub("/", raw)
            low = raw.lower()
        counted.length += len(low)
        here = [0] * len(query.terms)
        for i, term in enumerate(query.terms):
            n = term.count(low)
            if n:
                parts = min(n, term.kebab_parts(low)) if term.camel and "-" in low else 0
                tf[i] += w * (min(n, 20) - (1 - PART_WEIGHT) * min(parts, 20))
                here[i] = n
            elif term.camel and term.text_lower in low and (n := term.parts_in(raw)):
                tf[i] += PART_WEIGHT * w * min(n, 20)  # `createServerClient` holds "client"
        for k, (i, j, together) in enumerate(neighbours):
            if here[i] and here[j] and (n := occurrences(together, low)):
                counted.near[k] += w * min(n, 20)
    return counted


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


def _score(
    query: Query,
    cand: _Candidate,
    idf: list[float],
    r: Sequence[Any],
    counted: _Counted,
    now: float,
    asked: Sequence[int] | None = None,
) -> float | None:
    """Negative (lower is better), as FTS5 ranks; None: it holds none of the words.

    `asked`: each term's count in the prompt of the row's turn, a field of low weight for the words
    the row lacks (`_turn_prompts`)."""
    length_norm = K1 * (1 - B + B * (counted.length / AVERAGE_CHARS))
    relevance = 0.0
    covered: set[int] = set()
    for i, term in enumerate(query.terms):
        tf = counted.tf[i]
        if not tf and (cand.all_terms or i in cand.found_by):
            tf = FIELD_WEIGHTS[1]  # the index found it in content not read yet, or past the scored part
        if tf:
            relevance += idf[i] * tf * (K1 + 1) / (tf + length_norm)
            covered.update(term.covers or (i,))
    if not relevance:
        return None  # found through another term's lookup only, and holds none of the words
    for k, (i, j, _) in enumerate(query.neighbours):
        if near := counted.near[k]:
            relevance += NEAR_WEIGHT * min(idf[i], idf[j]) * near * (K1 + 1) / (near + length_norm)
    if asked:
        for i, term in enumerate(query.terms):
            stands_for = set(term.covers or (i,))
            if not stands_for <= covered and (n := asked[i]):
                tf = TURN_WEIGHT * min(n, 20)
                relevance += idf[i] * tf * (K1 + 1) / (tf + length_norm)
                covered.update(stands_for)
    coverage = len(covered & query.word_indexes) / query.words
    age_days = max(0.0, now - float(r[8])) / 86400.0
    recency = 1.0 + 1.0 / (1.0 + age_days / RECENCY_HALF_LIFE_DAYS)
    weight: float = TYPE_WEIGHT.get(r[1], 1.0) * (HINT_BOOST if r[1] in query.type_hints else 1.0)
    if r[1] == "command" and r[9]:
        weight *= _command_weight(r[9])
    # coverage counts most: all the words before some of them
    return -relevance * weight * recency * (0.15 + 0.85 * coverage**2)


@lru_cache(maxsize=4096)
def _command_weight(command: str) -> float:
    """Build and test commands above trivial ones; a commit's message restates the work it records,
    and the rows that did the work answer better. Cached: hits repeat commands."""
    return COMMAND_KIND_WEIGHT[0 if _COMMIT.match(command) else command_kind(command)]


def _fold_key(hit: Hit) -> tuple[str, ...]:
    """Rows that say the same thing: one command or title again (numbers aside), or one session's todos."""
    if hit.type == "task":
        return ("task", hit.session_id)
    return (hit.type, hit.file_path or "", _folded_title(hit.title))


@lru_cache(maxsize=4096)
def _folded_title(title: str) -> str:
    """A title without its numbers and spacing: hits repeat titles (a command run thirty times)."""
    return _SPACE.sub(" ", _DIGITS.sub("#", title.lower())).strip()


def _fold(hits: list[Hit]) -> list[Hit]:
    """The best hit of each group of near-identical ones, carrying how many it stands for."""
    kept: dict[tuple[str, ...], Hit] = {}
    for hit in hits:  # best first
        key = _fold_key(hit)
        first = kept.get(key)
        if first is None:
            kept[key] = hit
        else:
            first.similar += 1
    return list(kept.values())


__all__ = ["TYPE_WEIGHT", "Term", "search"]
