"""The daemon's single write connection: pragmas, migrations and batch commits.

Exactly one `Store` exists per daemon; everything that writes goes through
`commit_batch` (or `write`), so SQLite never sees two writers from us and
the events ledger makes every commit idempotent by `event_id`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import aiosqlite
import anyio
import msgspec

from nmem_client import paths
from nmemd.config import Settings
from nmemd.errors import StorageError, StorageFullError
from nmemd.model import COMPACT_STEPS, Extracted, compact_key
from nmemd.store import fts, grams
from nmemd.store.dedup import Deduper
from nmemd.store.migrations import MIGRATIONS, MIGRATIONS_DDL

LOG = logging.getLogger("nmemd.store")
# FTS5's merge settings as nmem runs them (FTS5's defaults): retention sweeps defer merges while they
# run (automerge off, crisismerge raised) and set these back; `open_store` repairs what a crash left.
FTS_MERGES: Final = {"automerge": 4, "crisismerge": 16}
# Live batches index their observations once this many wait (migration m004): an FTS5 insert
# costs a segment and merges per transaction, so 16-event batches paid ~40 % of their cost to it.
FTS_CHUNK = 1024
_T = TypeVar("_T")
SQL_CHUNK = 500  # host parameters per IN (...) query, well under SQLite's limit


class Incoming(msgspec.Struct, kw_only=True):
    """One accepted event on its way to a batch commit."""

    event_id: str
    received_at: float
    extracted: Extracted
    from_inbox: bool = False  # delete its inbox row in the same transaction
    # The event's natural idempotency key when its sender knows one (a transcript line's
    # uuid, ...); tool calls get theirs from `natural_key` on every path.
    natural_key: str | None = None
    git_branch: str | None = None  # the session's branch, when the sender knows it (transcripts)


KEYED_TOOL_EVENTS = frozenset({"PostToolUse", "PostToolUseFailure"})


# The same in SQL, over an observations row: an event that finishes a tool call (with `tool_use_id`
# not null and a known session, the row records that call), and the call's natural key.
TOOL_CALL_ROW = f"hook_event IN ({', '.join(repr(e) for e in sorted(KEYED_TOOL_EVENTS))})"
TOOL_CALL_ROW_KEY = "'tool:' || session_id || ':' || tool_use_id"


def tool_call(ex: Extracted) -> tuple[str, str] | None:
    """(session, tool_use_id) of a finished tool call: what its natural key names (migration m005)."""
    if ex.tool_use_id and ex.hook_event in KEYED_TOOL_EVENTS and ex.session_id != "unknown":
        return ex.session_id, ex.tool_use_id
    return None


def _tool_key(call: tuple[str, str]) -> str:
    return f"tool:{call[0]}:{call[1]}"


def natural_key(ex: Extracted) -> str | None:
    """The key an event has on the hook path and the transcript path alike.

    `tool:<session>:<tool_use_id>` for a finished tool call (PreToolUse and
    PermissionRequest carry the id too but are not the call's record, so they
    never claim its key); `prompt:<session>:<prompt_id>` for a prompt, where
    Claude Code sends its id (2.1.196+; the transcript calls it `promptId`);
    `compact:<session>:<prompt_id>:start|summary` for a compaction's two steps; otherwise
    the key extraction named (`reply:<session>:<hash>` for a turn's final message).
    """
    call = tool_call(ex)
    if call is not None:
        return _tool_key(call)
    if ex.session_id == "unknown":
        return None
    if ex.prompt_id and ex.hook_event == "UserPromptSubmit":
        return f"prompt:{ex.session_id}:{ex.prompt_id}"
    if ex.prompt_id and ex.hook_event in COMPACT_STEPS:
        return compact_key(ex.session_id, ex.prompt_id, ex.hook_event)
    return ex.natural_key


KEY_DIGEST: Final = "sha256:"
KEY_DIGEST_FUNCTION: Final = "nmem_key_digest"  # the same in SQL, on the write connection


def key_digest(key: str | None) -> str | None:
    """What the ledger keeps of a key that must not be kept as it is (one holding a secret, or one
    whose row was purged): enough to recognise the event again, nothing of the key's text."""
    if key is None or key.startswith(KEY_DIGEST):
        return key
    return KEY_DIGEST + _sha256(key)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _unchanged(text: str) -> str:
    return text


def stored_key(key: str | None, redact: Callable[[str], str] = _unchanged) -> str | None:
    """A natural key as the ledger stores it: a sender's id can hold anything (Copilot's messageId,
    a transcript line's uuid), so one the redactor would change is kept as its digest."""
    return key_digest(key) if key and redact(key) != key else key


def connection_pragmas(settings: Settings) -> list[str]:
    return [
        "PRAGMA journal_mode=WAL",
        f"PRAGMA synchronous={settings.synchronous}",
        "PRAGMA busy_timeout=5000",
        "PRAGMA foreign_keys=ON",
        "PRAGMA temp_store=MEMORY",
        "PRAGMA secure_delete=ON",  # deleted rows (drained inbox, purges) leave no bytes behind
        f"PRAGMA journal_size_limit={64 * 1024 * 1024}",
        "PRAGMA wal_autocheckpoint=0",  # nmemd.store.checkpointer does it off the commit path
    ]


def translate(exc: sqlite3.Error) -> StorageError:
    """Map sqlite3 errors to ours, once, at the store's edge."""
    message = str(exc)
    name = getattr(exc, "sqlite_errorname", "")
    # A file-size limit (EFBIG) surfaces as an I/O write error, ENOSPC as SQLITE_FULL: both mean "cannot grow".
    if name in ("SQLITE_FULL", "SQLITE_IOERR_WRITE") or "database or disk is full" in message:
        return StorageFullError(message)
    return StorageError(message)


async def migrate(conn: aiosqlite.Connection) -> list[str]:
    """Apply every migration not yet recorded; return the names applied."""
    await conn.execute(MIGRATIONS_DDL)
    rows = await conn.execute_fetchall("SELECT name FROM schema_migrations")
    done = {r[0] for r in rows}
    applied = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        await conn.executescript(
            "BEGIN IMMEDIATE;\n"
            + sql
            + f"\nINSERT INTO schema_migrations(name, applied_at) VALUES ('{name}', {time.time()});\nCOMMIT;"
        )
        applied.append(name)
    return applied


@dataclass
class Store:
    conn: aiosqlite.Connection
    settings: Settings
    dedup: Deduper
    next_observation_id: int = 1
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    last_commit_at: float = 0.0
    on_commit: Callable[[], None] = lambda: None  # nudges the checkpointer after every commit
    # The redactor (nmemd.capture.redact, given by whoever opens the store: capture sits above the
    # store) for what is stored as it comes: a session's branch, an event's natural key.
    redact: Callable[[str], str] = _unchanged
    # One checkpoint at a time in this process: two at once make the second one fail busy.
    checkpoint_lock: anyio.Lock = field(default_factory=anyio.Lock)
    # Bumped by every purge: derived text computed before it (summaries) must not be written after it.
    purges: int = 0
    # Observations with a smaller id are in the FTS index, the others not yet (fts_state, m004).
    indexed_below: int = 1
    _indexed_at_commit: int = 0  # what the open transaction indexed up to (applied at COMMIT)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[aiosqlite.Connection]:
        """One `BEGIN IMMEDIATE` transaction, shielded: a cancelled write may still commit."""
        async with self.lock:
            with anyio.CancelScope(shield=True):
                try:
                    await self.conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as exc:
                    raise translate(exc) from exc
                self._indexed_at_commit = 0
                try:
                    yield self.conn
                    await self.conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    await self._rollback()
                    raise translate(exc) from exc
                except BaseException:
                    await self._rollback()
                    raise
                self.indexed_below = max(self.indexed_below, self._indexed_at_commit)
                self.committed()

    def committed(self) -> None:
        """Every transaction on the write connection ends here (jobs that run their own SQL too)."""
        self.last_commit_at = time.time()
        self.on_commit()

    async def _rollback(self) -> None:
        try:
            if self.conn.in_transaction:
                await self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            LOG.exception("rollback failed")

    @property
    def unindexed(self) -> int:
        """Observations committed but not in the FTS index yet (at most ids, gaps count)."""
        return max(0, self.next_observation_id - self.indexed_below)

    async def index_within(self, conn: aiosqlite.Connection, end: int | None = None) -> None:
        """Inside a `write()` transaction: index every observation below `end` (default: all) not
        indexed yet. Every path that inserts observations outside `commit_items` calls it."""
        start, end = self.indexed_below, self.next_observation_id if end is None else end
        if end > start:
            await conn.execute(_INDEX_RANGE, (start, end))
            await conn.execute(grams.INDEX_RANGE, (start, end))
            await conn.execute(_SET_INDEXED, (end,))
            self._indexed_at_commit = end

    async def all_indexed(self, conn: aiosqlite.Connection) -> None:
        """Inside a `write()` transaction that just ran FTS5's 'rebuild': every row is indexed."""
        await conn.execute(_SET_INDEXED, (self.next_observation_id,))
        self._indexed_at_commit = self.next_observation_id

    async def index_pending(self) -> None:
        """Index every committed observation now (the writer when quiet, shutdown, start)."""
        if self.unindexed:
            async with self.write() as conn:
                await self.index_within(conn)

    async def searchable(self) -> None:
        """Before a full-text read: index what is pending. A failure (disk full) is logged and the
        read goes on: it only misses the newest observations."""
        try:
            await self.index_pending()
        except StorageError as exc:
            LOG.warning("could not index the newest observations before a search: %s", exc)

    async def commit_batch(self, items: Sequence[Incoming]) -> int:
        """Store a batch in one transaction; return how many events were new."""
        return len(await self.commit_items(items))

    async def commit_items(self, items: Sequence[Incoming]) -> list[int]:
        """Store a batch in one transaction; return the indexes (ascending) of the items that were new.

        Events already in the ledger (a retry, the same event through both the
        socket and the inbox, or a tool call seen by a hook and again in its
        transcript: same natural key) are skipped; their inbox rows are still removed.
        """
        if not items:
            return []
        async with self.lock:
            with anyio.CancelScope(shield=True):
                try:
                    new = await on_writer_thread(self.conn, self.commit_on_thread, items)
                except sqlite3.Error as exc:
                    raise translate(exc) from exc
                self.committed()
        return new

    def commit_on_thread(
        self, db: sqlite3.Connection, items: Sequence[Incoming], import_files: Sequence[tuple[Any, ...]] = ()
    ) -> list[int]:
        """`commit_items` on the writer thread itself (the caller holds `lock`): the whole transaction
        in one go, then the ids, the watermark and the dedup window move on. Raises sqlite3.Error.

        `import_files` rows (see `record_import_files`) are written in the same transaction: how far
        a transcript was read is recorded exactly when the events read from it are.
        The caller calls `committed()` afterwards, on the event loop.
        """
        overlay = self.dedup.overlay()
        plan = _commit(db, items, self.next_observation_id, self.indexed_below, overlay, import_files, self.redact)
        self.next_observation_id = plan.next_id
        self.indexed_below = plan.indexed_below
        self.dedup.merge(overlay)
        return plan.new

    async def import_files(self, paths: Sequence[str]) -> list[tuple[Any, ...]]:
        """Rows of `import_files` for these paths (what `nmem import-transcripts` read so far)."""
        rows: list[tuple[Any, ...]] = []
        for start in range(0, len(paths), SQL_CHUNK):
            chunk = paths[start : start + SQL_CHUNK]
            marks = ",".join("?" * len(chunk))
            found = await self.conn.execute_fetchall(
                f"SELECT path, dev, inode, size, mtime, offset, head_hash, events FROM import_files"
                f" WHERE path IN ({marks})",
                chunk,
            )
            rows.extend(tuple(r) for r in found)
        return rows

    async def record_import_files(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Upsert (path, dev, inode, size, mtime, offset, head_hash, events): call only after their events commit."""
        if not rows:
            return
        async with self.write() as conn:
            await conn.executemany(_UPSERT_IMPORT_FILE, _stamped(rows))

    async def scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        rows = await self.conn.execute_fetchall(sql, tuple(params))
        for row in rows:
            return row[0]
        return None


# Events already stored: by event_id or natural key in the ledger, and finished tool calls by
# the observation row that records them (migration m005), as (event_id or NULL, natural key).
_KNOWN = (
    "SELECT event_id, natural_key FROM events WHERE event_id IN (SELECT value FROM json_each(?))"
    " OR natural_key IN (SELECT value FROM json_each(?))"
    f" UNION ALL SELECT NULL, {TOOL_CALL_ROW_KEY} FROM observations"
    " WHERE (session_id, tool_use_id) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')"
    f" FROM json_each(?)) AND {TOOL_CALL_ROW}"
)
ROWS_PER_STATEMENT = 32  # x 16 columns: under SQLite's old 999-parameter limit


class _RowsInsert:
    """`INSERT ... VALUES (...), (...), ...`: up to ROWS_PER_STATEMENT rows in one statement.

    `executemany` steps once per row, and each step lets the GIL go and takes it back; on the
    writer thread every retake waits for the event loop to let go of it (the writer spent ~45 %
    of its time there under load). One statement per 32 rows retakes it once.
    """

    def __init__(self, head: str, columns: int, tail: str = ""):
        self.head, self.tail = head, tail
        self.row = "(" + ", ".join("?" * columns) + ")"
        self._sql: dict[int, str] = {}

    def sql(self, rows: int) -> str:
        text = self._sql.get(rows)
        if text is None:
            text = self._sql[rows] = f"{self.head} VALUES {', '.join([self.row] * rows)}{self.tail}"
        return text

    def run(self, db: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> None:
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start : start + ROWS_PER_STATEMENT]
            db.execute(self.sql(len(chunk)), [value for row in chunk for value in row])


_OBSERVATIONS = _RowsInsert(
    "INSERT INTO observations(id, event_id, session_id, project, ts, last_ts, hook_event, type, title,"
    " content, tool_name, file_path, command, tool_use_id, agent_id, agent)",
    16,
)
_MERGE = "UPDATE observations SET count = count + 1, last_ts = max(last_ts, ?) WHERE id = ?"
_EVENTS = _RowsInsert(
    "INSERT INTO events(event_id, received_at, session_id, hook_event, observation_id, natural_key)",
    6,
    " ON CONFLICT DO NOTHING",
)
# One FTS5 insert for many rows (migrations m002, m004): the ids are ours and ascending. Each is
# followed by grams.INDEX_RANGE, the same rows' unspaced-script pairs (m007).
_INDEX_RANGE = (
    f"INSERT INTO observations_fts(rowid, {fts.COLUMNS})"
    f" SELECT id, {fts.COLUMNS} FROM observations WHERE id >= ? AND id < ?"
)
_SET_INDEXED = "UPDATE fts_state SET indexed_below = ?"
_UPSERT_IMPORT_FILE = (
    "INSERT INTO import_files(path, dev, inode, size, mtime, offset, head_hash, events, imported_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET dev = excluded.dev,"
    " inode = excluded.inode, size = excluded.size, mtime = excluded.mtime, offset = excluded.offset,"
    " head_hash = excluded.head_hash, events = excluded.events, imported_at = excluded.imported_at"
)


def _stamped(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    now = time.time()
    return [(*r, now) for r in rows]


_INSERT_PROMPT = (
    "INSERT INTO prompts(observation_id, session_id, prompt_number, ts) VALUES (?, ?,"
    " (SELECT coalesce(max(prompt_number), 0) + 1 FROM prompts WHERE session_id = ?), ?)"
)
_SESSION_COLUMNS = """
INSERT INTO sessions(session_id, project, cwd, started_at, last_event_at, source, end_reason, ended_at,
                     model, transcript_path, last_assistant_message, git_branch, event_count, agent)"""
_SESSION_UPDATE = """
ON CONFLICT(session_id) DO UPDATE SET
    project = coalesce(sessions.project, excluded.project),
    cwd = coalesce(sessions.cwd, excluded.cwd),
    started_at = min(coalesce(sessions.started_at, excluded.started_at), excluded.started_at),
    last_event_at = max(coalesce(sessions.last_event_at, excluded.last_event_at), excluded.last_event_at),
    source = coalesce(sessions.source, excluded.source),
    end_reason = coalesce(excluded.end_reason, sessions.end_reason),
    ended_at = coalesce(excluded.ended_at, sessions.ended_at),
    model = coalesce(nullif(excluded.model, ''), sessions.model),
    transcript_path = coalesce(sessions.transcript_path, excluded.transcript_path),
    last_assistant_message = coalesce(excluded.last_assistant_message, sessions.last_assistant_message),
    git_branch = coalesce(excluded.git_branch, sessions.git_branch),
    event_count = sessions.event_count + excluded.event_count,
    agent = coalesce(sessions.agent, excluded.agent)
"""
_SESSIONS = _RowsInsert(_SESSION_COLUMNS, 14, _SESSION_UPDATE)


def _json_list(values: Sequence[str]) -> str:
    return msgspec.json.encode(values).decode()


def _branch(name: str | None, redact: Callable[[str], str]) -> str | None:
    """A session's branch as stored: a name is anything its author typed, a token included."""
    return redact(name) if name else None


class _Session:
    """A batch's events of one session, folded into the one upsert they amount to (in batch order)."""

    __slots__ = ("session_id", "project", "cwd", "started_at", "last_event_at", "source", "end_reason", "ended_at",
                 "model", "transcript_path", "last_assistant_message", "git_branch", "count", "agent")  # fmt: skip

    def __init__(self, ex: Extracted, ts: float, git_branch: str | None):
        self.session_id = ex.session_id
        self.project = ex.project
        self.cwd = ex.cwd
        self.started_at = self.last_event_at = ts
        self.source = ex.source
        self.end_reason = ex.end_reason
        self.ended_at = ts if ex.end_reason is not None else None
        self.model = ex.model
        self.transcript_path = ex.transcript_path
        self.last_assistant_message = ex.last_assistant_message if ex.hook_event == "Stop" else None
        self.git_branch = git_branch or None
        self.count = 1
        self.agent = ex.agent

    def add(self, ex: Extracted, ts: float, git_branch: str | None) -> None:
        """Fold a later event as `_SESSIONS` would apply it: first value kept, or last one, min/max."""
        if self.project is None:
            self.project = ex.project
        if self.cwd is None:
            self.cwd = ex.cwd
        if self.source is None:
            self.source = ex.source
        if self.transcript_path is None:
            self.transcript_path = ex.transcript_path
        self.started_at = min(self.started_at, ts)
        self.last_event_at = max(self.last_event_at, ts)
        if ex.end_reason is not None:
            self.end_reason, self.ended_at = ex.end_reason, ts
        if ex.model:
            self.model = ex.model
        if ex.hook_event == "Stop" and ex.last_assistant_message is not None:
            self.last_assistant_message = ex.last_assistant_message
        if git_branch:
            self.git_branch = git_branch
        if self.agent is None:
            self.agent = ex.agent
        self.count += 1

    def row(self) -> tuple[Any, ...]:
        return (
            self.session_id, self.project, self.cwd, self.started_at, self.last_event_at, self.source,
            self.end_reason, self.ended_at, self.model, self.transcript_path, self.last_assistant_message,
            self.git_branch, self.count, self.agent,
        )  # fmt: skip


@dataclass
class _Plan:
    next_id: int
    indexed_below: int = 0
    observations: list[tuple[Any, ...]] = field(default_factory=list)
    merges: list[tuple[float, int]] = field(default_factory=list)
    prompts: list[tuple[Any, ...]] = field(default_factory=list)
    sessions: dict[str, _Session] = field(default_factory=dict)
    events: list[tuple[Any, ...]] = field(default_factory=list)
    inbox_done: list[tuple[str]] = field(default_factory=list)
    new: list[int] = field(default_factory=list)  # indexes of the items stored


def _plan(
    items: Sequence[Incoming],
    keys: Sequence[str | None],
    calls: Sequence[tuple[str, str] | None],
    known: set[str],
    known_keys: set[str],
    next_id: int,
    overlay: Deduper,
    redact: Callable[[str], str] = _unchanged,
) -> _Plan:
    """Turn a batch into rows; observation ids are assigned here (we are the only writer).

    A tool call that gets an observation row of its own is known by that row (`_KNOWN`): its
    ledger row leaves the natural key out, so the ledger's key index takes no page for it.
    """
    plan = _Plan(next_id=next_id)
    seen = set(known)
    seen_keys = set(known_keys)
    sessions = plan.sessions
    for index, (item, key, call) in enumerate(zip(items, keys, calls, strict=True)):
        if item.from_inbox:
            plan.inbox_done.append((item.event_id,))
        if item.event_id in seen or key in seen_keys:
            continue
        seen.add(item.event_id)
        if key is not None:
            seen_keys.add(key)
        plan.new.append(index)
        ex, ts = item.extracted, item.received_at
        first_id: int | None = None
        own_row = False  # its first observation is a row of its own (what purge maps back to the ledger)
        for n, obs in enumerate(ex.observations):
            target = overlay.lookup(ex.session_id, obs.dedup_key, ts) if obs.dedup_key else None
            if target is not None:
                plan.merges.append((ts, target))
                first_id = first_id or target
                continue
            oid = plan.next_id
            plan.next_id += 1
            first_id = first_id or oid
            own_row = own_row or n == 0
            obs_event_id = item.event_id if n == 0 else f"{item.event_id}:{n}"
            plan.observations.append(
                (
                    oid,
                    obs_event_id,
                    ex.session_id,
                    ex.project,
                    ts,
                    ts,
                    ex.hook_event,
                    obs.type,
                    obs.title,
                    obs.content,
                    obs.tool_name,
                    obs.file_path,
                    obs.command,
                    ex.tool_use_id,
                    ex.agent_id,
                    ex.agent,
                )
            )
            if obs.dedup_key:
                overlay.remember(ex.session_id, obs.dedup_key, ts, oid)
            if obs.type == "prompt":
                plan.prompts.append((oid, ex.session_id, ex.session_id, ts))
        session = sessions.get(ex.session_id)
        if session is None:
            sessions[ex.session_id] = _Session(ex, ts, _branch(item.git_branch, redact))
        else:
            session.add(ex, ts, _branch(item.git_branch, redact))
        if own_row and call is not None:
            key = None  # the row is the record: (session_id, tool_use_id) of a PostToolUse(Failure) row
        plan.events.append((item.event_id, ts, ex.session_id, ex.hook_event, first_id, key))
    return plan


def _commit(
    db: sqlite3.Connection,
    items: Sequence[Incoming],
    next_id: int,
    indexed_below: int,
    overlay: Deduper,
    import_files: Sequence[tuple[Any, ...]] = (),
    redact: Callable[[str], str] = _unchanged,
) -> _Plan:
    """The batch transaction, run on the writer thread: BEGIN IMMEDIATE to COMMIT, or ROLLBACK on any error.

    Its observations join the FTS index once `FTS_CHUNK` of them wait (see migration m004).
    """
    calls = [tool_call(i.extracted) for i in items]
    # A tool call's key is its call's on every path; other events may bring their own (transcript lines).
    keys = [
        _tool_key(c) if c else stored_key(i.natural_key or natural_key(i.extracted), redact)
        for i, c in zip(items, calls, strict=True)
    ]
    digests = {KEY_DIGEST + _sha256(k): k for k in keys if k and not k.startswith(KEY_DIGEST)}  # a purged row's
    db.execute("BEGIN IMMEDIATE")
    try:
        ids = _json_list([i.event_id for i in items])
        pairs = msgspec.json.encode([c for c in calls if c is not None]).decode()
        rows = db.execute(_KNOWN, (ids, _json_list([k for k in keys if k] + list(digests)), pairs)).fetchall()
        known_ids = {r[0] for r in rows if r[0] is not None}
        known_keys = {digests.get(r[1], r[1]) for r in rows if r[1] is not None}
        plan = _plan(items, keys, calls, known_ids, known_keys, next_id, overlay, redact)
        plan.indexed_below = indexed_below
        if plan.observations:
            _OBSERVATIONS.run(db, plan.observations)
            if plan.next_id - indexed_below >= FTS_CHUNK:
                db.execute(_INDEX_RANGE, (indexed_below, plan.next_id))
                db.execute(grams.INDEX_RANGE, (indexed_below, plan.next_id))
                db.execute(_SET_INDEXED, (plan.next_id,))
                plan.indexed_below = plan.next_id
        if plan.merges:
            db.executemany(_MERGE, plan.merges)
        if plan.prompts:
            db.executemany(_INSERT_PROMPT, plan.prompts)
        if plan.sessions:
            _SESSIONS.run(db, [s.row() for s in plan.sessions.values()])
        if plan.events:
            _EVENTS.run(db, plan.events)
        if plan.inbox_done:
            db.executemany("DELETE FROM inbox WHERE event_id = ?", plan.inbox_done)
        if import_files:
            db.executemany(_UPSERT_IMPORT_FILE, _stamped(import_files))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                LOG.exception("rollback failed")
        raise
    return plan


async def on_writer_thread(conn: aiosqlite.Connection, fn: Callable[..., _T], *args: Any) -> _T:
    """Run `fn(sqlite3_connection, *args)` on aiosqlite's own thread, in one hop.

    aiosqlite sends each statement to its thread and back (a loop wake-up per
    statement); a batch is ~7 statements. This uses its private `_execute` and
    `_conn` (pinned `aiosqlite<0.23`, covered by tests/test_store.py): the one
    write connection stays aiosqlite's, and nothing else touches it meanwhile
    because every writer holds `Store.lock`.
    """
    return await conn._execute(lambda: fn(conn._conn, *args))  # type: ignore[no-untyped-call,no-any-return]


GRAMS_BACKFILL_CHUNK = 50_000  # ids per transaction: ~0.1-0.3 s of the write lock at start


async def _backfill_grams(conn: aiosqlite.Connection) -> None:
    """Index the unspaced-script pairs of rows stored before migration m007, a chunk per transaction.

    Resumable: `grams_from` records how far it got, so a crash in the middle goes on from there."""
    rows = await conn.execute_fetchall("SELECT grams_from, grams_below FROM fts_state")
    start, end = (int(v) for v in list(rows)[0])
    if start >= end:
        return
    LOG.info("indexing unspaced-script text (CJK, Thai) of observations below id %d", end)
    began = time.monotonic()
    while start < end:
        stop = min(start + GRAMS_BACKFILL_CHUNK, end)
        await conn.execute("BEGIN IMMEDIATE")
        try:
            await conn.execute(grams.INDEX_RANGE, (start, stop))
            await conn.execute("UPDATE fts_state SET grams_from = ?", (stop,))
            await conn.execute("COMMIT")
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        start = stop
        LOG.info("indexed unspaced-script text up to id %d of %d (%.1f s)", stop, end, time.monotonic() - began)


FTS_REINDEX_CHUNK = 100_000  # ids per transaction when a migration (m008, m010) indexes old rows again


async def _reindex_fts(conn: aiosqlite.Connection) -> None:
    """Index the rows stored before migration m008 or m010 into its new index, a chunk per transaction.

    Resumable: `reindex_from` records how far it got, so a crash in the middle goes on from there."""
    rows = await conn.execute_fetchall("SELECT reindex_from, reindex_below FROM fts_state")
    start, end = (int(v) for v in list(rows)[0])
    if start >= end:
        return
    LOG.info("indexing observations below id %d again for full-text search (a migration's new index)", end)
    began = time.monotonic()
    while start < end:
        stop = min(start + FTS_REINDEX_CHUNK, end)
        await conn.execute("BEGIN IMMEDIATE")
        try:
            await conn.execute(_INDEX_RANGE, (start, stop))
            await conn.execute("UPDATE fts_state SET reindex_from = ?", (stop,))
            await conn.execute("COMMIT")
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        # The checkpointer does not run yet: without this the WAL held the whole new index (650 MB at 1M).
        await conn.execute_fetchall("PRAGMA wal_checkpoint(RESTART)")
        start = stop
        LOG.info("indexed observations up to id %d of %d (%.1f s)", stop, end, time.monotonic() - began)


async def _ensure_statistics(conn: aiosqlite.Connection) -> None:
    """Planner statistics from the first start: without them SQLite may read a whole type's index
    where a session's would do (a store built by an import had none until the first `optimize`).
    `analysis_limit` keeps ANALYZE to a sample of each index, milliseconds even at a million rows."""
    has = await conn.execute_fetchall("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'")
    if has and not await _statistics_stale(conn):
        return
    await conn.execute("PRAGMA analysis_limit=400")
    await conn.execute("ANALYZE")


async def _statistics_stale(conn: aiosqlite.Connection) -> bool:
    """No statistics of observations, or ones taken when it held a tenth of its rows or fewer (the first
    start's ANALYZE ran on an empty file; an import then brought a million rows)."""
    rows = await conn.execute_fetchall("SELECT stat FROM sqlite_stat1 WHERE tbl = 'observations' LIMIT 1")
    recorded = int(str(list(rows)[0][0]).split()[0]) if rows else 0
    span = await conn.execute_fetchall("SELECT coalesce(max(id) - min(id) + 1, 0) FROM observations")
    estimated = int(list(span)[0][0])  # two rowid lookups, not a count
    return estimated >= STATS_MIN_ROWS and recorded * 10 < estimated


STATS_MIN_ROWS = 1000  # below this any plan is fast: no ANALYZE at every start of a young store


# FTS5 plans the statements it runs on its own tables from sqlite_stat1 like any other. The ANALYZE
# of a young store (the first start's, on an empty file) records `observations_fts_data` as 2 rows,
# and believing that, SQLite runs FTS5's `DELETE ... WHERE id>=? AND id<=?` (once per input segment
# of every merge step, automerges inside batches included) as a scan of the whole index: 80 ms per
# statement at a million observations, a 64-page merge step 1.1 s instead of 7 ms. Every statement
# FTS5 runs there is a rowid or primary-key lookup, right whenever the table is believed big.
FTS_DATA_STAT = "1000000"


async def plan_fts_data_as_large(conn: aiosqlite.Connection) -> bool:
    """Record `observations_fts_data` as a big table in sqlite_stat1 (after any ANALYZE); True when
    the row changed. `ANALYZE sqlite_schema` reloads the statistics and prepares statements again,
    FTS5's own included (deleting the row would leave this connection with the old estimate)."""
    if not await conn.execute_fetchall("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'"):
        return False
    rows = await conn.execute_fetchall("SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'observations_fts_data'")
    if all(idx is None and stat == FTS_DATA_STAT for idx, stat in rows):
        return False  # right already, or no row: SQLite's default estimate is a million rows
    await conn.execute("DELETE FROM sqlite_stat1 WHERE tbl = 'observations_fts_data'")
    await conn.execute(
        "INSERT INTO sqlite_stat1(tbl, idx, stat) VALUES ('observations_fts_data', NULL, ?)", (FTS_DATA_STAT,)
    )
    await conn.execute("ANALYZE sqlite_schema")
    return True


async def set_fts_merges(conn: aiosqlite.Connection, options: dict[str, int]) -> None:
    """Set FTS5 merge options (`automerge`, `crisismerge`) of the main index; stored in the database."""
    for option, value in options.items():
        await conn.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES (?, ?)", (option, value))


@asynccontextmanager
async def open_store(settings: Settings, redact: Callable[[str], str] = _unchanged) -> AsyncIterator[Store]:
    """Open (creating and migrating if needed) the database; checkpoint on close. `redact`: the
    redactor for the branch and natural keys a batch brings (`Store.redact`)."""
    paths.make_dirs(os.path.dirname(settings.db) or ".")
    old_umask = os.umask(0o077)
    try:
        # Room for the batch statements of every row count (store._RowsInsert) beside the others.
        conn = await aiosqlite.connect(settings.db, isolation_level=None, cached_statements=256)
    finally:
        os.umask(old_umask)
    try:
        await conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # effective on a new, empty file only
        for pragma in connection_pragmas(settings):
            await conn.execute(pragma)
        await conn.create_function(grams.SQL_FUNCTION, 2, grams.pairs, deterministic=True)
        await conn.create_function(KEY_DIGEST_FUNCTION, 1, key_digest, deterministic=True)
        applied = await migrate(conn)
        # A retention sweep defers FTS5's merges while it runs; a crash may have left them deferred.
        # (A read first: no write at every start for settings that are almost always right.)
        rows = await conn.execute_fetchall(
            "SELECT k, v FROM observations_fts_config WHERE k IN ('automerge', 'crisismerge')"
        )
        await set_fts_merges(conn, {k: FTS_MERGES[k] for k, v in rows if int(v) != FTS_MERGES[k]})
        if applied:
            LOG.info("applied migrations: %s", ", ".join(applied))
        await _reindex_fts(conn)
        await _backfill_grams(conn)
        await _ensure_statistics(conn)
        if await plan_fts_data_as_large(conn):
            LOG.info("sqlite_stat1: observations_fts_data recorded as large (FTS5 merges scanned it)")
        top = await conn.execute_fetchall(
            "SELECT max(coalesce((SELECT max(id) FROM observations), 0),"
            " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'observations'), 0))"
        )
        store = Store(conn=conn, settings=settings, dedup=Deduper(settings.dedup_window_s), redact=redact)
        store.next_observation_id = int(list(top)[0][0]) + 1
        watermark = await conn.execute_fetchall("SELECT indexed_below FROM fts_state")
        store.indexed_below = int(list(watermark)[0][0])
        await store.index_pending()  # what a crash left unindexed
    except sqlite3.Error as exc:
        await conn.close()
        raise translate(exc) from exc
    except BaseException:
        await conn.close()
        raise
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await store.index_pending()  # a stopped daemon leaves every observation searchable
            except StorageError:
                LOG.exception("indexing the newest observations failed; the next start does it")
            try:
                await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                LOG.exception("final checkpoint failed")
            await conn.close()
