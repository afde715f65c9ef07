"""The frame protocol as bytes arrive (nmemd/daemon/connection.py): pipelined, dribbled and mixed frames."""

from __future__ import annotations

import json
import os
import socket

import pytest
from support.daemon import Daemon
from support.db import integrity_ok
from support.helpers import connect, count, new_id, payload, read_reply

from nmem_client import protocol


def _hook(marker: str) -> bytes:
    return protocol.encode_request(protocol.KIND_HOOK, new_id().encode(), payload(marker))


class Replies:
    """Replies read off one connection, keeping what a recv brought past the current one."""

    def __init__(self, s: socket.socket):
        self.s, self.buf = s, b""

    def _fill(self) -> None:
        chunk = self.s.recv(65536)
        assert chunk, "the daemon closed the connection"
        self.buf += chunk

    def next(self) -> tuple[bytes, bytes]:
        while b"\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\n")
        if head.startswith(b"ERR "):
            return b"ERR", head[4:]
        size = int(head[3:])
        while len(self.buf) < size:
            self._fill()
        body, self.buf = self.buf[:size], self.buf[size:]
        return head[:2], body


def test_pipelined_frames_in_one_write_are_answered_in_order(daemon: Daemon) -> None:
    """Frames sent back to back are answered one by one, in order; each hook only after its commit."""
    daemon.start()
    ping = protocol.encode_request(protocol.KIND_PING, protocol.NO_EVENT_ID, b"")
    rpc = protocol.encode_request(protocol.KIND_RPC, protocol.NO_EVENT_ID, b'{"method": "status"}')
    s = connect(daemon.socket)
    try:
        s.sendall(_hook("pipe-1") + ping + _hook("pipe-2") + rpc + _hook("pipe-3"))
        reader = Replies(s)
        replies = [reader.next() for _ in range(5)]
    finally:
        s.close()
    assert [status for status, _ in replies] == [b"OK"] * 5, replies
    assert replies[0][1] == replies[2][1] == replies[4][1] == b""
    assert json.loads(replies[1][1])["running"] is True  # the ping's daemon facts
    assert "database" in json.loads(replies[3][1])  # the rpc's status
    assert count(daemon.db, "events", "session_id LIKE 'pipe-%'") == 3
    assert daemon.stop() == 0
    integrity_ok(daemon.db)


def test_a_ping_sent_with_a_request_is_answered_with_it_or_on_its_own_before_long(daemon: Daemon) -> None:
    """A ping's reply waits for the reply of the frame sent with it (one send for both: a read's ping,
    `control._read_after_ping`), but not for a frame still arriving: it goes out alone after PING_HOLD_S."""
    daemon.start()
    ping = protocol.encode_request(protocol.KIND_PING, protocol.NO_EVENT_ID, b"")
    body = b'{"method": "recent", "params": {"limit": 1}}'
    rpc = protocol.encode_request(protocol.KIND_RPC, protocol.NO_EVENT_ID, body)
    s = connect(daemon.socket)
    try:
        s.sendall(ping + rpc)
        reader = Replies(s)
        facts, answer = reader.next(), reader.next()
        s.sendall(ping + rpc[:-5])  # the request's last bytes are not sent yet
        alone = reader.next()  # within the socket's timeout: the held reply's time ran out
        s.sendall(rpc[-5:])
        late = reader.next()
    finally:
        s.close()
    assert facts[0] == alone[0] == b"OK" and json.loads(facts[1])["running"] is json.loads(alone[1])["running"] is True
    assert answer == late and answer[0] == b"OK" and isinstance(json.loads(answer[1]), list)
    assert daemon.stop() == 0


def test_reads_answered_from_their_thread_keep_the_order_of_their_frames(daemon: Daemon) -> None:
    """Reads answered by the thread that ran them (`rpc.start_read`, `WorkerSender`), an error among them and
    a ping before and after: each reply in its frame's place, the daemon's facts, the rows, the refusal."""
    daemon.start()
    ping = protocol.encode_request(protocol.KIND_PING, protocol.NO_EVENT_ID, b"")

    def rpc(method: str, params: dict[str, object]) -> bytes:
        body = json.dumps({"method": method, "params": params}).encode()
        return protocol.encode_request(protocol.KIND_RPC, protocol.NO_EVENT_ID, body)

    s = connect(daemon.socket)
    try:
        s.sendall(_hook("order-1"))
        assert Replies(s).next() == (b"OK", b"")
        s.sendall(
            ping
            + rpc("search", {"query": "order"})
            + rpc("search", {"query": "???"})  # nothing to search for: the query's own error
            + rpc("recent", {"limit": 1})
            + ping
        )
        reader = Replies(s)
        replies = [reader.next() for _ in range(5)]
    finally:
        s.close()
    assert json.loads(replies[0][1])["running"] is True and json.loads(replies[4][1])["running"] is True
    assert replies[1][0] == b"OK" and [h["type"] for h in json.loads(replies[1][1])] == ["prompt"]
    assert replies[2][0] == b"ERR" and replies[2][1].startswith(b"QueryError ")
    assert replies[3][0] == b"OK" and len(json.loads(replies[3][1])) == 1
    assert daemon.stop() == 0


