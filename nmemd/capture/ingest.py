"""Group commit: events queue up, commit together, and only then are acknowledged.

The write connection's thread takes every queued event (up to `BATCH_MAX_EVENTS`,
never splitting an entry) into one transaction, and while events keep coming it
goes straight on to the next batch: it never waits for the event loop between
batches. Each batch is acknowledged on the loop once it committed. While one
batch commits the next one fills, so under load batches grow by themselves; an
idle daemon commits a lone event at once (`BATCH_MAX_DELAY_MS` is 0).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio

from nmemd.config import tunable
from nmemd.errors import ShuttingDown, StorageError
from nmemd.store.batches import FTS_CHUNK, Incoming
from nmemd.store.database import Store, on_writer_thread, translate

LOG = logging.getLogger("nmemd.ingest")
FTS_LAG_S = 0.1  # a writer quiet this long indexes what live batches left for the next chunk
# The writer indexes live observations itself, between batches, once FTS_CHUNK wait (and all of them
# when quiet for FTS_LAG_S), in a transaction it commits as soon as an event is queued
# (`Store.index_step_on_thread`): a hook's batch waits for one INDEX_STEP at most. The batch that
# brought the count to FTS_CHUNK indexed them in its own transaction before: 26 ms of CPU, ~50 ms on
# a busy machine, on one hook's ack every 1,024 (bench_team_pull.py, issue #40). A batch still indexes
# a backlog of INDEX_BACKLOG: events that never left the writer a moment between batches.
INDEX_BACKLOG = 2 * FTS_CHUNK
WRITER_SLICE_S = 0.05  # the writer thread keeps the write lock this long at most under load
BUSY_WINDOW_S = 0.5  # events this recent mean capture is under way
QUEUE_MAX = 20_000  # events; beyond this hook events get `busy` (their client falls back to the inbox)
# Between two background writes (`write_between_batches`: team sync's pulled rows and acks) the writer
# rests as long as the last one took, this long at most, unless an event arrives: they keep to about
# half of the writer, and of a core, while hooks come.
JOB_REST_MAX_S = 0.01
# A batch takes every event queued while the previous one committed, up to BATCH_MAX_EVENTS, waiting
# at most BATCH_MAX_DELAY_MS for more. Measured (BENCHMARKS.md, bench/bench_ingest.py's sweep): a
# delay only adds latency, since hook clients keep one event in flight, and batches grow by
# themselves under load (16 events on average at 32 connections); 512 is never reached.
BATCH_MAX_EVENTS = tunable("BATCH_MAX_EVENTS", 512, 1)
BATCH_MAX_DELAY_MS = tunable("BATCH_MAX_DELAY_MS", 0.0, 0.0)

Done = Callable[[BaseException | None, int], None]
T = TypeVar("T")


class _Pending:
    """One queue entry: a live event alone, or a batch (drain, import) committed whole and acked once.

    `done(error, new)` runs on the event loop once the entry's batch committed (error None,
    `new` = how many of its items were not stored before) or failed (nothing acknowledged).
    """

    __slots__ = ("items", "done", "import_files")

    def __init__(self, items: list[Incoming], done: Done, import_files: Sequence[tuple[Any, ...]] = ()):
        self.items = items
        self.done = done
        self.import_files = import_files  # written in the same transaction (store.record_import_files rows)


class _Job:
    """A background write: `fn(db, *args)` in a transaction of its own, between batches."""

    __slots__ = ("fn", "args", "rests", "done", "result", "error")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], rests: bool = True):
        self.fn, self.args = fn, args
        self.rests = rests  # the writer rests after it (JOB_REST_MAX_S): False when its caller paces itself
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Ingestor:
    """Owns the queue between connection handlers and the store.

    Handlers call `enqueue` with a callback (no task, no await per event: the
    socket protocol answers from the callback); the drain and the importer
    `await submit_many`. `run` hands the writer thread a turn of the write lock
    whenever something is queued, and indexes for full-text search when quiet.
    """

    def __init__(self, store: Store):
        self.store = store
        self.max_events = BATCH_MAX_EVENTS
        self.max_delay = BATCH_MAX_DELAY_MS / 1000.0
        self._queue: deque[_Pending] = deque()
        self._jobs: deque[_Job] = deque()  # background writes, taken when no event is queued
        self._resting = False  # between two background writes: only an event's arrival ends the rest
        self._ready = anyio.Event()  # set when the queue gets an entry (or closes)
        self._space = anyio.Event()  # set when a full queue shrinks
        self._closed = False
        self._index_failed = False
        self._quiet = False  # no event for FTS_LAG_S: every pending observation may be indexed
        self._queued = 0  # events queued or in a batch not yet settled on the loop
        self.committed = 0  # events newly stored since start
        self.last_enqueued = float("-inf")  # monotonic time of the last enqueue
        self.batches = 0
        self.last_error: str | None = None

    @property
    def full(self) -> bool:
        return self._queued >= QUEUE_MAX

    def enqueue(self, items: list[Incoming], done: Done, import_files: Sequence[tuple[Any, ...]] = ()) -> None:
        """Queue events for the next batch; `done` runs after its commit. Raise ShuttingDown once closed."""
        if self._closed:
            raise ShuttingDown("the daemon is shutting down")
        self._queue.append(_Pending(items, done, import_files))
        self._quiet = False
        self._queued += len(items)
        self.last_enqueued = time.monotonic()
        self._ready.set()

    def busy(self) -> bool:
        """Whether events are arriving (one in the last BUSY_WINDOW_S): queries then yield (store/readers.py)."""
        return self._queued > 0 or time.monotonic() - self.last_enqueued < BUSY_WINDOW_S

    async def submit(self, incoming: Incoming) -> None:
        """Return once the event is committed; raise StorageError if its batch failed."""
        await self.submit_many([incoming])

    async def submit_many(self, items: list[Incoming], import_files: Sequence[tuple[Any, ...]] = ()) -> int:
        """Queue several events as one entry (the inbox drain, an import batch); return how many were new.

        They are committed in one transaction (with whatever else the batch
        holds, and with `import_files`, the transcript read states they complete)
        and acknowledged together, after that commit. Waits while the queue is full.
        """
        if not items:
            await self.store.record_import_files(import_files)
            return 0
        while self.full and not self._closed:
            if self._space.is_set():
                self._space = anyio.Event()
            await self._space.wait()
        finished = anyio.Event()
        outcome: list[Any] = [None, 0]

        def done(error: BaseException | None, new: int) -> None:
            outcome[0], outcome[1] = error, new
            finished.set()

        self.enqueue(items, done, import_files)
        await finished.wait()
        if outcome[0] is not None:
            raise outcome[0]
        return int(outcome[1])

    def close(self) -> None:
        """Accept nothing more; `run` commits what is queued, then returns."""
        self._closed = True
        self._ready.set()
        self._space.set()

    async def write_between_batches(self, fn: Callable[..., T], *args: Any, rest: bool = True) -> T:
        """`fn(db, *args)` as `Store.transaction` runs it, but by the writer thread in its own turn,
        when no event is queued: events that arrive meanwhile are committed right after it in the
        same turn, never behind a hand-over of the store's lock through the event loop (a hook's
        ack waited 15-40 ms so behind each of a pull's short transactions on a busy machine,
        issue #40). The writer then rests as long as it took (JOB_REST_MAX_S at most) unless `rest`
        is False: a caller that runs it in a pause between hooks (team sync's paced pull) uses the
        pause. Shielded: a cancelled caller's write may still commit."""
        if self._closed:  # run() may have returned: the store's lock, as any other writer
            return await self.store.transaction(fn, *args)
        job = _Job(fn, args, rest)
        self._jobs.append(job)
        if not self._resting:
            self._ready.set()
        with anyio.CancelScope(shield=True):
            await job.done.wait()
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    async def run(self) -> None:
        rest = 0.0
        while True:
            if not self._queue:
                if self._jobs and (rest > 0 or self.store.restarting):
                    await self._rest(rest or JOB_REST_MAX_S)
                    rest = 0.0
                    continue
                if not self._jobs:
                    if self._closed:
                        await self._index_pending()
                        return
                    if not self._index_due():
                        self._ready = anyio.Event()
                        if self.store.unindexed and not self._index_failed:  # quiet for FTS_LAG_S: index the rest
                            with anyio.move_on_after(FTS_LAG_S):
                                await self._ready.wait()
                            self._quiet = not self._queue and not self._jobs
                        else:
                            await self._ready.wait()
                        continue
            if self.max_delay > 0 and self._queue:
                await self._linger()
            store = self.store
            async with store.lock:
                with anyio.CancelScope(shield=True):
                    rest = await on_writer_thread(store.conn, self._write_while_queued, asyncio.get_running_loop())

    async def _rest(self, seconds: float) -> None:
        """Between two background writes: `seconds`, or until an event arrives (or close)."""
        self._ready = anyio.Event()
        self._resting = True
        try:
            with anyio.move_on_after(seconds):
                await self._ready.wait()
        finally:
            self._resting = False

    async def _linger(self) -> None:
        """Wait up to `max_delay` for the batch to fill (the delay counts from now: the first entry's arrival)."""
        with anyio.move_on_after(self.max_delay):
            while self._queued < self.max_events and not self._closed:
                self._ready = anyio.Event()
                await self._ready.wait()

    def _write_while_queued(self, db: sqlite3.Connection, loop: asyncio.AbstractEventLoop) -> float:
        """On the writer thread: commit batch after batch while entries wait, for WRITER_SLICE_S at most
        (then other writers get the lock). Each batch is acknowledged on the loop as soon as it
        commits while the next one is already being written: the writer never waits for the loop.
        When no entry waits, one background write, or an index step (`_index_due`); events queued
        during either are taken next. Returns
        how long to rest before the next background write (0: none ran).
        """
        deadline = time.monotonic() + WRITER_SLICE_S
        rest = 0.0
        while time.monotonic() < deadline:
            if not self._queue:
                if not self._jobs and self._index_due():
                    self._index_step(db, loop)
                    continue
                if not self._jobs or rest > 0 or self.store.restarting:
                    break
                job = self._jobs.popleft()
                began = time.monotonic()
                try:
                    job.result = self.store.transaction_on_thread(db, job.fn, *job.args)
                except sqlite3.Error as exc:
                    job.error = translate(exc)
                except Exception as exc:  # the caller's to handle, as from Store.transaction
                    job.error = exc
                if job.rests:
                    rest = min(max(time.monotonic() - began, 0.001), JOB_REST_MAX_S)
                loop.call_soon_threadsafe(self._job_done, job)
                continue
            batch = self._take()
            items = batch[0].items if len(batch) == 1 else [i for p in batch for i in p.items]
            files = [row for p in batch for row in p.import_files]
            error: BaseException | None = None
            new: list[int] = []
            try:
                new = self.store.commit_on_thread(db, items, files, INDEX_BACKLOG)
            except sqlite3.Error as exc:
                error = translate(exc)
                LOG.error("batch of %d events not committed: %s", len(items), error)
            except Exception as exc:  # a bug must not kill the daemon nor ack anything
                LOG.exception("batch of %d events failed", len(items))
                error = StorageError(f"internal error: {exc!r}")
            loop.call_soon_threadsafe(self._settle, batch, len(items), new, error)
        return rest

    def _index_due(self) -> bool:
        """Whether the writer indexes now: FTS_CHUNK observations wait, or any after a quiet moment."""
        store = self.store
        if self._index_failed or store.restarting:
            return False
        return store.unindexed >= FTS_CHUNK or (self._quiet and store.unindexed > 0)

    def _index_step(self, db: sqlite3.Connection, loop: asyncio.AbstractEventLoop) -> None:
        """On the writer thread, no event queued: one index transaction, ended early by an event's arrival."""
        try:
            self.store.index_step_on_thread(db, FTS_CHUNK, lambda: bool(self._queue))
        except sqlite3.Error as exc:  # retried after the next commit; searches and the next start too
            LOG.warning("indexing the newest observations failed: %s", translate(exc))
            self._index_failed = True
            return
        loop.call_soon_threadsafe(self.store.committed)

    def _job_done(self, job: _Job) -> None:
        """On the loop, once a background write committed (or failed)."""
        if job.error is None:
            self.store.committed()
        job.done.set()

    def _take(self) -> list[_Pending]:
        """Entries up to `max_events` events (at least one entry; an entry is never split).

        Only the writer thread takes; the loop only appends (deque operations are atomic)."""
        queue = self._queue
        batch = [queue.popleft()]
        size = len(batch[0].items)
        while queue and size + len(queue[0].items) <= self.max_events:
            entry = queue.popleft()
            batch.append(entry)
            size += len(entry.items)
        return batch

    def _settle(self, batch: list[_Pending], size: int, new: list[int], error: BaseException | None) -> None:
        """On the loop, once a batch committed (or failed): only now is each of its events acknowledged."""
        self._queued -= size
        if self._queued < QUEUE_MAX:
            self._space.set()
        if error is None:
            self.committed += len(new)
            self.batches += 1
            self.last_error = None
            self._index_failed = False
            self.store.committed()
        else:
            self.last_error = str(error) if isinstance(error, StorageError) else repr(error)
        counts = [0] * len(batch) if error is not None else _count_new(batch, new)
        for p, n in zip(batch, counts, strict=True):
            try:
                p.done(error, n)
            except Exception:  # one peer's callback must not keep the others unanswered
                LOG.exception("acknowledging an event failed")

    async def _index_pending(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.store.index_pending()
                self._index_failed = False
            except StorageError as exc:  # retried after the next commit; searches and the next start too
                LOG.warning("indexing the newest observations failed: %s", exc)
                self._index_failed = True

    @property
    def queued(self) -> int:
        """Events not yet committed (queued, or in the batch being written)."""
        return self._queued


def _count_new(batch: list[_Pending], new: list[int]) -> list[int]:
    """Each entry's share of `new` (ascending indexes into the batch's items, entry after entry)."""
    if len(batch) == 1:
        return [len(new)]
    counts = []
    i, end = 0, 0
    for p in batch:
        end += len(p.items)
        start = i
        while i < len(new) and new[i] < end:
            i += 1
        counts.append(i - start)
    return counts
