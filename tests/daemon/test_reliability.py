"""Issue #5: the fault-injection suite, one scenario function per gap, the same code at two sizes.

Each `scenario_N(...)` drives real parts (nmemd subprocesses, real sockets, the real hook
client as `python -I -S send.py` or its own wire code in-process, real SQLite files),
then accounts for every event a client sent and returns `Figures`: events sent,
stored, lost, duplicated, how the clients fared (acked, fell back) and their wall times
against their timeout, plus `violations` -- the pass criteria that failed. The tests
below run each scenario bounded (scale 1, CI) and assert `violations == []`;
`bench/bench_reliability.py` runs the same functions at a larger scale and prints
the figures (RELIABILITY.md). Sizes grow with `NMEM_RELIABILITY_SCALE` (default 1).

After every scenario (`Figures.account`): `PRAGMA integrity_check`, the FTS5
`integrity-check`, no duplicate `event_id`, and every marker a client sent present
exactly once in the events ledger (each event carries its own marker as session_id).

Every test of a scenario carries `@pytest.mark.reliability(scenario=N)`, here and where the earlier
tests of a scenario live (1 test_killrecovery, 3 and 11 and 12 test_faults, 6 test_badinput,
test_faults and test_extract, 7 and 8 test_instance, 10 test_privacy);
tests/unit/test_suite.py fails when a scenario of RELIABILITY.md has none.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pwd
import random
import resource
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.daemon import READY_TIMEOUT_S, Daemon, run_send
from support.db import db_rows, integrity_ok
from support.env import BIN, SEND_SCRIPT
from support.helpers import (
    connect,
    count,
    kill_all,
    lock_pid,
    log_text,
    new_id,
    payload,
    pid_running,
    ping,
    prompt_event,
    raw_hook_exchange,
    read_reply,
    send_frame,
    umask_kept,
    wait_until,
)

from nmem_client import inbox, protocol
from nmem_client.hook import deliver
from nmemd.control import control
from nmemd.errors import DaemonUnavailable

SCALE_ENV = "NMEM_RELIABILITY_SCALE"
pytestmark = pytest.mark.reliability


def scale_from_env() -> float:
    try:
        return max(float(os.environ.get(SCALE_ENV, "1")), 0.01)
    except ValueError:
        return 1.0


def scaled(n: float, scale: float, cap: int | None = None, minimum: int = 1) -> int:
    value = max(minimum, round(n * scale))
    return min(value, cap) if cap else value


# --- figures and the invariants checked after every scenario -----------------------------------


@dataclass
class Figures:
    """What one scenario run did; `violations` lists the pass criteria that failed."""

    scenario: int
    name: str
    scale: float = 1.0
    sent: int = 0
    stored: int = 0
    lost: int = 0
    duplicated: int = 0
    acked: int = 0
    real_clients: int = 0  # sends through the real client script (outcome not visible: it exits 0)
    fell_back: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)  # ERR replies by code (retryable or not)
    latencies: list[float] = field(default_factory=list)
    timeout_s: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def check(self, ok: object, message: str) -> bool:
        if not ok:
            self.violations.append(message)
        return bool(ok)

    def client_done(self, outcome: str, wall: float, code: str = "") -> None:
        """Record one send: outcome "acked", "real" (the client script), "refused" (for good), or where
        it fell back ("inbox", "spool", "lost"); `code` is the daemon's ERR code, if it sent one."""
        with self.lock:
            self.latencies.append(wall)
            if code:
                self.refused[code] = self.refused.get(code, 0) + 1
            if outcome == "acked":
                self.acked += 1
            elif outcome == "real":
                self.real_clients += 1
            elif outcome != "refused":
                self.fell_back[outcome] = self.fell_back.get(outcome, 0) + 1

    def account(self, db: Path, expected: set[str], prefix: str, *, observations: bool = True) -> None:
        """Every expected marker stored exactly once under `prefix`; integrity checks; no dup event_id."""
        rows = db_rows(
            db, "SELECT session_id, count(*) FROM events WHERE session_id LIKE ? GROUP BY session_id", (prefix + "%",)
        )
        stored = {str(r[0]): int(r[1]) for r in rows}  # type: ignore[call-overload]
        self.sent = len(expected)
        self.stored = len(expected & set(stored))
        self.lost = len(expected - set(stored))
        self.duplicated = sum(c - 1 for c in stored.values() if c > 1)
        extra = set(stored) - expected
        self.check(self.lost == 0, f"{self.lost} events lost, e.g. {sorted(expected - set(stored))[:3]}")
        self.check(self.duplicated == 0, f"{self.duplicated} events stored more than once")
        self.check(not extra, f"unexpected events stored: {sorted(extra)[:3]}")
        if observations:
            obs = dict(
                db_rows(
                    db,
                    "SELECT session_id, count(*) FROM observations WHERE session_id LIKE ? GROUP BY session_id",
                    (prefix + "%",),
                )
            )
            wrong = {m: obs.get(m) for m in expected if obs.get(m) != 1}
            self.check(not wrong, f"{len(wrong)} events without exactly one observation, e.g. {list(wrong)[:3]}")
        try:
            integrity_ok(db)  # integrity_check, FTS5 integrity-check (rank 1), no duplicate event_id
        except (AssertionError, sqlite3.Error) as exc:
            self.violations.append(f"integrity check failed: {exc!r}")

    def latency(self) -> dict[str, float]:
        data = sorted(self.latencies)
        if not data:
            return {}

        def pct(q: float) -> float:
            return data[min(len(data) - 1, round((len(data) - 1) * q / 100))]

        return {"p50": pct(50), "p99": pct(99), "max": data[-1]}

    def lines(self) -> list[str]:
        lat = self.latency()
        out = [
            f"scenario {self.scenario}: {self.name} (scale {self.scale:g})",
            f"  events sent {self.sent}, stored {self.stored}, lost {self.lost}, duplicated {self.duplicated}",
        ]
        if self.acked or self.fell_back or self.refused or self.real_clients:
            real = f"; {self.real_clients} sends through the real client script" if self.real_clients else ""
            out.append(
                f"  in-process clients: acked {self.acked}, fell back {self.fell_back or 0},"
                f" ERR replies {self.refused or 0}{real}"
            )
        if lat:
            bound = f" (client timeout {self.timeout_s * 1000:.0f} ms)" if self.timeout_s else ""
            out.append(
                f"  client wall time: p50 {lat['p50'] * 1000:.1f} ms, p99 {lat['p99'] * 1000:.1f} ms,"
                f" max {lat['max'] * 1000:.1f} ms over {len(self.latencies)} sends{bound}"
            )
        for key, value in self.notes.items():
            out.append(f"  {key}: {value}")
        out.append("  PASS" if not self.violations else "  FAIL: " + "; ".join(self.violations))
        return out


# --- clients ---------------------------------------------------------------------------------


