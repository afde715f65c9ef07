"""Import Claude Code history: find transcripts, read what is new in each, send it to the daemon.

CLI side: files are streamed line by line (a file is never held in memory),
parsed with msgspec, turned into hook-shaped records by `nmemd.transcripts`
and sent in batches, one `import_events` RPC each, on a sender thread so the
next batch is read while the daemon stores the last one.

Daemon side (`call`): each record goes through the same `extract` as a live
hook and the same group commit (`Ingestor.submit_many`), with its transcript
timestamp and its natural key; the reply comes after the commit. How far each
file was read is recorded in `import_files` after the events before that
offset are committed, so an interrupted run resumes where it stopped (events
sent twice are harmless: their natural keys are known).
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import msgspec

from nmemd.errors import NmemError
from nmemd.transcripts import Counts, Record, TranscriptReader

if TYPE_CHECKING:
    import sqlite3

    from nmemd.server import Daemon

LOG = logging.getLogger("nmemd.backfill")

METHODS: Final = ("import_events", "import_state")
BATCH_EVENTS: Final = 256  # events per RPC
BATCH_BYTES: Final = 4 * 1024 * 1024  # transcript bytes behind one RPC (its frame is smaller: strings are bounded)
LINE_MAX: Final = 32 * 1024 * 1024  # a longer line is skipped, read in chunks, never held whole
HEAD_BYTES: Final = 1024  # hashed to notice a file replaced under the same name
RPC_TIMEOUT_S: Final = 300.0


class ImportParamsError(NmemError):
    """An `import_events` request is malformed."""


# --- the wire ------------------------------------------------------------------------------------


class FileState(msgspec.Struct, kw_only=True):
    """How far one transcript was read: only complete lines before `offset` are done."""

    path: str
    dev: int
    inode: int
    size: int
    mtime: float
    offset: int
    head_hash: str
    events: int = 0  # records sent from this file, all runs

    def row(self) -> tuple[Any, ...]:
        return (self.path, self.dev, self.inode, self.size, self.mtime, self.offset, self.head_hash, self.events)


class ImportParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    items: list[Record] = []
    files: list[FileState] = []


class StateParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    paths: list[str]


# --- daemon side ---------------------------------------------------------------------------------


def event_id_for(key: str) -> str:
    """A ledger id derived from the natural key: the same record always gets the same id."""
    return "imp" + hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def _known_keys(conn: sqlite3.Connection, keys: list[str]) -> set[str]:
    known: set[str] = set()
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(f"SELECT natural_key FROM events WHERE natural_key IN ({marks})", chunk)
        known.update(r[0] for r in rows)
    return known


async def call(daemon: Daemon, method: str, params: dict[str, Any]) -> Any:
    """Run `import_events` or `import_state` for the CLI."""
    import anyio

    from nmemd import readers
    from nmemd.extract import extract
    from nmemd.store import Incoming, natural_key

    store = daemon.ingestor.store
    try:
        if method == "import_state":
            rows = await store.import_files(msgspec.convert(params, StateParams).paths)
            return [dict(zip(FileState.__struct_fields__, r, strict=True)) for r in rows]
        p = msgspec.convert(params, ImportParams)
    except msgspec.ValidationError as exc:
        raise ImportParamsError(f"{method}: {exc}") from exc
    # Records seen before (a re-run, or the hook saw them live) cost one index lookup, not an extraction.
    known = await readers.run(daemon.settings.db, _known_keys, [r.key for r in p.items]) if p.items else set()
    todo = [r for r in p.items if r.key not in known]
    skip = daemon.skip_tools

    def extract_all() -> list[Incoming]:
        out = []
        for r in todo:
            ex = extract(r.payload, skip_tools=skip)
            key = natural_key(ex) or r.key
            out.append(
                Incoming(
                    event_id=event_id_for(key), received_at=r.ts, extracted=ex, natural_key=key, git_branch=r.git_branch
                )
            )
        return out

    if todo:
        incoming = await anyio.to_thread.run_sync(extract_all)  # the event loop keeps serving live hooks
        await daemon.ingestor.submit_many(incoming)
    await store.record_import_files([f.row() for f in p.files])
    return {"received": len(p.items), "new": len(todo)}


# --- CLI side: files -----------------------------------------------------------------------------


@dataclass
class Problem:
    """Something wrong with one file; the run goes on."""

    path: str
    reason: str


def default_root() -> str:
    base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    return os.path.join(base, "projects")


def discover(paths: Sequence[str], problems: list[Problem]) -> list[str]:
    """Every transcript under `paths`: files as given, directories walked for `*.jsonl` (sorted,
    so a session's transcript comes before its `subagents/`)."""
    found: list[str] = []
    for raw in paths:
        path = os.path.abspath(raw)
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path, onerror=lambda e: problems.append(_problem(e))):
                dirs.sort()
                found += [os.path.join(root, f) for f in sorted(files) if f.endswith(".jsonl")]
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
class _Batch:
    items: list[Record]
    files: list[FileState]


