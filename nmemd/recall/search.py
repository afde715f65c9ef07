"""Full-text search that answers questions, at a cost that does not grow with the matches.

`lookups` finds candidates (bounded FTS5 reads, newest first, each term's idf from the same read);
`ranking` scores the best of them (BM25 over their own text, coverage, kind, hints, recency) within
a time budget. Here: the two in order, near-identical rows (the same command run again, successive
todo snapshots) folded into the best of them with a count, and each shown hit's snippet.
"""

from __future__ import annotations

import re
import sqlite3
import time
from typing import Final

from nmemd.errors import QueryError
from nmemd.recall import lookups, ranking, snippets, turns, vocabulary
from nmemd.recall.queries import Filters, Hit, checked_limit, marks, teammates_of
from nmemd.recall.terms import Query, parse
from nmemd.remembered import remembered

# Lookups still running after this are cut short and the rest is ranked: an FTS5 prefix query has to
# merge every token under its prefix ("co*": ~0.25 s at a million rows), and a memory must answer.
# A person or a tool call can wait that long for a two-letter prefix; a hook gets less (replies).
TIME_BUDGET_S: Final = 1.0

_DIGITS: Final = re.compile(r"\d+")
_SAID: Final = frozenset({"stop", "assistant"})
_STOP_PREFIX: Final = "Stop: "
_SAID_CHARS: Final = 60  # titles are cut at different lengths: the Stop's carries its prefix


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
        found, idf = lookups.candidates(conn, query, filters)
        conn.set_progress_handler(None, 0)  # the budget is for lookups; ranking what they found is bounded
        hits, contents = ranking.rank(conn, query, found, idf, now, ranking.unsaid(lookups.one_project(filters)))
    except sqlite3.OperationalError as exc:
        raise QueryError(f"search failed: {exc}") from exc
    except UnicodeEncodeError:
        raise QueryError("a filter is not valid Unicode text") from None
    finally:
        conn.set_progress_handler(None, 0)
    why = bool(snippets.ASKS_WHY.search(text))
    twins: dict[int, list[Hit]] = {}
    folded = _fold(hits, twins, limit + turns.TURN_TOP)
    outcome = turns.asks_outcome(query, text)
    best = turns.surface(conn, query, folded, idf, why, turns.asks(text), twins, outcome)[:limit]
    if kinds := vocabulary.kinds_only(query, text):  # "what changed": the newest edits
        best = vocabulary.with_newest(conn, best, kinds, filters, limit)
    teammates_of(conn, best)
    _snippets(conn, query, best, contents, why)
    return best


def _snippets(conn: sqlite3.Connection, query: Query, hits: list[Hit], contents: dict[int, str], why: bool) -> None:
    """Each shown hit's snippet (only for what is shown: it costs a regex per word over the content). Ranking
    read the first SCAN_CHARS of the best rows (`ranking.rank`); the others' are read here."""
    longer = [h.id for h in hits if h.id not in contents]
    if longer:
        rows = conn.execute(
            f"SELECT id, substr(content, 1, ?) FROM observations WHERE id IN ({marks(longer)})",
            [snippets.SCAN_CHARS, *longer],
        )
        contents = {**contents, **dict(rows.fetchall())}
    for hit in hits:
        cut = snippets.cut(query, contents.get(hit.id) or "", hit.title, why=why)
        if cut is not None:
            hit.snippet, hit.spans = cut


@remembered(8192)
def _folded_title(title: str) -> str:
    """A title without its numbers and spacing: hits repeat titles (a command run thirty times). A search folds
    ~80 hits, ~23 of their titles new on a 1M store: 8,192 hold ~350 searches' (~4 MB at most)."""
    return " ".join(_DIGITS.sub("#", title.lower()).split())  # `\s` is `str.isspace`, as `split()` reads


def _fold(hits: list[Hit], twins: dict[int, list[Hit]] | None = None, keep: int | None = None) -> list[Hit]:
    """The best hit of each group of near-identical ones, carrying how many it stands for; in `twins`, by
    the kept prompt's id, the prompts folded into it (a prompt sent again: each began a turn of its own).
    Near-identical: one command or title again (numbers aside), or one session's todos. `keep`: the first
    groups only (once that many are found, a hit is read only as far as it may join one of them)."""
    kept: dict[tuple[str, ...], Hit] = {}
    heads: set[tuple[str, ...]] = set()  # what the kept groups' keys start with, their titles aside
    full = False
    for hit in hits:  # best first
        kind = hit.type
        if kind == "task":
            key: tuple[str, ...] = ("task", hit.session_id)
            head = key
        else:
            said = kind in _SAID  # a turn's last text is its Stop too: the same words once
            head = ("said", hit.session_id) if said else (kind, hit.file_path or "")
            if full and head not in heads:
                continue  # it joins none of the groups kept, and starts none that is kept
            title = (
                _folded_title(hit.title.removeprefix(_STOP_PREFIX))[:_SAID_CHARS] if said else _folded_title(hit.title)
            )
            key = (*head, title)
        first = kept.get(key)
        if first is None:
            if not full:
                kept[key] = hit
                heads.add(head)
                full = keep is not None and len(kept) >= keep
        else:
            first.similar += 1
            if twins is not None and kind == "prompt" and hit.session_id == first.session_id:
                twins.setdefault(first.id, []).append(hit)
    return list(kept.values())


__all__ = ["Filters", "Hit", "search"]
