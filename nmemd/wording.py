"""Words that depend on a count or an age, for every surface that prints one (CLI, viewer, context)."""

from __future__ import annotations

import time


def plural(n: int, word: str, words: str | None = None, *, grouped: bool = False) -> str:
    """`1 observation`, `2 observations` (`words` where adding an s is wrong)."""
    number = f"{n:,}" if grouped else str(n)
    return f"{number} {word if n == 1 else words or word + 's'}"


def ago(ts: float | None, now: float | None = None, *, unknown: str = "at an unknown time") -> str:
    """A coarse relative age ("3 h ago"): enough to tell today from last month, stable across seconds;
    `unknown` for no time at all. `now` defaults to the clock (the viewer's pages)."""
    if not ts:
        return unknown
    s = max(0.0, (time.time() if now is None else now) - ts)
    if s < 90:
        return "just now"
    if s < 90 * 60:
        return f"{round(s / 60)} min ago"
    if s < 36 * 3600:
        return f"{round(s / 3600)} h ago"
    days = s / 86400
    if days < 14:
        return f"{round(days)} days ago"
    if days < 60:
        return f"{round(days / 7)} weeks ago"
    return f"{round(days / 30)} months ago"
