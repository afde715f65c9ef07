"""Phrases over a full-text index that holds no positions (migration m008).

The main index records which rows hold each word, not where (`detail=none`): a fifth of the
positional index's bytes, which pays for prefix indexes of 2 and 3 characters (`co*` in 0.5 ms
instead of 0.2-0.4 s at a million rows). FTS5 refuses a phrase on such an index, and identifiers
and paths are phrases (`save_hook`, `src/auth.ts`: unicode61 splits them). So a lookup asks the
index for rows holding every word of the phrase (`relax`), and `PhraseCheck` keeps the rows
where the words stand in order: a pattern finds each place they might (each word from its stem's
first letters on, so every spelling FTS5 would accept is seen), and FTS5 itself, on a positional
table in memory, decides on that short span exactly as it decided on the whole index before.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from nmemd.remembered import remembered

TOKENIZE: Final = "porter unicode61 remove_diacritics 2"  # the main index's (migrations.FTS_TOKENIZE)
SPANS_PER_FIELD: Final = 256  # places a phrase might stand, checked per field, before the row is given up

# The main index's columns (migration m010): `scope` is a generated column of observations holding
# one token per project, which no word a person types can match: its letters are the project path's
# bytes in hex behind a `zzp` no English word starts with.
COLUMNS: Final = "title, content, file_path, command, scope"
SCOPE_SQL: Final = "'zzp' || hex(project)"
# The main index's rowid is its observation's id negated (migration m016): a search wants the newest
# rows, and FTS5 reads a doclist in its own order (ascending) at about half the cost of ORDER BY rowid
# DESC (a three-word AND at a million rows: 272 against 775 us). Its content table is a view that
# lists the rows newest first, so FTS5's 'rebuild' and 'integrity-check' read them in rowid order:
# FTS5 writes a new segment each time a rowid comes below the last one (9x the time).
NEWEST_FIRST_VIEW: Final = "observations_newest_first"
NEGATED_SINCE: Final = "m016_newest_first_index"
# One FTS5 insert for many rows (migrations m002, m004), newest first (FTS5's order). Each is
# followed by grams.INDEX_RANGE, the same rows' unspaced-script pairs (m007).
INDEX_RANGE: Final = (
    f"INSERT INTO observations_fts(rowid, {COLUMNS})"
    f" SELECT -id, {COLUMNS} FROM observations WHERE id >= ? AND id < ? ORDER BY id DESC"
)
# An FTS5 command on the main index, `(name, value)`: an option kept in the database (`automerge`,
# `crisismerge`), or `('merge', n)`: about n pages of merging its segments (levels of `usermerge`, 4).
COMMAND: Final = "INSERT INTO observations_fts(observations_fts, rank) VALUES (?, ?)"


def values(row: str) -> str:
    """`COLUMNS` of a trigger's `old` or `new` row."""
    return ", ".join(f"{row}.{c}" for c in COLUMNS.split(", "))


@dataclass(frozen=True)
class Index:
    """A full-text index as lookups read it: which table, and whether its rowids are ids negated."""

    table: str
    negated: bool

    def newest(self, older: bool = False) -> str:
        """SQL for the ids of the newest rows matching `?`, as `id`, at most `?` of them; with `older`,
        only those older than an id given before the limit (`bound`)."""
        id_, order, cmp = ("-rowid", "rowid", ">") if self.negated else ("rowid", "rowid DESC", "<")
        below = f" AND rowid {cmp} ?" if older else ""
        return f"SELECT {id_} AS id FROM {self.table} WHERE {self.table} MATCH ?{below} ORDER BY {order} LIMIT ?"

    def bound(self, below: int) -> int:
        """The parameter of `newest(older=True)` for rows older than the observation `below`."""
        return -below if self.negated else below


MAIN: Final = Index("observations_fts", negated=True)
MAIN_BEFORE_M016: Final = Index("observations_fts", negated=False)  # a store the daemon has not migrated yet
GRAMS: Final = Index("observations_grams", negated=False)


def scope_token(project: str) -> str:
    """The index's token for a project's rows (`SCOPE_SQL`, as unicode61 lowercases it)."""
    return "zzp" + project.encode("utf-8", "surrogatepass").hex()


_QUOTED: Final = re.compile(r'"((?:[^"]|"")*)"(\*?)')
_local = threading.local()


def _memory() -> sqlite3.Connection:
    """This thread's in-memory FTS5 tables: the tokenizer's words, and spans checked with positions."""
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.execute("CREATE VIRTUAL TABLE words USING fts5(x, tokenize='unicode61 remove_diacritics 2')")
        conn.execute("CREATE VIRTUAL TABLE words_v USING fts5vocab(words, instance)")
        conn.execute(f"CREATE VIRTUAL TABLE stems USING fts5(x, tokenize='{TOKENIZE}')")
        conn.execute("CREATE VIRTUAL TABLE stems_v USING fts5vocab(stems, instance)")
        conn.execute(f"CREATE VIRTUAL TABLE spans USING fts5(x, tokenize='{TOKENIZE}')")
        _local.conn = conn
    return conn


