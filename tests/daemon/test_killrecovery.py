"""Acceptance: `kill -9` of nmemd at random points under load loses nothing and duplicates nothing.

Each round: a daemon serves; 20 clients send 50 events each (every event has its own
marker, its session_id); the daemon is SIGKILLed when a random share of the events has
been sent; the clients carry on, falling back to the inbox (connection refused, reset,
or no ack within NMEM_TIMEOUT_MS=300); the daemon restarts and drains; then every
event must be stored exactly once and the database must pass its integrity checks.

Budget: 20 x 50 x 10 rounds = 10,000 events. Running every event as its own
`python -I -S send.py` process costs ~20 ms of CPU each (~100 s on 2 cores), so each
of the 20 clients (a thread) sends every SUBPROCESS_EVERY-th event through the real
client script and the others through the client's own code in-process:
`nmem_client.hook.deliver` (the real wire code, same timeout) and, when no ack comes,
`nmem_client.inbox.store` under the same event_id -- exactly what `hook.run` does.
Mixing per client keeps both kinds in flight for the whole round, so the kill lands
among both.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.helpers import count, new_id, payload, wait_until

from nmem_client import inbox, protocol
from nmem_client.hook import deliver

ROUNDS = 10
CLIENTS = 20
EVENTS_PER_CLIENT = 50
SUBPROCESS_EVERY = 5  # 10 of each client's 50 events run `python -I -S send.py`
TIMEOUT_MS = 300
CLIENT_ENV = {"NMEM_AUTOSTART": "0", "NMEM_TIMEOUT_MS": str(TIMEOUT_MS)}


class Round:
    """One round's clients, the kill switch and what they observed."""

    def __init__(self, number: int, daemon: Daemon, rng: random.Random):
        self.number = number
        self.daemon = daemon
        self.total = CLIENTS * EVENTS_PER_CLIENT
        self.kill_at = rng.randint(self.total // 20, self.total - self.total // 20)
        self.sent = 0
        self.lock = threading.Lock()
        self.acked = 0
        self.fallbacks: dict[str, int] = {}
        self.refused: list[tuple[str, bytes]] = []
        self.client_errors: list[str] = []
        self.killed_at: int | None = None

    def marker(self, client: int, n: int) -> str:
        return f"kr{self.number:02d}-c{client:02d}-e{n:03d}"

    def markers(self) -> set[str]:
        return {self.marker(c, n) for c in range(CLIENTS) for n in range(EVENTS_PER_CLIENT)}

    def _done_one(self, acked: bool = False, fallback: str | None = None) -> None:
        with self.lock:
            self.sent += 1
            self.acked += acked
            if fallback:
                self.fallbacks[fallback] = self.fallbacks.get(fallback, 0) + 1

    def client(self, client: int) -> None:
        for n in range(EVENTS_PER_CLIENT):
            if n % SUBPROCESS_EVERY == 0:
                self.send_subprocess(self.marker(client, n))
            else:
                self.send_in_process(self.marker(client, n))

    def send_subprocess(self, marker: str) -> None:
        """The real hook client, one process per event, exactly as installed hooks run it."""
        done = run_send(payload(marker), env=CLIENT_ENV, timeout=30)
        if done.returncode != 0 or done.stderr:
            self.client_errors.append(f"{marker}: rc={done.returncode} {done.stderr[-500:]!r}")
        self._done_one()

    def send_in_process(self, marker: str) -> None:
        """`hook.run` minus stdin: deliver with the hook timeout, else the inbox under the same id."""
        event_id = new_id()
        body = payload(marker)
        try:
            status, reply = deliver(protocol.KIND_HOOK, event_id.encode(), body, TIMEOUT_MS / 1000)
        except OSError:
            status, reply = b"", b""
        if status == b"OK":
            self._done_one(acked=True)
        elif status == b"ERR" and reply not in protocol.RETRYABLE:
            self.refused.append((marker, reply))  # a valid event refused for good
            self._done_one()
        else:
            self._done_one(fallback=inbox.store(event_id, body))

    def killer(self) -> None:
        wait_until(lambda: self.sent >= self.kill_at, 60, f"round {self.number}: {self.kill_at} events sent")
        self.killed_at = self.sent
        self.daemon.kill()

    def run(self) -> None:
        with ThreadPoolExecutor(CLIENTS + 1) as pool:
            kill = pool.submit(self.killer)
            clients = [pool.submit(self.client, c) for c in range(CLIENTS)]
            for f in clients:
                f.result(timeout=90)
            kill.result(timeout=10)


def _backlog(daemon: Daemon) -> int:
    spool = daemon.home / "spool"
    spooled = sum(1 for _ in spool.glob("*.event")) if spool.exists() else 0
    return count(daemon.db, "inbox") + spooled


def _per_marker(db: Path, table: str, prefix: str) -> dict[str, int]:
    rows = db_rows(
        db, f"SELECT session_id, count(*) FROM {table} WHERE session_id LIKE ? GROUP BY session_id", (prefix + "%",)
    )
    return {str(r[0]): int(r[1]) for r in rows}


@pytest.mark.reliability(scenario=1)
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_kill9_at_random_points_loses_and_duplicates_nothing(daemon: Daemon, keep_umask: None) -> None:
    seed = int(time.time())
    rng = random.Random(seed)
    daemon.start()
    stored_before = 0
    acked = fallbacks = waiting = 0
    for number in range(ROUNDS):
        rnd = Round(number, daemon, rng)
        context = f"seed {seed}, round {number}, kill after {rnd.kill_at} events"
        rnd.run()
        assert daemon.proc is not None and daemon.proc.returncode == -9, context
        assert rnd.client_errors == [], context
        assert rnd.refused == [], f"{context}: valid events refused for good: {rnd.refused[:5]}"
        assert set(rnd.fallbacks) <= {"inbox", "spool"}, f"{context}: {rnd.fallbacks}"
        acked += rnd.acked
        fallbacks += sum(rnd.fallbacks.values())
        waiting += _backlog(daemon)
        print(
            f"round {number}: killed after {rnd.killed_at}/{rnd.total} events; in-process acked {rnd.acked},"
            f" fell back {rnd.fallbacks}; backlog at restart {_backlog(daemon)}"
        )

        daemon.start()  # recovers the WAL, drains inbox and spool at start (and every 2 s)
        wait_until(lambda: _backlog(daemon) == 0, 30, f"{context}: inbox and spool drained")
        expected = rnd.markers()
        prefix = f"kr{number:02d}-"
        events = _per_marker(daemon.db, "events", prefix)
        missing = expected - set(events)
        dupes = {m: c for m, c in events.items() if c != 1}
        assert not missing, f"{context}: {len(missing)} events lost, e.g. {sorted(missing)[:5]}"
        assert not dupes, f"{context}: events stored more than once: {dict(list(dupes.items())[:5])}"
        assert set(events) == expected, context
        # Derived rows follow the ledger: one observation and one session counting one event each.
        observations = _per_marker(daemon.db, "observations", prefix)
        assert observations == dict.fromkeys(expected, 1), context
        sessions = dict(
            db_rows(daemon.db, "SELECT session_id, event_count FROM sessions WHERE session_id LIKE ?", (prefix + "%",))
        )
        assert sessions == dict.fromkeys(expected, 1), context
        stored_before += len(expected)
        assert count(daemon.db, "events") == stored_before, context
        integrity_ok(daemon.db)
    # The rounds exercised both paths: acknowledged deliveries and fallbacks drained after restart.
    assert acked > 0 and fallbacks > 0 and waiting > 0, (acked, fallbacks, waiting)
    daemon.stop()
    assert daemon.proc is not None and daemon.proc.returncode == 0
    integrity_ok(daemon.db)
