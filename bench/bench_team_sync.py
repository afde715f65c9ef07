"""Team memory's sync, measured (issue #30): two members on a throwaway PostgreSQL cluster.

Phases (each can be skipped with --skip):
  latency      A's hook -> B's store, over --events events, one at a time (target p50 <= 2 s, p99 <= 5 s);
               B's `nmem search` finds the last one at the end
  throughput   --push observations waiting in A's outbox, pushed by A's daemon (target >= 5,000 obs/s)
  hooks        hook acks (one event per connection, acked after COMMIT) on A's daemon, alternating rounds:
               the shared project while a background load keeps the push busy, vs an unshared project
               under the same load (nothing to push); target p50 and p99 ratio <= 1.1
  sessionstart SessionStart replies on A with the server blackholed (a proxy that holds every byte)
               for the shared project, vs an unshared project with the same history, alternating
  faults       --fault-rounds rounds of: PostgreSQL stopped and restarted mid-push, the proxy stalls then
               drops, A SIGKILLed mid-push, B SIGKILLed mid-pull; then every event once on the server and
               once in B's store (0 lost, 0 duplicated)

Nothing here asserts; it prints figures. Run from the repo root:
  .venv/bin/python bench/bench_team_sync.py [--events 100] [--push 20000] [--rounds 6] [--fault-rounds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from common import median, p99, print_machine, send_one  # noqa: E402
from support.helpers import wait_until  # noqa: E402
from support.pg_cluster import running_cluster  # noqa: E402
from support.team_world import Member, Proxy, bash_event, via  # noqa: E402

from nmemd.team import admin  # noqa: E402


def ms(s: float) -> str:
    return f"{s * 1000:.1f} ms"


def body(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


def rows_like(db: Path, marker: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return int(
            conn.execute("SELECT count(*) FROM observations WHERE content LIKE ?", (f"%{marker}%",)).fetchone()[0]
        )
    finally:
        conn.close()


def join(m: Member, dsn: str, project: Path) -> None:
    done = m.nmem("team", "join", "--project", str(project), stdin=dsn)
    if done.returncode != 0:
        raise SystemExit(f"join failed: {done.stderr}")


def phase_latency(a: Member, b: Member, a_repo: Path, b_repo: Path, events: int) -> None:
    waits: list[float] = []
    poll = sqlite3.connect(f"file:{b.db}?mode=ro", uri=True, timeout=5)
    try:
        for n in range(events):
            marker = f"zqlat{n}x{os.getpid()}"
            began = time.monotonic()
            assert send_one(a.env["NMEM_SOCKET"], body(bash_event("lat", a_repo, f"echo {n}", marker, n))).startswith(
                b"OK"
            )
            while not poll.execute("SELECT 1 FROM observations WHERE content LIKE ?", (f"%{marker}%",)).fetchone():
                if time.monotonic() - began > 30:
                    raise SystemExit(f"event {n} did not reach B in 30 s")
                time.sleep(0.002)  # the poll interval of the measurement
            waits.append(time.monotonic() - began)
        found = b.search(f"zqlat{events - 1}x{os.getpid()}", project=b_repo)
    finally:
        poll.close()
    print(
        f"latency A hook -> B store, {events} events: p50 {ms(median(waits))}, p99 {ms(p99(waits))},"
        f" max {ms(max(waits))}; B's nmem search finds the last: {'yes' if found else 'NO'}"
        f"  (target p50 <= 2 s, p99 <= 5 s)"
    )


def phase_throughput(a: Member, db_server: Any, a_repo: Path, count: int) -> None:
    a.stop()
    conn = sqlite3.connect(a.db, isolation_level=None)
    top = conn.execute("SELECT coalesce(max(id), 0) FROM observations").fetchone()[0]
    now = time.time()
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO observations(id, event_id, session_id, project, ts, last_ts, hook_event, type, title, content,"
        " file_path, command) VALUES (?, ?, 'bulk', ?, ?, ?, 'PostToolUse', 'command', ?, ?, ?, ?)",
        [
            (
                top + 1 + i,
                f"bulk-{os.getpid()}-{i}",
                str(a_repo),
                now,
                now,
                f"$ make step{i}",
                f"step {i} output zqbulk line of build log " * 4,
                f"{a_repo}/src/mod{i % 50}.py",
                f"make step{i}",
            )
            for i in range(count)
        ],  # fmt: skip
    )
    conn.execute("COMMIT")
    queued = conn.execute("SELECT count(*) FROM team_outbox").fetchone()[0]
    conn.close()
    a.start()
    began = time.monotonic()
    watch = sqlite3.connect(f"file:{a.db}?mode=ro", uri=True, timeout=5)
    try:
        while watch.execute("SELECT count(*) FROM team_outbox").fetchone()[0]:
            if time.monotonic() - began > 600:
                raise SystemExit("the outbox did not drain in 600 s")
            time.sleep(0.01)  # the poll interval of the measurement
    finally:
        watch.close()
    took = time.monotonic() - began
    on_server = db_server.execute("SELECT count(*) FROM nmem.observations WHERE session_id = 'bulk'")[0][0]
    print(
        f"push throughput: {queued} queued, {on_server} on the server, {count / took:,.0f} obs/s"
        f" ({took:.2f} s from READY)  (target >= 5,000 obs/s)"
    )


class Load:
    """Hook events at a steady rate into one project, on their own connections (as hooks do)."""

    def __init__(self, sock: str, cwd: Path, rate: float):
        self.sock, self.cwd, self.rate = sock, cwd, rate
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        gap = 1.0 / self.rate
        nxt = time.monotonic()
        while not self.stop.is_set():
            send_one(
                self.sock, body(bash_event(f"load{id(self)}", self.cwd, f"make t{self.sent}", "zqload", self.sent))
            )
            self.sent += 1
            nxt += gap
            delay = nxt - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)


def acks(sock: str, cwd: Path, n: int, tag: str) -> list[float]:
    out = []
    for i in range(n):
        event = body(bash_event(f"m{tag}", cwd, f"pytest -k t{i}", f"zqack {tag} {i}", i))
        began = time.perf_counter()
        assert send_one(sock, event).startswith(b"OK")
        out.append(time.perf_counter() - began)
        time.sleep(0.005)  # a hook every few ms, not a flood: what an agent sends
    return out


def phase_hooks(a: Member, shared: Path, unshared: Path, rounds: int, per_round: int, rate: float) -> None:
    sock = a.env["NMEM_SOCKET"]
    got: dict[str, list[float]] = {"busy push": [], "sync off": []}
    pushed_before = _pushed(a)
    for r in range(rounds):
        for label, cwd in (("busy push", shared), ("sync off", unshared)) if r % 2 == 0 else (
            ("sync off", unshared), ("busy push", shared)):  # fmt: skip
            load = Load(sock, cwd, rate)
            load.thread.start()
            try:
                got[label] += acks(sock, cwd, per_round, f"{label[:4]}{r}")
            finally:
                load.stop.set()
                load.thread.join()
    busy, off = got["busy push"], got["sync off"]
    print(
        f"hook acks ({rounds} alternating rounds x {per_round}, background {rate:.0f} events/s into the same project;"
        f" {_pushed(a) - pushed_before} rows pushed meanwhile):\n"
        f"  busy push p50 {ms(median(busy))} p99 {ms(p99(busy))} | sync off p50 {ms(median(off))} p99 {ms(p99(off))}"
        f" | ratio p50 {median(busy) / median(off):.2f}x p99 {p99(busy) / p99(off):.2f}x  (target <= 1.1x)"
    )


def _pushed(a: Member) -> int:
    done = a.nmem("team", "status", "--json")
    try:
        return int(sum(link.get("pushed", 0) for link in json.loads(done.stdout)))
    except (ValueError, TypeError):
        return 0


def session_start(cwd: Path, n: int) -> bytes:
    return body(
        {"session_id": f"ss-{n}-{os.getpid()}", "cwd": str(cwd), "hook_event_name": "SessionStart",
         "source": "startup", "transcript_path": str(cwd / ".claude" / "t.jsonl")}
    )  # fmt: skip


def phase_sessionstart(a: Member, proxy: Proxy, shared: Path, root: Path, count: int) -> None:
    """A's store copied to C, whose daemon has no team (sync off): the same history, the same project."""
    c = Member("cy", root / "cy")
    c.home.mkdir(parents=True)
    a.nmem("maintain", "--job", "checkpoint")  # A's WAL truncated: both read the same file, not a WAL beside it
    src = sqlite3.connect(f"file:{a.db}?mode=ro", uri=True)
    dst = sqlite3.connect(c.db)
    src.backup(dst)
    src.close()
    dst.execute("DELETE FROM team_projects")
    dst.execute("DELETE FROM team_outbox")
    dst.commit()
    dst.close()
    c.start()
    proxy.stall()  # A's server blackholed: every byte held
    got: dict[str, list[float]] = {"blackholed": [], "sync off": []}
    try:
        for i in range(5):  # warm both (page cache, the MCP server built after a first SessionStart)
            for m in (a, c):
                send_one(m.env["NMEM_SOCKET"], session_start(shared, 1000 + i), timeout=30)
        for i in range(count):
            order = (("blackholed", a), ("sync off", c))
            for label, m in order if i % 2 == 0 else order[::-1]:
                began = time.perf_counter()
                assert send_one(m.env["NMEM_SOCKET"], session_start(shared, i), timeout=30).startswith(b"OK")
                got[label].append(time.perf_counter() - began)
    finally:
        proxy.resume()
        c.stop()
        c.cleanup()
    hole, off = got["blackholed"], got["sync off"]
    print(
        f"SessionStart replies, {count} each, alternating, one project and one history: A with its server blackholed"
        f" p50 {ms(median(hole))} p99 {ms(p99(hole))} | a copy of A's store with no team (sync off)"
        f" p50 {ms(median(off))} p99 {ms(p99(off))} | ratio p50 {median(hole) / median(off):.2f}x"
        f" p99 {p99(hole) / p99(off):.2f}x  (target: no slower)"
    )


