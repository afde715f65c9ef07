"""Full-text search that answers questions, at a cost that does not grow with the matches.

A query's terms (`terms.parse`) are looked up once all together and once each. Every
lookup reads FTS5's matches newest first and stops after a fixed number, so a word in a
third of a million rows costs what a rare word costs; FTS5's bm25 is summed per row over
the terms that found it. Rows that hold more of the terms rank first (coverage), then
BM25, weighted by what kind of observation it is, by the question's hints ("which file
did we edit": edits) and by recency. Near-identical rows (the same command run again,
successive todo snapshots) fold into the best of them, with a count.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nmemd.errors import QueryError
from nmemd.recall.queries import _HIT_COLUMNS, ALL_PROJECTS, Filters, Hit, _limit, _where
from nmemd.recall.summary import command_kind
from nmemd.recall.terms import Query, Term, parse

# How much an observation type matters when ranking equally relevant text. What changed the
# code (edits, writes) and what went wrong (errors) answer most questions; reads and todo
# snapshots restate them and recur, so they rank below.
TYPE_WEIGHT: Final[dict[str, float]] = {
    "error": 1.3,
    "edit": 1.3,
    "write": 1.3,
    "prompt": 1.0,  # the user's own words: they match the question more often than they answer it
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
BM25_WEIGHTS: Final = (4.0, 1.0, 2.5, 2.5)  # title, content, file_path, command
RECENCY_HALF_LIFE_DAYS: Final = 14.0
PER_LOOKUP: Final = 200  # newest matches scored per lookup (all terms, then each term)
SCAN_LIMIT: Final = 4000  # matches a filtered lookup reads at most before giving up on older ones
RESCORE: Final = 120  # best candidates fetched and ranked in full
SNIPPET_CHARS: Final = 160

_DIGITS: Final = re.compile(r"\d+")
_SPACE: Final = re.compile(r"\s+")


@dataclass
class _Candidate:
    bm25: float = 0.0  # FTS5's bm25 summed over the lookups that found it: negative, lower is better
    terms: set[int] = field(default_factory=set)


def search(
    conn: sqlite3.Connection, text: str, filters: Filters | None = None, limit: int = 20, now: float | None = None
) -> list[Hit]:
    """Ranked hits for `text` (words, phrases, `prefix*`, identifiers, paths), best first."""
    filters = filters or Filters()
    query = parse(text)
    limit = _limit(limit)
    now = time.time() if now is None else now
    try:
        found = _candidates(conn, query, filters)
        hits = _rank(conn, query, found, now)
    except sqlite3.OperationalError as exc:
        raise QueryError(f"search failed: {exc}") from exc
    except UnicodeEncodeError:
        raise QueryError("a filter is not valid Unicode text") from None
    hits = _fold(hits)[:limit]
    _add_snippets(conn, query, hits)
    return hits


def _candidates(conn: sqlite3.Connection, query: Query, filters: Filters) -> dict[int, _Candidate]:
    found: dict[int, _Candidate] = {}
    every = set(range(query.words))
    if query.words > 1:
        for rowid, score in _lookup(conn, query.all_of(), filters):
            found[rowid] = _Candidate(score, set(every))
    for i, term in enumerate(query.terms):
        for rowid, score in _lookup(conn, term.fts, filters):
            got = found.setdefault(rowid, _Candidate())
            if got.terms != every:  # an all-terms match already has its whole score
                got.bm25 += score
                got.terms.update(term.covers or (i,))
    return found


def _lookup(conn: sqlite3.Connection, match: str, filters: Filters) -> list[tuple[int, float]]:
    """The newest matches of one FTS5 expression with their bm25, filtered, bounded."""
    weights = ", ".join(str(w) for w in BM25_WEIGHTS)
    clauses, params = _filters_sql(filters)
    if not clauses:
        sql = f"""SELECT rowid, bm25(observations_fts, {weights}) FROM observations_fts
                  WHERE observations_fts MATCH ? ORDER BY rowid DESC LIMIT ?"""
        return conn.execute(sql, (match, PER_LOOKUP)).fetchall()
    sql = f"""SELECT f.rowid, f.score FROM (
                  SELECT rowid, bm25(observations_fts, {weights}) AS score FROM observations_fts
                  WHERE observations_fts MATCH ? ORDER BY rowid DESC LIMIT ?) f
              JOIN observations o ON o.id = f.rowid
              WHERE {" AND ".join(clauses)} LIMIT ?"""
    return conn.execute(sql, (match, SCAN_LIMIT, *params, PER_LOOKUP)).fetchall()


def _filters_sql(filters: Filters) -> tuple[list[str], list[Any]]:
    """`_where`, except that a project also takes the folders under it (a session that `cd`ed into one)."""
    project = filters.project if filters.project and filters.project != ALL_PROJECTS else None
    clauses, params = _where(Filters(**{**_as_dict(filters), "project": None}))
    if project:
        top = project.rstrip("/") or "/"
        clauses.insert(0, "(o.project = ? OR (o.project > ? AND o.project < ?))")
        params[0:0] = [top, top + "/", top + "0"]  # '0' sorts right after '/'
    return clauses, params


def _as_dict(filters: Filters) -> dict[str, Any]:
    return {name: getattr(filters, name) for name in filters.__struct_fields__}


def _rank(conn: sqlite3.Connection, query: Query, found: dict[int, _Candidate], now: float) -> list[Hit]:
    if not found:
        return []
    n = query.words
    best = sorted(found.items(), key=lambda kv: (-len(kv[1].terms), kv[1].bm25, -kv[0]))[:RESCORE]
    ids = [rowid for rowid, _ in best]
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        f"SELECT {_HIT_COLUMNS}, o.last_ts, o.command FROM observations o WHERE o.id IN ({marks})", ids
    ).fetchall()
    hits: list[Hit] = []
    for r in rows:
        cand = found[r[0]]
        coverage = len(cand.terms) / n
        age_days = max(0.0, now - r[8]) / 86400.0
        recency = 1.0 + 1.0 / (1.0 + age_days / RECENCY_HALF_LIFE_DAYS)
        weight = TYPE_WEIGHT.get(r[1], 1.0) * (HINT_BOOST if r[1] in query.type_hints else 1.0)
        if r[1] == "command" and r[9]:
            weight *= COMMAND_KIND_WEIGHT[command_kind(r[9])]
        # bm25 is negative (lower is better); coverage counts most: all the words before some of them.
        score = cand.bm25 * weight * recency * (0.15 + 0.85 * coverage**2)
        hits.append(
            Hit(
                id=r[0], type=r[1], project=r[2], session_id=r[3], ts=r[4], title=r[5], file_path=r[6],
                count=r[7], score=round(score, 4),
            )
        )  # fmt: skip
    hits.sort(key=lambda h: (h.score or 0.0, -h.id))
    return hits


def _fold_key(hit: Hit) -> tuple[str, ...]:
    """Rows that say the same thing: one command or title again (numbers aside), or one session's todos."""
    if hit.type == "task":
        return ("task", hit.session_id)
    title = _SPACE.sub(" ", _DIGITS.sub("#", hit.title.lower())).strip()
    return (hit.type, hit.file_path or "", title)


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


def _add_snippets(conn: sqlite3.Connection, query: Query, hits: Sequence[Hit]) -> None:
    """The matched words in context, from the text that matched (FTS5's own snippet, one row at a time)."""
    match = query.any_of()
    for hit in hits:
        row = conn.execute(
            "SELECT snippet(observations_fts, -1, '[', ']', '…', 16) FROM observations_fts"
            " WHERE observations_fts MATCH ? AND rowid = ?",
            (match, hit.id),
        ).fetchone()
        if row and row[0] and "[" in row[0]:
            hit.snippet = row[0][: SNIPPET_CHARS * 2]


__all__ = ["TYPE_WEIGHT", "Term", "search"]