def send_in_process(marker: str, timeout_s: float, body: bytes | None = None) -> tuple[str, float, str, str]:
    """`hook.run` minus stdin: deliver within the timeout, else the inbox under the same event_id.

    Returns (outcome, wall seconds, event_id, the daemon's error code or "");
    outcome as in `Figures.client_done`.
    """
    event_id = new_id()
    body = payload(marker) if body is None else body
    started = time.monotonic()
    try:
        status, reply = deliver(protocol.KIND_HOOK, event_id.encode(), body, timeout_s)
    except OSError:
        status, reply = b"", b""
    code = reply.split(b" ", 1)[0].decode(errors="replace") if status == b"ERR" else ""
    if status == b"OK":
        return "acked", time.monotonic() - started, event_id, code
    if status == b"ERR" and reply.split(b" ", 1)[0] not in protocol.RETRYABLE:
        return "refused", time.monotonic() - started, event_id, code
    where = inbox.store(event_id, body)
    return where, time.monotonic() - started, event_id, code


def send_subprocess(body: bytes, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[bytes], float]:
    """The real hook client, one process, exactly as installed hooks run it."""
    started = time.monotonic()
    done = run_send(body, env=env, timeout=60)
    return done, time.monotonic() - started


def client_problem(done: subprocess.CompletedProcess[bytes]) -> str | None:
    if done.returncode != 0 or done.stderr:
        return f"rc={done.returncode} stderr={done.stderr[-300:]!r}"
    return None


def backlog(home: Path, db: Path) -> int:
    """Events still waiting for the daemon: inbox rows plus spool files."""
    spool = home / "spool"
    spooled = sum(1 for _ in spool.glob("*.event")) if spool.exists() else 0
    return count(db, "inbox") + spooled


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start_with_env(daemon: Daemon, extra: dict[str, str]) -> subprocess.Popen[bytes]:
    daemon.env = {**daemon.env, **extra}
    return daemon.start()


# --- 2. commit, then death before the reply ----------------------------------------------------

SESSION_START_TIMEOUT_MS = 2000


def session_start(marker: str, cwd: str) -> bytes:
    return json.dumps(
        {
            "session_id": marker,
            "transcript_path": f"{cwd}/.claude/{marker}.jsonl",
            "cwd": cwd,
            "hook_event_name": "SessionStart",
            "source": "startup",
        }
    ).encode()


def _seed_project(daemon: Daemon, cwd: str, n: int) -> None:
    """Give the project history, so SessionStart's context (built after the commit) takes a moment."""
    with connect(daemon.socket) as s:
        for i in range(n):
            event = prompt_event(f"seed-{i:04d}", cwd=cwd)
            event["prompt"] = f"seed prompt {i} about module_{i % 37} and file src/part_{i}.py"
            s.sendall(protocol.encode_request(protocol.KIND_HOOK, new_id().encode(), json.dumps(event).encode()))
            assert read_reply(s)[0] == b"OK"


def scenario_2(daemon: Daemon, scale: float = 1.0) -> Figures:
    """The daemon commits a SessionStart, then is SIGKILLed before its reply (the context is
    built after the commit); the real client falls back with the same event_id."""
    fig = Figures(2, "commit, then kill -9 before the reply; client falls back with the same event_id", scale)
    fig.timeout_s = SESSION_START_TIMEOUT_MS / 1000
    trials = scaled(3, scale)
    cwd = "/tmp/nmem-rel-s2"
    env = {"NMEM_AUTOSTART": "0", "NMEM_TIMEOUT_MS": str(SESSION_START_TIMEOUT_MS)}
    daemon.start()
    _seed_project(daemon, cwd, 300)
    expected: set[str] = set()
    hits = attempts = 0
    same_id = 0
    while hits < trials and attempts < trials * 10:
        attempts += 1
        marker = f"s2-{attempts:04d}"
        expected.add(marker)
        assert daemon.proc is not None
        proc = daemon.proc
        result: dict[str, Any] = {}

        def client(marker: str = marker, result: dict[str, Any] = result) -> None:
            result["done"], result["wall"] = send_subprocess(session_start(marker, cwd), env)

        thread = threading.Thread(target=client)
        thread.start()
        conn = sqlite3.connect(f"file:{daemon.db}?mode=ro", uri=True, timeout=5)
        try:
            deadline = time.monotonic() + 20
            committed = False
            while time.monotonic() < deadline and thread.is_alive():  # a tight poll: the window is ms wide
                if conn.execute("SELECT 1 FROM events WHERE session_id = ?", (marker,)).fetchone():
                    committed = True
                    break
        finally:
            conn.close()
        if committed:
            proc.kill()  # committed; its reply is still being built on a reader thread
        thread.join(60)
        if not committed:
            proc.kill()
        proc.wait(30)
        if proc.stderr:
            proc.stderr.close()
        done = result["done"]
        fig.latencies.append(result["wall"])
        problem = client_problem(done)
        fig.check(problem is None, f"{marker}: client {problem}")
        replied = done.stdout != b""  # a SessionStart reply carries the context
        fig.acked += replied
        ledger_ids = {r[0] for r in db_rows(daemon.db, "SELECT event_id FROM events WHERE session_id = ?", (marker,))}
        inbox_ids = {r[0] for r in db_rows(daemon.db, "SELECT event_id FROM inbox")}
        if committed and not replied:
            hits += 1
            fig.fell_back["inbox"] = fig.fell_back.get("inbox", 0) + len(ledger_ids & inbox_ids)
            same_id += bool(ledger_ids and ledger_ids <= inbox_ids)
        daemon.start()  # drains the inbox: the ledger already has the id, so only the row goes
        wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 20, "inbox drained")
    fig.notes["trials"] = f"{attempts} kills, {hits} landed after the commit and before the reply"
    fig.check(hits >= trials, f"only {hits} of {attempts} kills landed between commit and reply")
    fig.check(same_id == hits, f"only {same_id} of {hits} fallbacks carried the committed event_id")
    daemon.stop()
    fig.account(daemon.db, expected, "s2-")
    return fig


@pytest.mark.reliability(scenario=2)
def test_scenario_2_commit_then_death_before_reply(daemon: Daemon) -> None:
    fig = scenario_2(daemon, scale_from_env())
    print("\n".join(fig.lines()))
    assert fig.violations == []


# --- 4. 200 concurrent clients x 50 events, the daemon killed half-way -------------------------

CLIENT_TIMEOUT_MS = 500


