"""Fault injection (reliability.md section 6): a frozen daemon, a full disk, SIGTERM during a
batch, fuzzed frames, and databases left by earlier schema versions.

Invariant after every scenario: the integrity checks pass (`integrity_ok`), no event_id is
stored twice, and every event a client sent -- each carries its own marker in session_id --
is stored exactly once once the faults are over. Real parts only: real nmemd processes, the
real client (`python -I -S send.py`, or its own `deliver` + `inbox.store` in-process for
raw reply codes), real SQLite files. Every wait is a bounded poll.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.earlier_stores import EARLIER_VERSIONS
from support.helpers import big_payload, connect, count, log_text, new_id, payload, ping, wait_until

from nmem_client import inbox, protocol
from nmem_client.hook import deliver
from nmemd.store.migrations import MIGRATIONS

DRAIN_ENV = {"NMEM_INBOX_DRAIN_INTERVAL_S": "0.3"}


# --- shared checks ----------------------------------------------------------------------------


def backlog(home: Path, db: Path) -> int:
    """Events still waiting for the daemon: inbox rows plus spool files."""
    spool = home / "spool"
    spooled = sum(1 for _ in spool.glob("*.event")) if spool.exists() else 0
    return count(db, "inbox") + spooled


def per_marker(db: Path, prefix: str) -> dict[str, int]:
    rows = db_rows(
        db, "SELECT session_id, count(*) FROM events WHERE session_id LIKE ? GROUP BY session_id", (prefix + "%",)
    )
    return {str(r[0]): int(r[1]) for r in rows}


def assert_exactly_once(db: Path, expected: set[str], prefix: str) -> dict[str, int]:
    """Every expected marker is in the ledger exactly once, nothing else under `prefix`; db intact."""
    stored = per_marker(db, prefix)
    missing = expected - set(stored)
    dupes = {m: c for m, c in stored.items() if c != 1}
    extra = set(stored) - expected
    assert not missing, f"{len(missing)} events lost, e.g. {sorted(missing)[:5]}"
    assert not dupes, f"events stored more than once: {dict(list(dupes.items())[:5])}"
    assert not extra, f"unexpected events: {sorted(extra)[:5]}"
    obs = dict(
        db_rows(
            db,
            "SELECT session_id, count(*) FROM observations WHERE session_id LIKE ? GROUP BY session_id",
            (prefix + "%",),
        )
    )
    assert obs == dict.fromkeys(expected, 1)
    integrity_ok(db)
    return stored


def start_with_env(daemon: Daemon, extra: dict[str, str]) -> None:
    daemon.env = {**daemon.env, **extra}
    daemon.start()


# --- 1. frozen daemon -------------------------------------------------------------------------

FROZEN_TIMEOUT_MS = 500
FROZEN_BOUND_S = FROZEN_TIMEOUT_MS / 1000 + inbox.BUSY_TIMEOUT_MS / 1000 + 1.0
FROZEN_CLIENTS = 16


def daemon_holds_write_lock(db: Path) -> bool:
    """True when another connection (the frozen daemon) holds the database's write lock."""
    conn = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout=0")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return True
            raise
        conn.execute("ROLLBACK")
        return False
    finally:
        conn.close()


def held_while_frozen(db: Path) -> bool:
    """The write lock is held, and still is a moment later: by the frozen daemon, not by a
    streamer's own inbox fallback that happened to write at that instant."""
    if not daemon_holds_write_lock(db):
        return False
    time.sleep(0.05)  # a fallback write takes a millisecond; the frozen daemon holds on
    return daemon_holds_write_lock(db)


