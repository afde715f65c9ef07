"""Where an agent keeps its history and how it is read, as a `HistorySource` (each agent's is in its
folder, `nmemd/agents/<name>/history.py`; the registry's `AgentSpec.history` names it); `importer` loops
over them.

Three kinds of file: JSONL read line by line from where the last run stopped (Claude Code, Codex, the
Gemini CLI, Copilot: `lines`), one JSON document read whole once it changed (Cline: `document`), and a
database read by what changed since the last run (OpenCode: `database`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from nmemd.history.records import Counts, Record


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
    where: Callable[[], str] | None = None  # where it looks, said when no agent's history is found
    # Live: a reader of only the agent's own words in the transcript its hooks name (`transcript_path`),
    # fed the lines `words_line` lets through (`nmemd.history.follow`); None: its hooks name none.
    words: Callable[[str], LineReader] | None = None
    words_line: Callable[[bytes], bool] | None = None
    # The file of a session whose hooks name none, by its session id (Copilot's events.jsonl); None: unknown.
    live_file: Callable[[str], str | None] | None = None


def existing(*folders: str) -> list[str]:
    """The folders given that exist."""
    return [f for f in folders if os.path.isdir(f)]
