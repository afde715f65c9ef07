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
    __slots__ = ("incoming", "done", "error")

    def __init__(self, incoming: Incoming):
        self.incoming = incoming
        self.done = anyio.Event()
        self.error: BaseException | None = None


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
        self.committed = 0  # events newly stored since start
        self.batches = 0
        self.last_error: str | None = None

    async def submit(self, incoming: Incoming) -> None:
        """Return once the event is committed; raise StorageError if its batch failed."""
        pending = _Pending(incoming)
        await self._send.send(pending)
        await pending.done.wait()
        if pending.error is not None:
            raise pending.error

    async def submit_many(self, items: list[Incoming]) -> None:
        """Queue several events (the inbox drain) and wait for all of them."""
        pendings = [_Pending(i) for i in items]
        for p in pendings:
            await self._send.send(p)
        for p in pendings:
            await p.done.wait()
        for p in pendings:
            if p.error is not None:
                raise p.error

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
                await self._fill(batch)
                await self._commit(batch)

    async def _fill(self, batch: list[_Pending]) -> None:
        deadline = anyio.current_time() + self.max_delay
        while len(batch) < self.max_events:
            try:
                batch.append(self._recv.receive_nowait())
                continue
            except anyio.WouldBlock:
                pass
            except anyio.EndOfStream:
                return
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return
            with anyio.move_on_after(remaining):
                try:
                    batch.append(await self._recv.receive())
                except anyio.EndOfStream:
                    return

    async def _commit(self, batch: list[_Pending]) -> None:
        error: BaseException | None = None
        with anyio.CancelScope(shield=True):
            try:
                self.committed += await self.store.commit_batch([p.incoming for p in batch])
                self.batches += 1
                self.last_error = None
            except StorageError as exc:
                LOG.error("batch of %d events not committed: %s", len(batch), exc)
                self.last_error = str(exc)
                error = exc
            except Exception as exc:  # a bug must not kill the daemon nor ack anything
                LOG.exception("batch of %d events failed", len(batch))
                self.last_error = repr(exc)
                error = StorageError(f"internal error: {exc!r}")
        for p in batch:
            p.error = error
            p.done.set()

    @property
    def queued(self) -> int:
        return self._recv.statistics().current_buffer_used