@pytest.mark.reliability(scenario=3)
@pytest.mark.timeout(45)
def test_frozen_daemon_clients_fall_back_in_time_and_nothing_is_lost(daemon: Daemon, keep_umask: None) -> None:
    start_with_env(daemon, DRAIN_ENV)
    assert daemon.proc is not None
    pid = daemon.proc.pid
    markers: set[str] = set()
    lock = threading.Lock()
    stop_stream = threading.Event()
    stream_fallbacks: dict[str, int] = {}

    def streamer(n: int) -> None:
        """Keeps the daemon committing, so a SIGSTOP is likely to land inside a write transaction."""
        i = 0
        while not stop_stream.is_set():
            marker = f"fz-s{n:02d}-{i:05d}"
            i += 1
            with lock:
                markers.add(marker)
            event_id, body = new_id(), payload(marker)
            try:
                status, reply = deliver(protocol.KIND_HOOK, event_id.encode(), body, FROZEN_TIMEOUT_MS / 1000)
            except OSError:
                status, reply = b"", b""
            if status != b"OK":
                assert status != b"ERR" or reply.split(b" ", 1)[0] in protocol.RETRYABLE, reply
                where = inbox.store(event_id, body)
                with lock:
                    stream_fallbacks[where] = stream_fallbacks.get(where, 0) + 1

    attempts = 0
    in_txn = False
    with ThreadPoolExecutor(4) as pool:
        streams = [pool.submit(streamer, n) for n in range(4)]
        wait_until(lambda: count(daemon.db, "events") >= 20, 10, "the stream to get under way")
        # Freeze, and keep it frozen if the daemon is inside a write transaction; else thaw and retry.
        while attempts < 200:
            attempts += 1
            os.kill(pid, signal.SIGSTOP)
            if held_while_frozen(daemon.db):
                in_txn = True
                break
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.003)  # let the stream go on a little before the next try (not a wait for a condition)
        try:
            # The frozen daemon: real hook clients, each measured.
            walls: list[float] = []
            results: list[subprocess.CompletedProcess[bytes]] = []

            def client(n: int) -> None:
                marker = f"fz-c{n:02d}"
                with lock:
                    markers.add(marker)
                t0 = time.monotonic()
                done = run_send(
                    payload(marker), env={"NMEM_AUTOSTART": "0", "NMEM_TIMEOUT_MS": str(FROZEN_TIMEOUT_MS)}, timeout=30
                )
                wall = time.monotonic() - t0
                with lock:
                    walls.append(wall)
                    results.append(done)

            with ThreadPoolExecutor(FROZEN_CLIENTS) as cpool:
                for f in [cpool.submit(client, n) for n in range(FROZEN_CLIENTS)]:
                    f.result(timeout=30)
            stop_stream.set()
            for f in streams:
                f.result(timeout=30)  # the streamers' last events also fell back
            waiting = backlog(daemon.home, daemon.db)
        finally:
            stop_stream.set()
            os.kill(pid, signal.SIGCONT)
    print(
        f"frozen daemon: inside a write transaction={in_txn} after {attempts} tries;"
        f" client walls max {max(walls):.3f} s; streamer fallbacks {stream_fallbacks};"
        f" backlog while frozen {waiting}; events sent {len(markers)}"
    )
    assert all(r.returncode == 0 and r.stderr == b"" and r.stdout == b"" for r in results), results
    assert max(walls) <= FROZEN_BOUND_S, f"a client took {max(walls):.2f} s (bound {FROZEN_BOUND_S:.2f} s)"
    assert waiting >= FROZEN_CLIENTS, f"only {waiting} events waiting in inbox/spool while frozen"
    if in_txn:  # the inbox was locked by the frozen writer: the fallback had to be the spool
        assert (daemon.home / "spool").exists() and any((daemon.home / "spool").glob("*.event"))
    wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 20, "inbox and spool drained after SIGCONT")
    assert daemon.proc.poll() is None and ping(daemon.socket) is not None
    assert_exactly_once(daemon.db, markers, "fz-")
    assert daemon.stop() == 0
    integrity_ok(daemon.db)


# --- 2. disk full -----------------------------------------------------------------------------


def start_limited(daemon: Daemon, limit: int) -> subprocess.Popen[bytes]:
    """`Daemon.start`, but nmemd runs under RLIMIT_FSIZE=limit with SIGXFSZ ignored (EFBIG instead)."""
    return daemon.start(rlimits={"RLIMIT_FSIZE": (limit, limit)})


