"""Import every agent's history: find its files, read what is new in each, send it to the daemon
(`nmem import-transcripts`; the daemon's side is `nmemd.history.import_rpc`).

Each agent in the registry names its history (`AgentSpec.history`, nmemd.history.sources): where it
lives, which files are its, and how they are read (JSONL line by line, a document whole, a database by
what changed since the last run, its offset the time of the newest change read). A `*.jsonl` no agent
claims is read as a Claude Code transcript.

Files are streamed line by line (a file is never held in memory), parsed with msgspec, turned into
hook-shaped records by `nmemd.agents.claude_code.history` and extracted right there by the daemon's own
`extract` (same code, same skip list: the daemon names it, so the result is what a live hook would
have stored). Batches of typed `Extracted` go to the daemon, one `import_events` RPC each, two in
flight, so the next batch is read and extracted while the daemon commits the last ones.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from nmemd import registry
from nmemd.history import files
from nmemd.history.import_rpc import (
    BATCH_BYTES,
    BATCH_EVENTS,
    BATCH_WIRE_BYTES,
    RPC_TIMEOUT_S,
    SUMMARY_SESSIONS,
    FileState,
    ImportEvent,
    StateReply,
)
from nmemd.history.pipeline import Pipeline
from nmemd.history.records import Counts, Record
from nmemd.history.sources import DatabaseReader, DocumentReader, HistorySource, LineReader

LOG = logging.getLogger("nmemd.import_transcripts")
_encode = msgspec.json.Encoder().encode
LINE_MAX: Final = 32 * 1024 * 1024  # a longer line is skipped, read in chunks, never held whole
HEAD_BYTES: Final = 1024  # hashed to notice a file replaced under the same name


# --- CLI side: files -----------------------------------------------------------------------------


@dataclass
class Problem:
    """Something wrong with one file; the run goes on."""

    path: str
    reason: str


def _sources() -> list[HistorySource]:
    return [spec.history() for spec in registry.AGENTS.values() if spec.history is not None]


def default_roots() -> list[str]:
    """Every agent's history folders (or database) on this machine, those that exist, in the registry's order."""
    return [root for source in _sources() for root in source.roots()]


def source_for(path: str) -> HistorySource:
    """The agent's history a file is: the first that claims it; else the one that reads any `*.jsonl`."""
    sources = _sources()
    return next((s for s in sources if not s.catch_all and s.claims(path)), None) or next(
        s for s in sources if s.catch_all
    )


def discover(paths: Sequence[str], problems: list[Problem]) -> list[str]:
    """Every history file under `paths`: files as given, directories walked for the files an agent claims
    (sorted, so a session's transcript comes before its `subagents/`). A folder an agent reserves
    (`HistorySource.reserves`) holds only that agent's files."""
    sources = _sources()
    found: list[str] = []
    for raw in paths:
        path = os.path.abspath(raw)
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path, onerror=lambda e: problems.append(_problem(e))):
                dirs.sort()
                owner = next((s for s in sources if s.reserves is not None and s.reserves(root)), None)
                mine = [owner] if owner is not None else sources
                found += [p for f in sorted(names) if any(s.claims(p := os.path.join(root, f)) for s in mine)]
        elif os.path.exists(path) or os.path.islink(path):
            found.append(path)
        else:
            problems.append(Problem(path, "not found"))
    return list(dict.fromkeys(found))


def _problem(exc: OSError) -> Problem:
    return Problem(str(exc.filename or "?"), exc.strerror or str(exc))


def head_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=12).hexdigest()


# --- CLI side: the run ---------------------------------------------------------------------------


class Summary(msgspec.Struct, kw_only=True):
    """What one run did (`--json` prints it)."""

    files: int = 0  # transcripts found
    files_read: int = 0  # with something new
    files_unchanged: int = 0
    bytes: int = 0  # read this run
    lines: int = 0
    events_sent: int = 0
    events_new: int = 0
    prompts: int = 0
    tool_calls: int = 0
    errors: int = 0
    compactions: int = 0
    replies: int = 0  # turns' final assistant messages
    said: int = 0  # blocks of the agent's own words between its tool calls
    sessions_summarized: int = 0  # sessions given a summary (the same as live Stop writes) at the end
    skipped_lines: int = 0  # progress, snapshots, unknown types, results without their call
    invalid_lines: int = 0
    bad_files: list[dict[str, str]] = []
    seconds: float = 0.0
    interrupted: bool = False


