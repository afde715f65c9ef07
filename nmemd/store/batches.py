"""A batch of events as rows, in one transaction on the writer thread (`write_batch`).

Group commit: the events that arrived together are checked against the ledger in one query,
planned into rows (observation ids assigned here: one writer), and inserted a few statements per
table, not one per row. `Store.commit_items` runs it under the store's lock.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from nmemd.model import Extracted
from nmemd.store import fts, grams, places
from nmemd.store.dedup import Deduper
from nmemd.store.keys import (
    KEY_DIGEST,
    TOOL_CALL_ROW,
    TOOL_CALL_ROW_KEY,
    as_is,
    digest,
    natural_key,
    stored_key,
    tool_call,
    tool_key,
)

LOG = logging.getLogger("nmemd.store")
_T = TypeVar("_T")


def in_transaction(db: sqlite3.Connection, fn: Callable[[sqlite3.Connection], _T]) -> _T:
    """`fn(db)` between BEGIN IMMEDIATE and COMMIT, rolled back on any error: the one transaction shape of
    every write on the writer thread (a batch, a pull's page, a purge)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = fn(db)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                LOG.exception("rollback failed")
        raise
    return result


# Live observations are indexed once this many wait (migration m004): an FTS5 insert costs a segment
# and merges per transaction, so 16-event batches paid ~40 % of their cost to it. The daemon's writer
# indexes them between batches (`Store.index_step_on_thread`); a batch does only when told to
# (`write_batch`'s `index_at`: tools, and the daemon's backlog of events that never stopped arriving).
FTS_CHUNK = 1024
# An index step's rows per statement: it commits after any of them once an event waits (~3 ms of CPU).
INDEX_STEP = 128


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


# Events already stored: by event_id or natural key in the ledger, and finished tool calls by
# the observation row that records them (migration m005), as (event_id or NULL, natural key).
# INDEXED BY: once the statistics have seen a session of thousands of rows without tool-call ids (an
# import, a bulk insert), every (session_id, tool_use_id) looks shared by thousands of rows and the
# planner reads the whole table instead (a scan per hook: 11-14 ms at 48k rows, issue #40).
_KNOWN = (
    "SELECT event_id, natural_key FROM events WHERE event_id IN (SELECT value FROM json_each(?))"
    " OR natural_key IN (SELECT value FROM json_each(?))"
    f" UNION ALL SELECT NULL, {TOOL_CALL_ROW_KEY} FROM observations INDEXED BY observations_session_tool"
    " WHERE (session_id, tool_use_id) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')"
    f" FROM json_each(?)) AND {TOOL_CALL_ROW}"
)
ROWS_PER_STATEMENT = 32  # x 16 columns: under SQLite's old 999-parameter limit


class RowsInsert:
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

    def run(self, db: sqlite3.Connection, rows: Sequence[Sequence[Any]]) -> list[Any]:
        """Insert `rows`; return what a RETURNING tail returns (nothing without one)."""
        out: list[Any] = []
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start : start + ROWS_PER_STATEMENT]
            out += db.execute(self.sql(len(chunk)), [value for row in chunk for value in row]).fetchall()
        return out


_OBSERVATIONS = RowsInsert(
    "INSERT INTO observations(id, event_id, session_id, project, ts, last_ts, hook_event, type, title,"
    " content, tool_name, file_path, command, tool_use_id, agent_id, agent)",
    16,
)
_MERGE = "UPDATE observations SET count = count + 1, last_ts = max(last_ts, ?) WHERE id = ?"
_EVENTS = RowsInsert(
    "INSERT INTO events(event_id, received_at, session_id, hook_event, observation_id, natural_key)",
    6,
    " ON CONFLICT DO NOTHING",
)
SET_INDEXED = "UPDATE fts_state SET indexed_below = ?"
UPSERT_IMPORT_FILE = (
    "INSERT INTO import_files(path, dev, inode, size, mtime, offset, head_hash, events, imported_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET dev = excluded.dev,"
    " inode = excluded.inode, size = excluded.size, mtime = excluded.mtime, offset = excluded.offset,"
    " head_hash = excluded.head_hash, events = excluded.events, imported_at = excluded.imported_at"
)


