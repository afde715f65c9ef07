"""The extraction worker: the same answers as the event loop, and nothing lost when it dies.

The worker is a real `python -m nmemd.capture.extract_worker` process; the daemon tests run a real
nmemd and kill its real worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from support.checks import BAD_BODIES, check_worker_agrees
from support.daemon import Daemon
from support.db import integrity_ok
from support.fixtures import hook_payloads
from support.helpers import (
    connect,
    count,
    log_text,
    new_id,
    payload,
    pid_running,
    ping,
    read_reply,
    send_hook,
    wait_until,
)

from nmem_client import protocol
from nmemd.capture.extract_worker import OK, REPLY, REQUEST


def test_the_worker_extracts_every_fixture_exactly_as_the_loop_does() -> None:
    check_worker_agrees([json.dumps(p).encode() for _, p in hook_payloads()])


def test_the_worker_reads_requests_split_anywhere() -> None:
    """Pipe reads cut frames at any byte: a request split across reads is answered whole."""
    body = json.dumps(next(p for _, p in hook_payloads())).encode()
    frame = REQUEST.pack(len(body), 7) + body
    argv = [sys.executable, "-P", "-m", "nmemd.capture.extract_worker"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert proc.stdout.read(REPLY.size) == REPLY.pack(0, 0, OK)
            for i in range(0, len(frame), 5):  # one write per 5 bytes, flushed: many reads
                proc.stdin.write(frame[i : i + 5])
                proc.stdin.flush()
            proc.stdin.close()
            out = proc.stdout.read()
        finally:
            proc.wait(timeout=30)
    length, seq, status = REPLY.unpack_from(out)
    assert (seq, status) == (7, OK) and len(out) == REPLY.size + length
    assert proc.returncode == 0


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the worker's memory map (Linux)")
def test_the_worker_extracts_every_fixture_without_loading_openssl() -> None:
    """hashlib loads OpenSSL's libcrypto (3.6 MB of a process's memory) to offer its algorithms; the
    worker hashes with blake2b alone, CPython's own, and keeps every one of its answers (above)."""
    bodies = [json.dumps(p).encode() for _, p in hook_payloads()]
    argv = [sys.executable, "-P", "-m", "nmemd.capture.extract_worker"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(b"".join(REQUEST.pack(len(b), seq) + b for seq, b in enumerate(bodies, start=1)))
            proc.stdin.flush()
            for _ in range(len(bodies) + 1):  # the hello, then one reply each
                length, _seq, status = REPLY.unpack(proc.stdout.read(REPLY.size))
                assert status == OK
                proc.stdout.read(length)
            mapped = Path(f"/proc/{proc.pid}/maps").read_text()
            proc.stdin.close()
        finally:
            proc.wait(timeout=30)
    assert "libcrypto" not in mapped and "_hashlib" not in mapped


# --- inside the daemon --------------------------------------------------------------------------


def worker_facts(sock: str) -> dict[str, Any] | None:
    facts = ping(sock)
    return facts["worker"] if facts else None


def ready_worker(sock: str, **expect: Any) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        w = worker_facts(sock)
        return w if w and w["ready"] and all(w[k] == v for k, v in expect.items()) else None

    return wait_until(ready, 30, f"the extraction worker to be ready with {expect}")


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def burst(sock: str, bodies: list[bytes], timeout: float = 30.0) -> list[tuple[bytes, bytes]]:
    """Every frame written on its own connection before any reply is read: the daemon finds them
    together, extracts the first itself and hands the rest to the worker (they wait on a batch)."""
    conns = [connect(sock, timeout) for _ in bodies]
    try:
        for c, body in zip(conns, bodies, strict=True):
            c.sendall(protocol.encode_request(protocol.KIND_HOOK, new_id().encode(), body))
        return [read_reply(c) for c in conns]
    finally:
        for c in conns:
            c.close()


def test_a_worker_killed_under_load_loses_nothing_and_comes_back(daemon: Daemon) -> None:
    daemon.start()
    first = ready_worker(daemon.socket)
    assert first["pid"] in children(daemon.proc.pid)  # type: ignore[union-attr]
    senders, per_sender = 8, 150
    replies: list[bytes] = []
    lock = threading.Lock()
    halfway = threading.Event()

    def send(k: int) -> None:
        for i in range(per_sender):
            status, _ = send_hook(daemon.socket, new_id(), payload(f"wk-{k}-{i}"))
            with lock:
                replies.append(status)
                if len(replies) == senders * per_sender // 3:
                    halfway.set()

    threads = [threading.Thread(target=send, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    assert halfway.wait(60)
    assert worker_facts(daemon.socket)["extracted"] > 0  # type: ignore[index]  # under load the worker extracts
    os.kill(first["pid"], signal.SIGKILL)
    for t in threads:
        t.join(60)
    assert replies == [b"OK"] * (senders * per_sender)  # every event acked, none refused
    again = ready_worker(daemon.socket, restarts=1)
    assert again["pid"] != first["pid"] and again["pid"] in children(daemon.proc.pid)  # type: ignore[union-attr]
    status, _ = send_hook(daemon.socket, new_id(), payload("after-restart"))
    assert status == b"OK"
    assert daemon.stop() == 0
    assert "extraction worker exited" in log_text(daemon.home)
    assert count(daemon.db, "events") == senders * per_sender + 1
    assert count(daemon.db, "events", "session_id LIKE 'wk-%'") == senders * per_sender
    integrity_ok(daemon.db)


@pytest.mark.slow
def test_a_frozen_worker_is_killed_and_its_events_extracted_here(daemon: Daemon) -> None:
    daemon.start()
    frozen = ready_worker(daemon.socket)["pid"]
    os.kill(frozen, signal.SIGSTOP)
    try:
        replies = burst(daemon.socket, [payload(f"frozen-{i}") for i in range(16)])
        assert [status for status, _ in replies] == [b"OK"] * 16  # after the stall limit, extracted here
        again = ready_worker(daemon.socket, restarts=1)
        assert again["pid"] != frozen
        wait_until(lambda: not pid_running(frozen), 10, "the frozen worker to be killed")
    finally:
        if pid_running(frozen):
            os.kill(frozen, signal.SIGKILL)
    assert "answered nothing" in log_text(daemon.home)
    assert send_hook(daemon.socket, new_id(), payload("after"))[0] == b"OK"
    daemon.stop()
    assert count(daemon.db, "events") == 17


def test_refusals_with_the_worker_match_the_loop(daemon: Daemon) -> None:
    daemon.start()
    ready_worker(daemon.socket)
    good = [payload(f"fine-{i}") for i in range(8)]
    replies = burst(daemon.socket, good + BAD_BODIES[:4])
    assert [status for status, _ in replies[:8]] == [b"OK"] * 8
    for status, reason in replies[8:]:
        assert status == b"ERR" and reason.startswith(b"invalid"), reason
    w = ready_worker(daemon.socket)
    assert w["extracted"] > 0 and w["restarts"] == 0
    daemon.stop()
    assert count(daemon.db, "events") == 8


def test_a_lone_event_is_extracted_without_the_pipe_hop(daemon: Daemon) -> None:
    """One event at a time (a hook now and then) is cheaper to extract in the loop."""
    daemon.start()
    ready_worker(daemon.socket)
    for i in range(5):
        assert send_hook(daemon.socket, new_id(), payload(f"lone-{i}"))[0] == b"OK"
    assert ready_worker(daemon.socket)["extracted"] == 0
    daemon.stop()
    assert count(daemon.db, "events") == 5


def test_the_worker_ends_with_its_daemon_even_on_kill9(daemon: Daemon) -> None:
    daemon.start()
    pid = ready_worker(daemon.socket)["pid"]
    daemon.kill()
    wait_until(lambda: not pid_running(pid), 10, "the orphaned worker to see EOF and exit")


def test_sigterm_stops_the_worker_with_the_daemon(daemon: Daemon) -> None:
    daemon.start()
    pid = ready_worker(daemon.socket)["pid"]
    assert daemon.stop() == 0
    assert not pid_running(pid)


@pytest.mark.parametrize("value", ["0", "false"])
def test_extract_worker_off_extracts_in_the_loop(daemon: Daemon, value: str) -> None:
    daemon.env["NMEM_EXTRACT_WORKER"] = value
    daemon.start()
    assert send_hook(daemon.socket, new_id(), payload("no-worker"))[0] == b"OK"
    facts = ping(daemon.socket)
    assert facts is not None and facts["worker"] is None
    assert children(daemon.proc.pid) == []  # type: ignore[union-attr]
    daemon.stop()
    assert count(daemon.db, "events") == 1
