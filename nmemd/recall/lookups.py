"""Search's candidates: bounded FTS5 lookups, newest first, whose cost does not grow with the matches.

A query's terms are looked up once all together (the rarest few) and once each. Every lookup
reads FTS5's matches newest first and stops after a fixed number, so a word in a third of a
million rows costs what a rare word costs; the same read gives each term's idf (`idf`). Phrases,
identifiers and paths are checked as typed on the rows holding their words (store/fts.py); a
project filter uses the index's project terms (m010).
"""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Any, Final

import msgspec

from nmemd.recall.queries import ALL_PROJECTS, Filters, filter_clauses, marks
from nmemd.recall.ranking import RESCORE, SCORED_CHARS, Candidate
from nmemd.recall.terms import Query
from nmemd.store import fts

_SPAN: Final = (
    "SELECT (SELECT max(id) FROM observations), (SELECT min(id) FROM observations),"
    f" EXISTS (SELECT 1 FROM schema_migrations WHERE name = '{fts.NEGATED_SINCE}')"
)
PER_LOOKUP: Final = 200  # newest matches taken per lookup (all terms, then each term)
SCAN_LIMIT: Final = 2000  # matches a filtered lookup reads at most before giving up on older ones
PHRASE_PAGE: Final = 200  # rows holding a phrase's words, checked for the phrase at a time (store/fts.py)
# Rows holding a phrase's words checked at most (their text is read: ~5-15 ms a page at a million rows).
PHRASE_SCAN: Final = 600
LITERAL_SCAN: Final = 600  # rows holding an identifier's or path's words checked for it as typed (in C)
RARITY_PROBE: Final = 64  # a word's newest rowids read to tell how rare it is (`_Newest.rows_holding`)
LITERAL_CONTENT_SCAN: Final = 200  # of which the content is read, when titles, paths and commands fall short
LITERAL_ENOUGH: Final = RESCORE  # rows whose title, path or command hold a literal: its content is not read then
ALL_TERMS_AT_MOST: Final = 3  # terms in the lookup of rows holding them all (the rarest)
ENOUGH_CANDIDATES: Final = 200  # a filtered search stops looking up its common words with this many


def candidates(conn: sqlite3.Connection, query: Query, filters: Filters) -> tuple[dict[int, Candidate], list[float]]:
    """Rows found by any lookup, and each term's inverse document frequency (estimated, see `_idf`)."""
    found: dict[int, Candidate] = {}
    # The span of ids from two rowid seeks of observations (a scan of the index would read its content
    # view, every column), and whether the index has them negated (m016).
    top, bottom, negated = conn.execute(_SPAN).fetchone()
    top, bottom = top or 0, bottom or 0
    main = fts.MAIN if negated else fts.MAIN_BEFORE_M016  # a store the daemon has not migrated: a CLI's read
    total = max(top - bottom + 1, 1)
    filtered = bool(_filters_sql(filters)[0])
    places = _places(conn, filters)
    if places:  # sessions started here worked elsewhere too: their rows there are this project's
        filters = _Scoped(**_as_dict(filters), places=places)
    newest_of = _Newest(conn, main, _project_match(conn, filters, places), top, total)
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
                for rowid in newest:  # a word's newest rows: the most rows any lookup returns
                    cand = found.get(rowid)
                    if cand is None:
                        cand = found[rowid] = Candidate()
                    cand.found_by.add(i)
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
                cand = _candidate(found, rowid)
                cand.all_terms = cand.all_terms or len(rarest) == len(words)
                cand.found_by.update(rarest)
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc):
                raise
    # A filtered word, a phrase, an identifier or a path costs a lookup of its own (up to SCAN_LIMIT rows
    # read, or its words' rows checked for it as typed): the rarest terms first, and the common ones
    # only while candidates are short of what ranking takes (their rows weigh least in `ranking.rank`).
    for i in sorted(range(len(query.terms)), key=lambda i: -idf[i]):
        term = query.terms[i]
        try:
            if not checked[i] and len(found) < ENOUGH_CANDIDATES:
                for rowid in _lookup(newest_of, term.fts, filters, literal=not term.phrase):
                    _candidate(found, rowid).found_by.add(i)
            if term.grams:  # inside an unspaced run: the pairs index
                for rowid in _lookup(newest_of, term.grams, filters, fts.GRAMS):
                    _candidate(found, rowid).found_by.add(i)
        except sqlite3.OperationalError as exc:
            if "interrupt" not in str(exc):
                raise
    return found, idf