def stamped(rows: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
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
# Each session's project as stored after the upsert: where the batch's rows are outside it (store.places).
_SESSIONS = RowsInsert(_SESSION_COLUMNS, 14, _SESSION_UPDATE + " RETURNING session_id, project")


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
        self.project = ex.launch_project or ex.project
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
            self.project = ex.launch_project or ex.project
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
class BatchPlan:
    """The rows a batch amounts to, and where the next id and the index's watermark stand after it."""

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
    redact: Callable[[str], str] = as_is,
) -> BatchPlan:
    """Turn a batch into rows; observation ids are assigned here (we are the only writer).

    A tool call that gets an observation row of its own is known by that row (`_KNOWN`): its
    ledger row leaves the natural key out, so the ledger's key index takes no page for it.
    """
    plan = BatchPlan(next_id=next_id)
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


def write_batch(
    db: sqlite3.Connection,
    items: Sequence[Incoming],
    next_id: int,
    indexed_below: int,
    overlay: Deduper,
    import_files: Sequence[tuple[Any, ...]] = (),
    redact: Callable[[str], str] = as_is,
    index_at: int = FTS_CHUNK,
) -> BatchPlan:
    """The batch transaction, run on the writer thread: BEGIN IMMEDIATE to COMMIT, or ROLLBACK on any error.

    Every observation not yet in the FTS index joins it once `index_at` of them wait (see migration m004).
    """
    calls = [tool_call(i.extracted) for i in items]
    # A tool call's key is its call's on every path; other events may bring their own (transcript lines).
    keys = [
        tool_key(c) if c else stored_key(i.natural_key or natural_key(i.extracted), redact)
        for i, c in zip(items, calls, strict=True)
    ]
    digests = {digest(k): k for k in keys if k and not k.startswith(KEY_DIGEST)}  # a purged row's

    def batch(db: sqlite3.Connection) -> BatchPlan:
        ids = _json_list([i.event_id for i in items])
        pairs = msgspec.json.encode([c for c in calls if c is not None]).decode()
        rows = db.execute(_KNOWN, (ids, _json_list([k for k in keys if k] + list(digests)), pairs)).fetchall()
        known_ids = {r[0] for r in rows if r[0] is not None}
        known_keys = {digests.get(r[1], r[1]) for r in rows if r[1] is not None}
        plan = _plan(items, keys, calls, known_ids, known_keys, next_id, overlay, redact)
        plan.indexed_below = indexed_below
        if plan.observations:
            _OBSERVATIONS.run(db, plan.observations)
            if plan.next_id - indexed_below >= index_at:
                db.execute(fts.INDEX_RANGE, (indexed_below, plan.next_id))
                db.execute(grams.INDEX_RANGE, (indexed_below, plan.next_id))
                db.execute(SET_INDEXED, (plan.next_id,))
                plan.indexed_below = plan.next_id
        if plan.merges:
            db.executemany(_MERGE, plan.merges)
        if plan.prompts:
            db.executemany(_INSERT_PROMPT, plan.prompts)
        if plan.sessions:
            launches = dict(_SESSIONS.run(db, [s.row() for s in plan.sessions.values()]))
            places.note(db, ((o[2], o[3]) for o in plan.observations), launches)
        if plan.events:
            _EVENTS.run(db, plan.events)
        if plan.inbox_done:
            db.executemany("DELETE FROM inbox WHERE event_id = ?", plan.inbox_done)
        if import_files:
            db.executemany(UPSERT_IMPORT_FILE, stamped(import_files))
        return plan

    return in_transaction(db, batch)
