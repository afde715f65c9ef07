"""nmemd's event loop: accept framed requests on the Unix socket and route them.

Shutdown order matters for zero loss: stop accepting, let handlers that hold
an event finish (their batch commits), close the ingest queue so everything
queued commits, then checkpoint and release the lock.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream

from nmem_client import protocol
from nmemd import __version__, maintenance, recall, rpc
from nmemd.checkpointer import Checkpointer
from nmemd.config import Settings
from nmemd.deadlines import Deadlines, Watch
from nmemd.drain import drain_once
from nmemd.errors import InvalidEvent, NmemError, StorageError, StorageFullError
from nmemd.ingest import Ingestor, extract_event
from nmemd.instance import InstanceLock, bind_socket, ensure_private_dir, inherited_socket, peer_uid, sd_notify
from nmemd.model import Extracted
from nmemd.status import DaemonFacts
from nmemd.store import Incoming, open_store

LOG = logging.getLogger("nmemd.server")
SHUTDOWN_GRACE_S = 5.0
OFFLOAD_BYTES = 1024 * 1024  # parse bigger payloads in a worker thread, off the event loop
# Past max_connections, peers idle before their header are dropped within ~0.5 s (deadlines.py);
# past this many times max_connections, a new connection gets OVERLOADED_HEADER_S to send its
# header and then `busy`, unless it is a ping: health checks are answered under any load.
HARD_CONNECTIONS_FACTOR = 4
OVERLOADED_HEADER_S = 0.05
ACCEPT_BACKOFF_S = 0.1  # out of file descriptors: wait for some to close instead of dying
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

HookResponder = Callable[["Daemon", Any], Any]


def same_user(uid: int | None) -> bool:
    """Only the daemon's own user may talk to it (the 0700 directory is not enough everywhere)."""
    return uid == os.geteuid()


@dataclass
class Daemon:
    """The running daemon's shared state, handed to every connection."""

    settings: Settings
    ingestor: Ingestor
    started_by: str = "user"
    socket_activated: bool = False
    started_at: float = field(default_factory=time.time)
    connections: int = 0
    last_activity: float = field(default_factory=time.monotonic)
    uid_allowed: Callable[[int | None], bool] = same_user
    stop_requested: anyio.Event = field(default_factory=anyio.Event)
    stopping: anyio.Event = field(default_factory=anyio.Event)  # set once shutdown begins
    refused_peers: int = 0
    post_commit_pending: int = 0
    # Post-commit work (summaries, ...): runs after the reply, finishes before shutdown.
    background: anyio.abc.TaskGroup = field(init=False)

    skip_tools: frozenset[str] = field(init=False)  # built once: every event consults it
    deadlines: Deadlines = field(init=False)

    def __post_init__(self) -> None:
        self.skip_tools = frozenset(self.settings.skip_tools)
        self.deadlines = Deadlines(
            resolution=min(0.25, self.settings.read_timeout_s / 5),
            crowded=lambda: self.connections > self.settings.max_connections,
        )

    def facts(self) -> DaemonFacts:
        return DaemonFacts(
            running=True,
            pid=os.getpid(),
            socket=self.settings.socket,
            started_at=self.started_at,
            started_by=self.started_by,
            connections=self.connections,
            queued=self.ingestor.queued,
            committed=self.ingestor.committed,
            batches=self.ingestor.batches,
            last_error=self.ingestor.last_error,
            version=__version__,
            post_commit_pending=self.post_commit_pending,
        )


async def _reply(stream: anyio.abc.ByteStream, data: bytes) -> None:
    try:
        await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        LOG.debug("client left before its reply")


