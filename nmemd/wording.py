"""Words that depend on a count, for every surface that prints one (CLI, viewer, context)."""

from __future__ import annotations


def plural(n: int, word: str, words: str | None = None, *, grouped: bool = False) -> str:
    """`1 observation`, `2 observations` (`words` where adding an s is wrong)."""
    number = f"{n:,}" if grouped else str(n)
    return f"{number} {word if n == 1 else words or word + 's'}"