def scenario_4(daemon: Daemon, scale: float = 1.0, subprocess_every: int = 5) -> Figures:
    """Concurrent clients (threads; every `subprocess_every`-th event through the real client
    script with autostart on, the others in-process); SIGKILL of the daemon at half the events.
    A client started a new daemon; every event lands once; "database is locked" reaches nobody."""
    clients = scaled(40, scale, cap=200)
    per_client = scaled(10, scale, cap=50)
    fig = Figures(4, f"{clients} concurrent clients x {per_client} events, kill -9 half-way", scale)
    fig.timeout_s = CLIENT_TIMEOUT_MS / 1000
    env = {"NMEM_TIMEOUT_MS": str(CLIENT_TIMEOUT_MS)}  # autostart on: the clients bring a daemon back
    total = clients * per_client
    daemon.start()
    killed = threading.Event()
    sent = [0]
    problems: list[str] = []
    lock = threading.Lock()

    def client(c: int) -> None:
        for n in range(per_client):
            marker = f"s4-c{c:03d}-e{n:03d}"
            if n % subprocess_every == 0:
                done, wall = send_subprocess(payload(marker), env)
                problem = client_problem(done)
                if problem:
                    with lock:
                        problems.append(f"{marker}: {problem}")
                fig.client_done("real", wall)
            else:
                outcome, wall, _, code = send_in_process(marker, CLIENT_TIMEOUT_MS / 1000)
                fig.client_done(outcome, wall, code)
            with lock:
                sent[0] += 1

    def killer() -> None:
        wait_until(lambda: sent[0] >= total // 2, 300, "half the events sent")
        fig.notes["killed after"] = f"{sent[0]}/{total} events"
        daemon.kill()
        killed.set()

    with umask_kept(), ThreadPoolExecutor(clients + 1) as pool:
        kill = pool.submit(killer)
        futures = [pool.submit(client, c) for c in range(clients)]
        for f in futures:
            f.result(timeout=900)
        kill.result(timeout=30)
    try:
        fig.check(killed.is_set(), "the daemon was not killed")
        # Clients that found no daemon started one (exactly one survives the flock).
        pid = wait_until(lambda: (p := lock_pid(daemon.socket)) and p > 0 and p, 30, "an autostarted daemon")
        wait_until(lambda: ping(daemon.socket), 30, "the autostarted daemon to answer")
        wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 120, "inbox and spool drained")
        fig.notes["restarted by"] = f"a client (pid {pid}, started_by={(ping(daemon.socket) or {}).get('started_by')})"
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not pid_running(pid), 30, "the autostarted daemon to stop")
    finally:
        kill_all(daemon.home)
    fig.notes["subprocess clients with a non-empty stderr or rc != 0"] = len(problems)
    fig.check(not problems, f"real clients complained: {problems[:3]}")
    fig.check("lost" not in fig.fell_back, f"{fig.fell_back.get('lost')} in-process events lost by the fallback")
    locked = [line for line in log_text(daemon.home).splitlines() if "locked" in line.lower()]
    fig.notes['"database is locked" in the daemon log'] = len(locked)
    fig.check(not locked, f"the daemon log mentions a lock: {locked[:2]}")
    expected = {f"s4-c{c:03d}-e{n:03d}" for c in range(clients) for n in range(per_client)}
    fig.account(daemon.db, expected, "s4-")
    return fig


@pytest.mark.slow
@pytest.mark.reliability(scenario=4)
@pytest.mark.timeout(120)
def test_scenario_4_concurrent_clients_daemon_killed_half_way(daemon: Daemon) -> None:
    fig = scenario_4(daemon, scale_from_env())
    print("\n".join(fig.lines()))
    assert fig.violations == []


# --- 5. disk full, then space comes back: recovery without a restart ----------------------------

DRAIN_FAST = {"NMEM_INBOX_DRAIN_INTERVAL_S": "0.3"}


def start_soft_limited(daemon: Daemon, limit: int) -> subprocess.Popen[bytes]:
    """`Daemon.start`, with nmemd under a soft RLIMIT_FSIZE=limit (the hard one stays unlimited, so
    the limit can be lifted on the running daemon: raising a hard limit needs CAP_SYS_RESOURCE)."""
    return daemon.start(rlimits={"RLIMIT_FSIZE": (limit, resource.RLIM_INFINITY)})


def _serving_lines(home: Path) -> int:
    return sum(" serving " in line for line in log_text(home).splitlines())


def scenario_5(daemon: Daemon, scale: float = 1.0) -> Figures:
    """The daemon runs under RLIMIT_FSIZE (EFBIG, as a full disk) until it refuses; then the limit
    is lifted on the running process (prlimit): space is back. Same process, no restart: new
    events are acknowledged and everything that fell back meanwhile is drained, once."""
    from support.helpers import big_payload

    fig = Figures(5, "disk full (RLIMIT_FSIZE), then space returns to the running daemon", scale)
    fig.timeout_s = 5.0
    refusals_wanted = scaled(10, scale)
    daemon.env = {**daemon.env, **DRAIN_FAST}
    daemon.start()
    assert daemon.stop() == 0
    limit = max(os.path.getsize(daemon.db), 64 * 1024) + 256 * 1024
    proc = start_soft_limited(daemon, limit)
    serving_before = _serving_lines(daemon.home)
    rng = random.Random(5)
    markers: set[str] = set()
    acked: list[str] = []
    refusals = n = 0
    while refusals < refusals_wanted and n < scaled(2000, scale):
        marker = f"s5-full-{n:05d}"
        n += 1
        markers.add(marker)
        outcome, wall, _, code = send_in_process(marker, fig.timeout_s, big_payload(marker, rng))
        fig.client_done(outcome, wall, code)
        if outcome == "acked":
            acked.append(marker)
        else:
            refusals += 1
    for k in range(3):  # real hook clients while the disk is full: they fall back, silently
        marker = f"s5-real-{k}"
        markers.add(marker)
        done, wall = send_subprocess(big_payload(marker, rng), {"NMEM_AUTOSTART": "0"})
        fig.client_done("real", wall)
        problem = client_problem(done)
        fig.check(problem is None, f"real client while full: {problem}")
    facts = ping(daemon.socket) or {}
    fig.notes["while full"] = (
        f"{n} sent, {len(acked)} acked, {refusals} refused; daemon last_error={str(facts.get('last_error'))[:60]!r}"
    )
    fig.check(refusals >= refusals_wanted, f"the daemon never refused ({n} events of ~4 KB, limit {limit} B)")
    fig.check(set(fig.refused) <= {"storage_full"}, f"unclear refusals: {fig.refused}")
    stored_now = {str(r[0]) for r in db_rows(daemon.db, "SELECT session_id FROM events WHERE session_id LIKE 's5-%'")}
    fig.check(not [m for m in acked if m not in stored_now], "an acknowledged event is not in the database")
    fig.check("not committed" in log_text(daemon.home), "the storage failure was not logged")

    # Space returns: lift the limit on the running daemon.
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    recovered_at = time.monotonic()
    after: list[str] = []
    for k in range(scaled(20, scale)):
        marker = f"s5-after-{k:04d}"
        markers.add(marker)
        outcome, wall, _, code = send_in_process(marker, fig.timeout_s, big_payload(marker, rng))
        fig.client_done(outcome, wall, code)
        after.append(outcome)
    wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 30, "inbox and spool drained once space returned")
    fig.notes["after space returned"] = (
        f"{after.count('acked')}/{len(after)} acked at once; backlog drained"
        f" {time.monotonic() - recovered_at:.1f} s after the limit was lifted"
    )
    fig.check(after.count("acked") == len(after), f"not acknowledged after space returned: {after}")
    fig.check(proc.poll() is None, "the daemon exited")
    fig.check(_serving_lines(daemon.home) == serving_before, "the daemon restarted (restart loop)")
    facts = ping(daemon.socket) or {}
    fig.check(facts.get("pid") == proc.pid, "another process answers")
    fig.check(facts.get("last_error") is None, f"last_error still set: {facts.get('last_error')!r}")
    fig.check(daemon.stop() == 0, "nmemd did not exit cleanly")
    fig.account(daemon.db, markers, "s5-")
    return fig


@pytest.mark.reliability(scenario=5)
@pytest.mark.timeout(90)
def test_scenario_5_disk_full_recovers_without_restart(daemon: Daemon, keep_umask: None) -> None:
    fig = scenario_5(daemon, scale_from_env())
    print("\n".join(fig.lines()))
    assert fig.violations == []


# --- 6. thousands of idle connections and slow senders; a health check in parallel ---------------