@dataclass
class Progress:
    """Live figures for whoever displays them (rich bar, plain lines)."""

    files_total: int = 0
    files_done: int = 0
    bytes_total: int = 0
    bytes_done: int = 0
    events: int = 0
    started: float = field(default_factory=time.monotonic)


@dataclass
class _Open:
    """The file being read: enough to record how far it got at any batch boundary."""

    path: str
    st: os.stat_result
    head_hash: str
    reader: LineReader
    decode: Callable[[bytes], object]
    offset: int  # after the last complete line consumed
    events: int  # records from this file, all runs

    def state(self) -> FileState:
        st = self.st
        return FileState(
            path=self.path, dev=st.st_dev, inode=st.st_ino, size=st.st_size, mtime=st.st_mtime,
            offset=self.reader.safe_offset(self.offset), head_hash=self.head_hash, events=self.events,
        )  # fmt: skip


class Importer:
    """One run over a set of transcripts."""

    def __init__(self, ask: Callable[[str, dict[str, Any], float], Any], progress: Progress | None = None):
        self.ask = ask
        self.summary = Summary()
        self.progress = progress or Progress()
        self.problems: dict[str, list[str]] = {}
        self.invalid: dict[str, int] = {}
        self.skip_tools: frozenset[str] = frozenset()  # the daemon's, from `import_state`
        from nmemd.capture.extract import extract  # not at module level: every `nmem` command imports this module
        from nmemd.store.keys import natural_key

        self._extract = extract
        self._natural_key = natural_key
        self._events: list[bytes] = []  # encoded ImportEvents of the next batch
        self._wire_bytes = 0
        self._pending_bytes = 0
        self._done: list[FileState] = []  # files finished since the last batch
        self._open: _Open | None = None
        self._pipeline: Pipeline | None = None
        self._sessions: dict[str, None] = {}  # sessions this run sent events of, in order

    def run(self, paths: Sequence[str]) -> Summary:
        """Import what is new under `paths`; Ctrl-C stops after the batches in flight (summary.interrupted)."""
        started = time.monotonic()
        try:
            found: list[Problem] = []
            files = discover(paths, found)
            for p in found:
                self._note(p.path, p.reason)
            self.summary.files = len(files)
            plan = self._plan(files, self._load_state(files))
            self._pipeline = Pipeline(self.ask, self.summary)
            for path, st, saved in plan:
                try:
                    self._import_file(path, st, saved)
                except MemoryError:  # one file the bounds let through: the others are still read
                    self._open = None
                    self._note(path, "out of memory reading it: skipped")
                    LOG.warning("out of memory reading %s: skipped", path)
            self._flush()
            self._pipeline.finish()
            self._summarize()
        except KeyboardInterrupt:
            self.summary.interrupted = True
            if self._pipeline is not None:
                self._pipeline.abandon(RPC_TIMEOUT_S)
        except BaseException:
            if self._pipeline is not None:
                self._pipeline.abandon(RPC_TIMEOUT_S)
            raise
        finally:
            self.summary.seconds = round(time.monotonic() - started, 3)
            for path, n in self.invalid.items():
                self._note(path, f"{n} invalid JSON line{'s' if n > 1 else ''} skipped")
            self.summary.bad_files = [{"path": p, "reason": "; ".join(r)} for p, r in self.problems.items()]
        return self.summary

    def _load_state(self, files: list[str]) -> dict[str, FileState]:
        state: dict[str, FileState] = {}
        for start in range(0, max(len(files), 1), 2000):
            reply = msgspec.convert(
                self.ask("import_state", {"paths": files[start : start + 2000]}, RPC_TIMEOUT_S), StateReply
            )
            self.skip_tools = frozenset(reply.skip_tools)
            for row in reply.files:
                state[row.path] = row
        return state

    def _plan(
        self, files: list[str], state: dict[str, FileState]
    ) -> list[tuple[str, os.stat_result, FileState | None]]:
        """Stat every file once: skip the unchanged, and size the work for the progress display."""
        plan = []
        for path in files:
            try:
                st = os.stat(path)
            except OSError as exc:
                self._note(path, exc.strerror or str(exc))
                continue
            if not stat.S_ISREG(st.st_mode):
                self._note(path, "not a regular file")
                continue
            saved = state.get(path)
            if source_for(path).database is not None:  # read by what changed in it, never by size
                plan.append((path, st, saved))
                continue
            same = (
                saved is not None and (saved.dev, saved.inode) == (st.st_dev, st.st_ino) and saved.offset <= st.st_size
            )
            if same and saved and (saved.size, saved.mtime, saved.offset) == (st.st_size, st.st_mtime, st.st_size):
                self.summary.files_unchanged += 1
                continue
            plan.append((path, st, saved))
            self.progress.bytes_total += st.st_size - (saved.offset if same and saved else 0)
        self.progress.files_total = len(plan)
        return plan

    def _import_file(self, path: str, st: os.stat_result, saved: FileState | None) -> None:
        source = source_for(path)
        if source.database is not None:
            self._import_database(source.database, source.unreadable, path, st, saved)
            return
        if source.document is not None:
            self._import_document(source.document, source.unreadable, path, st, saved)
            return
        assert source.lines is not None and source.decode is not None  # the third kind
        try:
            f = files.open_file(path)  # a FIFO swapped in since `_plan` fails at once, never waits
        except OSError as exc:
            self._note(path, exc.strerror or str(exc))
            self.progress.files_done += 1
            return
        with f:
            try:
                head = f.read(HEAD_BYTES)
            except OSError as exc:
                self._note(path, exc.strerror or str(exc))
                self.progress.files_done += 1
                return
            if b"\0" in head:
                self._note(path, "binary file, not a transcript")
                self.progress.files_done += 1
                return
            hh = head_hash(head)
            start = 0
            if (
                saved is not None
                and (saved.dev, saved.inode, saved.head_hash) == (st.st_dev, st.st_ino, hh)
                and saved.offset <= st.st_size
            ):
                start = saved.offset  # else new, replaced or shrunk: read it all again (natural keys make it safe)
            f.seek(start)
            events = saved.events if start and saved else 0
            cur = self._open = _Open(path, st, hh, source.lines(path), source.decode, start, events)
            for problem in getattr(cur.reader, "problems", ()):
                self._note(path, problem)
            try:
                whole = self._read(f, cur)
            except OSError as exc:
                self._note(path, f"read failed: {exc.strerror or exc}")
                whole = False
            if whole:  # not a file being written (a cut last line): its last turn ended with its last text
                for r in cur.reader.finish():
                    cur.events += 1
                    self.progress.events += 1
                    self._add(r)
        self._open = None
        if cur.offset != start or cur.events:
            self._done.append(cur.state())
        self._count(cur.reader.counts)
        self.summary.files_read += 1
        self.progress.files_done += 1

    def _import_database(
        self,
        open_reader: Callable[[str, int], DatabaseReader],
        unreadable: type[Exception],
        path: str,
        st: os.stat_result,
        saved: FileState | None,
    ) -> None:
        """A database (OpenCode's): the sessions changed since the last run (the saved offset, in ms)."""
        same = saved is not None and (saved.dev, saved.inode) == (st.st_dev, st.st_ino)
        reader = open_reader(path, saved.offset if same and saved else -1)
        events, whole = self._add_all(reader.records, unreadable, path, saved.events if same and saved else 0)
        if whole:
            self._done.append(FileState(path=path, dev=st.st_dev, inode=st.st_ino, size=st.st_size, mtime=st.st_mtime,
                                        offset=reader.watermark, head_hash="", events=events))  # fmt: skip
        self._file_read(st, reader.counts)

    def _import_document(
        self,
        open_reader: Callable[[str], DocumentReader],
        unreadable: type[Exception],
        path: str,
        st: os.stat_result,
        saved: FileState | None,
    ) -> None:
        """A document (a Cline task's messages file): read whole once it changed (keys dedupe)."""
        reader = open_reader(path)
        events, _ = self._add_all(reader.records, unreadable, path, saved.events if saved is not None else 0)
        for problem in reader.problems:
            self._note(path, problem)
        # recorded even when unreadable: a document is read whole, so it is tried again once it changes
        self._done.append(FileState(path=path, dev=st.st_dev, inode=st.st_ino, size=st.st_size, mtime=st.st_mtime,
                                    offset=st.st_size, head_hash="", events=events))  # fmt: skip
        self._file_read(st, reader.counts)

    def _add_all(
        self, records: Callable[[], Iterable[Any]], unreadable: type[Exception], path: str, events: int
    ) -> tuple[int, bool]:
        """Add every record a whole-file reader gives, in batches: the file's event count, and whether
        it was read to its end (an unreadable one is said in the run's problems)."""
        try:
            for r in records():
                events += 1
                self.progress.events += 1
                self._add(r)
                if len(self._events) >= BATCH_EVENTS or self._wire_bytes >= BATCH_WIRE_BYTES:
                    self._flush()
        except unreadable as exc:
            self._note(path, str(exc))
            return events, False
        return events, True

    def _file_read(self, st: os.stat_result, counts: Counts) -> None:
        self.summary.bytes += st.st_size
        self.progress.bytes_done += st.st_size
        self._count(counts)
        self.summary.files_read += 1
        self.progress.files_done += 1

    def _read(self, f: Any, cur: _Open) -> bool:
        """Import each complete line from `cur.offset` on; a truncated last line is left for the next run.

        Returns False when it found one (the file is being written)."""
        readline = f.readline
        decode = cur.decode
        feed = cur.reader.feed
        add = self._add
        summary, progress = self.summary, self.progress
        offset = cur.offset
        while True:
            raw = readline(LINE_MAX)
            if not raw:
                return True
            size = len(raw)
            if raw[-1] != 10:  # no newline
                if size < LINE_MAX:
                    self._note(cur.path, "truncated last line (left for the next run)")
                    return False
                offset += self._skip_long(f, raw, cur.path)
                cur.offset = offset
                continue
            start = offset
            offset += size
            cur.offset = offset
            summary.bytes += size
            progress.bytes_done += size
            self._pending_bytes += size
            if size > files.VALUES_MAX and files.too_many_values(raw):  # decoding would cost ~50 bytes a byte
                self._note(cur.path, f"line of over {files.VALUES_MAX:,} JSON values skipped")
                summary.invalid_lines += 1
                continue
            try:
                line = decode(raw)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                if raw.strip():
                    self.invalid[cur.path] = self.invalid.get(cur.path, 0) + 1
                    summary.invalid_lines += 1
                continue
            records = feed(line, start, size, raw)
            if records:
                cur.events += len(records)
                progress.events += len(records)
                for r in records:
                    add(r)
                if len(self._events) >= BATCH_EVENTS or self._wire_bytes >= BATCH_WIRE_BYTES:
                    self._flush()
            if self._pending_bytes >= BATCH_BYTES:
                self._flush()

    def _skip_long(self, f: Any, raw: bytes, path: str) -> int:
        """Skip the rest of a line over LINE_MAX, read in chunks, never whole; return its length."""
        skipped = len(raw)
        while raw and raw[-1] != 10:
            raw = f.readline(LINE_MAX)
            skipped += len(raw)
        self._note(path, "line over 32 MB skipped")
        self.summary.invalid_lines += 1
        return skipped

    def _add(self, r: Record) -> None:
        """Extract one record as a live hook's payload would be, and encode it for the next batch."""
        ex = self._extract(r.payload, skip_tools=self.skip_tools)
        key = self._natural_key(ex) or ex.natural_key or r.key
        event = ImportEvent(key=key, ts=r.ts, extracted=ex, git_branch=r.git_branch)
        self._sessions[ex.session_id] = None
        raw = _encode(event)
        self._events.append(raw)
        self._wire_bytes += len(raw)

    def _note(self, path: str, reason: str) -> None:
        reasons = self.problems.setdefault(path, [])
        if reason not in reasons:
            reasons.append(reason)

    def _count(self, counts: Counts) -> None:
        s = self.summary
        s.lines += counts.lines
        s.prompts += counts.prompts
        s.tool_calls += counts.tools
        s.errors += counts.errors
        s.compactions += counts.compactions
        s.replies += counts.replies
        s.said += counts.said
        s.skipped_lines += counts.skipped

    def _summarize(self) -> None:
        """Give every session this run touched the summary a live Stop would have written (transcripts
        have no Stop or SessionEnd), once everything is committed: summaries read what is stored."""
        sessions = [s for s in self._sessions if s != "unknown"]
        for start in range(0, len(sessions), SUMMARY_SESSIONS):
            chunk = sessions[start : start + SUMMARY_SESSIONS]
            reply = self.ask("import_summaries", {"sessions": chunk}, RPC_TIMEOUT_S)
            self.summary.sessions_summarized += int(reply.get("summarized", 0))

    def _flush(self) -> None:
        files = self._done
        if self._open is not None and self._open.offset:
            files = [*files, self._open.state()]
        if not self._events and not files:
            return
        assert self._pipeline is not None
        self._pipeline.send(self._events, files)
        self._events, self._done, self._pending_bytes, self._wire_bytes = [], [], 0, 0