@pytest.mark.reliability(scenario=5)
@pytest.mark.timeout(60)
def test_disk_full_refuses_without_acking_and_recovers_after_restart(daemon: Daemon, keep_umask: None) -> None:
    # Size the database once with a normal start, then run under a file-size limit a bit above it.
    daemon.start()
    assert daemon.stop() == 0
    base = max(os.path.getsize(daemon.db), 64 * 1024)
    limit = base + 256 * 1024
    proc = start_limited(daemon, limit)
    rng = random.Random(7)
    acked: list[str] = []
    refused: dict[bytes, int] = {}
    fell_back: dict[str, int] = {}
    markers: set[str] = set()
    refusals_seen = 0
    n = 0
    while refusals_seen < 10 and n < 2000:
        marker = f"df-{n:05d}"
        n += 1
        markers.add(marker)
        event_id, body = new_id(), big_payload(marker, rng)
        try:
            status, reply = deliver(protocol.KIND_HOOK, event_id.encode(), body, 5.0)
        except OSError:
            status, reply = b"", b""
        if status == b"OK":
            acked.append(marker)
            continue
        code = reply.split(b" ", 1)[0]
        refused[code] = refused.get(code, 0) + 1
        refusals_seen += 1
        where = inbox.store(event_id, body)  # what the client does with a retryable refusal
        fell_back[where] = fell_back.get(where, 0) + 1
    # A few real hook clients while the disk is full: they fall back too (inbox or spool).
    for k in range(3):
        marker = f"df-real-{k}"
        markers.add(marker)
        done = run_send(big_payload(marker, rng), env={"NMEM_AUTOSTART": "0"})
        assert done.returncode == 0 and done.stderr == b""
    facts = ping(daemon.socket)
    print(
        f"disk full (RLIMIT_FSIZE={limit}): sent {n}, acked {len(acked)}, refused {refused},"
        f" fell back {fell_back}; daemon last_error={facts and facts.get('last_error')!r}"
    )
    assert refusals_seen >= 10, f"the daemon never refused ({n} events of ~4 KB, limit {limit} bytes)"
    assert acked, "nothing was acknowledged before the disk filled"
    assert set(refused) <= {protocol.ERR_STORAGE_FULL, protocol.ERR_INTERNAL}, refused
    # Nothing acknowledged without a commit: every acked event is readable right now.
    stored_now = per_marker(daemon.db, "df-")
    assert not [m for m in acked if stored_now.get(m) != 1], "acknowledged events missing from the db"
    # The daemon stayed up: same process, answering, no crash.
    assert proc.poll() is None and facts is not None and facts["pid"] == proc.pid
    assert "not committed" in log_text(daemon.home), "the storage failure was not logged"

    assert daemon.stop() == 0, "nmemd did not exit cleanly after running out of space"
    daemon.start()  # a normal start: no limit; recovers the WAL, drains inbox and spool
    wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 20, "inbox and spool drained after restart")
    assert_exactly_once(daemon.db, markers, "df-")
    assert daemon.stop() == 0


# --- 3. SIGTERM during a batch ----------------------------------------------------------------

TERM_SENDERS = 16
TERM_EVENTS = 40


@pytest.mark.reliability(scenario=11)
@pytest.mark.timeout(60)
def test_sigterm_during_a_batch_commits_every_acked_event(daemon: Daemon, keep_umask: None) -> None:
    daemon.start()
    assert daemon.proc is not None
    lock = threading.Lock()
    acked: set[str] = set()
    fell_back: dict[str, int] = {}
    sent = [0]

    def sender(c: int) -> None:
        for i in range(TERM_EVENTS):
            marker = f"st-c{c:02d}-{i:03d}"
            event_id, body = new_id(), payload(marker)
            try:
                status, reply = deliver(protocol.KIND_HOOK, event_id.encode(), body, 2.0)
            except OSError:
                status, reply = b"", b""
            if status == b"OK":
                with lock:
                    acked.add(marker)
                    sent[0] += 1
                continue
            assert status != b"ERR" or reply.split(b" ", 1)[0] in protocol.RETRYABLE, reply
            where = inbox.store(event_id, body)
            with lock:
                fell_back[where] = fell_back.get(where, 0) + 1
                sent[0] += 1

    total = TERM_SENDERS * TERM_EVENTS
    with ThreadPoolExecutor(TERM_SENDERS) as pool:
        futures = [pool.submit(sender, c) for c in range(TERM_SENDERS)]
        wait_until(lambda: sent[0] >= total // 3, 20, "a third of the events sent")
        sent_at_term = sent[0]
        daemon.proc.send_signal(signal.SIGTERM)
        rc = daemon.stop(timeout=20)  # already signalled: waits for the exit
        for f in futures:
            f.result(timeout=30)
    expected = {f"st-c{c:02d}-{i:03d}" for c in range(TERM_SENDERS) for i in range(TERM_EVENTS)}
    print(f"SIGTERM after {sent_at_term}/{total}: acked {len(acked)}, fell back {fell_back}, rc {rc}")
    assert rc == 0
    stored = per_marker(daemon.db, "st-")
    lost_acked = sorted(m for m in acked if stored.get(m) != 1)
    assert not lost_acked, f"{len(lost_acked)} acknowledged events not stored at exit: {lost_acked[:5]}"
    assert sum(fell_back.values()) > 0 and len(acked) > 0
    daemon.start()
    wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 20, "inbox and spool drained after restart")
    assert_exactly_once(daemon.db, expected, "st-")
    assert daemon.stop() == 0


# --- 4. frame parser fuzz ---------------------------------------------------------------------