def _candidate(found: dict[int, Candidate], rowid: int) -> Candidate:
    """The row's entry in `found`, made the first time (most rows come back from several lookups)."""
    cand = found.get(rowid)
    if cand is None:
        cand = found[rowid] = Candidate()
    return cand


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

    def __init__(
        self, conn: sqlite3.Connection, main: fts.Index, project: str | None = None, top: int = 0, total: int = 1
    ) -> None:
        self.conn = conn
        self.main = main  # the main index as this store has it (`fts.MAIN`, or from before m016)
        self.project = project  # the filter's project in the index's terms (`_project_match`)
        self.top, self.total = top, total  # the index's newest rowid and its span, for `rows_holding`
        self._read: dict[tuple[str, str], tuple[list[int], int]] = {}  # (table, match) -> (rowids, limit)

    def read(self, match: str) -> list[int] | None:
        """Every row holding `match`, if an earlier read got them all (it returned fewer than it asked)."""
        have = self._read.get((self.main.table, match))
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

    def __call__(self, match: str, limit: int, index: fts.Index | None = None) -> list[int]:
        index = index or self.main
        have = self._read.get((index.table, match))
        if have is not None and (have[1] >= limit or len(have[0]) < have[1]):  # enough, or all there is
            return have[0][:limit]
        # One row out of SQLite, not one per rowid: a row crossing into Python (the GIL let go and taken
        # back, a tuple, an int) costs a fifth of what FTS5 spends finding it. group_concat's order is
        # not promised, so the rowids are put back in theirs.
        sql = f"SELECT group_concat(id) FROM ({index.newest()})"
        joined = self.conn.execute(sql, (match, limit)).fetchone()[0]
        ids = sorted(map(int, joined.split(",")), reverse=True) if joined else []
        self._read[(index.table, match)] = (ids, limit)
        return ids


