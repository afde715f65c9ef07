"""Where each agent keeps its history and how it is read, as one `HistorySource` per agent (the
registry's `AgentSpec.history` names it); `importer` loops over them.

Three kinds of file: JSONL read line by line from where the last run stopped (Claude Code, Codex, the
Gemini CLI, Copilot: `lines`), one JSON document read whole once it changed (Cline: `document`), and a
database read by what changed since the last run (OpenCode: `database`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from nmemd.history import cline, codex, copilot, gemini, opencode
from nmemd.history.transcripts import Counts, Record, TranscriptReader, decode_line


class LineReader(Protocol):
    counts: Counts

    def feed(self, line: object, offset: int, size: int, raw: bytes | None = None) -> list[Record]: ...
    def finish(self) -> list[Record]: ...
    def safe_offset(self, end: int) -> int: ...


class WholeReader(Protocol):
    """A document or a database: its records at once."""

    counts: Counts

    def records(self) -> Iterable[Record]: ...


class DocumentReader(WholeReader, Protocol):
    problems: list[str]  # side files it could not read


class DatabaseReader(WholeReader, Protocol):
    watermark: int  # the newest change read (ms): the next run's `since`


@dataclass(frozen=True, kw_only=True)
class HistorySource:
    roots: Callable[[], list[str]]  # its history folders (or files) on this machine, those that exist
    claims: Callable[[str], bool]  # a file of its history
    # A folder where only the files it claims are history (no other agent's `*.jsonl` there).
    reserves: Callable[[str], bool] | None = None
    catch_all: bool = False  # reads every `*.jsonl` no other agent claims (Claude Code's transcripts)
    # One of these three: how a file of its is read.
    lines: Callable[[str], LineReader] | None = None
    decode: Callable[[bytes], object] | None = None  # a line of `lines`
    document: Callable[[str], DocumentReader] | None = None
    database: Callable[[str, int], DatabaseReader] | None = None  # (path, since)
    unreadable: type[Exception] = OSError  # what `document` or `database` raises for a file it cannot read


def _existing(*folders: str) -> list[str]:
    return [f for f in folders if os.path.isdir(f)]


def _claude_roots() -> list[str]:
    from nmemd.history.importer import default_root  # importer loads this module through the registry

    return _existing(default_root())


def _codex_roots() -> list[str]:
    from nmemd.history.importer import codex_root

    return _existing(codex_root())


def _gemini_roots() -> list[str]:
    from nmemd.history.importer import gemini_root

    return _existing(gemini_root())


def _in_gemini_tmp(folder: str) -> bool:
    """A folder in the Gemini CLI's `.gemini/tmp`, where only `chats/session-*.jsonl` files are history."""
    return f"{os.sep}.gemini{os.sep}tmp" in folder


def _copilot_roots() -> list[str]:
    from nmemd.capture.copilot import session_state

    return _existing(str(session_state()))


def _opencode_roots() -> list[str]:
    from nmemd.capture.opencode import database

    return [database()] if os.path.isfile(database()) else []


CLAUDE_CODE = HistorySource(
    roots=_claude_roots,
    claims=lambda path: path.endswith(".jsonl"),
    catch_all=True,
    lines=TranscriptReader.for_file,
    decode=decode_line,
)
CODEX = HistorySource(
    roots=_codex_roots,
    claims=codex.is_rollout,
    lines=lambda path: codex.RolloutReader(path=path),
    decode=codex.decode_line,  # Codex's, the Gemini CLI's and Copilot's lines: plain JSON, any shape
)
GEMINI = HistorySource(
    roots=_gemini_roots,
    claims=gemini.is_session,
    reserves=_in_gemini_tmp,
    lines=lambda path: gemini.SessionReader(path=path),
    decode=codex.decode_line,
)
COPILOT = HistorySource(
    roots=_copilot_roots,
    claims=copilot.is_events,
    lines=lambda path: copilot.EventsReader(path=path),
    decode=codex.decode_line,
)
CLINE = HistorySource(
    roots=lambda: _existing(os.path.join(os.path.expanduser("~"), ".cline", "data", "sessions")),
    claims=cline.is_messages,
    document=cline.MessagesReader,
    unreadable=cline.Unreadable,
)
OPENCODE = HistorySource(
    roots=_opencode_roots,
    claims=opencode.is_database,
    database=lambda path, since: opencode.DatabaseReader(path, since=since),
    unreadable=opencode.Unreadable,
)