def test_replies_larger_than_the_socket_takes_arrive_whole_and_in_order(daemon: Daemon) -> None:
    """Reads whose replies the socket cannot take at once (a client that reads only later): what a worker
    thread could not write goes through the transport, and each reply arrives whole, in its frame's order."""
    from support.helpers import prompt_event

    daemon.start()
    s = connect(daemon.socket, timeout=30)
    try:
        for n in range(40):
            event = {**prompt_event(f"big-{n}"), "prompt": f"big reply {n} " + "lorem ipsum dolor " * 400}
            s.sendall(protocol.encode_request(protocol.KIND_HOOK, new_id().encode(), json.dumps(event).encode()))
            assert Replies(s).next() == (b"OK", b"")
        ids = list(range(1, 201))
        body = json.dumps({"method": "show", "params": {"ids": ids}}).encode()
        show = protocol.encode_request(protocol.KIND_RPC, protocol.NO_EVENT_ID, body)
        s.sendall(show * 6)  # ~1.1 MB of replies before the first is read: far more than a socket holds
        reader = Replies(s)
        replies = [reader.next() for _ in range(6)]
    finally:
        s.close()
    assert all(status == b"OK" for status, _ in replies) and len(replies[0][1]) > 150_000
    assert all(body == replies[0][1] for _, body in replies)  # each whole: no reply cut into another
    assert sum("lorem ipsum" in row["content"] for row in json.loads(replies[0][1])) == 40
    assert daemon.stop() == 0


def test_a_frame_dribbled_byte_by_byte_is_stored_once(daemon: Daemon) -> None:
    daemon.start()
    frame = _hook("dribble")
    s = connect(daemon.socket)
    try:
        for i in range(len(frame)):
            s.send(frame[i : i + 1])
        status, reply = read_reply(s)
    finally:
        s.close()
    assert (status, reply) == (b"OK", b"")
    assert count(daemon.db, "events", "session_id = 'dribble'") == 1
    assert daemon.stop() == 0


def test_a_connection_that_leaves_mid_frame_stores_nothing_and_the_next_is_served(daemon: Daemon) -> None:
    daemon.start()
    frame = _hook("torn")
    s = connect(daemon.socket)
    s.sendall(frame[: len(frame) // 2])
    s.close()
    s = connect(daemon.socket)
    try:
        s.sendall(_hook("whole"))
        assert read_reply(s) == (b"OK", b"")
    finally:
        s.close()
    assert count(daemon.db, "events", "session_id = 'torn'") == 0
    assert count(daemon.db, "events", "session_id = 'whole'") == 1
    assert daemon.stop() == 0


def test_a_daemon_side_error_reaches_the_cli_as_its_kind(daemon: Daemon) -> None:
    """`ERR <kind> <message>`: the CLI raises what the daemon raised (a QueryError, an UnknownMethod,
    a StorageFullError when the store cannot grow), not a DaemonError that names none of them."""
    import resource
    import time

    from nmemd.control import control
    from nmemd.errors import DaemonError, QueryError, StorageError, StorageFullError, UnknownMethod

    daemon.start()
    assert daemon.stop() == 0
    limit = os.path.getsize(daemon.db) + 1024 * 1024  # the store cannot grow past this (EFBIG, as a full disk)
    daemon.start(rlimits={"RLIMIT_FSIZE": (limit, resource.RLIM_INFINITY)})
    with pytest.raises(QueryError, match="nothing to search for"):
        control.ask("search", {"query": "!!!"})
    with pytest.raises(UnknownMethod, match="no_such_method"):
        control.ask("no_such_method", {})
    text = "".join(f"word{n} " for n in range(700))  # ~4 KB, each word its own term
    with pytest.raises(StorageError) as raised:
        for chunk in range(8):  # ~16 MB of rows and index at most: far past the limit
            records = [
                {"kind": "observation", "event_id": f"full{chunk:02d}{n:04d}aaaa", "session_id": "s-full",
                 "ts": time.time(), "type": "prompt", "title": f"row {n}", "content": text}
                for n in range(500)
            ]  # fmt: skip
            control.ask("import", {"records": records}, timeout=60.0)
    assert isinstance(raised.value, StorageFullError) and not isinstance(raised.value, DaemonError), raised.value
    control.ask("status")  # the daemon goes on
