"""The daemon's single write connection: pragmas, migrations and batch commits.

Exactly one `Store` exists per daemon; everything that writes goes through
`commit_batch` (or `write`), so SQLite never sees two writers from us and
the events ledger makes every commit idempotent by `event_id`. A batch's rows are planned and
written by `batches`; what a start puts right first is `repair`'s.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiosqlite
import anyio

from nmem_client import paths
from nmemd.config import Settings
from nmemd.errors import StorageError, StorageFullError
from nmemd.store import fts, grams
from nmemd.store.batches import (
    FTS_CHUNK,
    INDEX_STEP,
    SET_INDEXED,
    UPSERT_IMPORT_FILE,
    Incoming,
    in_transaction,
    stamped,
    write_batch,
)
from nmemd.store.dedup import Deduper
from nmemd.store.keys import KEY_DIGEST_FUNCTION, as_is, key_digest
from nmemd.store.migrations import MIGRATIONS, MIGRATIONS_DDL
from nmemd.store.repair import repair

LOG = logging.getLogger("nmemd.store")
_T = TypeVar("_T")
SQL_CHUNK = 500  # host parameters per IN (...) query, well under SQLite's limit


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
    # Called after every commit on the write connection (the checkpointer, team sync's pushers):
    # `add_commit_listener`, never a replaced attribute, so each listener keeps the others.
    commit_listeners: list[Callable[[], None]] = field(default_factory=list)
    # The redactor (nmemd.capture.redact, given by whoever opens the store: capture sits above the
    # store) for what is stored as it comes: a session's branch, an event's natural key.
    redact: Callable[[str], str] = as_is
    # One checkpoint at a time in this process: two at once make the second one fail busy.
    checkpoint_lock: anyio.Lock = field(default_factory=anyio.Lock)
    # True while the checkpointer restarts the WAL (store.checkpointer): background writes (team sync's,
    # Ingestor.write_between_batches) wait, so the locked RESTART has only the hooks' few frames to copy.
    restarting: bool = False
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
        for listener in self.commit_listeners:
            listener()

    def add_commit_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener()` after every commit from now on; returns what removes it again."""
        self.commit_listeners.append(listener)

        def remove() -> None:
            if listener in self.commit_listeners:
                self.commit_listeners.remove(listener)

        return remove

    async def transaction(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`fn(sqlite3_connection, *args)` on the writer thread between BEGIN IMMEDIATE and COMMIT
        (ROLLBACK on any error), under the store's lock, shielded as a batch commit is; sqlite3
        errors become StorageError. `fn` may call `index_on_thread`."""
        async with self.lock:
            with anyio.CancelScope(shield=True):
                try:
                    result: _T = await on_writer_thread(self.conn, self.transaction_on_thread, fn, *args)
                except sqlite3.Error as exc:
                    raise translate(exc) from exc
                self.committed()
        return result

    def transaction_on_thread(self, db: sqlite3.Connection, fn: Callable[..., _T], *args: Any) -> _T:
        """`transaction`'s work on the writer thread itself (the caller holds `lock`, as the ingestor's
        writer turn does): the watermark moves once it commits. The caller calls `committed()`
        afterwards, on the event loop. Raises sqlite3.Error."""
        self._indexed_at_commit = 0
        result = _in_transaction(db, fn, args)
        self.indexed_below = max(self.indexed_below, self._indexed_at_commit)
        return result

    def index_step_on_thread(self, db: sqlite3.Connection, limit: int, stop: Callable[[], bool]) -> int:
        """On the writer thread (the caller holds `lock`, then calls `committed()`): up to `limit`
        pending observations into the FTS index in one transaction, INDEX_STEP rows a statement,
        committed early once `stop()` (an event waits: its batch waits for one statement at most).
        Returns how many ids it indexed. Raises sqlite3.Error."""
        start = self.indexed_below
        end = min(self.next_observation_id, start + limit)

        def index(db: sqlite3.Connection) -> int:
            at = start
            while at < end and (at == start or not stop()):
                at = min(at + INDEX_STEP, end)
                self.index_on_thread(db, at)
            return at - start

        return self.transaction_on_thread(db, index) if end > start else 0

    def index_on_thread(self, db: sqlite3.Connection, end: int) -> None:
        """Inside a `transaction` function: index every observation below `end` not indexed yet
        (the watermark moves once the transaction commits)."""
        start = max(self.indexed_below, self._indexed_at_commit)
        if end > start:
            db.execute(fts.INDEX_RANGE, (start, end))
            db.execute(grams.INDEX_RANGE, (start, end))
            db.execute(SET_INDEXED, (end,))
            self._indexed_at_commit = end

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
            await conn.execute(fts.INDEX_RANGE, (start, end))
            await conn.execute(grams.INDEX_RANGE, (start, end))
            await conn.execute(SET_INDEXED, (end,))
            self._indexed_at_commit = end

    async def all_indexed(self, conn: aiosqlite.Connection) -> None:
        """Inside a `write()` transaction that just ran FTS5's 'rebuild': every row is indexed."""
        await conn.execute(SET_INDEXED, (self.next_observation_id,))
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
        self,
        db: sqlite3.Connection,
        items: Sequence[Incoming],
        import_files: Sequence[tuple[Any, ...]] = (),
        index_at: int = FTS_CHUNK,
    ) -> list[int]:
        """`commit_items` on the writer thread itself (the caller holds `lock`): the whole transaction
        in one go, then the ids, the watermark and the dedup window move on. Raises sqlite3.Error.

        `import_files` rows (see `record_import_files`) are written in the same transaction: how far
        a transcript was read is recorded exactly when the events read from it are.
        The caller calls `committed()` afterwards, on the event loop. The batch indexes every pending
        observation once `index_at` wait (`write_batch`).
        """
        overlay = self.dedup.overlay()
        plan = write_batch(
            db, items, self.next_observation_id, self.indexed_below, overlay, import_files, self.redact, index_at
        )
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
            await conn.executemany(UPSERT_IMPORT_FILE, stamped(rows))

    async def scalar(self, sql: str, params: Iterable[Any] = ()) -> Any:
        rows = await self.conn.execute_fetchall(sql, tuple(params))
        for row in rows:
            return row[0]
        return None


