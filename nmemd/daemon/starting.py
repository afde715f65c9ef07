"""The socket's answer while the store opens: hooks told `busy` at once, every other request kept for later.

The daemon binds its socket before it opens the store, so that clients see it is there. Opening takes
~0.1 s, but a migration that indexes the store again takes ~40 s at a million observations (m010,
m016). Until the store is open nothing accepted connections: each hook waited its 500 ms timeout
before it put its event in the inbox, and an agent's every tool call stalled that long. While the
store opens, `Starting` accepts: a hook frame of this store gets `ERR busy starting` (the client then
writes the event to the spool at once: the SQLite inbox may be behind a migration's write lock for
seconds, and the daemon drains the spool once it serves); any other frame (a ping, a read, an MCP
session) is left unread in its socket, and the daemon serves it as it starts serving, as it would
have from the listen queue. An MCP session still held after MCP_HOLD_S is told `busy starting` too:
its bridge asks again (nmem_client/bridge.py) rather than give up after its handshake's 60 s, which a
store of a few million observations takes to index again.

The frame's header is read with MSG_PEEK: nothing is taken off a connection that the daemon serves.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Final

from nmem_client import protocol
from nmemd.config import tunable
from nmemd.daemon.connection import parse_header
from nmemd.daemon.instance import peer_uid
from nmemd.errors import InvalidEvent

LOG = logging.getLogger("nmemd.starting")
HOLD_AT_MOST: Final = 128  # connections held; then the listen queue keeps the rest, as before
HEADER_WAIT_S: Final = 0.5  # a client that connected and sent no whole header yet: kept for the daemon
# An MCP session held this long while the store still opens is told `busy starting`; its bridge asks again.
MCP_HOLD_S: Final = tunable("STARTING_MCP_HOLD_S", 20.0, 0.05)
# After `busy `: the client spools the event (protocol.BUSY_STARTING), and the daemon drains it once it serves.
BUSY_MESSAGE: Final = protocol.BUSY_STARTING.decode().removeprefix("busy ") + ": nmemd is opening the store"


class Starting:
    """Accepts on `sock` from `start()` until `stop()`, on the event loop's own callbacks (no task: the
    store's opening raises what it raises, not a task group's): hooks of `store_id` are answered `busy`,
    and its MCP sessions after MCP_HOLD_S; the rest are held."""

    def __init__(self, sock: socket.socket, store_id: bytes, uid_allowed: Callable[[int | None], bool]) -> None:
        self.sock = sock
        self.store_id = store_id
        self.uid_allowed = uid_allowed
        self.held: dict[socket.socket, asyncio.TimerHandle | None] = {}  # accepted, unread: the daemon's
        self.answered = 0  # hooks told busy
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        self._loop.add_reader(self.sock.fileno(), self._accept)

    def _accept(self) -> None:
        assert self._loop is not None
        while True:
            if len(self.held) >= HOLD_AT_MOST:
                self._loop.remove_reader(self.sock.fileno())
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors: the listen queue keeps the rest for the daemon
                LOG.debug("not accepting while starting: %s", exc)
                return
            conn.setblocking(False)
            if not self.uid_allowed(peer_uid(conn)):  # another user's: the daemon refuses it as it serves
                self.held[conn] = None
                continue
            self.held[conn] = self._loop.call_later(HEADER_WAIT_S, self._leave, conn)
            self._loop.add_reader(conn.fileno(), self._peek, conn)

    def _peek(self, conn: socket.socket) -> None:
        """The header, read without taking it: `busy` to a hook frame of this store, once it is whole (clients
        send it as they connect); any other connection left for the daemon."""
        try:
            header = conn.recv(protocol.MAX_HEADER, socket.MSG_PEEK)
        except OSError:
            header = b""
        self._leave(conn)  # looked at once: a header not whole yet stays readable, and waiting would spin
        kind = _kind_for(header, self.store_id)
        if kind == protocol.KIND_HOOK:
            self._tell_busy(conn)
            self.answered += 1
        elif kind == protocol.KIND_MCP and self._loop is not None:
            self.held[conn] = self._loop.call_later(MCP_HOLD_S, self._mcp_waited, conn)

    def _mcp_waited(self, conn: socket.socket) -> None:
        if self._tell_busy(conn):
            LOG.info("an MCP session waited %.1f s for the store to open: told to ask again", MCP_HOLD_S)

    def _tell_busy(self, conn: socket.socket) -> bool:
        """`busy starting` to a held connection, no longer held (its client asks again later); False when the
        daemon has it already."""
        if self.held.pop(conn, False) is False:
            return False
        try:
            conn.send(protocol.encode_error(protocol.ERR_BUSY, BUSY_MESSAGE))
        except OSError:
            pass
        conn.close()
        return True

    def _leave(self, conn: socket.socket) -> None:
        """No more looking at `conn`: it waits for the daemon."""
        timer = self.held.get(conn)
        if timer is not None and self._loop is not None:
            timer.cancel()
            self.held[conn] = None
            self._loop.remove_reader(conn.fileno())

    def stop(self) -> list[socket.socket]:
        """Stop accepting; the connections held, in the order they came, for the daemon to serve."""
        for conn in list(self.held):
            self._leave(conn)
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
            self._loop = None  # once: the daemon closes the socket when it stops
        held, self.held = list(self.held), {}
        if self.answered:
            LOG.info("told %d hook(s) that the daemon was starting: their events wait in the spool", self.answered)
            self.answered = 0
        return held

    def close(self) -> None:
        """The daemon does not serve (its store did not open): every held connection closed."""
        for conn in self.stop():
            conn.close()


def _kind_for(header: bytes, store_id: bytes) -> bytes | None:
    """The kind of frame `header` starts, when it is a whole, valid header naming this store (or none: an
    older client); None for anything else, which is the daemon's to read and answer."""
    line, newline, _ = header.partition(b"\n")
    if not newline:
        return None
    try:
        kind, _, _, store = parse_header(line)
    except InvalidEvent:
        return None
    return kind if store in (b"", store_id) else None
