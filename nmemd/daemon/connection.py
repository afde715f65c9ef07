"""One client connection: frames parsed as their bytes arrive, hook events acked from the commit.

A hook event is the daemon's hottest path, so it costs no task and no await:
`data_received` parses the frame, extracts the event and queues it; the batch's
commit callback writes the OK. With anyio's socket streams the same event paid a
scheduler round per receive and send, a reader registered and removed per wait
and several task switches (~40 % of the loop's time under load, BENCHMARKS.md).
Everything that waits on something else (an rpc, a large payload, a SessionStart
context) runs as a task in the daemon's handler group, and an MCP connection,
which is long-lived and line-based, is handed over to an anyio stream.

Frames on one connection are answered in order: while a frame is being handled,
later bytes wait in the buffer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from nmem_client import malformed, protocol
from nmemd.capture import clock
from nmemd.capture.extract import extract_event
from nmemd.daemon.instance import peer_uid
from nmemd.errors import InvalidEvent, ShuttingDown, StorageError, StorageFullError
from nmemd.model import Extracted
from nmemd.recall import replies
from nmemd.store import readers
from nmemd.store.batches import Incoming

if TYPE_CHECKING:
    from nmemd.daemon.server import Daemon

LOG = logging.getLogger("nmemd.server")
OFFLOAD_BYTES = 1024 * 1024  # parse bigger payloads in a worker thread, off the event loop
# Past max_connections, peers idle before their header are dropped within ~0.5 s (deadlines.py);
# past this many times max_connections, a new connection gets OVERLOADED_HEADER_S to send its
# header and then `busy`, unless it is a ping: health checks are answered under any load.
HARD_CONNECTIONS_FACTOR = 4
OVERLOADED_HEADER_S = 0.05
READ_PAUSE_BYTES = 256 * 1024  # while a frame is handled, buffer this much of the next ones at most
# A ping sent together with a request (a read's, `control._read_after_ping`) has its reply held this long at
# most, to go out with the request's: one send and one wake-up of the client instead of two (~0.13 ms of
# the loop's time a search, a send to a waiting peer). Far below the client's patience (`control.ANSWER_S`).
PING_HOLD_S = 0.05
READ_NOW_BYTES = 64 * 1024  # read at connection time (`_read_now`): the transport's own reads are 256 KB


def parse_header(line: bytes) -> tuple[bytes, bytes, int, bytes]:
    """kind, event id, body length and the store the client means (b"": an older client named none)."""
    parts = line.split(b" ")
    if len(parts) not in (4, 5) or parts[0] != protocol.MAGIC or parts[1] not in protocol.KINDS:
        raise InvalidEvent("malformed frame header")
    kind, event_id, raw_len = parts[1], parts[2], parts[3]
    if not (event_id == protocol.NO_EVENT_ID or (8 <= len(event_id) <= 64 and event_id.isalnum())):
        raise InvalidEvent("malformed event id")
    if not raw_len.isdigit():
        raise InvalidEvent("malformed frame length")
    store = parts[4] if len(parts) == 5 else b""
    if len(store) > 40:
        raise InvalidEvent("malformed store id")
    return kind, event_id, int(raw_len), store


def storage_error_reply(exc: StorageError) -> bytes:
    if isinstance(exc, StorageFullError):
        return protocol.encode_error(protocol.ERR_STORAGE_FULL, str(exc))
    if isinstance(exc, ShuttingDown):
        return protocol.encode_error(protocol.ERR_SHUTTING_DOWN, str(exc))
    return protocol.encode_error(protocol.ERR_INTERNAL, str(exc))


class FrameConnection(asyncio.Protocol):
    """The frame protocol of `nmem_client.protocol` on one accepted socket."""

    def __init__(self, daemon: Daemon):
        self.daemon = daemon
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.header: tuple[bytes, bytes, int] | None = None
        self.busy = False  # a frame is being handled; later bytes wait
        self.eof = False
        self.closed = False
        self.draining = False  # the daemon stops: close after the frame in hand
        self.handed_over = False  # an MCP session owns the socket now
        self.overloaded = False
        self.paused = False
        self.held = b""  # a ping's reply waiting for the next reply (PING_HOLD_S)
        self.held_timer: asyncio.TimerHandle | None = None
        self.watch = daemon.deadlines.watch(self)

    # --- asyncio callbacks ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        daemon = self.daemon
        daemon.connection_opened(self)
        sock = cast(socket.socket, transport.get_extra_info("socket"))
        uid = peer_uid(sock)
        if not daemon.uid_allowed(uid):
            daemon.refused_peers += 1
            LOG.warning("refused a connection from uid %s", uid)
            self._close()
            return
        self.overloaded = daemon.connections > HARD_CONNECTIONS_FACTOR * daemon.settings.max_connections
        self._await_header()
        self._read_now(sock.fileno())

    def _read_now(self, fd: int) -> None:
        """What the client sent as it connected (clients send their frame at once), read now: the transport
        starts reading at the loop's next round, one wake-up of the loop later (~0.09 ms a hook or a read).
        Before its first read, so the stream's order holds; an error or the end is the transport's to see."""
        try:
            data = os.read(fd, READ_NOW_BYTES)
        except OSError:  # nothing yet (BlockingIOError), or an error the transport reports
            return
        if data:
            self.data_received(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.busy:
            if len(self.buf) > READ_PAUSE_BYTES and self.transport is not None and not self.paused:
                self.paused = True
                self.transport.pause_reading()
            return
        self._advance()

    def eof_received(self) -> bool:
        self.eof = True
        if not self.busy:
            self._advance()
        return True  # keep our half open: an answer may still be on its way

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.daemon.deadlines.forget(self.watch)
        if not self.handed_over:
            self.daemon.connection_closed(self)

    def cancel(self) -> None:
        """The deadline sweeper's call: the peer was too slow to send its frame."""
        if self.closed or self.handed_over:
            return
        LOG.warning("a client was too slow to send its frame; dropped")
        self._write(protocol.encode_error(protocol.ERR_TIMEOUT, "frame not received in time"))
        self._close()

    def stop(self) -> None:
        """The daemon stops: close now when between frames, else once the frame in hand is answered."""
        self.draining = True
        if not self.busy and self.header is None:
            self._close()

    # --- frames ---------------------------------------------------------------------------------

    def _advance(self) -> None:
        """Handle every complete frame in the buffer, in order, until one needs to wait."""
        while not self.busy and not self.closed:
            if self.header is None:
                if self.draining:
                    self._close()  # frames after the stop are not read: their senders fall back
                    return
                nl = self.buf.find(b"\n", 0, protocol.MAX_HEADER)
                if nl < 0:
                    if len(self.buf) >= protocol.MAX_HEADER:
                        LOG.warning("a client sent a header line that never ends; dropped")
                        self._refuse(protocol.ERR_INVALID, "malformed frame header")
                    elif self.eof:
                        self._close()  # a clean close between frames (or a torn header: nothing to answer)
                    return
                if not self._start_frame(bytes(self.buf[:nl])):
                    return
                del self.buf[: nl + 1]
            kind, event_id, length = cast(tuple[bytes, bytes, int], self.header)
            if len(self.buf) < length:
                if self.eof:
                    self._close()  # the peer left mid-frame
                return
            body = bytes(self.buf[:length])
            del self.buf[:length]
            self.header = None
            self.watch.idle()
            self.daemon.last_activity = time.monotonic()
            try:
                self._dispatch(kind, event_id, body)
            except Exception:  # a bug must cost this connection only, never the loop's callback
                LOG.exception("connection handler failed")
                self._close()
                return
            if not self.busy:
                self._await_header()

    def _start_frame(self, line: bytes) -> bool:
        settings = self.daemon.settings
        try:
            kind, event_id, length, store = parse_header(line)
        except InvalidEvent as exc:
            LOG.warning("a client sent garbage: %s", exc)
            self._refuse(protocol.ERR_INVALID, str(exc))
            return False
        if store and kind != protocol.KIND_PING and not self.daemon.serves(store):
            # A client of another NMEM_HOME (a shared NMEM_SOCKET, a stale store.lock): its events
            # belong in its own store's inbox, never in ours (issue #37, 1). A ping is answered: it
            # says which store this is (`home`, `store`), and doctor compares.
            LOG.warning(
                "refused a %s frame meant for another store (%s)", kind.decode(), store.decode(errors="replace")
            )
            self._refuse(protocol.ERR_WRONG_STORE, f"this daemon serves {self.daemon.settings.home}")
            return False
        if self.overloaded and kind != protocol.KIND_PING:  # a health check is answered even now
            self._refuse(protocol.ERR_BUSY, "too many connections")
            return False
        if length > settings.max_frame_bytes:
            LOG.warning("refused a %d-byte frame (max %d)", length, settings.max_frame_bytes)
            self._refuse(protocol.ERR_TOO_LARGE, "frame too large")
            return False
        self.header = (kind, event_id, length)
        # A local peer sends megabytes in milliseconds; allow 10 MB/s on top of the base timeout.
        self.watch.reading(settings.read_timeout_s + length / 10e6)
        return True

    def _dispatch(self, kind: bytes, event_id: bytes, body: bytes) -> None:
        daemon = self.daemon
        if kind == protocol.KIND_HOOK:
            if event_id == protocol.NO_EVENT_ID:
                LOG.warning("refused a hook event without an id: hook events need an id")
                self._refuse(protocol.ERR_INVALID, "hook events need an id")
            elif len(body) > OFFLOAD_BYTES:
                self._in_task(self._extract_offloaded, event_id, body)
            elif (
                # The worker pays off beside other work (a batch committing, events in the worker);
                # a lone event is cheaper here than two pipe hops (~100 us of CPU, BENCHMARKS.md).
                daemon.extractor is not None
                and (daemon.ingestor.queued or daemon.extractor.in_flight)
                and daemon.extractor.submit(body, lambda result: self._extracted(event_id, result))
            ):
                self.busy = True
            else:
                try:
                    extracted = extract_event(body, daemon.skip_tools)
                except InvalidEvent as exc:
                    self._invalid(event_id, exc)
                    return
                self.busy = self._submit(event_id, extracted)
        elif kind == protocol.KIND_PING:
            if self.buf and not self.held:  # a frame came with it: its reply takes this one along
                self.held = daemon.ping_reply()
                self.held_timer = asyncio.get_running_loop().call_later(PING_HOLD_S, self._write, b"")
            else:
                self._write(daemon.ping_reply())
        elif kind == protocol.KIND_RPC:
            self._rpc_frame(body)
        else:
            self._hand_over_to_mcp(body)

    def _extracted(self, event_id: bytes, result: Extracted | InvalidEvent) -> None:
        """An extraction done off this call (the worker process or a thread), back on the loop."""
        if isinstance(result, InvalidEvent):
            self._invalid(event_id, result)
            self._frame_done()
        elif not self._submit(event_id, result):
            self._frame_done()

    def _invalid(self, event_id: bytes, exc: InvalidEvent) -> None:
        LOG.warning("refused event %s: %s", event_id.decode(), exc)
        # counted by nmem status and doctor, which point at this line (and the log's, by event id)
        malformed.note(f"refused event {event_id.decode()}: {exc}", self.daemon.settings.home)
        self._write(protocol.encode_error(protocol.ERR_INVALID, str(exc)))

    def _submit(self, event_id: bytes, extracted: Extracted) -> bool:
        """Queue the event for a batch (True: `_committed` answers it later), or refuse it now."""
        ingestor = self.daemon.ingestor
        if ingestor.full:
            self._write(protocol.encode_error(protocol.ERR_BUSY, "queue full"))
            return False
        incoming = Incoming(event_id=event_id.decode(), received_at=clock.stamps.now(), extracted=extracted)
        try:
            ingestor.enqueue([incoming], lambda error, _new: self._committed(extracted, error))
        except ShuttingDown as exc:
            self._write(storage_error_reply(exc))
            return False
        return True

    def _committed(self, extracted: Extracted, error: BaseException | None) -> None:
        """Runs on the loop once the event's batch committed (or failed): only now may it be acked."""
        if error is not None:
            reply = storage_error_reply(error if isinstance(error, StorageError) else StorageError(repr(error)))
            self._write(reply)
            self._frame_done()
            return
        daemon = self.daemon
        if replies.replies_to(daemon.settings, extracted, notices=bool(daemon.problems)) and daemon.spawn(
            self._reply_after_commit, extracted
        ):
            return
        self._write(protocol.encode_ok(b""))
        self.daemon.after_commit(extracted)
        self._frame_done()

    async def _reply_after_commit(self, extracted: Extracted) -> None:
        try:
            reply = await replies.hook_reply(self.daemon, extracted)
        except Exception:  # the event is stored; a failed reply must not fail the hook
            LOG.exception("hook reply for %s failed", extracted.hook_event)
            reply = b""
        self._write(protocol.encode_ok(reply))
        self.daemon.after_commit(extracted)
        self._frame_done()

    async def _extract_offloaded(self, event_id: bytes, body: bytes) -> None:
        result: Extracted | InvalidEvent
        try:
            result = await anyio.to_thread.run_sync(extract_event, body, self.daemon.skip_tools)
        except InvalidEvent as exc:
            result = exc
        self._extracted(event_id, result)

    def _rpc_frame(self, body: bytes) -> None:
        """A read starts at once (`rpc.start_read`) and its end calls back to the loop (`_read_done`); any
        other request, or a read that cannot start yet, takes `_rpc`'s way, in a task."""
        from nmemd.daemon import rpc

        sender = self._worker_sender()
        running = rpc.start_read(self.daemon, body, sender.send) if sender is not None else None
        if sender is None or running is None:
            self._in_task(self._rpc, body, sender)
            return
        self.busy = True
        readers.when_done(running, lambda done: self._read_done(done, sender))

    def _read_done(self, running: readers.Running, sender: WorkerSender) -> None:
        """`_rpc_frame`'s read is over (on the loop): its error's reply if it failed (the worker sent the
        answer otherwise), then the next frame."""
        from nmemd.daemon import rpc

        try:
            reply = rpc.read_reply(self.daemon, running)
        except Exception:  # a bug must cost this connection only, never the loop's callback
            LOG.exception("connection handler failed")
            sender.finish()
            self._close()
            return
        sender.finish()
        self._write(reply or b"")
        self._frame_done()

    async def _rpc(self, body: bytes, sender: WorkerSender | None) -> None:
        from nmemd.daemon.server import rpc_reply

        try:
            reply = await rpc_reply(self.daemon, body, None if sender is None else sender.send)
        finally:
            if sender is not None:
                sender.finish()
        self._write(reply or b"")  # an error, or a reply no worker sent (a team search's, a write's)
        self._frame_done()

    def _worker_sender(self) -> WorkerSender | None:
        """A sender for a read's reply from its worker thread (`rpc.dispatch`), with the ping's reply held
        for it; None when the transport holds unsent replies (they go first) or is closing, or the daemon
        is stopping."""
        transport = self.transport
        if transport is None or transport.is_closing() or transport.get_write_buffer_size():
            return None
        if self.daemon.stopping.is_set():  # no task may start: the frame's way closes the connection
            return None
        held, self.held = self.held, b""
        if self.held_timer is not None:
            self.held_timer.cancel()
            self.held_timer = None
        fd = os.dup(cast(socket.socket, transport.get_extra_info("socket")).fileno())
        return WorkerSender(self, fd, held)

    def _in_task(self, fn: Any, *args: Any) -> None:
        self.busy = True

        async def run() -> None:
            try:
                await fn(*args)
            except Exception:
                LOG.exception("connection handler failed")
                self._close()

        if not self.daemon.spawn(run):
            self._close()

    def _frame_done(self) -> None:
        self.busy = False
        if self.closed:
            return
        if self.draining:
            self._close()
            return
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        self._await_header()
        self._advance()

    def _await_header(self) -> None:
        timeout = OVERLOADED_HEADER_S if self.overloaded else self.daemon.settings.read_timeout_s
        self.watch.reading_header(timeout)

    # --- MCP ------------------------------------------------------------------------------------

    def _hand_over_to_mcp(self, body: bytes) -> None:
        """Give the socket (and any bytes already read past the frame) to an anyio stream for MCP."""
        self._write(b"")  # a held ping reply goes before the socket changes hands
        transport = cast(asyncio.Transport, self.transport)
        fd = os.dup(cast(socket.socket, transport.get_extra_info("socket")).fileno())
        leftover = bytes(self.buf)
        self.buf.clear()
        self.handed_over = True
        self.watch.idle()
        # Either closes our descriptor only (the duplicate keeps the connection); abort when nothing
        # is left to write, so no earlier reply can interleave with the MCP session's bytes.
        if transport.get_write_buffer_size():
            transport.close()
        else:
            transport.abort()
        if not self.daemon.spawn(self._serve_mcp, fd, leftover, body):
            os.close(fd)
            self.daemon.connection_closed(self)
        else:
            self.daemon.connection_settled()

    async def _serve_mcp(self, fd: int, leftover: bytes, body: bytes) -> None:
        from nmemd import mcp  # imported on the first MCP connection only (~0.8 s)

        try:
            stream = await anyio.abc.UNIXSocketStream.from_socket(socket.socket(fileno=fd))
        except OSError as exc:
            os.close(fd)
            LOG.debug("connection error: %s", exc)
            self.daemon.connection_closed(self)
            return
        try:
            async with stream:
                buffered = BufferedByteReceiveStream(stream)
                if leftover:
                    buffered.feed_data(leftover)
                await mcp.serve_connection(self.daemon, stream, buffered, body)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
            LOG.debug("a client closed its connection early")
        except OSError as exc:
            LOG.debug("connection error: %s", exc)
        except Exception:
            LOG.exception("connection handler failed")
        finally:
            self.daemon.connection_closed(self)

    # --- output ---------------------------------------------------------------------------------

    def write_now(self, data: bytes) -> None:
        """`_write`, for a `WorkerSender` on the loop."""
        self._write(data)

    def _write(self, data: bytes) -> None:
        """Send `data`, after a held ping reply (b"": that reply alone, when its time is up)."""
        if self.held:
            data = self.held + data
            self.held = b""
            if self.held_timer is not None:
                self.held_timer.cancel()
                self.held_timer = None
        if not data:
            return
        transport = self.transport
        if transport is None or transport.is_closing():
            LOG.debug("client left before its reply")
            return
        transport.write(data)

    def _refuse(self, code: bytes, message: str) -> None:
        self._write(protocol.encode_error(code, message))
        self._close()

    def _close(self) -> None:
        """No more frames; replies already written still go out before the socket closes."""
        self.closed = True
        self.watch.idle()
        self._write(b"")  # a held ping reply too
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # pending replies are flushed first