@lru_cache(maxsize=1024)
def words(text: str) -> tuple[tuple[str, str], ...]:
    """The tokens FTS5 makes of `text`, in order: each as unicode61 folds it, and its porter stem."""
    conn = _memory()
    found: list[list[str]] = []
    for table in ("words", "stems"):
        conn.execute("BEGIN")
        try:
            conn.execute(f"DELETE FROM {table}")
            conn.execute(f"INSERT INTO {table}(rowid, x) VALUES (1, ?)", (text,))
            found.append([r[0] for r in conn.execute(f"SELECT term FROM {table}_v ORDER BY offset")])
        finally:
            conn.execute("ROLLBACK")
    return tuple(zip(found[0], found[1], strict=False))


def one_token(text: str) -> bool:
    """Whether `text` is ASCII letters and digits only: one token, which `words` need not be asked for
    (unicode61 keeps letters and numbers, and splits at everything else ASCII)."""
    return text.isascii() and text.isalnum()


def _phrase_words(quoted: re.Match[str]) -> tuple[tuple[str, str], ...] | None:
    """The words (and stems) of a `_QUOTED` string, or None when it is a single word (no phrase)."""
    text = quoted.group(1).replace('""', '"')
    if one_token(text):
        return None
    toks = words(text)
    return toks if len(toks) >= 2 else None


@dataclass(frozen=True)
class Phrase:
    fts: str  # the quoted string as the query had it (with its `*`), for FTS5 on spans
    pattern: re.Pattern[str]  # where it might stand, in folded text (a superset: see `_pattern`)
    keys: tuple[str, ...]  # what each word starts with


@dataclass(frozen=True)
class Relaxed:
    match: str  # what the index can answer: every phrase as its words AND-ed
    phrases: tuple[Phrase, ...]  # each must stand somewhere in one field of a row
    source: str = ""  # the expression before it was relaxed, for `narrowed`

    def narrowed(self, choose: Callable[[list[str]], list[str]]) -> str:
        """`match` with each phrase's words cut to those `choose` keeps (FTS5 strings like `"ts"`).

        A superset of `match`'s rows, for callers that check the phrase as typed anyway: FTS5
        intersects the doclists of an AND to their end, so `"status" "lines" "test" "usage" "db"
        "py"` costs 20 times the read of its rarest word."""

        def sub(m: re.Match[str]) -> str:
            toks = _phrase_words(m)
            if toks is None:
                return m.group(0)
            quoted = [f'"{t}"' for t, _ in toks]
            quoted[-1] += m.group(2)
            return " ".join(choose(quoted) or quoted)

        return _QUOTED.sub(sub, self.source) if self.source else self.match

    def prefilter(self, column: str) -> tuple[str, list[str]]:
        """SQL that drops, in C, the rows whose `column` cannot hold any of the phrases: their keys in
        order (LIKE ignores ASCII case), unless the text has letters with diacritics, which LIKE does
        not fold. ("", []) when a key is not ASCII."""
        if not all(k.isascii() for p in self.phrases for k in p.keys):
            return "", []
        likes = " OR ".join(f"{column} LIKE ?" for _ in self.phrases)
        patterns = ["%" + "%".join(p.keys) + "%" for p in self.phrases]
        return f"({likes} OR {column} GLOB ?)", [*patterns, _ACCENTED_GLOB]


@dataclass(frozen=True)
class Literal:
    """An identifier or a path as typed (`target_width`, `next.config.ts`), matched as a substring.

    SQLite finds the rows holding it (`like`, in C, ASCII case aside); `holds` then asks that it stand
    between word edges, as the tokenizer would see it (`ctypes/index.tsx` does not hold `types/index.ts`)."""

    text: str  # lowercase, without punctuation at its ends
    like: str  # for `LIKE ? ESCAPE '\\'`
    prefix: bool  # `"src/auth"*`: anything may follow

    def holds(self, text: str | None) -> bool:
        """Whether `text` (lowercase: SQLite's lower() is cheaper than Python's) holds it between word edges."""
        if not text:
            return False
        end = len(self.text)
        at = text.find(self.text)
        while at >= 0:  # str.find, not a regex with a look-behind: contents run to tens of kilobytes
            if (at == 0 or not text[at - 1].isalnum()) and (
                self.prefix or at + end == len(text) or not text[at + end].isalnum()
            ):
                return True
            at = text.find(self.text, at + 1)
        return False


def literal(phrase: Phrase) -> Literal | None:
    """The phrase as a `Literal`; None when it has letters SQLite's LIKE and lower() do not fold."""
    m = _QUOTED.fullmatch(phrase.fts)
    if m is None:
        return None
    text = _EDGES.sub("", m.group(1).replace('""', '"').lower())
    if not text or not text.isascii():
        return None
    like = "%" + re.sub(r"([%_\\])", r"\\\1", text) + "%"
    return Literal(text, like, bool(m.group(2)))


