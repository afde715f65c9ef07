"""nmemd's event loop: accept framed requests on the Unix socket and route them.

Shutdown order matters for zero loss: stop accepting, let handlers that hold
an event finish (their batch commits), close the ingest queue so everything
queued commits, then checkpoint and release the lock.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import msgspec

from nmem_client import paths, protocol
from nmemd import __version__, gc_tuning
from nmemd.capture.drain import drain_once
from nmemd.capture.extractor import Extractor
from nmemd.capture.ingest import Ingestor
from nmemd.capture.quiet import QuietMoments
from nmemd.config import Settings, tunable
from nmemd.daemon import rpc
from nmemd.daemon.connection import FrameConnection
from nmemd.daemon.deadlines import Deadlines
from nmemd.daemon.instance import (
    InstanceLock,
    bind_socket,
    ensure_private_dir,
    ensure_socket_dir,
    inherited_socket,
    sd_notify,
)
from nmemd.daemon.starting import Starting
from nmemd.daemon.status import DaemonFacts
from nmemd.errors import AlreadyRunning, NmemError, StorageError
from nmemd.history.follow import Follower
from nmemd.jobs import scheduler
from nmemd.model import Extracted
from nmemd.recall import replies
from nmemd.store.checkpointer import Checkpointer
from nmemd.store.database import open_store
from nmemd.team.sync import TeamSync

LOG = logging.getLogger("nmemd.server")
SHUTDOWN_GRACE_S = 5.0
ACCEPT_BACKOFF_S = 0.1  # out of file descriptors: wait for some to close instead of dying
# The folder this daemon imports nmemd from (a checkout or site-packages): which installation it is.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


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
    last_activity: float = field(default_factory=time.monotonic)
    uid_allowed: Callable[[int | None], bool] = same_user
    problems: list[str] = field(default_factory=list)  # config left out at start (config.load_checked)
    stop_requested: anyio.Event = field(default_factory=anyio.Event)
    stopping: anyio.Event = field(default_factory=anyio.Event)  # set once shutdown begins
    refused_peers: int = 0
    post_commit_pending: int = 0
    # Post-commit work (summaries, ...): runs after the reply, finishes before shutdown.
    background: anyio.abc.TaskGroup = field(init=False)
    # Connection work that waits (rpc, MCP sessions, SessionStart context): cancelled at shutdown's end.
    handlers: anyio.abc.TaskGroup = field(init=False)
    open_connections: set[FrameConnection] = field(default_factory=set)
    _all_closed: anyio.Event = field(default_factory=anyio.Event)
    quiet: QuietMoments = field(default_factory=QuietMoments)  # the pauses between hooks (team sync's push)

    skip_tools: frozenset[str] = field(init=False)  # built once: every event consults it
    extractor: Extractor | None = None  # the extraction worker's handle; None: extract in the loop
    mcp_preloaded: bool = False  # the MCP server is built, or being built
    mcp_building: bool = False  # being built
    inbox_drained: anyio.Event = field(default_factory=anyio.Event)  # the drain at start is done (or failed)
    deadlines: Deadlines = field(init=False)
    store_id: bytes = field(init=False)  # its NMEM_HOME as clients name it (nmem_client.paths.store_id)
    team: TeamSync = field(init=False)  # team memory's sync (idle, psycopg unloaded, until a project is shared)
    follower: Follower = field(init=False)  # reads the agent's own words from the transcripts events name

    def __post_init__(self) -> None:
        self.skip_tools = frozenset(self.settings.skip_tools)
        self.store_id = paths.store_id(self.settings.home)
        self.team = TeamSync(self, self._delete_pulled)
        self.follower = Follower(self.ingestor, self.skip_tools, self.spawn)
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
            executable=sys.executable,
            package=PACKAGE_ROOT,
            post_commit_pending=self.post_commit_pending,
            mcp_building=self.mcp_building,
            worker=self.extractor.facts() if self.extractor is not None else None,
            config_problems=self.problems,
            home=self.settings.home,
            store=self.store_id.decode(),
        )

    async def catch_up(self, project: str, budget_s: float) -> bool:
        return await self.team.catch_up(project, budget_s)

    async def _delete_pulled(self, ids: list[int]) -> None:
        """A pulled tombstone's delete: purge's own (full text, prompts, every copy), nothing queued back."""
        from nmemd.history import purge

        await purge.purge(self.ingestor.store, purge.PurgeFilter(ids=ids), share=False)

    def serves(self, store: bytes) -> bool:
        """Whether `store` (a client's `paths.store_id`) names this daemon's NMEM_HOME. Checked again
        on a mismatch: a home removed and made again has a new inode."""
        if store == self.store_id:
            return True
        self.store_id = paths.store_id(self.settings.home)
        return store == self.store_id

    def ping_reply(self) -> bytes:
        return protocol.encode_ok(msgspec.json.encode(self.facts()))

    def spawn(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Start a handler task; False once the handler group is gone (the daemon stopped)."""
        try:
            self.handlers.start_soon(fn, *args)
        except RuntimeError:
            LOG.debug("no task started: the daemon is stopping")
            return False
        return True

    def after_commit(self, extracted: Extracted) -> None:
        if extracted.transcript_path is not None or extracted.agent is not None:
            self.follower.note(extracted)
        if replies.has_after_commit_work(extracted):  # a task per event would cost every event
            self.post_commit_pending += 1
            self.background.start_soon(_after_commit, self, extracted)
        if extracted.hook_event == "SessionStart" and not self.mcp_preloaded:
            # An agent session starts and will connect its MCP server next: build ours now, after the
            # context went out, rather than make that first connection wait ~1 s for the mcp import.
            self.mcp_preloaded = self.mcp_building = self.spawn(_preload_mcp, self)

    @property
    def connections(self) -> int:
        """Open connections, MCP sessions included."""
        return len(self.open_connections)

    def connection_opened(self, conn: FrameConnection) -> None:
        self.open_connections.add(conn)
        self.last_activity = time.monotonic()
        self.quiet.hook_started()

    def connection_closed(self, conn: FrameConnection) -> None:
        self.last_activity = time.monotonic()
        self.open_connections.discard(conn)
        if not self.open_connections:
            self._all_closed.set()
        self.connection_settled()

    def connection_settled(self) -> None:
        """A connection closed or became an MCP session: when no other frame is in flight (MCP sessions
        are long-lived, they do not count) and no event waits for its commit, a quiet moment begins."""
        if self.ingestor.queued == 0 and all(c.handed_over for c in self.open_connections):
            self.quiet.all_done()

    async def close_connections(self, grace_s: float) -> None:
        """Stop every frame connection: each answers the frame in hand (its batch commits) first."""
        for conn in list(self.open_connections):
            conn.stop()
        if self.open_connections:
            self._all_closed = anyio.Event()
            with anyio.move_on_after(grace_s):
                await self._all_closed.wait()
        for conn in list(self.open_connections):
            if conn.transport is not None:
                conn.transport.abort()


async def _preload_mcp(daemon: Daemon) -> None:
    from nmemd.mcp.server import get_server

    began = time.monotonic()
    try:
        await get_server()
    except Exception:  # the first MCP connection tries again and reports it
        LOG.exception("building the MCP server failed")
        return
    finally:
        daemon.mcp_building = False
    gc_tuning.freeze_long_lived()  # mcp's and pydantic's objects live as long as the daemon's own
    LOG.info("MCP server ready in %.2f s", time.monotonic() - began)


async def _after_commit(daemon: Daemon, extracted: Extracted) -> None:
    try:
        await replies.after_commit(daemon, extracted)
    except Exception:
        LOG.exception("post-commit work for %s failed", extracted.hook_event)
    finally:
        daemon.post_commit_pending -= 1


async def rpc_reply(daemon: Daemon, body: bytes, send: Callable[[bytes], None] | None = None) -> bytes | None:
    """The reply frame to an rpc request: OK with the result as JSON, or ERR with the error's kind
    (`ERR QueryError <message>`; `invalid` for a malformed request). None: `send` had it from the worker
    thread (`rpc.dispatch`)."""
    try:
        request = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        request = None
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        return protocol.encode_error(protocol.ERR_INVALID, 'expected {"method": ..., "params": {...}}')
    params = request.get("params") or {}
    if not isinstance(params, dict):
        return protocol.encode_error(protocol.ERR_INVALID, "params must be an object")
    try:
        result = await rpc.dispatch(daemon, request["method"], params, send)
    except NmemError as exc:  # its kind too (errors.RPC_KINDS): the CLI raises what was raised here
        return rpc.error_reply(exc)
    return None if result is rpc.SENT else protocol.encode_ok(msgspec.json.encode(result))


async def _accept_forever(daemon: Daemon, sock: socket.socket, held: list[socket.socket]) -> None:
    """Accept connections and give each a `FrameConnection`, those `Starting` held first.

    Running out of file descriptors (EMFILE, ENFILE, ...) pauses accepting for a
    moment instead of ending the daemon: a local process opening thousands of
    connections must not take everybody's memory down.
    """
    loop = asyncio.get_running_loop()
    for conn in held:
        await _serve_accepted(loop, daemon, conn)
    sock.setblocking(False)
    warned = 0.0
    while True:
        await anyio.wait_readable(sock)
        while True:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                if time.monotonic() - warned > 10:  # once per episode, not ten lines a second
                    warned = time.monotonic()
                    LOG.warning("cannot accept connections (%s): pausing, then retrying", exc.strerror)
                await anyio.sleep(ACCEPT_BACKOFF_S)
                break
            await _serve_accepted(loop, daemon, conn)


async def _serve_accepted(loop: asyncio.AbstractEventLoop, daemon: Daemon, conn: socket.socket) -> None:
    try:
        await loop.connect_accepted_socket(lambda: FrameConnection(daemon), conn)
    except OSError as exc:
        conn.close()
        LOG.debug("connection error: %s", exc)


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


INSTALL_CHECK_S = tunable("INSTALL_CHECK_S", 30.0, 0.01)


def installation_gone() -> str | None:
    """What of the installation this daemon runs from is gone (None: nothing): its Python or its
    package folder, as after `pipx uninstall` with the daemon still running."""
    for path in (sys.executable, os.path.join(PACKAGE_ROOT, "nmemd", "__init__.py")):
        if not os.path.exists(path):
            return path
    return None


async def _watch_installation(scope: anyio.CancelScope) -> None:
    """Exit once the installation is gone (issue #37, 2): nothing could start this daemon again, its
    next lazy import would fail, and it would hold the store and the socket for good."""
    while True:
        await anyio.sleep(INSTALL_CHECK_S)
        gone = installation_gone()
        if gone:
            LOG.warning("the installation this daemon runs from is gone (%s): exiting", gone)
            scope.cancel()
            return


async def _drain_periodically(daemon: Daemon) -> None:
    while True:
        try:
            count = await drain_once(daemon.ingestor, daemon.settings)
            if count:
                daemon.last_activity = time.monotonic()
        except (StorageError, OSError) as exc:  # OSError: the spool unreadable, out of descriptors
            LOG.warning("inbox drain failed, will retry: %s", exc)
        daemon.inbox_drained.set()
        await anyio.sleep(daemon.settings.inbox_drain_interval_s)


async def _final_drain(daemon: Daemon) -> None:
    """Store what clients left in the inbox while we ran, so a stop never strands events."""
    with anyio.move_on_after(SHUTDOWN_GRACE_S):
        try:
            await drain_once(daemon.ingestor, daemon.settings)
        except (StorageError, OSError) as exc:
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
    problems: list[str] | None = None,
    task_status: anyio.abc.TaskStatus[Daemon] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run the daemon until SIGTERM/SIGINT, a shutdown request, or idleness."""
    _raise_fd_limit()
    ensure_private_dir(settings.home)
    ensure_socket_dir(settings.socket, settings.home)
    lock = InstanceLock(settings.lock)
    lock.acquire()
    store_lock = InstanceLock(settings.store_lock, note=settings.socket)
    try:
        store_lock.acquire()
    except AlreadyRunning:
        lock.release()
        raise
    try:
        sock = inherited_socket()
        activated = sock is not None
        if sock is None:
            sock = bind_socket(settings.socket)
        starting = Starting(sock, paths.store_id(settings.home), uid_allowed)  # hooks not kept waiting meanwhile
        starting.start()
        try:
            from nmemd.capture.redact import redact  # the store sits below capture: it is given the redactor

            async with open_store(settings, redact=redact) as store:
                ingestor = Ingestor(store)
                checkpointer = Checkpointer(store)
                store.add_commit_listener(checkpointer.committed)
                daemon = Daemon(
                    settings=settings,
                    ingestor=ingestor,
                    started_by=started_by,
                    socket_activated=activated,
                    uid_allowed=uid_allowed,
                    problems=problems or [],
                )
                if settings.extract_worker:
                    daemon.extractor = Extractor(daemon.skip_tools)
                await _run(daemon, sock, starting.stop(), checkpointer, task_status)
        finally:
            starting.close()  # what it held when the store did not open
            if not activated:  # never unlink a socket systemd handed us
                _unlink_quietly(settings.socket)
    finally:
        store_lock.release()
        lock.release()
        LOG.info("stopped")


async def _run(
    daemon: Daemon,
    sock: socket.socket,
    held: list[socket.socket],
    checkpointer: Checkpointer,
    task_status: anyio.abc.TaskStatus[Daemon],
) -> None:
    async with anyio.create_task_group() as core:
        daemon.background = core
        core.start_soon(daemon.ingestor.run)
        try:
            async with anyio.create_task_group() as conns:
                daemon.handlers = conns
                try:
                    async with anyio.create_task_group() as services:
                        services.start_soon(_accept_forever, daemon, sock, held)
                        services.start_soon(daemon.deadlines.run)
                        services.start_soon(checkpointer.run)
                        if daemon.extractor is not None:
                            services.start_soon(daemon.extractor.run)
                        await services.start(_watch_signals, services.cancel_scope)
                        services.start_soon(_watch_stop, daemon, services.cancel_scope)
                        services.start_soon(_watch_idle, daemon, services.cancel_scope)
                        services.start_soon(_watch_installation, services.cancel_scope)
                        services.start_soon(_drain_periodically, daemon)
                        services.start_soon(scheduler.run_scheduler, daemon)
                        services.start_soon(daemon.team.run)
                        LOG.info(
                            "nmemd %s serving %s (pid %d, started by %s%s)",
                            __version__,
                            daemon.settings.socket,
                            os.getpid(),
                            daemon.started_by,
                            ", socket-activated" if daemon.socket_activated else "",
                        )
                        gc_tuning.freeze_long_lived()
                        sd_notify("READY=1")
                        task_status.started(daemon)
                finally:
                    # Shut down in order even when cancelled from outside: stop accepting,
                    # give handlers holding an event time to see their batch commit.
                    daemon.stopping.set()
                    with anyio.CancelScope(shield=True):
                        sd_notify("STOPPING=1")
                        sock.close()
                        await daemon.close_connections(SHUTDOWN_GRACE_S)
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
