"""The words of questions, mapped onto what nmem stores.

People ask "which file did we change", "what did we run", "what broke", "what did we agree";
the rows that answer say `Edit src/app.ts`, `$ npm test`, `Bash failed (exit 1)`, or the
agent's own words. A verb of `terms.TYPE_HINTS` names the kind of row it asks for: a row of
that kind counts as holding it for ranking's coverage (at KIND_COVERAGE of a word it holds),
so the everyday phrasing ranks the rows the precise one does; a question made only of such
words ("what changed") gets the newest rows of its kinds. The words themselves are still
searched (at less weight): nothing typed is dropped. When nothing is found, `try_instead`
says what to try.
"""

from __future__ import annotations

import sqlite3
from functools import lru_cache
from typing import Final

import msgspec

from nmemd.recall import queries
from nmemd.recall.queries import Filters, Hit
from nmemd.recall.terms import TYPE_HINTS, Query

_SUGGESTED_TYPES: Final = ("edit", "command", "error", "prompt")
# A row of the kind a word asks for holds that word at this share of coverage: less than the word
# itself, since "which file did we change to fix X" means the edit *about X*, not any edit.
KIND_COVERAGE: Final = 0.5
_NOUNS: Final = frozenset({"file", "files"})
_MADE: Final = frozenset({"edit", "write"})


def kinds_of(word: str) -> tuple[str, ...]:
    """The observation types a question word asks for ("changed": edit, write); () for another word."""
    return TYPE_HINTS.get(word.lower(), ())


def named_by_type(query: Query, row_type: str) -> frozenset[int]:
    """Indexes of the query's hint verbs that a row of `row_type` stands for ("change" for an edit).

    Not "file" (a noun the rows' paths say), nor an edit's verb in a question that asks why: "what
    went wrong when we deployed to update the pages" asks for the failure, not for an edit."""
    if query.asks_why and row_type in _MADE:
        return frozenset()
    return _named(query.hints, row_type)


@lru_cache(maxsize=1024)
def _named(words: tuple[str, ...], row_type: str) -> frozenset[int]:
    return frozenset(i for i, w in enumerate(words) if w and w not in _NOUNS and _asks_for(kinds_of(w), row_type))


def _asks_for(kinds: tuple[str, ...], row_type: str) -> bool:
    """A failed command was run too: "what broke when we ran the tests" asks for its error row."""
    return row_type in kinds or (row_type == "error" and "command" in kinds)


def kinds_only(query: Query, text: str) -> tuple[str, ...]:
    """The kinds a question asks for when each of its words names one ("what changed", "which file
    did we modify", "what did we run"): its verbs' kinds, else its nouns'; () when a word names a
    subject, or when `text` is that word alone (`nmem search error` looks for the word)."""
    words = [t for t in query.terms if not t.covers]
    if not words or not all(t.hint for t in words) or len(text.split()) <= len(words):
        return ()
    verbs = [t.text_lower for t in words if t.text_lower not in _NOUNS] or [t.text_lower for t in words]
    return tuple(dict.fromkeys(kind for w in verbs for kind in kinds_of(w)))


def with_newest(
    conn: sqlite3.Connection, hits: list[Hit], kinds: tuple[str, ...], filters: Filters, limit: int
) -> list[Hit]:
    """A question made only of kind words ("what changed") answered as the newest rows of those kinds
    would answer it, after the hits of those kinds that hold its words; the other hits follow."""
    if filters.types:  # the caller chose the kinds
        return hits
    asked = [h for h in hits if h.type in kinds]
    seen = {h.id for h in asked}
    newest = [
        h for h in queries.recent(conn, msgspec.structs.replace(filters, types=list(kinds)), limit) if h.id not in seen
    ]
    seen.update(h.id for h in newest)
    return [*asked, *newest, *(h for h in hits if h.id not in seen)][:limit]


def try_instead(*, scoped: bool, typed: bool, every: str = "--all", type_option: str = "--type ") -> str:
    """What to try when a search found nothing: other words, every project, a type filter or none.

    `every` and `type_option` are how the caller spells them (the CLI's options, the MCP tool's
    parameters)."""
    tips = ["fewer or other words (a name, a path, an error's text)"]
    if scoped:
        tips.append(f"{every} for every project")
    if typed:
        tips.append(f"no {type_option.strip(' =')} filter")
    else:
        tips.append(type_option + "|".join(_SUGGESTED_TYPES))
    return "try " + ", ".join(tips)