_ids = st.one_of(
    st.just(b"-"),
    st.binary(min_size=16, max_size=16).map(lambda b: b.hex().encode()),  # a well-formed id
    st.text("abcdef0123456789", min_size=0, max_size=80).map(str.encode),
    st.binary(max_size=70).filter(lambda b: b" " not in b and b"\n" not in b),
)
_kinds = st.one_of(
    st.sampled_from([protocol.KIND_HOOK, protocol.KIND_RPC, protocol.KIND_PING]),
    st.binary(max_size=8).filter(lambda b: b" " not in b and b"\n" not in b),
)
_lengths = st.one_of(st.integers(0, 600), st.integers(0, 2**80), st.just(32 * 1024 * 1024 + 1))


@st.composite
def _structured(draw: st.DrawFn) -> bytes:
    kind, event_id, length = draw(_kinds), draw(_ids), draw(_lengths)
    raw_len = draw(st.one_of(st.just(str(length).encode()), st.sampled_from([b"", b"-1", b"1e3", b"0x10", b" 5"])))
    body = draw(
        st.one_of(
            st.binary(max_size=min(length, 600)),  # truncated (or exact when short)
            st.just(b'{"hook_event_name": "UserPromptSubmit", "session_id": "fuzz-'),
            st.just(b"\xff\xfe" * 10),
            st.just(b"[" * 300),
        )
    )
    return b"NMEM1 " + kind + b" " + event_id + b" " + raw_len + b"\n" + body


_frames = st.one_of(st.binary(max_size=600), _structured(), st.binary(max_size=300).map(lambda b: b"NMEM1 " + b))


@pytest.mark.reliability(scenario=6)
@pytest.mark.timeout(90)
def test_fuzzed_frames_never_kill_the_daemon(daemon: Daemon) -> None:
    start_with_env(daemon, {"NMEM_READ_TIMEOUT_S": "1"})
    assert daemon.proc is not None
    replies: dict[bytes, int] = {}

    @settings(
        max_examples=100,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(frame=_frames, abrupt=st.booleans())
    def one(frame: bytes, abrupt: bool) -> None:
        with connect(daemon.socket, timeout=10) as s:
            try:
                s.sendall(frame)
                if abrupt:
                    s.close()  # disconnect at once: truncated frame plus disconnect
                else:
                    s.shutdown(socket.SHUT_WR)
                    reply = b""
                    while chunk := s.recv(65536):
                        reply += chunk
                    head = b" ".join(reply.split(b"\n", 1)[0].split(b" ")[:2]) if reply else b"(closed)"
                    head = b"OK" if head.startswith(b"OK ") else head
                    replies[head] = replies.get(head, 0) + 1
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon refused early and closed: fine
        assert daemon.proc is not None and daemon.proc.poll() is None, f"nmemd died on {frame!r}"
        assert ping(daemon.socket, timeout=5) is not None, f"no ping answer after {frame!r}"

    one()
    print(f"fuzz: replies to frames read to the end: {replies}")
    assert daemon.proc.poll() is None and ping(daemon.socket) is not None
    assert daemon.stop() == 0
    integrity_ok(daemon.db)
    dup = db_rows(daemon.db, "SELECT count(*) - count(DISTINCT event_id) FROM events")[0][0]
    assert dup == 0


# --- 5. schema migrations (the databases of earlier versions: support/earlier_stores.py) ---------


@pytest.mark.reliability(scenario=12)
@pytest.mark.timeout(30)
@pytest.mark.parametrize(("name", "build", "applied_before"), EARLIER_VERSIONS, ids=[v[0] for v in EARLIER_VERSIONS])
def test_daemon_migrates_earlier_databases_without_loss(
    daemon: Daemon, name: str, build: Callable[[Path], set[str]], applied_before: tuple[str, ...]
) -> None:
    markers = build(daemon.home)
    before_applied = {r[0] for r in db_rows(daemon.db, "SELECT name FROM sqlite_master WHERE name='schema_migrations'")}
    if applied_before:
        assert before_applied
        assert {r[0] for r in db_rows(daemon.db, "SELECT name FROM schema_migrations")} == set(applied_before)
    before_obs = count(daemon.db, "observations")
    daemon.start()
    wait_until(lambda: count(daemon.db, "inbox") == 0, 15, f"{name}: inbox drained")
    assert daemon.stop() == 0
    assert {r[0] for r in db_rows(daemon.db, "SELECT name FROM schema_migrations")} == {m for m, _ in MIGRATIONS}
    assert count(daemon.db, "events") == len(markers)
    assert count(daemon.db, "observations") == len(markers) >= before_obs
    assert_exactly_once(daemon.db, markers, "mg-")
    # Rows indexed before and after the upgrade are all found, once each.
    hits = db_rows(daemon.db, "SELECT rowid FROM observations_fts WHERE observations_fts MATCH 'remember marker'")
    assert len(hits) == len({h[0] for h in hits}) == len(markers)
