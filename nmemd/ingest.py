"""Group commit: events queue up, commit together, and only then are acknowledged.

A batch closes when it holds `batch_max_events` events or its first event has
waited `batch_max_delay_ms`. While one batch commits on aiosqlite's thread the
next one fills, so under load batches grow by themselves and an idle daemon
adds at most the delay to a single event's latency.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from nmemd.errors import InvalidEvent, StorageError
from nmemd.extract import extract
from nmemd.model import Extracted
from nmemd.store import Incoming, Store

LOG = logging.getLogger("nmemd.ingest")
QUEUE_MAX = 20_000  # beyond this, senders wait (and hook clients fall back to the inbox)

_decoder = msgspec.json.Decoder()


def decode_event(body: bytes) -> dict[str, Any]:
    """Parse a hook payload; raise InvalidEvent for anything that is not JSON we can hold."""
    if not body.strip():
        raise InvalidEvent("empty payload")
    try:
        payload = _decoder.decode(body)
    except RecursionError as exc:
        raise InvalidEvent("payload nested too deeply") from exc
    except UnicodeDecodeError as exc:
        raise InvalidEvent("payload is not valid UTF-8") from exc
    except msgspec.DecodeError as exc:
        raise InvalidEvent(f"payload is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidEvent(f"payload is a JSON {type(payload).__name__}, not an object")
    return payload


def extract_event(body: bytes, skip_tools: frozenset[str]) -> Extracted:
    return extract(decode_event(body), skip_tools=skip_tools)


class _Pending:
    """One queue entry: a live event alone, or a batch (drain, import) committed whole and acked once."""

    __slots__ = ("items", "done", "error", "new")

    def __init__(self, items: list[Incoming]):
        self.items = items
        self.done = anyio.Event()
        self.error: BaseException | None = None
        self.new = 0  # of `items`, how many were not stored before


class Ingestor:
    """Owns the queue between connection handlers and the store."""

    def __init__(self, store: Store):
        self.store = store
        settings = store.settings
        self.max_events = settings.batch_max_events
        self.max_delay = settings.batch_max_delay_ms / 1000.0
        self._send: MemoryObjectSendStream[_Pending]
        self._recv: MemoryObjectReceiveStream[_Pending]
        self._send, self._recv = anyio.create_memory_object_stream[_Pending](QUEUE_MAX)
        self._queued = 0  # events in entries not yet taken into a batch
        self.committed = 0  # events newly stored since start
        self.batches = 0
        self.last_error: str | None = None

    async def submit(self, incoming: Incoming) -> None:
        """Return once the event is committed; raise StorageError if its batch failed."""
        await self._wait(_Pending([incoming]))

    async def submit_many(self, items: list[Incoming]) -> int:
        """Queue several events as one entry (the inbox drain, an import batch); return how many were new.

        They are committed in one transaction (with whatever else the batch
        holds) and acknowledged together, after that commit.
        """
        if not items:
            return 0
        pending = _Pending(items)
        await self._wait(pending)
        return pending.new

    async def _wait(self, pending: _Pending) -> None:
        self._queued += len(pending.items)
        try:
            await self._send.send(pending)
        except BaseException:
            self._queued -= len(pending.items)
            raise
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error

    def close(self) -> None:
        """Accept nothing more; `run` commits what is queued, then returns."""
        self._send.close()

    async def run(self) -> None:
        async with self._recv:
            while True:
                try:
                    first = await self._recv.receive()
                except anyio.EndOfStream:
                    return
                batch = [first]
                await self._fill(batch, len(first.items))
                await self._commit(batch)

    async def _fill(self, batch: list[_Pending], size: int) -> None:
        """Take entries until the batch holds `max_events` events or the delay is over; an entry is never split."""
        deadline = anyio.current_time() + self.max_delay
        while size < self.max_events and (entry := await self._next(deadline)) is not None:
            batch.append(entry)
            size += len(entry.items)

    async def _next(self, deadline: float) -> _Pending | None:
        """The next entry, waiting until `deadline` at most; None if none came or the queue is closed."""
        try:
            return self._recv.receive_nowait()
        except anyio.WouldBlock:
            pass
        except anyio.EndOfStream:
            return None
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            return None
        with anyio.move_on_after(remaining):
            try:
                return await self._recv.receive()
            except anyio.EndOfStream:
                return None
        return None

    async def _commit(self, batch: list[_Pending]) -> None:
        items = batch[0].items if len(batch) == 1 else [i for p in batch for i in p.items]
        self._queued -= len(items)
        error: BaseException | None = None
        new: list[int] = []
        with anyio.CancelScope(shield=True):
            try:
                new = await self.store.commit_items(items)
                self.committed += len(new)
                self.batches += 1
                self.last_error = None
            except StorageError as exc:
                LOG.error("batch of %d events not committed: %s", len(items), exc)
                self.last_error = str(exc)
                error = exc
            except Exception as exc:  # a bug must not kill the daemon nor ack anything
                LOG.exception("batch of %d events failed", len(items))
                self.last_error = repr(exc)
                error = StorageError(f"internal error: {exc!r}")
        if error is None:
            _count_new(batch, new)
        for p in batch:
            p.error = error
            p.done.set()

    @property
    def queued(self) -> int:
        """Events waiting for a batch."""
        return self._queued


def _count_new(batch: list[_Pending], new: list[int]) -> None:
    """Give each entry its share of `new` (ascending indexes into the batch's items, entry after entry)."""
    if len(batch) == 1:
        batch[0].new = len(new)
        return
    i, end = 0, 0
    for p in batch:
        end += len(p.items)
        start = i
        while i < len(new) and new[i] < end:
            i += 1
        p.new = i - start