READ_TIMEOUT_S = 2.0


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _slow_sender(sock_path: str, marker: str, pieces: int, gap_s: float) -> tuple[str, bytes]:
    """A valid hook frame sent in `pieces` pieces `gap_s` apart (within the read timeout); like the
    hook client, it falls back to the inbox under the same id when no OK comes back."""
    event_id, body = new_id(), payload(marker)
    frame = protocol.encode_request(protocol.KIND_HOOK, event_id.encode(), body)
    step = max(1, len(frame) // pieces)
    status, reply = b"", b""
    try:
        with connect(sock_path, timeout=READ_TIMEOUT_S + 10) as s:
            try:
                for start in range(0, len(frame), step):
                    s.sendall(frame[start : start + step])
                    time.sleep(gap_s)  # the fault itself: a sender that dribbles
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused early (e.g. busy): read why
            status, reply = read_reply(s)
    except OSError:
        pass
    if status == b"OK":
        return "acked", b""
    code = reply.split(b" ", 1)[0]
    return inbox.store(event_id, body), code


def _stalled_sender(sock_path: str) -> bytes:
    """Declares a 64 KB frame, sends a part, stalls: the daemon must drop it (ERR timeout, or busy)."""
    try:
        with connect(sock_path, timeout=READ_TIMEOUT_S + 10) as s:
            try:
                s.sendall(b"NMEM1 hook %s 65536\n" % new_id().encode() + b"x" * 1000)
            except (BrokenPipeError, ConnectionResetError):
                pass
            status, reply = read_reply(s)
            return reply.split(b" ", 1)[0] if status == b"ERR" else status
    except ConnectionResetError:
        return b"reset"


def scenario_6(daemon: Daemon, scale: float = 1.0) -> Figures:
    idle_n = scaled(2000, scale, cap=15000)
    slow_n = scaled(40, scale, cap=400)
    fig = Figures(6, f"{idle_n} idle connections, {slow_n} slow and {slow_n} stalled senders, health check", scale)
    fig.timeout_s = CLIENT_TIMEOUT_MS / 1000
    _raise_nofile()
    start_with_env(daemon, {"NMEM_READ_TIMEOUT_S": str(READ_TIMEOUT_S), **DRAIN_FAST})
    assert daemon.proc is not None
    pid = daemon.proc.pid
    rss_start = rss_kb(pid)
    stop = threading.Event()
    health: dict[str, int] = {"ok": 0, "failed": 0}
    health_walls: list[float] = []
    rss_peak = [rss_start]
    markers: set[str] = set()

    def health_check() -> None:
        """`nmem status`'s own ping (nmemd.control.control), which waits out a full listen backlog (EAGAIN)."""
        assert os.environ["NMEM_SOCKET"] == daemon.socket
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                ok = control.ping(timeout=2.0) is not None
            except DaemonUnavailable:
                ok = False
            health_walls.append(time.monotonic() - t0)
            health["ok" if ok else "failed"] += 1
            rss_peak[0] = max(rss_peak[0], rss_kb(pid))
            stop.wait(0.02)

    def hooks() -> None:
        i = 0
        while not stop.is_set():
            marker = f"s6-hook-{i:05d}"
            i += 1
            markers.add(marker)
            outcome, wall, _, code = send_in_process(marker, fig.timeout_s)
            fig.client_done(outcome, wall, code)
            stop.wait(0.02)

    idle: list[socket.socket] = []
    slow_replies: list[tuple[str, bytes]] = []
    stalled_replies: list[bytes] = []
    with umask_kept(), ThreadPoolExecutor(2 + 2 * slow_n) as pool:
        watchers = [pool.submit(health_check), pool.submit(hooks)]
        try:
            # Slow and stalled senders among a few hundred idle peers (under max_connections) ...
            for _ in range(min(idle_n, 500)):
                idle.append(wait_until(lambda: _try_connect(daemon.socket), 30, "the listen backlog to drain"))
            slow_markers = [f"s6-slow-{k:04d}" for k in range(slow_n)]
            markers.update(slow_markers)
            slow = [pool.submit(_slow_sender, daemon.socket, m, 8, READ_TIMEOUT_S / 16) for m in slow_markers]
            stalled = [pool.submit(_stalled_sender, daemon.socket) for _ in range(slow_n)]
            slow_replies = [f.result(timeout=60) for f in slow]
            stalled_replies = [f.result(timeout=60) for f in stalled]
            # ... then thousands of idle connections.
            for _ in range(idle_n - len(idle)):
                idle.append(wait_until(lambda: _try_connect(daemon.socket), 30, "the listen backlog to drain"))
            rss_peak[0] = max(rss_peak[0], rss_kb(pid))
            # The idle connections are dropped at the read timeout; until then they only cost a little.
            heard: dict[socket.socket, bytes] = {}
            wait_until(
                lambda: all(_closed_by_peer(s, heard) for s in idle), READ_TIMEOUT_S + 30, "idle connections dropped"
            )
        finally:
            stop.set()
            for s in idle:
                s.close()
            for f in watchers:
                f.result(timeout=30)
    facts = wait_until(lambda: (f := ping(daemon.socket)) and f["connections"] <= 1 and f, 30, "connections closed")
    rss_end = rss_kb(pid)
    fig.notes["health check"] = (
        f"{health['ok']} passed, {health['failed']} failed; wall max {max(health_walls, default=0) * 1000:.0f} ms"
    )
    fig.notes["daemon VmRSS"] = (
        f"{rss_start / 1024:.0f} MB at start, peak {rss_peak[0] / 1024:.0f} MB, {rss_end / 1024:.0f} MB after"
    )
    slow_ok = sum(r[0] == "acked" for r in slow_replies)
    slow_codes = sorted({r[1].decode() for r in slow_replies if r[1]})
    stalled_codes = {c.decode(): stalled_replies.count(c) for c in set(stalled_replies)}
    stalled_timeouts = sum(c in (protocol.ERR_TIMEOUT, protocol.ERR_BUSY) for c in stalled_replies)
    fig.notes["slow senders"] = (
        f"{slow_ok}/{slow_n} acked, the others refused ({slow_codes}) and fell back"
        f" {dict((o, [r[0] for r in slow_replies].count(o)) for o in ('inbox', 'spool'))};"
        f" stalled senders dropped: {stalled_codes}"
    )
    fig.check(daemon.proc.poll() is None, "the daemon died")
    fig.check(health["failed"] == 0, f"health check failed {health['failed']} times (of {sum(health.values())})")
    fig.check(rss_peak[0] - rss_start < 150 * 1024, f"VmRSS grew by {(rss_peak[0] - rss_start) / 1024:.0f} MB")
    fig.check(all(r[0] in ("acked", "inbox", "spool") for r in slow_replies), f"slow senders: {slow_replies}")
    fig.check(set(slow_codes) <= {"busy"}, f"slow senders refused with {slow_codes}")
    fig.check(stalled_timeouts == slow_n, f"stalled senders: {stalled_codes}")
    fig.check(facts["connections"] <= 1, "connections leaked")
    wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 20, "inbox drained")
    fig.check(daemon.stop() == 0, "nmemd did not exit cleanly")
    fig.account(daemon.db, markers, "s6-")
    return fig


def _try_connect(sock_path: str) -> socket.socket | None:
    """A connection, or None while the listen backlog is full (EAGAIN: the daemon is still accepting)."""
    try:
        return connect(sock_path, timeout=10)
    except BlockingIOError:
        return None


