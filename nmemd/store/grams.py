"""Substring search for scripts written without spaces (Chinese, Japanese, Thai; Korean words with particles).

unicode61 keeps an unspaced run (東京サーバー) as one token, so the main index finds a word inside
it only where the run starts. Every run is also indexed as its overlapping character pairs
(東京 京サ サー ーバ バー ー) in `observations_grams` (migration m007), for the rows that hold such
text only: a word of n >= 2 characters is then the phrase of its n - 1 pairs, and a single
character the prefix of a pair (a run's last character is a token of its own, so every
character starts one). Text that is all ASCII, most of what agents store, costs one flag test.
"""

from __future__ import annotations

import re
from typing import Final

UNSPACED: Final = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
TOKENIZE: Final = "unicode61 remove_diacritics 0 categories 'L* N* Co M*'"  # Thai vowel marks are M*

# Called on the write connection for the rows indexed whose text is not all ASCII (`nmem_grams(title,
# content)`): SQLite's GLOB tells them apart in C, where a Python call per row took the GIL back once
# a row on the writer thread, each time after the event loop's turn (issue #40: a pull's rows).
SQL_FUNCTION: Final = "nmem_grams"
_NOT_ASCII: Final = "'*[^\x01-\x7f]*'"  # a character outside 1-127 somewhere (NUL counts: pairs() decides)
INDEX_RANGE: Final = (
    "INSERT INTO observations_grams(rowid, grams)"
    f" SELECT id, g FROM (SELECT id, {SQL_FUNCTION}(title, content) AS g FROM observations"
    f" WHERE id >= ? AND id < ? AND (title GLOB {_NOT_ASCII} OR content GLOB {_NOT_ASCII})) WHERE g IS NOT NULL"
)


def pairs(title: str | None, content: str | None) -> str | None:
    """The character pairs of every unspaced run in the row's text, or None when it has none."""
    tokens: list[str] = []
    for text in (title, content):
        if not text or text.isascii():  # O(1) in CPython
            continue
        for run in UNSPACED.findall(text):
            tokens.extend(run[i : i + 2] for i in range(len(run) - 1))
            tokens.append(run[-1])
    return " ".join(tokens) if tokens else None


def match(word: str) -> str | None:
    """An FTS5 expression over `observations_grams` for a word holding unspaced runs (None: it holds none)."""
    phrases = []
    for run in UNSPACED.findall(word.lower()):
        if len(run) == 1:
            phrases.append(f'"{run}"*')
        else:
            phrases.append('"' + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + '"')
    return " AND ".join(phrases) if phrases else None