class _Sender:
    """Sends batches in order on its own thread: one in flight, one waiting."""

    def __init__(self, ask: Callable[[str, dict[str, Any], float], Any], summary: Summary):
        self.ask = ask
        self.summary = summary
        self.queue: queue.Queue[_Batch | None] = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="nmem-import-sender", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            batch = self.queue.get()
            if batch is None or self.stop.is_set():
                return
            try:
                reply = self.ask("import_events", {"items": batch.items, "files": batch.files}, RPC_TIMEOUT_S)
                self.summary.events_sent += int(reply.get("received", 0))
                self.summary.events_new += int(reply.get("new", 0))
            except BaseException as exc:  # reported by the main thread, which stops producing
                self.error = exc
                return

    def put(self, batch: _Batch) -> None:
        while True:
            if self.error is not None:
                raise self.error
            try:
                self.queue.put(batch, timeout=0.2)
                return
            except queue.Full:
                continue

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued, then stop; raise what the daemon refused."""
        if self.error is None:
            self.put_final()
        self.thread.join(timeout)
        if self.error is not None:
            raise self.error

    def put_final(self) -> None:
        while self.thread.is_alive():
            try:
                self.queue.put(None, timeout=0.2)
                return
            except queue.Full:
                continue

    def abandon(self, timeout: float) -> None:
        """Ctrl-C: drop what waits, let the batch in flight finish (its commit is whole either way)."""
        self.stop.set()
        try:
            self.queue.get_nowait()
        except queue.Empty:
            pass
        self.put_final()
        self.thread.join(timeout)


@dataclass
class _Open:
    """The file being read: enough to record how far it got at any batch boundary."""

    path: str
    st: os.stat_result
    head_hash: str
    reader: TranscriptReader
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
        self._decoder = msgspec.json.Decoder()
        self._items: list[Record] = []
        self._pending_bytes = 0
        self._done: list[FileState] = []  # files finished since the last batch
        self._open: _Open | None = None
        self._sender: _Sender | None = None

    def run(self, paths: Sequence[str]) -> Summary:
        """Import what is new under `paths`; Ctrl-C stops after the batch in flight (summary.interrupted)."""
        started = time.monotonic()
        try:
            found: list[Problem] = []
            files = discover(paths, found)
            for p in found:
                self._note(p.path, p.reason)
            self.summary.files = len(files)
            plan = self._plan(files, self._load_state(files))
            self._sender = _Sender(self.ask, self.summary)
            for path, st, saved in plan:
                self._import_file(path, st, saved)
            self._flush()
            self._sender.close()
        except KeyboardInterrupt:
            self.summary.interrupted = True
            if self._sender is not None:
                self._sender.abandon(RPC_TIMEOUT_S)
        finally:
            self.summary.seconds = round(time.monotonic() - started, 3)
            for path, n in self.invalid.items():
                self._note(path, f"{n} invalid JSON line{'s' if n > 1 else ''} skipped")
            self.summary.bad_files = [{"path": p, "reason": "; ".join(r)} for p, r in self.problems.items()]
        return self.summary

    def _load_state(self, files: list[str]) -> dict[str, FileState]:
        state: dict[str, FileState] = {}
        for start in range(0, len(files), 2000):
            rows = self.ask("import_state", {"paths": files[start : start + 2000]}, RPC_TIMEOUT_S)
            for row in msgspec.convert(rows, list[FileState]):
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
        try:
            f = open(path, "rb")  # noqa: SIM115 - a with-block follows
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
            cur = self._open = _Open(
                path, st, hh, TranscriptReader.for_file(path), start, saved.events if start and saved else 0
            )
            try:
                self._read(f, cur)
            except OSError as exc:
                self._note(path, f"read failed: {exc.strerror or exc}")
        self._open = None
        if cur.offset != start or cur.events:
            self._done.append(cur.state())
        self._count(cur.reader.counts)
        self.summary.files_read += 1
        self.progress.files_done += 1

    def _read(self, f: Any, cur: _Open) -> None:
        decode = self._decoder.decode
        feed = cur.reader.feed
        for raw_start, raw in self._lines(f, cur):
            size = len(raw)
            cur.offset = raw_start + size
            self.progress.bytes_done += size
            self._pending_bytes += size
            try:
                line = decode(raw)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                if raw.strip():
                    self.invalid[cur.path] = self.invalid.get(cur.path, 0) + 1
                    self.summary.invalid_lines += 1
                continue
            records = feed(line, raw_start, size)
            if records:
                cur.events += len(records)
                self._items += records
                self.progress.events += len(records)
                if len(self._items) >= BATCH_EVENTS:
                    self._flush()
            if self._pending_bytes >= BATCH_BYTES:
                self._flush()

    def _lines(self, f: Any, cur: _Open) -> Iterator[tuple[int, bytes]]:
        """(offset, line) for each complete line; a truncated last line is left for the next run."""
        offset = cur.offset
        while True:
            raw = f.readline(LINE_MAX)
            if not raw:
                return
            if raw[-1] != 10:  # no newline
                if len(raw) < LINE_MAX:
                    self._note(cur.path, "truncated last line (left for the next run)")
                    return
                skipped = len(raw)
                while raw and raw[-1] != 10:  # an over-long line: skip it in chunks, never whole
                    raw = f.readline(LINE_MAX)
                    skipped += len(raw)
                self._note(cur.path, "line over 32 MB skipped")
                self.summary.invalid_lines += 1
                offset += skipped
                cur.offset = offset
                continue
            self.summary.bytes += len(raw)
            yield offset, raw
            offset += len(raw)

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
        s.skipped_lines += counts.skipped

    def _flush(self) -> None:
        files = self._done
        if self._open is not None and self._open.offset:
            files = [*files, self._open.state()]
        if not self._items and not files:
            return
        assert self._sender is not None
        self._sender.put(_Batch(items=self._items, files=files))
        self._items, self._done, self._pending_bytes = [], [], 0