@remembered(512)
def relax(match: str) -> Relaxed | None:
    """`match` for an index without positions, or None when it holds no phrase of several words.

    Every phrase nmem builds is one of the expression's conjuncts (terms are AND-ed; a term's
    alternatives, OR-ed, are single words), so a row must hold each phrase somewhere. Remembered (the
    answer is frozen): a search asks it of the same expression three or four times, once per lookup; among
    the caches a purge empties, since a purge relaxes the words it forgets too."""
    phrases: list[Phrase] = []

    def sub(m: re.Match[str]) -> str:
        toks = _phrase_words(m)
        if toks is None:
            return m.group(0)
        keys = tuple(_key(stem) for _, stem in toks)
        phrases.append(Phrase(m.group(0), _pattern(keys), keys))
        # Juxtaposed strings: FTS5's implicit AND, which binds tighter than OR and, unlike a
        # parenthesised group, may stand beside another string (`"x" "a" "b"`).
        return " ".join(f'"{t}"' for t, _ in toks) + m.group(2)

    relaxed = _QUOTED.sub(sub, match)
    return Relaxed(relaxed, tuple(phrases), match) if phrases else None


def _pattern(keys: Sequence[str]) -> re.Pattern[str]:
    """Consecutive words starting with these keys (see `_key`): every place the phrase may stand."""
    return _compiled(r"[^\W_]*[\W_]+".join(re.escape(k) for k in keys) + r"[^\W_]*")


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    """A query's pattern compiled once: `re`'s own cache is shared with the whole daemon (its 512 entries
    turn over), and a search compiles its phrases again at every lookup."""
    return re.compile(pattern)


def _key(stem: str) -> str:
    """The stem less what porter may have added: a word with the same stem starts with it.

    A porter stem is the word's first letters plus at most an `e` (relational -> relate, hoping ->
    hope), an `i` (happy -> happi) or the `l` of `ble` (possibility -> possibl), so: the stem less
    up to two trailing e, i or l."""
    key = stem
    while len(key) > max(1, len(stem) - 2) and key[-1] in "eil":
        key = key[:-1]
    return key


def fold(text: str) -> str:
    """Lowercase, and without diacritics as unicode61 reads it (remove_diacritics 2)."""
    low = text.lower()
    if low.isascii() or not _ACCENTED.search(low):  # dashes, arrows, emoji: nothing to fold (NFD is costly)
        return low
    return _COMBINING.sub("", unicodedata.normalize("NFD", low))


@dataclass
class PhraseCheck:
    """Which rows hold every phrase, field by field (title and paths first, content only if needed)."""

    relaxed: Relaxed
    held: dict[int, set[int]] = field(default_factory=dict)  # row id -> phrases found so far

    def add(self, rows: Iterable[Sequence[object]]) -> None:
        """Rows as (id, field, field...): look for the phrases still missing in these fields."""
        spans: list[tuple[int, int, str]] = []  # row id, phrase index, text
        for row in rows:
            rowid = int(str(row[0]))
            have = self.held.setdefault(rowid, set())
            for text in row[1:]:
                if not isinstance(text, str) or not text:
                    continue
                low = fold(text)
                for i, phrase in enumerate(self.relaxed.phrases):
                    if i not in have:
                        spans.extend((rowid, i, s) for s in _spans(phrase.pattern, low))
        if not spans:
            return
        conn = _memory()
        conn.execute("BEGIN")
        try:
            conn.execute("DELETE FROM spans")
            conn.executemany("INSERT INTO spans(rowid, x) VALUES (?, ?)", [(n, s[2]) for n, s in enumerate(spans)])
            for i, phrase in enumerate(self.relaxed.phrases):
                for (n,) in conn.execute("SELECT rowid FROM spans WHERE spans MATCH ?", (phrase.fts,)):
                    rowid, j, _ = spans[n]
                    if j == i:
                        self.held[rowid].add(i)
        finally:
            conn.execute("ROLLBACK")

    def holds(self, rowid: int) -> bool:
        return len(self.held.get(rowid, ())) == len(self.relaxed.phrases)


def _spans(pattern: re.Pattern[str], low: str) -> list[str]:
    """Each place the pattern starts on a word's first character (overlapping ones too), bounded."""
    out: list[str] = []
    pos = 0
    while len(out) < SPANS_PER_FIELD:
        m = pattern.search(low, pos)
        if m is None:
            break
        start = m.start()
        if start == 0 or not _TOKEN_CHAR.match(low, start - 1):
            out.append(m.group(0))
        pos = start + 1
    return out


_TOKEN_CHAR: Final = re.compile(r"[^\W_]")
_EDGES: Final = re.compile(r"^[^a-z0-9]+|[^a-z0-9]+$")
# Letters NFD splits into a base and marks: Latin-1 and Latin Extended, Greek, Cyrillic, Vietnamese.
_ACCENTED: Final = re.compile("[\u00c0-\u024f\u0370-\u04ff\u1e00-\u1fff]")
_ACCENTED_GLOB: Final = "*[\u00c0-\u024f\u0370-\u04ff\u1e00-\u1fff]*"
# The combining diacritical marks NFD separates from Latin, Greek and Cyrillic letters (café -> cafe).
_COMBINING: Final = re.compile("[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
