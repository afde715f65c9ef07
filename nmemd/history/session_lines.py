"""What the readers of an agent's JSONL session file share (Codex's rollouts, Copilot's events.jsonl, the
Gemini CLI's sessions): `decode_line`, and `SessionLines`, the reader interface `importer` drives
(`decode`, `feed`, `finish`, `safe_offset`) with the session's facts as its lines name them and the payload
and record each event becomes. An agent's reader reads one line (`_line`) and ends a turn (`_turn_end`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import msgspec

from nmemd.history.records import STRING_MAX, Counts, Record, bound
from nmemd.jsonsafe import loads_replacing_surrogates, may_hold_surrogate

_decode = msgspec.json.Decoder().decode


def decode_line(raw: bytes) -> object:
    """One line of plain JSON, any shape; raises `msgspec.DecodeError` for a line that is not JSON (a lone
    surrogate, a string cut inside an emoji, is read as U+FFFD)."""
    try:
        return _decode(raw)
    except msgspec.DecodeError:
        if not may_hold_surrogate(raw):
            raise
        try:
            return loads_replacing_surrogates(raw)
        except (ValueError, RecursionError):
            raise msgspec.DecodeError("invalid JSON") from None


class Pending(Protocol):
    offset: int  # where the line of a call still waiting for its output starts


P = TypeVar("P", bound=Pending)


@dataclass
class SessionLines(Generic[P]):
    """Turns the lines of one session file, in order, into Records (the interface of TranscriptReader)."""

    AGENT: ClassVar[str]
    NAMES_FILE: ClassVar[bool] = True  # its payloads name the file (`transcript_path`)

    path: str
    counts: Counts = field(default_factory=Counts)
    session: str = ""
    cwd: str | None = None
    branch: str | None = None
    _pending: dict[str, P] = field(default_factory=dict)  # calls waiting for their output, by id
    _last_ts: float = 0.0
    _big: bool = False  # the line read is longer than STRING_MAX: its strings are bounded

    @staticmethod
    def decode(raw: bytes) -> object:
        return decode_line(raw)

    def safe_offset(self, end: int) -> int:
        """A call waiting for its output is read again from its line by the next run."""
        waiting = [c.offset for c in self._pending.values()]
        return min(end, *waiting) if waiting else end

    def finish(self) -> list[Record]:
        return self._turn_end()

    def feed(self, line: object, offset: int, size: int, raw: bytes | None = None) -> list[Record]:
        """Records for one decoded line. Never raises on odd input."""
        self.counts.lines += 1
        self._big = size > STRING_MAX
        if not isinstance(line, dict):
            self.counts.skipped += 1
            return []
        return self._line(line, offset)

    def _line(self, line: dict[str, Any], offset: int) -> list[Record]:
        raise NotImplementedError

    def _turn_end(self) -> list[Record]:
        raise NotImplementedError

    def _payload(self, event: str) -> dict[str, Any]:
        p: dict[str, Any] = {"nmem_agent": self.AGENT, "session_id": self.session, "hook_event_name": event}
        if self.NAMES_FILE:
            p["transcript_path"] = self.path
        if self.cwd:
            p["cwd"] = self.cwd
        return p

    def _record(self, key: str, payload: dict[str, Any], ts: float) -> Record:
        return Record(key=key, ts=ts, payload=payload, git_branch=self.branch)

    def _bound(self, value: Any, limit: int = STRING_MAX, tail: int = 0) -> Any:
        return bound(value, limit, tail) if self._big else value
