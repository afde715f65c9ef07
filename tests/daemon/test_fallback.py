"""The hook client's fallback paths: inbox table, spool files, autostart, and exactly-once across them."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.helpers import (
    count,
    daemon_processes,
    kill_all,
    lock_path,
    lock_pid,
    log_text,
    new_id,
    payload,
    pid_running,
    ping,
    send_hook,
    wait_until,
)

from nmem_client import inbox

NO_AUTOSTART = {"NMEM_AUTOSTART": "0"}
FAST_DRAIN = "0.2"


def _marker(tag: str) -> str:
    return f"{tag}-{new_id()[:12]}"


def _stored(db: Path, marker: str) -> int:
    return count(db, "events", "session_id = ?", (marker,))


def _send_ok(data: bytes, env: dict[str, str] | None = None) -> None:
    done = run_send(data, env=env)
    assert done.returncode == 0
    assert done.stderr == b""


@pytest.fixture
def no_stray_daemons(nmem_env: dict[str, str]) -> Iterator[None]:
    """Whatever happens in the test, no nmem process started for this NMEM_HOME survives it."""
    yield
    home = nmem_env["NMEM_HOME"]
    leftovers = kill_all(home)
    assert not daemon_processes(home)
    assert leftovers == [], f"processes outlived the test: {leftovers}"


def test_absent_daemon_no_autostart_events_wait_in_inbox_then_drain_once(daemon: Daemon) -> None:
    n = 12
    markers = [_marker("inbox") for _ in range(n)]
    for m in markers:
        _send_ok(payload(m), env=NO_AUTOSTART)

    # Nothing was started: no lock holder, no socket, no daemon process.
    assert lock_pid(daemon.socket) is None
    assert not os.path.exists(daemon.socket)
    assert daemon_processes(daemon.home) == []
    rows = db_rows(daemon.db, "SELECT event_id, payload FROM inbox")
    assert len(rows) == n
    ids = {r[0] for r in rows}
    assert len(ids) == n and all(len(i) == 32 for i in ids)

    daemon.start()
    wait_until(lambda: count(daemon.db, "inbox") == 0, 10, "inbox drained")
    assert count(daemon.db, "events") == n
    assert {r[0] for r in db_rows(daemon.db, "SELECT event_id FROM events")} == ids
    for m in markers:
        assert _stored(daemon.db, m) == 1
    integrity_ok(daemon.db)

    # A restart drains nothing twice.
    daemon.stop()
    daemon.start()
    assert ping(daemon.socket) is not None
    assert count(daemon.db, "events") == n
    integrity_ok(daemon.db)


@pytest.mark.timeout(60)
def test_absent_daemon_autostart_starts_one_daemon(nmem_env: dict[str, str], no_stray_daemons: None) -> None:
    home = Path(nmem_env["NMEM_HOME"])
    sock = nmem_env["NMEM_SOCKET"]
    db = home / "nmem.db"
    assert lock_pid(sock) is None

    # Several hooks fire at once with no daemon: each falls back, and together they start exactly one.
    first = [_marker("auto") for _ in range(4)]
    with ThreadPoolExecutor(len(first)) as pool:
        list(pool.map(lambda m: _send_ok(payload(m)), first))

    pid = wait_until(lambda: (p := lock_pid(sock)) and p > 0 and p, 20, "an autostarted daemon to take the lock")
    facts = wait_until(lambda: ping(sock), 20, "the autostarted daemon to answer")
    assert facts["pid"] == pid
    assert facts["started_by"] == "client"
    with open(lock_path(sock)) as f:
        assert int(f.read().strip()) == pid
    # Concurrent starters lost the flock and exited: one daemon for this home.
    wait_until(lambda: daemon_processes(home) == [pid], 20, "losing daemons to exit")

    # The fallen-back events are drained; later events go straight to the daemon.
    later = [_marker("auto-live") for _ in range(4)]
    for m in later:
        _send_ok(payload(m))
    wait_until(
        lambda: count(db, "inbox") == 0 and count(db, "events") == len(first) + len(later), 15, "every event stored"
    )
    for m in first + later:
        assert _stored(db, m) == 1
    integrity_ok(db)

    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: lock_pid(sock) is None and not pid_running(pid), 20, "the autostarted daemon to stop")
    assert not os.path.exists(sock)
    assert "started by client" in log_text(home)


def test_same_event_id_through_socket_and_inbox_is_stored_once(daemon: Daemon) -> None:
    daemon.env["NMEM_INBOX_DRAIN_INTERVAL_S"] = FAST_DRAIN
    daemon.start()

    # Socket first, then the inbox: the drain finds the id in the ledger and only deletes the row.
    m1, x = _marker("both"), new_id()
    body = payload(m1)
    assert send_hook(daemon.socket, x, body)[0] == b"OK"
    assert inbox.store(x, body) == "inbox"
    wait_until(lambda: count(daemon.db, "inbox") == 0, 10, "inbox drained")
    assert count(daemon.db, "events", "event_id = ?", (x,)) == 1
    assert _stored(daemon.db, m1) == 1
    assert count(daemon.db, "observations", "session_id = ?", (m1,)) == 1

    # Inbox first (drained), then the socket: the daemon acknowledges the retry and stores nothing new.
    m2, y = _marker("both"), new_id()
    body = payload(m2)
    assert inbox.store(y, body) == "inbox"
    wait_until(lambda: _stored(daemon.db, m2) == 1 and count(daemon.db, "inbox") == 0, 10, "inbox drained")
    assert send_hook(daemon.socket, y, body)[0] == b"OK"
    assert count(daemon.db, "events", "event_id = ?", (y,)) == 1
    assert count(daemon.db, "observations", "session_id = ?", (m2,)) == 1

    # Both at once, racing, many times over; plus a repeated inbox write (a no-op by primary key).
    racers = {new_id(): _marker("race") for _ in range(30)}

    def both_paths(item: tuple[str, str]) -> None:
        eid, m = item
        data = payload(m)
        assert inbox.store(eid, data) == "inbox"
        assert send_hook(daemon.socket, eid, data)[0] == b"OK"
        assert inbox.store(eid, data) == "inbox"

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(both_paths, racers.items()))
    wait_until(lambda: count(daemon.db, "inbox") == 0, 10, "inbox drained")
    for eid, m in racers.items():
        assert count(daemon.db, "events", "event_id = ?", (eid,)) == 1
        assert count(daemon.db, "observations", "session_id = ?", (m,)) == 1
    assert count(daemon.db, "events") == 2 + len(racers)
    integrity_ok(daemon.db)


def test_spool_files_are_drained_and_removed(daemon: Daemon) -> None:
    spool = daemon.home / "spool"
    # Spooled before the daemon starts: drained at start.
    early = {new_id(): _marker("spool") for _ in range(3)}
    for eid, m in early.items():
        inbox.spool(eid, payload(m))
    assert sorted(p.name for p in spool.iterdir()) == sorted(f"{e}.event" for e in early)

    daemon.env["NMEM_INBOX_DRAIN_INTERVAL_S"] = FAST_DRAIN
    daemon.start()
    wait_until(lambda: not any(spool.glob("*.event")), 10, "spool drained at start")
    for eid, m in early.items():
        assert count(daemon.db, "events", "event_id = ?", (eid,)) == 1
        assert _stored(daemon.db, m) == 1

    # Spooled while it runs (the client's path when SQLite is locked): drained periodically.
    # One of them also reached the daemon and the inbox under the same id: still stored once.
    late = {new_id(): _marker("spool") for _ in range(3)}
    dup_id = next(iter(late))
    assert send_hook(daemon.socket, dup_id, payload(late[dup_id]))[0] == b"OK"
    assert inbox.store(dup_id, payload(late[dup_id])) == "inbox"
    for eid, m in late.items():
        inbox.spool(eid, payload(m))
    # An invalid spooled file is dropped (and logged), not retried forever.
    bad = new_id()
    inbox.spool(bad, b"{not json")
    wait_until(lambda: not any(spool.glob("*.event")) and count(daemon.db, "inbox") == 0, 10, "spool drained")
    for eid, m in late.items():
        assert count(daemon.db, "events", "event_id = ?", (eid,)) == 1
        assert _stored(daemon.db, m) == 1
    assert count(daemon.db, "events", "event_id = ?", (bad,)) == 0
    assert count(daemon.db, "events") == len(early) + len(late)
    assert bad in log_text(daemon.home)
    assert not any(spool.iterdir()), "no temp files left"
    integrity_ok(daemon.db)


@pytest.mark.parametrize("reply", [b"OK xyz\n", b"HELLO\n", b"OK 10\nshort"])
def test_a_malformed_reply_makes_the_client_fall_back(nmem_env: dict[str, str], reply: bytes) -> None:
    """Whatever answers on the socket, an event without a proper ack goes to the inbox, silently."""
    import socket
    import threading

    os.makedirs(os.path.dirname(nmem_env["NMEM_SOCKET"]), exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(nmem_env["NMEM_SOCKET"])
    server.listen(1)
    server.settimeout(30)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(reply)  # and close: "OK 10" promised more than it sent

    thread = threading.Thread(target=answer)
    thread.start()
    marker = _marker("malformed")
    try:
        done = run_send(b'{"session_id": "%s", "hook_event_name": "Stop"}' % marker.encode(),
                        {**NO_AUTOSTART, "NMEM_TIMEOUT_MS": "2000"})  # fmt: skip
    finally:
        thread.join(30)
        server.close()
    assert done.returncode == 0 and done.stderr == b"" and done.stdout == b""
    assert db_rows(Path(nmem_env["NMEM_HOME"]) / "nmem.db", "SELECT count(*) FROM inbox") == [(1,)]


def test_an_unreadable_spool_is_logged_and_capture_goes_on(daemon: Daemon) -> None:
    """A drain that fails with an OSError (here the spool is a file; out of descriptors in
    RELIABILITY scenario 6) is retried at the next interval; the daemon keeps serving."""
    daemon.home.mkdir(parents=True, exist_ok=True)
    (daemon.home / "spool").write_text("not a directory")
    daemon.env["NMEM_INBOX_DRAIN_INTERVAL_S"] = FAST_DRAIN
    daemon.start()
    wait_until(lambda: log_text(daemon.home).count("inbox drain failed, will retry") >= 2, 10, "two failed drains")
    assert ping(daemon.socket) is not None
    assert send_hook(daemon.socket, new_id(), payload(_marker("spool")))[0] == b"OK"
    assert daemon.stop() == 0
    assert count(daemon.db, "events") == 1