def _in_transaction(db: sqlite3.Connection, fn: Callable[..., _T], args: Sequence[Any]) -> _T:
    return in_transaction(db, lambda db: fn(db, *args))


async def on_writer_thread(conn: aiosqlite.Connection, fn: Callable[..., _T], *args: Any) -> _T:
    """Run `fn(sqlite3_connection, *args)` on aiosqlite's own thread, in one hop.

    aiosqlite sends each statement to its thread and back (a loop wake-up per
    statement); a batch is ~7 statements. This uses its private `_execute` and
    `_conn` (pinned `aiosqlite<0.23`, covered by tests/unit/test_store.py): the one
    write connection stays aiosqlite's, and nothing else touches it meanwhile
    because every writer holds `Store.lock`.
    """
    return await conn._execute(lambda: fn(conn._conn, *args))  # type: ignore[no-untyped-call,no-any-return]


@asynccontextmanager
async def open_store(settings: Settings, redact: Callable[[str], str] = as_is) -> AsyncIterator[Store]:
    """Open (creating and migrating if needed) the database; checkpoint on close. `redact`: the
    redactor for the branch and natural keys a batch brings (`Store.redact`)."""
    paths.make_dirs(os.path.dirname(settings.db) or ".")
    old_umask = os.umask(0o077)
    try:
        # Room for the batch statements of every row count (batches' multi-row inserts) beside the others.
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
        if applied:
            LOG.info("applied migrations: %s", ", ".join(applied))
        await repair(conn)
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
