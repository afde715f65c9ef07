"""What every agent's history reader gives the importer: `Record`s (one hook-shaped event each) and
`Counts` (what a file held), and the helpers they all read fields with (`nonempty_str`, `bound`,
`parse_ts`). Each agent's reader is its own `nmemd/agents/<name>/history.py`."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from nmemd.model import plausible_ts

STRING_MAX: Final = 16_000  # extraction keeps <= 4,000 chars of most fields; longer strings are cut before sending


class Record(msgspec.Struct, kw_only=True):
    """One hook-shaped event from a transcript, ready to send to the daemon."""

    key: str  # natural idempotency key
    ts: float  # when it happened (the line's timestamp)
    payload: dict[str, Any]  # field names as in hook payloads
    git_branch: str | None = None


@dataclass
class Counts:
    """What one file held, by kind of record."""

    lines: int = 0
    prompts: int = 0
    tools: int = 0
    errors: int = 0
    compactions: int = 0
    replies: int = 0  # turns' final messages (Stop / SubagentStop records)
    said: int = 0  # blocks of the agent's own words between its tool calls (text, thinking)
    messages: int = 0  # assistant messages (grouped by message.id), not lines
    skipped: int = 0  # lines that carry nothing nmem keeps (progress, snapshots, unknown types)

    def add(self, other: Counts) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def nonempty_str(v: object) -> str | None:
    """A string field of a history line, None when absent, empty or not a string."""
    return v if isinstance(v, str) and v else None


def bound(value: Any, limit: int = STRING_MAX, tail: int = 0) -> Any:
    """`value` with every string longer than `limit` (+ `tail`) cut to its head (and its last `tail` chars).

    The cut-off middle is replaced by its newlines, so line counts that
    extraction reports ("… (120 more lines)", "created, 300 lines") stay exact.
    """
    if isinstance(value, str):
        if len(value) <= limit + tail:
            return value
        end = len(value) - tail
        return value[:limit] + "\n" * value.count("\n", limit, end) + value[end:]
    if isinstance(value, dict):
        return {k: bound(v, limit, tail) for k, v in value.items()}
    if isinstance(value, list):
        return [bound(v, limit, tail) for v in value]
    return value


def parse_ts(raw: object, default: float) -> float:
    """Epoch seconds of an ISO-8601 timestamp ("2026-02-10T21:12:02.480Z"); `default` when unreadable
    or implausible (year 1, year 9999: outside `TS_MIN`..`TS_MAX`)."""
    if not isinstance(raw, str):
        return default
    try:
        ts = dt.datetime.fromisoformat(raw).timestamp()
    except (ValueError, OverflowError, OSError):
        return default
    return ts if plausible_ts(ts) else default