DROPPED_REPLY = protocol.encode_error(protocol.ERR_TIMEOUT, "frame not received in time")


def _closed_by_peer(s: socket.socket, heard: dict[socket.socket, bytes]) -> bool:
    """True once the daemon closed `s` (EOF, or a reset); what it said first must be its `ERR timeout`
    reply or nothing. `heard` keeps what each socket received over the calls of a wait."""
    s.setblocking(False)
    try:
        while chunk := s.recv(65536):
            heard[s] = heard.get(s, b"") + chunk
    except BlockingIOError:
        return False  # still open (a reply may have come, the close not yet)
    except OSError:
        pass  # reset by the daemon: closed
    assert heard.get(s, b"") in (b"", DROPPED_REPLY), heard[s][:200]
    return True


@pytest.mark.slow
@pytest.mark.reliability(scenario=6)
@pytest.mark.timeout(90)
def test_scenario_6_idle_connections_and_slow_senders(daemon: Daemon) -> None:
    fig = scenario_6(daemon, scale_from_env())
    print("\n".join(fig.lines()))
    assert fig.violations == []


@pytest.mark.reliability(scenario=6)
@pytest.mark.timeout(60)
def test_scenario_6_ping_is_answered_while_max_connections_peers_idle(daemon: Daemon) -> None:
    """Past max_connections, idle peers are dropped quickly instead of new ones refused."""
    _raise_nofile()
    start_with_env(daemon, {"NMEM_MAX_CONNECTIONS": "64", "NMEM_READ_TIMEOUT_S": "30"})
    idle = [connect(daemon.socket, timeout=10) for _ in range(64)]
    try:
        wait_until(lambda: (f := ping(daemon.socket)) is None or f["connections"] >= 64, 10, "peers accepted")
        status, reply = send_frame(daemon.socket, protocol.KIND_PING, protocol.NO_EVENT_ID, b"", timeout=5)
        assert status == b"OK", reply
    finally:
        for s in idle:
            s.close()


@pytest.mark.reliability(scenario=6)
@pytest.mark.timeout(60)
def test_scenario_6_out_of_descriptors_pauses_accepting_instead_of_dying(daemon: Daemon) -> None:
    """More peers than the daemon has file descriptors: it logs, waits, and serves again."""
    _raise_nofile()
    limit = 96
    daemon.env["NMEM_READ_TIMEOUT_S"] = "30"
    daemon.start(rlimits={"RLIMIT_NOFILE": (limit, limit)})
    peers = []
    try:
        for _ in range(2 * limit):
            s = _try_connect(daemon.socket)
            if s is not None:
                peers.append(s)
        wait_until(lambda: "cannot accept connections" in log_text(daemon.home), 15, "the daemon to run out of fds")
        assert daemon.proc.poll() is None, "the daemon died"
    finally:
        for s in peers:
            s.close()
    wait_until(lambda: ping(daemon.socket) is not None, 15, "the daemon to answer again")
    marker = f"s6-fd-{new_id()[:8]}"
    done = run_send(payload(marker))
    assert done.returncode == 0 and done.stderr == b""
    wait_until(lambda: count(daemon.db, "events", "session_id = ?", (marker,)) == 1, 15, "the event stored")
    assert daemon.stop() == 0


# --- 7. twenty nmemd at once over a stale socket and lock left by kill -9 -----------------------

ALREADY_RUNNING_RC = 4