async def handle_hook(daemon: Daemon, stream: anyio.abc.ByteStream, event_id: bytes, body: bytes) -> None:
    try:
        if len(body) > OFFLOAD_BYTES:
            extracted = await anyio.to_thread.run_sync(extract_event, body, daemon.skip_tools)
        else:
            extracted = extract_event(body, daemon.skip_tools)
    except InvalidEvent as exc:
        LOG.warning("refused event %s: %s", event_id.decode(), exc)
        await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, str(exc)))
        return
    incoming = Incoming(event_id=event_id.decode(), received_at=time.time(), extracted=extracted)
    try:
        await daemon.ingestor.submit(incoming)
    except StorageFullError as exc:
        await _reply(stream, protocol.encode_error(protocol.ERR_STORAGE_FULL, str(exc)))
        return
    except StorageError as exc:
        await _reply(stream, protocol.encode_error(protocol.ERR_INTERNAL, str(exc)))
        return
    try:
        reply = await recall.hook_reply(daemon, extracted)
    except Exception:  # the event is stored; a failed reply must not fail the hook
        LOG.exception("hook reply for %s failed", extracted.hook_event)
        reply = b""
    await _reply(stream, protocol.encode_ok(reply))
    if recall.has_after_commit_work(extracted):  # a task per event would cost every event
        daemon.post_commit_pending += 1
        daemon.background.start_soon(_after_commit, daemon, extracted)


async def _after_commit(daemon: Daemon, extracted: Extracted) -> None:
    try:
        await recall.after_commit(daemon, extracted)
    except Exception:
        LOG.exception("post-commit work for %s failed", extracted.hook_event)
    finally:
        daemon.post_commit_pending -= 1


async def handle_rpc(daemon: Daemon, stream: anyio.abc.ByteStream, body: bytes) -> None:
    try:
        request = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        request = None
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, 'expected {"method": ..., "params": {...}}'))
        return
    params = request.get("params") or {}
    if not isinstance(params, dict):
        await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, "params must be an object"))
        return
    try:
        result = await rpc.dispatch(daemon, request["method"], params)
    except NmemError as exc:
        await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, str(exc)))
        return
    await _reply(stream, protocol.encode_ok(msgspec.json.encode(result)))


def _parse_header(line: bytes) -> tuple[bytes, bytes, int]:
    parts = line.split(b" ")
    if len(parts) != 4 or parts[0] != protocol.MAGIC or parts[1] not in protocol.KINDS:
        raise InvalidEvent("malformed frame header")
    kind, event_id, raw_len = parts[1], parts[2], parts[3]
    if not (event_id == protocol.NO_EVENT_ID or (8 <= len(event_id) <= 64 and event_id.isalnum())):
        raise InvalidEvent("malformed event id")
    if not raw_len.isdigit():
        raise InvalidEvent("malformed frame length")
    return kind, event_id, int(raw_len)


async def serve_frame(
    daemon: Daemon,
    stream: anyio.abc.SocketStream,
    buffered: BufferedByteReceiveStream,
    watch: Watch,
    overloaded: bool = False,
) -> bool:
    """Read and answer one frame; return False when the connection should close.

    A connection may carry many frames one after another (the importer and the
    benchmarks keep one open); the hook client sends one and closes. Reads are
    bounded by `watch` (the sweeper cancels the connection when its peer stalls).
    """
    settings = daemon.settings
    try:
        watch.reading_header(OVERLOADED_HEADER_S if overloaded else settings.read_timeout_s)
        try:
            line = await buffered.receive_until(b"\n", protocol.MAX_HEADER)
        except anyio.IncompleteRead:
            return False  # clean close between frames
        kind, event_id, length = _parse_header(line)
        if overloaded and kind != protocol.KIND_PING:  # a health check is answered even now
            await _reply(stream, protocol.encode_error(protocol.ERR_BUSY, "too many connections"))
            return False
        if length > settings.max_frame_bytes:
            LOG.warning("refused a %d-byte frame (max %d)", length, settings.max_frame_bytes)
            await _reply(stream, protocol.encode_error(protocol.ERR_TOO_LARGE, "frame too large"))
            return False
        # A local peer sends megabytes in milliseconds; allow 10 MB/s on top of the base timeout.
        watch.reading(settings.read_timeout_s + length / 10e6)
        body = await buffered.receive_exactly(length) if length else b""
        watch.idle()
    except anyio.DelimiterNotFound:
        LOG.warning("a client sent a header line that never ends; dropped")
        await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, "malformed frame header"))
        return False
    except InvalidEvent as exc:
        LOG.warning("a client sent garbage: %s", exc)
        await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, str(exc)))
        return False
    daemon.last_activity = time.monotonic()
    if kind == protocol.KIND_HOOK:
        if event_id == protocol.NO_EVENT_ID:
            LOG.warning("refused a hook event without an id: hook events need an id")
            await _reply(stream, protocol.encode_error(protocol.ERR_INVALID, "hook events need an id"))
            return False
        await handle_hook(daemon, stream, event_id, body)
    elif kind == protocol.KIND_RPC:
        await handle_rpc(daemon, stream, body)
    elif kind == protocol.KIND_PING:
        await _reply(stream, protocol.encode_ok(msgspec.json.encode(daemon.facts())))
    else:
        from nmemd import mcp  # imported on the first MCP connection only (~0.8 s)

        await mcp.serve_connection(daemon, stream, buffered, body)
        return False
    return True


