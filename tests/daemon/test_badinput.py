"""Hostile and broken input, through the real hook client and through raw sockets.

For every case: the client exits 0 silently within its timeout; the daemon stays up,
logs the problem, stores the next valid event, and leaves the stored data untouched
(tables only grow by the valid events sent). The cases share one seeded daemon per worker,
so each also proves the daemon came through every hostile input sent before it; each takes
its own baseline of the rows and the log when it starts.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.env import UNSET_FOR_TESTS, isolated_env, remove_fallbacks
from support.fixtures import hook_bodies
from support.helpers import (
    connect,
    count,
    log_text,
    new_id,
    payload,
    peer_closed,
    ping,
    read_reply,
    send_hook,
    wait_until,
)

from nmem_client import protocol

CLIENT_TIMEOUT_MS = 500
READ_TIMEOUT_S = 1
MB = 1024 * 1024


def _deep(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def _deep_in_tool_input(depth: int) -> bytes:
    """A real-shaped PostToolUse whose tool_input nests `depth` levels (below the decoder's limit)."""
    head = b'{"session_id":"deep","hook_event_name":"PostToolUse","cwd":"/tmp/p","tool_name":"Bash","tool_input":'
    return head + _deep(depth) + b',"tool_response":{"stdout":"ok"}}'


@dataclass(frozen=True)
class Bad:
    name: str
    body: bytes
    log: str | None  # regex expected in the daemon log; None: the client never reaches the daemon


# The daemon refuses on the socket ("refused event"), or, when the client gave up waiting and
# fell back, drops the event from the inbox ("dropping invalid inbox event"): both are logged.
REFUSED = r"(?:refused event|dropping invalid inbox event) \w+: "

BAD_PAYLOADS = [
    Bad("empty", b"", None),
    Bad("whitespace", b" \n\t\n", None),
    Bad("invalid-json", b'{"session_id": "x", "hook_event_name": ', REFUSED + "payload is not valid JSON"),
    Bad("invalid-utf8", b'{"session_id": "x\xff\xfe", "hook_event_name": "Stop"}', REFUSED + ".*UTF-8"),
    Bad("nested-10000", _deep(10_000), REFUSED + "payload nested too deeply"),
    Bad("non-object-list", b"[1,2]", REFUSED),
    Bad("non-object-string", b'"x"', REFUSED),
    Bad("non-object-null", b"null", REFUSED),
    Bad("non-object-number", b"42", REFUSED),
    Bad("garbage-20mb", b"\x00garbage" * (20 * MB // 8), REFUSED),
]


TABLES = {
    "events": "SELECT * FROM events ORDER BY event_id",
    "observations": "SELECT * FROM observations ORDER BY id",
    "sessions": "SELECT * FROM sessions ORDER BY session_id",
    "prompts": "SELECT * FROM prompts ORDER BY observation_id",
}


def _snapshot(db: Path, exclude: set[str] = frozenset()) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the memory tables, minus those of the sessions in `exclude`."""
    snap = {}
    for table, sql in TABLES.items():
        rows = db_rows(db, sql)
        if table == "prompts":
            rows = [r for r in rows if r[1] not in exclude]
        else:
            col = {"events": 2, "observations": 2, "sessions": 0}[table]
            rows = [r for r in rows if r[col] not in exclude]
        snap[table] = rows
    return snap


class Harness:
    """A seeded daemon plus the before/after bookkeeping every case needs."""

    def __init__(self, daemon: Daemon, env: dict[str, str]):
        self.daemon = daemon
        self.env = env  # the daemon's NMEM_HOME and socket, for the hook clients a case runs
        self.valid: set[str] = set()
        self.others: set[str] = set()  # sessions a case stored beside its valid events
        self.log_offset = 0
        self.before: dict[str, list[tuple[object, ...]]] = {}
        self.events_before = 0

    def seed(self) -> None:
        bodies = hook_bodies()
        with connect(self.daemon.socket) as s:  # one connection, many frames
            for body in bodies:
                s.sendall(protocol.encode_request(protocol.KIND_HOOK, new_id().encode(), body))
                assert read_reply(s)[0] == b"OK"
        assert count(self.daemon.db, "events") == len(bodies)
        self.baseline()

    def baseline(self) -> None:
        """What a case must leave as it found it: every row so far, and the log's length."""
        # Stop/SessionEnd summaries are written after their ack: the baseline waits for them.
        wait_until(
            lambda: (f := ping(self.daemon.socket)) is not None and f["post_commit_pending"] == 0,
            10,
            "session summaries written",
        )
        wait_until(lambda: count(self.daemon.db, "inbox") == 0, 10, "inbox drained")
        self.valid, self.others = set(), set()
        self.events_before = count(self.daemon.db, "events")
        self.before = _snapshot(self.daemon.db)
        self.log_offset = len(log_text(self.daemon.home))

    def new_log(self) -> str:
        return log_text(self.daemon.home)[self.log_offset :]

    def send(self, body: bytes) -> subprocess.CompletedProcess[bytes]:
        """The real hook client, pointed at this daemon."""
        return run_send(body, env=self.env)

    def send_valid(self) -> str:
        """The next valid event, through the real client: it must be stored."""
        marker = f"valid-{new_id()[:12]}"
        done = self.send(payload(marker))
        assert done.returncode == 0 and done.stderr == b""
        self.valid.add(marker)
        wait_until(
            lambda: count(self.daemon.db, "events", "session_id = ?", (marker,)) == 1,
            10,
            "the next valid event to be stored",
        )
        return marker

    def check_intact(self, extra_events: int = 0) -> None:
        d = self.daemon
        assert d.proc is not None and d.proc.poll() is None, "daemon died"
        assert ping(d.socket) is not None
        wait_until(lambda: count(d.db, "inbox") == 0, 10, "inbox drained")
        spool = d.home / "spool"
        assert not spool.exists() or not any(spool.glob("*.event"))
        new = db_rows(
            d.db,
            "SELECT e.event_id, e.session_id, e.hook_event, o.type, o.title FROM events e"
            " LEFT JOIN observations o ON o.id = e.observation_id ORDER BY e.received_at",
        )
        new = new[self.events_before :]
        assert len(new) == len(self.valid) + extra_events, f"unexpected events stored: {new}"
        for marker in self.valid:
            assert count(d.db, "events", "session_id = ?", (marker,)) == 1
        after = _snapshot(d.db, exclude=self.valid | self.others)
        assert after == self.before, "pre-existing rows changed"
        integrity_ok(d.db)


def _start(daemon: Daemon) -> Harness:
    """Start `daemon`, draining its inbox quickly, and seed it."""
    daemon.env["NMEM_INBOX_DRAIN_INTERVAL_S"] = "0.2"
    daemon.start()
    h = Harness(daemon, {"NMEM_HOME": str(daemon.home), "NMEM_SOCKET": daemon.socket})
    h.seed()
    return h


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    """One seeded daemon for this worker's cases (its start and seeding cost more than most cases)."""
    root, short = tmp_path_factory.mktemp("badinput"), tempfile.mkdtemp(prefix="nm", dir="/tmp")
    env = isolated_env(root, short)
    daemon = Daemon(env, short)
    for key in UNSET_FOR_TESTS:
        daemon.env.pop(key, None)
    daemon.env["NMEM_READ_TIMEOUT_S"] = str(READ_TIMEOUT_S)
    try:
        yield _start(daemon)
    finally:
        if daemon.proc is not None:
            daemon.stop()
        remove_fallbacks(env["NMEM_HOME"], str(root), short)
        shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def harness(seeded: Harness, monkeypatch: pytest.MonkeyPatch) -> Harness:
    monkeypatch.setenv("NMEM_TIMEOUT_MS", str(CLIENT_TIMEOUT_MS))
    assert seeded.daemon.proc is not None and seeded.daemon.proc.poll() is None, "an earlier case killed the daemon"
    seeded.baseline()
    return seeded


# --- payloads through the real client ---------------------------------------------------------


@pytest.mark.reliability(scenario=6)
@pytest.mark.parametrize("bad", BAD_PAYLOADS, ids=lambda b: b.name)
def test_client_survives_bad_payload(harness: Harness, bad: Bad) -> None:
    started = time.monotonic()
    done = harness.send(bad.body)
    elapsed = time.monotonic() - started
    assert done.returncode == 0
    assert done.stderr == b""
    assert done.stdout == b""
    assert elapsed < CLIENT_TIMEOUT_MS / 1000 + (6.0 if len(bad.body) > MB else 2.0), elapsed
    harness.send_valid()
    harness.check_intact()
    if bad.log is not None:
        assert re.search(bad.log, harness.new_log()), harness.new_log()[-2000:]


def test_client_20mb_valid_payload_is_stored_once_and_bounded(harness: Harness) -> None:
    big = json.dumps(
        {
            "session_id": "big",
            "hook_event_name": "PostToolUse",
            "cwd": "/tmp/p",
            "tool_name": "Read",
            "tool_input": {"file_path": "/tmp/p/huge.log"},
            "tool_response": {"type": "text", "file": {"filePath": "/tmp/p/huge.log", "content": "x" * (20 * MB)}},
        }
    ).encode()
    started = time.monotonic()
    done = harness.send(big)
    assert time.monotonic() - started < CLIENT_TIMEOUT_MS / 1000 + 6.0
    assert done.returncode == 0 and done.stderr == b""
    db = harness.daemon.db
    wait_until(
        lambda: count(db, "events", "session_id = 'big'") == 1 and count(db, "inbox") == 0,
        20,
        "the 20 MB event to be stored",
    )
    longest = db_rows(db, "SELECT max(length(content)), max(length(title)) FROM observations WHERE session_id = 'big'")
    assert longest[0][0] <= 4000 and longest[0][1] <= 200
    harness.others.add("big")
    harness.send_valid()
    harness.check_intact(extra_events=1)


def test_client_frame_over_max_frame_bytes_is_refused_for_good(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """ERR too_large is final: the client must not smuggle the refused event in through the inbox."""
    daemon.env["NMEM_MAX_FRAME_BYTES"] = str(8 * MB)
    monkeypatch.setenv("NMEM_TIMEOUT_MS", str(CLIENT_TIMEOUT_MS))
    h = _start(daemon)
    big = json.dumps({"session_id": "big", "hook_event_name": "UserPromptSubmit", "prompt": "y" * (20 * MB)}).encode()
    started = time.monotonic()
    done = h.send(big)
    assert time.monotonic() - started < CLIENT_TIMEOUT_MS / 1000 + 6.0
    assert done.returncode == 0 and done.stderr == b""
    assert re.search(r"refused a \d+-byte frame \(max 8388608\)", h.new_log())
    h.send_valid()
    h.check_intact()
    assert count(daemon.db, "events", "session_id = 'big'") == 0


# --- payloads and framing through raw sockets ---------------------------------------------------


@pytest.mark.parametrize("bad", [b for b in BAD_PAYLOADS if b.name != "whitespace"], ids=lambda b: b.name)
def test_raw_frame_with_bad_payload_is_refused(harness: Harness, bad: Bad) -> None:
    eid = new_id()
    status, reply = send_hook(harness.daemon.socket, eid, bad.body)
    assert (status, reply.split(b" ")[0]) == (b"ERR", protocol.ERR_INVALID), (status, reply)
    log = harness.new_log()
    assert f"refused event {eid}" in log, log[-2000:]
    assert count(harness.daemon.db, "events", "event_id = ?", (eid,)) == 0
    harness.send_valid()
    harness.check_intact()


def test_deeply_nested_tool_input_does_not_crash_anything(harness: Harness) -> None:
    """900 levels: under the JSON decoder's limit, so extraction and redaction must cope (store or refuse)."""
    body = _deep_in_tool_input(900)
    eid = new_id()
    status, reply = send_hook(harness.daemon.socket, eid, body)
    assert status in (b"OK", b"ERR"), "the daemon dropped the connection without a reply"
    if status == b"ERR":
        assert reply.split(b" ")[0] == protocol.ERR_INVALID, reply
    done = harness.send(body)
    assert done.returncode == 0 and done.stderr == b""
    harness.send_valid()
    stored = count(harness.daemon.db, "events", "session_id = 'deep'")
    assert stored == (2 if status == b"OK" else 0)
    harness.valid.add("deep")  # its rows (if any) are the only other new ones
    wait_until(lambda: count(harness.daemon.db, "inbox") == 0, 10, "inbox drained")
    assert count(harness.daemon.db, "events") == harness.events_before + 1 + stored
    assert "connection handler failed" not in harness.new_log()
    assert harness.daemon.proc is not None and harness.daemon.proc.poll() is None


def test_stalled_frame_times_out(harness: Harness) -> None:
    eid = new_id()
    with connect(harness.daemon.socket, timeout=READ_TIMEOUT_S + 5) as s:
        s.sendall(b"NMEM1 hook %s 1000\n" % eid.encode() + b'{"session_')
        started = time.monotonic()
        status, reply = read_reply(s)  # blocks until the daemon gives up on us
        waited = time.monotonic() - started
        assert (status, reply.split(b" ")[0]) == (b"ERR", protocol.ERR_TIMEOUT), reply
        assert READ_TIMEOUT_S * 0.8 <= waited < READ_TIMEOUT_S + 3
        assert peer_closed(s)
    assert "too slow to send its frame" in harness.new_log()
    assert count(harness.daemon.db, "events", "event_id = ?", (eid,)) == 0
    harness.send_valid()
    harness.check_intact()


def test_stalled_header_times_out(harness: Harness) -> None:
    with connect(harness.daemon.socket, timeout=READ_TIMEOUT_S + 5) as s:
        s.sendall(b"NMEM1 hook ")
        status, reply = read_reply(s)
        assert (status, reply.split(b" ")[0]) == (b"ERR", protocol.ERR_TIMEOUT), reply
        assert peer_closed(s)
    harness.send_valid()
    harness.check_intact()


@pytest.mark.reliability(scenario=6)
def test_many_stalled_connections_do_not_block_others(daemon: Daemon) -> None:
    """While 50 peers stall mid-frame, a hook is acknowledged before the daemon has given up on any
    of them: it did not wait behind their read timeouts (long here, so a loaded machine cannot make
    the ack look late)."""
    daemon.env["NMEM_READ_TIMEOUT_S"] = "60"
    daemon.start()
    socks = [connect(daemon.socket, timeout=5) for _ in range(50)]
    try:
        for i, s in enumerate(socks):
            s.sendall(b"NMEM1 hook %s 1000\n" % new_id().encode() if i % 2 else b"NMEM1 ho")
        marker = f"valid-{new_id()[:12]}"
        assert send_hook(daemon.socket, new_id(), payload(marker), timeout=30)[0] == b"OK"
        for s in socks:  # each still waits for the rest of its frame: no reply, not closed
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)
        assert count(daemon.db, "events", "session_id = ?", (marker,)) == 1
    finally:
        for s in socks:
            s.close()
    integrity_ok(daemon.db)


def test_peer_that_leaves_mid_frame_stores_nothing(harness: Harness) -> None:
    eid = new_id()
    with connect(harness.daemon.socket) as s:
        s.sendall(b"NMEM1 hook %s 1000\n" % eid.encode() + b'{"session_')
    harness.send_valid()
    assert count(harness.daemon.db, "events", "event_id = ?", (eid,)) == 0
    harness.check_intact()


GARBAGE = {
    "http": (b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", r"a client sent garbage: malformed frame header"),
    "binary": (
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n" + bytes(range(256)) * 4,
        r"a client sent garbage: malformed frame header",
    ),
    "oversized-header": (b"NMEM1 hook " + b"a" * 1000, r"header line that never ends"),
    # A long line that arrives in one read passes receive_until (anyio checks max_bytes only while
    # waiting for more), then fails header parsing: refused either way.
    "oversized-header-with-newline": (
        b"NMEM1 hook " + b"7" * 400 + b" 2\n{}",
        r"header line that never ends|a client sent garbage: malformed",
    ),
    "bad-event-id": (b"NMEM1 hook ../../etc/passwd 2\n{}", r"a client sent garbage: malformed event id"),
    "negative-length": (b"NMEM1 hook %s -5\n" % new_id().encode(), r"a client sent garbage: malformed frame length"),
    "unknown-kind": (b"NMEM1 exec %s 2\n{}" % new_id().encode(), r"a client sent garbage: malformed frame header"),
    "hook-without-id": (b"NMEM1 hook - 2\n{}", r"need an id|garbage"),
    "length-over-max": (b"NMEM1 hook %s 99999999999\n" % new_id().encode(), r"refused a 99999999999-byte frame"),
    "wrong-magic": (b"NMEM2 hook %s 2\n{}" % new_id().encode(), r"a client sent garbage: malformed frame header"),
}


@pytest.mark.reliability(scenario=6)
@pytest.mark.parametrize("name", list(GARBAGE))
def test_garbage_connection_is_answered_and_closed(harness: Harness, name: str) -> None:
    data, log = GARBAGE[name]
    with connect(harness.daemon.socket) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon may refuse before reading everything
        status, reply = read_reply(s)
        assert status == b"ERR", (status, reply)
        assert reply.split(b" ")[0] in (protocol.ERR_INVALID, protocol.ERR_TOO_LARGE), reply
        assert peer_closed(s)
    if log is not None:
        assert re.search(log, harness.new_log()), harness.new_log()[-2000:]
    harness.send_valid()
    harness.check_intact()


def test_garbage_after_a_good_frame_keeps_the_good_one(harness: Harness) -> None:
    """A connection carries several frames: a valid one, then garbage. The first stays stored, once."""
    marker = f"valid-{new_id()[:12]}"
    eid = new_id()
    with connect(harness.daemon.socket) as s:
        s.sendall(protocol.encode_request(protocol.KIND_HOOK, eid.encode(), payload(marker)))
        assert read_reply(s)[0] == b"OK"
        s.sendall(b"\xff\xfe\xfd garbage\n")
        status, _ = read_reply(s)
        assert status == b"ERR"
        assert peer_closed(s)
    harness.valid.add(marker)
    assert count(harness.daemon.db, "events", "event_id = ?", (eid,)) == 1
    harness.check_intact()


def test_half_closed_client_still_gets_its_ack(harness: Harness) -> None:
    marker = f"valid-{new_id()[:12]}"
    with connect(harness.daemon.socket) as s:
        s.sendall(protocol.encode_request(protocol.KIND_HOOK, new_id().encode(), payload(marker)))
        s.shutdown(socket.SHUT_WR)
        assert read_reply(s)[0] == b"OK"
    harness.valid.add(marker)
    harness.check_intact()