def scenario_7(daemon: Daemon, scale: float = 1.0, starters: int = 20) -> Figures:
    rounds = scaled(1, scale)
    fig = Figures(7, f"{starters} nmemd started at once over a stale socket and lock, {rounds} round(s)", scale)
    markers: set[str] = set()
    notify_path = daemon.notify_path + "7"
    for rnd in range(rounds):
        daemon.start()
        marker = f"s7-r{rnd:03d}-before"
        markers.add(marker)
        fig.check(send_frame(daemon.socket, protocol.KIND_HOOK, new_id(), payload(marker))[0] == b"OK", "send")
        daemon.kill()  # leaves the socket file and the lock file behind
        fig.check(lock_pid(daemon.socket) is None and os.path.exists(daemon.socket), "no stale socket and lock")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(READY_TIMEOUT_S)
        env = {**daemon.env, "NOTIFY_SOCKET": notify_path}
        procs: list[subprocess.Popen[bytes]] = []
        inodes: set[int] = set()
        watching = threading.Event()
        try:
            started = time.monotonic()
            for _ in range(starters):
                procs.append(
                    subprocess.Popen([str(BIN / "nmemd")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                )
            while b"READY=1" not in notify.recv(4096):
                pass
            watching.set()
            live = os.lstat(daemon.socket).st_ino

            def watch(watching: threading.Event = watching, inodes: set[int] = inodes) -> None:
                """The live socket must never disappear nor be replaced."""
                while watching.is_set():
                    try:
                        inodes.add(os.lstat(daemon.socket).st_ino)
                    except FileNotFoundError:
                        inodes.add(-1)

            watcher = threading.Thread(target=watch)
            watcher.start()
            exited: dict[int, float] = {}

            def all_but_one_exited(
                procs: list[subprocess.Popen[bytes]] = procs,
                exited: dict[int, float] = exited,
                started: float = started,
            ) -> bool:
                for p in procs:
                    if p.pid not in exited and p.poll() is not None:
                        exited[p.pid] = time.monotonic() - started
                return len(exited) >= starters - 1

            wait_until(all_but_one_exited, 60, "the losing daemons to exit")
            watching.clear()
            watcher.join(10)
            alive = [p for p in procs if p.poll() is None]
            fig.check(len(alive) == 1, f"round {rnd}: {len(alive)} daemons serve")
            losers = [p for p in procs if p.poll() is not None]
            codes = [p.returncode for p in losers]
            fig.check(codes == [ALREADY_RUNNING_RC] * len(losers), f"round {rnd}: exit codes {codes}")
            for p in losers:
                assert p.stderr is not None
                err = p.stderr.read()
                fig.check(b"already running" in err, f"round {rnd}: loser said {err[-200:]!r}")
            fig.latencies.extend(exited.values())
            fig.check(inodes == {live}, f"round {rnd}: the live socket was unlinked or replaced")
            if alive:
                winner = alive[0]
                facts = ping(daemon.socket) or {}
                fig.check(
                    facts.get("pid") == winner.pid and lock_pid(daemon.socket) == winner.pid,
                    f"round {rnd}: the winner does not hold the lock and the socket",
                )
                marker = f"s7-r{rnd:03d}-after"
                markers.add(marker)
                fig.check(
                    send_frame(daemon.socket, protocol.KIND_HOOK, new_id(), payload(marker))[0] == b"OK",
                    "send to the winner",
                )
                winner.send_signal(signal.SIGTERM)
                fig.check(winner.wait(30) == 0, "the winner did not stop cleanly")
        finally:
            watching.clear()
            notify.close()
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
                if p.stderr is not None:
                    p.stderr.close()
    fig.notes["losers"] = "exit time from the simultaneous start (client wall time = a loser's exit time)"
    fig.account(daemon.db, markers, "s7-")
    return fig


@pytest.mark.reliability(scenario=7)
@pytest.mark.timeout(90)
def test_scenario_7_twenty_daemons_over_a_stale_socket_and_lock(daemon: Daemon) -> None:
    fig = scenario_7(daemon, scale_from_env())
    print("\n".join(fig.lines()))
    assert fig.violations == []


# --- 8. another uid connects ----------------------------------------------------------------------


def _nobody() -> tuple[int, int]:
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def _as_other_uid(fn: Callable[[], bytes], uid: int, gid: int) -> bytes:
    """Run `fn` in a forked child that setuid()s to `uid` first; return what it returned (or the error)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: no pytest machinery from here on
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            try:
                out = fn()
            except OSError as exc:
                out = f"oserror {errno.errorcode.get(exc.errno or 0, exc.errno)}".encode()
            os.write(w, out[:4096])
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return data


def _raw_exchange(sock_path: str, body: bytes) -> Callable[[], bytes]:
    return lambda: b"reply " + raw_hook_exchange(sock_path, new_id(), body, timeout=10)


def _interpreter_for(uid: int, gid: int) -> str | None:
    """An interpreter the other uid may run (ours may live under a 0700 home)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        try:
            done = subprocess.run(
                [candidate, "-I", "-S", "-c", "pass"],
                user=uid,
                group=gid,
                extra_groups=[],
                capture_output=True,
                timeout=20,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return candidate
    return None


@contextlib.contextmanager
def _client_for(python: str, uid: int, gid: int) -> Iterator[str]:
    """The hook client the other uid may read: ours, or a copy of it when the checkout sits in a private
    directory (a clone under a 0700 home or mktemp -d)."""
    readable = subprocess.run(
        [python, "-I", "-S", "-c", f"open({str(SEND_SCRIPT)!r}).close()"],
        user=uid, group=gid, extra_groups=[], capture_output=True, timeout=20,
    )  # fmt: skip
    if readable.returncode == 0:
        yield str(SEND_SCRIPT)
        return
    copy = tempfile.mkdtemp(prefix="nm8", dir="/tmp")
    try:
        client = os.path.join(copy, "nmem_client")
        shutil.copytree(SEND_SCRIPT.parent, client, ignore=shutil.ignore_patterns("__pycache__"))
        for path in (copy, client):
            os.chmod(path, 0o755)
        for name in os.listdir(client):
            os.chmod(os.path.join(client, name), 0o644)
        yield os.path.join(client, SEND_SCRIPT.name)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def scenario_8(daemon: Daemon, short_dir: str, scale: float = 1.0) -> Figures:
    fig = Figures(8, "another uid (nobody) connects", scale)
    uid, gid = _nobody()
    daemon.start()
    mine = "s8-own"
    assert send_frame(daemon.socket, protocol.KIND_HOOK, new_id(), payload(mine))[0] == b"OK"
    events_before = count(daemon.db, "events")
    # a) The private directory keeps the other uid away from the socket altogether.
    out = _as_other_uid(_raw_exchange(daemon.socket, payload("s8-intruder-a")), uid, gid)
    fig.notes["through the 0700 directory"] = out.decode(errors="replace")
    fig.check(out.startswith(b"oserror EACCES"), f"the other uid reached the socket: {out[:100]!r}")
    # b) Where socket permissions do not protect (unix(7): some systems ignore them), the peer
    #    credential check must: open the path up, as such a system would behave.
    run_dir = os.path.dirname(daemon.socket)
    for path, mode in ((short_dir, 0o711), (run_dir, 0o711), (daemon.socket, 0o666)):
        os.chmod(path, mode)
    attempts = scaled(3, scale)
    replies = [
        _as_other_uid(_raw_exchange(daemon.socket, payload(f"s8-intruder-b{k}")), uid, gid) for k in range(attempts)
    ]
    fig.notes["with the socket opened up"] = f"{attempts} connections, replies {sorted(set(replies))}"
    fig.check(all(r == b"reply " for r in replies), f"the daemon answered another uid: {replies[:2]}")
    # c) The real hook client run as the other uid: refused, and it cannot use our inbox either.
    python = _interpreter_for(uid, gid)
    if python is not None:
        with _client_for(python, uid, gid) as send_script:
            done = subprocess.run(
                [python, "-I", "-S", send_script],
                input=payload("s8-intruder-c"),
                env={**daemon.env, "NMEM_AUTOSTART": "0"},
                user=uid,
                group=gid,
                extra_groups=[],
                capture_output=True,
                timeout=30,
            )
        fig.check(done.returncode == 0 and done.stderr == b"", f"the client did not fail open: {done}")
        fig.notes["real client as nobody"] = f"rc {done.returncode}, stderr {done.stderr!r}"
    else:
        fig.notes["real client as nobody"] = "skipped: no interpreter that uid may run"
    refused = sum(f"refused a connection from uid {uid}" in line for line in log_text(daemon.home).splitlines())
    fig.notes["refusals logged"] = refused
    fig.check(refused >= attempts, f"{refused} refusals logged for {attempts} connections")
    fig.check(count(daemon.db, "events") == events_before, "an event of the other uid was stored")
    fig.check(count(daemon.db, "inbox") == 0, "the other uid wrote into the inbox")
    spool = daemon.home / "spool"
    fig.check(not spool.exists() or not any(spool.iterdir()), "the other uid wrote into the spool")
    fig.check((ping(daemon.socket) or {}).get("pid") == daemon.proc.pid if daemon.proc else False, "daemon gone")
    fig.check(daemon.stop() == 0, "nmemd did not exit cleanly")
    fig.account(daemon.db, {mine}, "s8-")
    return fig


@pytest.mark.reliability(scenario=8)
@pytest.mark.timeout(60)
def test_scenario_8_another_uid_is_refused(daemon: Daemon, short_dir: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to setuid() a child to another uid")
    try:
        _nobody()
    except KeyError:
        pytest.skip("no 'nobody' user")
    fig = scenario_8(daemon, short_dir, scale_from_env())
    print("\n".join(fig.lines()))
    assert fig.violations == []


# --- 9. a long read transaction while events arrive ----------------------------------------------

WAL_SHRUNK_BYTES = 1024 * 1024


def scenario_9(daemon: Daemon, scale: float = 1.0, senders: int = 8) -> Figures:
    """A reader holds one snapshot open while `n` events arrive through hook clients; no client
    sees BUSY (every event acknowledged in time); once the reader ends the WAL shrinks back."""
    n = scaled(4000, scale)
    fig = Figures(9, f"a read transaction held open while {n} events arrive", scale)
    fig.timeout_s = CLIENT_TIMEOUT_MS / 1000
    start_with_env(
        daemon,
        {  # the production checkpoint job, run often enough for a bounded test
            "NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S": "1",
            "NMEM_MAINTENANCE_IDLE_S": "0.2",
            "NMEM_TUNE_WAL_TRUNCATE_BYTES": str(WAL_SHRUNK_BYTES),
            **DRAIN_FAST,
        },
    )
    wal = Path(str(daemon.db) + "-wal")
    reader = sqlite3.connect(daemon.db, isolation_level=None)
    reader.execute("BEGIN")
    seen_at_start = reader.execute("SELECT count(*) FROM events").fetchone()[0]  # the snapshot is now held
    wal_peak = [0]
    per_sender = -(-n // senders)

    def sender(k: int) -> None:
        for i in range(per_sender):
            if k * per_sender + i >= n:
                return
            outcome, wall, _, code = send_in_process(f"s9-{k:02d}-{i:06d}", fig.timeout_s)
            fig.client_done(outcome, wall, code)
            if i % 200 == 0:
                wal_peak[0] = max(wal_peak[0], wal.stat().st_size if wal.exists() else 0)

    started = time.monotonic()
    with umask_kept(), ThreadPoolExecutor(senders) as pool:
        for f in [pool.submit(sender, k) for k in range(senders)]:
            f.result(timeout=1800)
    took = time.monotonic() - started
    wal_peak[0] = max(wal_peak[0], wal.stat().st_size if wal.exists() else 0)
    still = reader.execute("SELECT count(*) FROM events").fetchone()[0]
    fig.check(still == seen_at_start, "the reader's snapshot moved: it was not one long transaction")
    reader.execute("COMMIT")
    reader.close()
    ended = time.monotonic()
    wait_until(lambda: not wal.exists() or wal.stat().st_size <= WAL_SHRUNK_BYTES, 60, "the WAL to shrink back")
    fig.notes["throughput with the reader open"] = f"{n / took:.0f} events/s"
    fig.notes["WAL"] = (
        f"peak {wal_peak[0] / 1048576:.1f} MB with the reader open; back to"
        f" {(wal.stat().st_size if wal.exists() else 0) / 1048576:.2f} MB"
        f" {time.monotonic() - ended:.1f} s after it ended"
    )
    fig.check(not fig.refused, f"clients got ERR replies: {fig.refused}")
    fig.check(not fig.fell_back, f"clients fell back (no ack within {CLIENT_TIMEOUT_MS} ms): {fig.fell_back}")
    locked = [line for line in log_text(daemon.home).splitlines() if "locked" in line.lower() or "busy" in line]
    fig.check(not locked, f"the daemon log reports contention: {locked[:2]}")
    wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 30, "inbox drained")
    fig.check(daemon.stop() == 0, "nmemd did not exit cleanly")
    fig.account(
        daemon.db,
        {f"s9-{k:02d}-{i:06d}" for k in range(senders) for i in range(per_sender) if k * per_sender + i < n},
        "s9-",
    )
    return fig


@pytest.mark.slow
@pytest.mark.reliability(scenario=9)
@pytest.mark.timeout(120)
def test_scenario_9_long_reader_while_events_arrive(daemon: Daemon) -> None:
    fig = scenario_9(daemon, scale_from_env())
    print("\n".join(fig.lines()))
    assert fig.violations == []


# --- 10. planted secrets of every redacted family, socket and fallback paths, then forget/purge --

# One obviously fake value per family the redactor knows (tests/unit/test_redact.py lists the formats);
# each is unique to this test so a hit anywhere on disk is unambiguous.
PLANTED: dict[str, str] = {
    "aws-access-key": "AKIAQ7RELIABJLJTYZ2K",
    "aws-secret-key": "wJalrXUtnFEMI/K7MDENG/bPxRfiReliabilityKEY",
    "github-token": "ghp_" + "Rel1abil1tyT0kenAbCdEfGhIjKlMnOpQrSt",
    "github-pat": "github_pat_11RELIAB0123456789_" + "relcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789abcdefghijklmn",
    "slack-token": "xoxb-123456789012-1234567890123-ReLiAbIlItYsLaCkToKeNxx",
    "openai-key": "sk-proj-relIAB1234567890abcdefGHIJ",
    "anthropic-key": "sk-ant-api03-" + "Rel1_" * 16,
    "google-api-key": "AIza" + "SyRel1234567890abcdefghijklmnopqrst",
    "stripe-key": "sk_live_" + "51Relxy" * 4,
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJyZWxpYWJpbGl0eSJ9.rElIaBiLiTy0n3I9PlFUP0THsR8Uxyz",
    "private-key": "MIIEowIBAAKCAQEAreliabilityPEMbodyLfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLR",
    "auth-header": "Zm9vYmFyYmF6cmVsaWFiaWxpdHk5OTk5",
    "bearer-token": "rElIaBiLiTyBeArEr0123456789abcdef",
    "cookie": "relsession8c1d2e3f4a5b6c7d",
    "url-password": "reliab1lity-url-pw-77",
    "password": "reliab1lity-hunter2-horse",
    "client-secret": "reliab1lity-client-secret-42",
    "api-key": "reliab1lity-api-key-k123",
    "token": "glpat-reliab1lity123456",
    # issue #16, finding 6: tools' own credential syntax
    "pgpassword": "reliab1lityPgPass77",
    "azure-account-key": "RelAzureKey0123456789abcdefABCDEF==",
    "mysql-p": "reliab1lityMysqlPw",
    "netrc": "reliab1lityNetrcPw",
    "docker-auth": "cmVsaWFiaWxpdHk6ZG9ja2VycHc=",
    "slack-webhook": "T0RELIAB1/B0RELIAB1/reliab1lityWebhookXyz",
    "kube-client-key": "LS0tLS1CRUdJTiByZWxpYWJpbGl0eSBrdWJlIGtleQ==",
    "sshpass": "reliab1litySshPw",
    "pgpass": "reliab1lityPgpassLine",
}


def secret_events(session: str, cwd: str = "/tmp/nmem-rel-s10") -> list[bytes]:
    """Every planted secret, in every kind of text a hook carries: prompt, command, output, file, reply."""
    p = PLANTED
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{p['private-key']}\n{p['private-key']}\n-----END RSA PRIVATE KEY-----"
    text = (
        f"key {p['aws-access-key']} AWS_SECRET_ACCESS_KEY={p['aws-secret-key']} push https://{p['github-token']}"
        f"@github.com/o/r token {p['github-pat']}. SLACK={p['slack-token']} OPENAI_API_KEY={p['openai-key']}"
        f" k={p['anthropic-key']} maps?key={p['google-api-key']}&x=1 stripe {p['stripe-key']}"
        f" cookie jar {p['jwt']} done\n{pem}\nAuthorization: Basic {p['auth-header']}\n"
        f"got Bearer {p['bearer-token']} back\nCookie: session={p['cookie']}; theme=dark\n"
        f"postgres://app:{p['url-password']}@db:5432/x password={p['password']}\n"
        f'{{"client_secret": "{p["client-secret"]}", "api_key": "{p["api-key"]}"}}'
        f" export GITLAB_TOKEN={p['token']}"
        f"\nPGPASSWORD={p['pgpassword']} psql -h db\nDefaultEndpointsProtocol=https;AccountName=rel;"
        f"AccountKey={p['azure-account-key']};EndpointSuffix=core.windows.net\nmysql -u root -p{p['mysql-p']} app\n"
        f"machine api.example.com login rel password {p['netrc']}\n"
        f'{{"auths": {{"ghcr.io": {{"auth": "{p["docker-auth"]}"}}}}}}\n'
        f"curl -X POST https://hooks.slack.com/services/{p['slack-webhook']}\n"
        f"    client-key-data: {p['kube-client-key']}\nsshpass -p {p['sshpass']} ssh rel@host\n"
        f"db.example.com:5432:app:rel:{p['pgpass']}\n"
    )
    base = {"session_id": session, "cwd": cwd, "transcript_path": f"{cwd}/.claude/{session}.jsonl"}
    return [
        json.dumps(e).encode()
        for e in (
            {**base, "hook_event_name": "UserPromptSubmit", "prompt": f"deploy with these: {text}"},
            {
                **base,
                "hook_event_name": "PostToolUse",
                "tool_name": "Bash",
                "tool_use_id": f"{session}-1",
                "tool_input": {"command": f"curl -H 'Authorization: Bearer {p['bearer-token']}' {text[:400]}"},
                "tool_response": {"stdout": text, "stderr": text[-300:], "interrupted": False},
            },
            {
                **base,
                "hook_event_name": "PostToolUse",
                "tool_name": "Read",
                "tool_use_id": f"{session}-2",
                "tool_input": {"file_path": f"{cwd}/.env"},
                "tool_response": {"type": "text", "file": {"filePath": f"{cwd}/.env", "content": text, "numLines": 9}},
            },
            {
                **base,
                "hook_event_name": "PostToolUseFailure",
                "tool_name": "Bash",
                "tool_use_id": f"{session}-3",
                "tool_input": {"command": f"deploy --token {p['token']}"},
                "error": f"failed: {text}",
            },
            {
                **base,
                "hook_event_name": "PostToolUse",
                "tool_name": "mcp__vault__put",
                "tool_use_id": f"{session}-4",
                "tool_input": {"value": text, "api_key": p["api-key"]},
                "tool_response": "stored",
            },
            {**base, "hook_event_name": "Stop", "last_assistant_message": f"I used {text}", "stop_hook_active": False},
        )
    ]


def _needles(secret: str) -> set[bytes]:
    """The secret, and its distinctive word parts as the FTS tokenizer would index them (lower case)."""
    parts = {w for w in "".join(c if c.isalnum() else " " for c in secret).lower().split() if len(w) >= 10}
    return {secret.encode(), secret.lower().encode()} | {w.encode() for w in parts}


def secret_hits(home: Path, db: Path) -> dict[str, list[str]]:
    """Planted secrets found anywhere: every file under the home (db, WAL, shm, spool, logs) and the
    FTS5 vocabulary (terms are prefix-compressed on disk, so the index is asked, not grepped)."""
    hits: dict[str, list[str]] = {}
    files = {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}
    copy_dir = tempfile.mkdtemp(prefix="nm10", dir="/tmp")
    try:
        for suffix in ("", "-wal"):
            if Path(str(db) + suffix).exists():
                shutil.copy(str(db) + suffix, os.path.join(copy_dir, "c.db" + suffix))
        conn = sqlite3.connect(os.path.join(copy_dir, "c.db"))
        try:
            conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, 'observations_fts', 'row')")
            vocab = {str(r[0]).encode() for r in conn.execute("SELECT term FROM temp.v")}
        finally:
            conn.close()
    finally:
        shutil.rmtree(copy_dir, ignore_errors=True)
    for family, secret in PLANTED.items():
        needles = _needles(secret)
        where = [name for name, data in files.items() if any(n in data for n in needles)]
        where += ["fts vocabulary"] if needles & vocab else []
        if where:
            hits[family] = where
    return hits


def _nmem(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "nmem"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NMEM_AUTOSTART": "0"},
    )


def scenario_10(daemon: Daemon, scale: float = 1.0) -> Figures:
    fig = Figures(
        10, f"secrets of {len(PLANTED)} redacted families via socket, inbox and spool; then forget and purge", scale
    )
    rounds = scaled(1, scale)
    markers: set[str] = set()
    stages: dict[str, int] = {}

    def clean(stage: str) -> None:
        hits = secret_hits(daemon.home, daemon.db)
        stages[stage] = len(hits)
        fig.check(not hits, f"{stage}: planted secrets on disk: {dict(list(hits.items())[:4])}")

    for rnd in range(rounds):
        # The fallback paths first, with no daemon: the inbox (the real client) and the spool.
        inbox_session, spool_session, sock_session = f"s10-r{rnd}-inbox", f"s10-r{rnd}-spool", f"s10-r{rnd}-sock"
        for body in secret_events(inbox_session):
            done, wall = send_subprocess(body, {"NMEM_AUTOSTART": "0"})
            fig.client_done("real", wall)
            fig.check(client_problem(done) is None, f"client: {client_problem(done)}")
        for body in secret_events(spool_session):
            inbox.spool(new_id(), body)
        daemon.start()  # drains inbox and spool at start
        wait_until(lambda: backlog(daemon.home, daemon.db) == 0, 20, "inbox and spool drained")
        for body in secret_events(sock_session):
            done, wall = send_subprocess(body, {"NMEM_AUTOSTART": "0"})
            fig.client_done("real", wall)
            fig.check(done.returncode == 0, "client")
        markers |= {inbox_session, spool_session, sock_session}
        clean(f"round {rnd}: running daemon")
        ids = [
            str(r[0])
            for r in db_rows(
                daemon.db, "SELECT id FROM observations WHERE session_id = ? ORDER BY id LIMIT 2", (sock_session,)
            )
        ]
        forgot = _nmem("forget", *ids)
        fig.check(forgot.returncode == 0, f"nmem forget: {forgot.stderr[-200:]}")
        clean(f"round {rnd}: after forget")
        purged = _nmem("purge", "--session", inbox_session, "--yes")
        fig.check(purged.returncode == 0, f"nmem purge: {purged.stderr[-200:]}")
        clean(f"round {rnd}: after purge")
        fig.check(daemon.stop() == 0, "nmemd did not exit cleanly")
        clean(f"round {rnd}: stopped")
    fig.notes["families"] = ", ".join(PLANTED)
    fig.notes["families found on disk, by stage"] = stages
    rows = {
        str(r[0]): int(r[1])
        for r in db_rows(
            daemon.db, "SELECT session_id, count(*) FROM events WHERE session_id LIKE 's10-%' GROUP BY session_id"
        )
    }
    fig.sent = len(markers) * 6
    fig.stored = sum(rows.values())
    fig.lost = fig.sent - fig.stored
    fig.check(rows == dict.fromkeys(markers, 6), f"events per session: {rows}")
    try:
        integrity_ok(daemon.db)
    except (AssertionError, sqlite3.Error) as exc:
        fig.violations.append(f"integrity check failed: {exc!r}")
    return fig


@pytest.mark.reliability(scenario=10)
@pytest.mark.timeout(90)
def test_scenario_10_planted_secrets_never_reach_the_disk(daemon: Daemon) -> None:
    fig = scenario_10(daemon, scale_from_env())
    print("\n".join(fig.lines()))
    assert fig.violations == []


# --- 12. migrations: the list of earlier versions grows with every migration ---------------------


@pytest.mark.reliability(scenario=12)
def test_scenario_12_every_migration_has_an_earlier_database_case() -> None:
    """support.earlier_stores.EARLIER_VERSIONS must hold a database built at every schema version: one row per
    prefix of MIGRATIONS (and the client-only inbox). A new migration without its row fails here;
    the row's builder must produce exactly that version (test_faults checks schema_migrations)."""
    from support.earlier_stores import EARLIER_VERSIONS

    from nmemd.store.migrations import MIGRATIONS

    names = [name for name, _ in MIGRATIONS]
    covered = {applied for _, _, applied in EARLIER_VERSIONS}
    missing = [names[:k] for k in range(len(names)) if tuple(names[:k]) not in covered]
    assert not missing, f"no earlier-database case for schema versions {missing} (add rows to EARLIER_VERSIONS)"