async def handle_connection(daemon: Daemon, stream: anyio.abc.SocketStream) -> None:
    """Serve one connection, frame after frame. Nothing a peer sends may raise out of here."""
    daemon.connections += 1
    daemon.last_activity = time.monotonic()
    try:
        async with stream:
            uid = peer_uid(stream.extra(anyio.abc.SocketAttribute.raw_socket))
            if not daemon.uid_allowed(uid):
                daemon.refused_peers += 1
                LOG.warning("refused a connection from uid %s", uid)
                return
            overloaded = daemon.connections > HARD_CONNECTIONS_FACTOR * daemon.settings.max_connections
            buffered = BufferedByteReceiveStream(stream)
            with anyio.CancelScope() as scope:
                watch = daemon.deadlines.watch(scope)
                try:
                    while await serve_frame(daemon, stream, buffered, watch, overloaded):
                        pass
                finally:
                    daemon.deadlines.forget(watch)
            if watch.expired:
                LOG.warning("a client was too slow to send its frame; dropped")
                await _reply(stream, protocol.encode_error(protocol.ERR_TIMEOUT, "frame not received in time"))
    except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, anyio.ClosedResourceError):
        LOG.debug("a client closed its connection early")
    except OSError as exc:
        LOG.debug("connection error: %s", exc)
    except Exception:
        LOG.exception("connection handler failed")
    finally:
        daemon.connections -= 1
        daemon.last_activity = time.monotonic()


async def _accept_forever(
    listener: anyio.abc.SocketListener,
    handler: Callable[[anyio.abc.SocketStream], Any],
    conns: anyio.abc.TaskGroup,
) -> None:
    """`listener.serve`, except that running out of descriptors (EMFILE, ENFILE, ...) pauses
    accepting for a moment instead of ending the daemon: a local process opening thousands
    of connections must not take everybody's memory down."""
    warned = 0.0
    while True:
        try:
            stream = await listener.accept()
        except anyio.BrokenResourceError as exc:  # anyio wraps the OSError
            cause = exc.__cause__
            if not isinstance(cause, OSError) or cause.errno not in _OUT_OF_RESOURCES:
                raise
            if time.monotonic() - warned > 10:  # once per episode, not ten lines a second
                warned = time.monotonic()
                LOG.warning("cannot accept connections (%s): pausing, then retrying", cause.strerror)
            await anyio.sleep(ACCEPT_BACKOFF_S)
            continue
        conns.start_soon(handler, stream)