class WorkerSender:
    """The replies of a connection while a read runs on a worker thread: its reply written from that thread
    (`rpc.dispatch`), before it, the ping's reply held for it (`PING_HOLD_S`: the loop writes that alone if
    the read takes longer). In order, under a lock: what the socket does not take at once goes to the
    transport, on the loop, and everything after it too. The descriptor is a duplicate: its number stays
    this connection's even if the loop closes the socket meanwhile (a client that left)."""

    def __init__(self, conn: FrameConnection, fd: int, held: bytes) -> None:
        self.conn = conn
        self.fd = fd
        self.held = held
        self.lock = threading.Lock()
        self.queued = False  # bytes went to the transport: the rest follows them there
        self.loop = asyncio.get_running_loop()
        self.timer = self.loop.call_later(PING_HOLD_S, self._flush) if held else None

    def send(self, data: bytes) -> None:
        """Write the held reply and `data` (a worker thread's call)."""
        with self.lock:
            data = self._written(self.held + data)
            self.held = b""
            if data:
                self.queued = True
                self.loop.call_soon_threadsafe(self.conn.write_now, data)

    def _flush(self) -> None:
        """The held reply's time is up: it goes alone (on the loop)."""
        with self.lock:
            data = self._written(self.held)
            self.held = b""
            if data:
                self.queued = True
                self.conn.write_now(data)

    def finish(self) -> None:
        """The read is over (on the loop, the worker done): what is held goes, and the duplicate is closed."""
        if self.timer is not None:
            self.timer.cancel()
        self._flush()
        os.close(self.fd)

    def _written(self, data: bytes) -> bytes:
        """What of `data` the socket did not take (b"" for a client that left: nothing to give it)."""
        if not data or self.queued:
            return data
        try:
            return data[os.write(self.fd, data) :]
        except BlockingIOError:
            return data
        except OSError:
            return b""