def phase_faults(cluster: Any, db: Any, a: Member, b: Member, a_repo: Path, proxy: Proxy, rounds: int) -> None:
    fast = {"NMEM_TEAM_PULL_INTERVAL_S": "1", "NMEM_TUNE_TEAM_PUSH_BATCH": "50", "NMEM_LOG_LEVEL": "DEBUG"}
    sent = 0
    marker = f"zqfault{os.getpid()}"

    def burst(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            event = body(bash_event("faults", a_repo, f"echo {sent}", f"{marker} {sent}", sent))
            for _attempt in range(100):  # a daemon restarting: the hook client would fall back to the inbox
                try:
                    if send_one(a.env["NMEM_SOCKET"], event).startswith(b"OK"):
                        break
                except OSError:
                    pass
                time.sleep(0.05)  # wait for the daemon to be back
            sent += 1

    began = time.monotonic()
    for _ in range(rounds):
        burst(30)
        cluster.stop("immediate")
        burst(20)
        cluster.start()
        burst(10)
        proxy.stall()
        burst(20)
        proxy.drop()
        proxy.resume()
        burst(10)
        a.stop(signal.SIGKILL)
        a.start(fast)
        burst(20)
        b.stop(signal.SIGKILL)
        b.start(fast)
        burst(10)
    try:
        query = "SELECT count(*) FROM nmem.observations WHERE body LIKE %s"
        wait_until(lambda: db.execute(query, (f"%{marker}%",))[0][0] >= sent, 120, "every event on the server")
    except AssertionError:
        if os.environ.get("NMEM_BENCH_HOLD"):
            print("HOLD: events missing on the server; stores kept under", a.root.parent, flush=True)
            time.sleep(float(os.environ["NMEM_BENCH_HOLD"]))  # time to look before the cleanup
        raise
    wait_until(lambda: rows_like(b.db, marker) >= sent, 300, "every event in B's store")
    (on_server, distinct) = db.execute(
        "SELECT count(*), count(DISTINCT event_id) FROM nmem.observations WHERE body LIKE %s", (f"%{marker}%",)
    )[0]
    in_b = rows_like(b.db, marker)
    conn = sqlite3.connect(f"file:{b.db}?mode=ro", uri=True)
    distinct_b = conn.execute(
        "SELECT count(DISTINCT event_id) FROM observations WHERE content LIKE ?", (f"%{marker}%",)
    ).fetchone()[0]
    conn.close()
    lost = sent - min(distinct, distinct_b)
    dup = (on_server - distinct) + (in_b - distinct_b)
    print(
        f"faults, {rounds} rounds ({time.monotonic() - began:.0f} s): {sent} events sent, {on_server} on the server"
        f" ({distinct} distinct), {in_b} in B's store ({distinct_b} distinct): lost {lost}, duplicated {dup}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100)
    ap.add_argument("--push", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--per-round", type=int, default=100)
    ap.add_argument("--load-rate", type=float, default=200.0, help="background events/s during the hook rounds")
    ap.add_argument("--starts", type=int, default=50, help="SessionStart replies of each kind")
    ap.add_argument("--fault-rounds", type=int, default=20)
    ap.add_argument("--skip", action="append", default=[], help="latency, throughput, hooks, sessionstart, faults")
    args = ap.parse_args()
    print_machine()
    with running_cluster() as cluster:
        from support.pg_cluster import Database  # noqa: F401 - the cluster's own database context

        with cluster.database() as db:
            admin.init(db.admin_dsn, "acme")
            root = Path(tempfile.mkdtemp(prefix="nmem-team-bench-", dir="/tmp"))
            a, b = Member("al", root / "al"), Member("bo", root / "bo")
            if os.environ.get("NMEM_BENCH_DEBUG"):  # the daemons' logs at DEBUG (each push and ack)
                a.env["NMEM_LOG_LEVEL"] = b.env["NMEM_LOG_LEVEL"] = "DEBUG"
            proxy = Proxy((cluster.host, cluster.port))
            try:
                a.dsn = admin.add_member(db.admin_dsn, "acme", "al").dsn
                b.dsn = admin.add_member(db.admin_dsn, "acme", "bo").dsn
                a_repo = a.checkout("api", "git@github.com:acme/api.git")
                unshared = a.checkout("tool", None)
                b_repo = b.checkout("api", "https://github.com/acme/api")
                a.start()
                b.start()
                join(a, via(a.dsn, proxy), a_repo)
                join(b, via(b.dsn, proxy), b_repo)
                if "latency" not in args.skip:
                    phase_latency(a, b, a_repo, b_repo, args.events)
                if "throughput" not in args.skip:
                    phase_throughput(a, db, a_repo, args.push)
                if "hooks" not in args.skip:
                    phase_hooks(a, a_repo, unshared, args.rounds, args.per_round, args.load_rate)
                if "sessionstart" not in args.skip:
                    phase_sessionstart(a, proxy, a_repo, root, args.starts)
                if "faults" not in args.skip:
                    phase_faults(cluster, db, a, b, a_repo, proxy, args.fault_rounds)
            finally:
                proxy.close()
                for m in (a, b):
                    m.stop()
                    m.cleanup()
                import shutil

                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