async def _watch_signals(
    scope: anyio.CancelScope, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()  # READY=1 must not go out before SIGTERM is ours to handle
        async for signum in signals:
            LOG.info("received %s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return


async def _watch_stop(daemon: Daemon, scope: anyio.CancelScope) -> None:
    await daemon.stop_requested.wait()
    LOG.info("shutdown requested over the socket")
    scope.cancel()


async def _watch_idle(daemon: Daemon, scope: anyio.CancelScope) -> None:
    idle = daemon.settings.idle_timeout_s
    if idle <= 0:
        return
    while True:
        await anyio.sleep(min(idle / 4, 5.0))
        quiet = time.monotonic() - daemon.last_activity
        if daemon.connections == 0 and daemon.ingestor.queued == 0 and quiet >= idle:
            LOG.info("idle for %.0f s: exiting", quiet)
            scope.cancel()
            return


async def _drain_periodically(daemon: Daemon) -> None:
    while True:
        try:
            count = await drain_once(daemon.ingestor, daemon.settings)
            if count:
                daemon.last_activity = time.monotonic()
        except StorageError as exc:
            LOG.warning("inbox drain failed, will retry: %s", exc)
        await anyio.sleep(daemon.settings.inbox_drain_interval_s)


async def _final_drain(daemon: Daemon) -> None:
    """Store what clients left in the inbox while we ran, so a stop never strands events."""
    with anyio.move_on_after(SHUTDOWN_GRACE_S):
        try:
            await drain_once(daemon.ingestor, daemon.settings)
        except StorageError as exc:
            LOG.warning("final inbox drain failed; events stay in the inbox: %s", exc)


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else 65536
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass


async def serve(
    settings: Settings,
    *,
    started_by: str = "user",
    uid_allowed: Callable[[int | None], bool] = same_user,
    task_status: anyio.abc.TaskStatus[Daemon] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the daemon until SIGTERM/SIGINT, a shutdown request, or idleness."""
    _raise_fd_limit()
    ensure_private_dir(settings.home)
    ensure_private_dir(os.path.dirname(settings.socket))
    lock = InstanceLock(settings.lock)
    lock.acquire()
    try:
        sock = inherited_socket()
        activated = sock is not None
        if sock is None:
            sock = bind_socket(settings.socket)
        try:
            async with open_store(settings) as store:
                ingestor = Ingestor(store)
                checkpointer = Checkpointer(store)
                store.on_commit = checkpointer.committed
                daemon = Daemon(
                    settings=settings,
                    ingestor=ingestor,
                    started_by=started_by,
                    socket_activated=activated,
                    uid_allowed=uid_allowed,
                )
                await _run(daemon, sock, checkpointer, task_status)
        finally:
            if not activated:  # never unlink a socket systemd handed us
                _unlink_quietly(settings.socket)
    finally:
        lock.release()
        LOG.info("stopped")


async def _run(
    daemon: Daemon, sock: Any, checkpointer: Checkpointer, task_status: anyio.abc.TaskStatus[Daemon]
) -> None:
    listener = await anyio.abc.SocketListener.from_socket(sock)
    async with anyio.create_task_group() as core:
        daemon.background = core
        core.start_soon(daemon.ingestor.run)
        try:
            async with anyio.create_task_group() as conns:
                try:
                    async with anyio.create_task_group() as services:

                        async def handler(stream: anyio.abc.SocketStream) -> None:
                            await handle_connection(daemon, stream)

                        services.start_soon(_accept_forever, listener, handler, conns)
                        services.start_soon(daemon.deadlines.run)
                        services.start_soon(checkpointer.run)
                        await services.start(_watch_signals, services.cancel_scope)
                        services.start_soon(_watch_stop, daemon, services.cancel_scope)
                        services.start_soon(_watch_idle, daemon, services.cancel_scope)
                        services.start_soon(_drain_periodically, daemon)
                        services.start_soon(maintenance.run_scheduler, daemon)
                        LOG.info(
                            "nmemd %s serving %s (pid %d, started by %s%s)",
                            __version__,
                            daemon.settings.socket,
                            os.getpid(),
                            daemon.started_by,
                            ", socket-activated" if daemon.socket_activated else "",
                        )
                        sd_notify("READY=1")
                        task_status.started(daemon)
                finally:
                    # Shut down in order even when cancelled from outside: stop accepting,
                    # give handlers holding an event time to see their batch commit.
                    daemon.stopping.set()
                    with anyio.CancelScope(shield=True):
                        sd_notify("STOPPING=1")
                        await listener.aclose()
                    conns.cancel_scope.deadline = anyio.current_time() + SHUTDOWN_GRACE_S
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    await _final_drain(daemon)
            finally:
                daemon.ingestor.close()  # run() commits whatever is still queued, then returns


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