def _lookup(
    newest_of: _Newest, match: str, filters: Filters, index: fts.Index | None = None, literal: bool = False
) -> list[int]:
    """The newest matches of one FTS5 expression, filtered, bounded: FTS5 streams rowids newest first.

    `literal`: its phrases are identifiers and paths, looked for as typed (`_literal_lookup`).

    With a project, a rare expression's rows are all read and filtered here (a few hundred rowids);
    a common one's come from the index's project terms (m010), which cost a seek into the project's
    long doclist per match (1.5 ms for a word in 31 of its rows) but stop at the page."""
    index = index or newest_of.main
    main = index is newest_of.main
    scoped = bool(newest_of.project and filters.project and main)
    relaxed = fts.relax(match) if main else None
    literals = [fts.literal(p) for p in relaxed.phrases] if relaxed is not None and literal else []
    if relaxed is not None and literals and all(literals):
        narrowed = relaxed.narrowed(newest_of.narrow)
        if scoped and len(newest_of(narrowed, LITERAL_SCAN)) == LITERAL_SCAN:
            narrowed = f"({narrowed}) AND {newest_of.project}"
            filters = _unscoped(filters)
        return _literal_lookup(newest_of, narrowed, [x for x in literals if x], filters)
    if scoped:
        every = newest_of.read(match) if relaxed is None else None
        if every is not None:  # the idf's read had all its rows: keep the project's
            return _filtered(newest_of.conn, every, filters)
        match = f"({match}) AND {newest_of.project}"
        filters = _unscoped(filters)
        relaxed = fts.relax(match)
    if relaxed is not None:
        return _phrase_lookup(newest_of, relaxed, filters)
    clauses, params = _filters_sql(filters)
    if not clauses:
        return newest_of(match, PER_LOOKUP, index)
    sql = f"""SELECT f.id FROM ({index.newest()}) f
              JOIN observations o ON o.id = f.id
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


def _phrase_lookup(newest_of: _Newest, relaxed: fts.Relaxed, filters: Filters) -> list[int]:
    """The newest rows that hold each phrase (`save_hook`, `src/auth.ts`) in order (store/fts.py).

    The index gives the newest rows holding all its words, a page at a time; each row's title, path
    and command are checked first, its content only when they do not hold the phrase. Within the
    PHRASE_SCAN newest such rows the answer is the positional index's; older ones are not looked at."""
    conn, main = newest_of.conn, newest_of.main
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
        ids = [
            r[0]
            for r in conn.execute(
                main.newest(older=below is not None),
                (relaxed.match, *(() if below is None else (main.bound(below),)), PHRASE_PAGE),
            )
        ]
        if not ids:
            break
        scanned += len(ids)
        below = ids[-1]
        rows = conn.execute(
            f"SELECT o.id, o.title, o.file_path, o.command FROM observations o WHERE o.id IN ({marks(ids)}){where}",
            [*ids, *params],
        ).fetchall()
        check.add(rows)
        rest = [r[0] for r in rows if not check.holds(r[0])]
        if rest:
            sql, args = relaxed.prefilter("content")
            check.add(
                conn.execute(
                    f"SELECT id, content FROM observations WHERE id IN ({marks(rest)}){' AND ' + sql if sql else ''}",
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
        if fields is not short:  # a row held already by a short field: its content need not be read for it
            scope = [i for i in scope if i not in held]
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


def one_project(filters: Filters) -> str | None:
    """The project the search is narrowed to, or None for every project."""
    return filters.project if filters.project and filters.project != ALL_PROJECTS else None


class _Scoped(Filters, kw_only=True):
    """Filters whose project has sessions that worked elsewhere too (`store.places`): those places' rows of
    those sessions pass its project filter."""

    places: list[str] = []


def _unscoped(filters: Filters) -> Filters:
    """The filters once the index's project terms select the project's rows: no project filter, unless
    some of those terms are other places, whose rows pass only when a session of the project stored them."""
    return filters if isinstance(filters, _Scoped) else msgspec.structs.replace(filters, project=None)


_HAS_PLACES: Final = "SELECT 1 FROM schema_migrations WHERE name = 'm013_session_places'"


def _places(conn: sqlite3.Connection, filters: Filters) -> list[str]:
    """Where the sessions started in the filter's project (or a folder under it) also worked, outside it."""
    project = one_project(filters)
    if not project or not conn.execute(_HAS_PLACES).fetchone():
        return []
    top = project.rstrip("/") or "/"
    rows = conn.execute(
        "SELECT DISTINCT project FROM session_places WHERE launch = ? OR (launch > ? AND launch < ?) LIMIT ?",
        (top, top + "/", top + "0", SUBPROJECTS + 1),
    ).fetchall()
    return [r[0] for r in rows]


def _project_match(conn: sqlite3.Connection, filters: Filters, places: list[str] | None = None) -> str | None:
    """The project filter as index terms: the project's, those of the folders under it that have rows
    (a session that `cd`ed into one) and the other places its sessions worked in, or None without a
    project or with too many of them."""
    project = one_project(filters)
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
    if len(under) + len(places or ()) > SUBPROJECTS:
        return None
    return "(" + " OR ".join(f'"{fts.scope_token(p)}"' for p in [top, *under, *(places or ())]) + ")"


def _filters_sql(filters: Filters) -> tuple[list[str], list[Any]]:
    """`filter_clauses`, except that a project also takes the folders under it (a session that `cd`ed into one)."""
    project = one_project(filters)
    clauses, params = filter_clauses(Filters(**{**_as_dict(filters), "project": None}))
    if project:
        top = project.rstrip("/") or "/"
        mine = "o.project = ? OR (o.project > ? AND o.project < ?)"
        values = [top, top + "/", top + "0"]  # '0' sorts right after '/'
        if isinstance(filters, _Scoped) and filters.places:  # and the rows its sessions stored elsewhere
            mine += (
                f" OR (o.project IN ({marks(filters.places)}) AND o.session_id IN (SELECT session_id FROM"
                " session_places WHERE launch = ? OR (launch > ? AND launch < ?)))"
            )
            values += [*filters.places, *values]
        clauses.insert(0, f"({mine})")
        params[0:0] = values
    return clauses, params


def _as_dict(filters: Filters) -> dict[str, Any]:
    return {name: getattr(filters, name) for name in Filters.__struct_fields__}
