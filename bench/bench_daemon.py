"""Daemon start-up and memory: spawn to READY=1 and to the first acked event; idle RSS.

Start-up is measured from the spawn of `.venv/bin/nmemd` to READY=1 on NOTIFY_SOCKET,
and to the first hook event acknowledged (sent right after READY=1, on a new
connection), both for a new NMEM_HOME (the db is created and migrated) and for a
restart on an existing db. RSS (VmRSS) is read when idle after start and after
10,000 events (then idle again), with the peak (VmHWM), for the daemon and for its
extraction worker; the target holds for the two together.

The tree's modules are compiled to bytecode first, as an installed nmem has them (pip compiles at
install): under this environment's PYTHONDONTWRITEBYTECODE a tree without `__pycache__` compiles
every module from source at every start (~0.1 s more CPU a start, and more RSS). `--source` skips
the compiling (a tree without bytecode is then measured that way).

    .venv/bin/python bench/bench_daemon.py [--starts 15] [--events 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import time
from pathlib import Path

import bench_ingest
import common
from common import Daemon, Home, median, ms, p90, verdict

TARGET_START_MS = 300.0
TARGET_RSS_MB = 60.0
SETTLE_S = 1.0  # idle time before reading RSS


def one_start(home: Home, body: bytes) -> tuple[int, int]:
    """(ns to READY=1, ns to the first ack), both from the spawn."""
    daemon = Daemon(home)
    try:
        start = time.perf_counter_ns()
        ready = daemon.start()
        head = common.send_one(home.socket, body)
        acked = time.perf_counter_ns() - start
        if not head.startswith(b"OK"):
            raise RuntimeError(f"first event refused: {head!r}")
    finally:
        daemon.stop()
    return ready, acked


def bench_start(starts: int) -> bool:
    event = common.template("Read")
    ok = True
    for label, fresh in (("new home (create + migrate db)", True), ("restart on an existing db", False)):
        ready: list[int] = []
        acked: list[int] = []
        sent = 0
        shared = Home()
        try:
            if not fresh:
                one_start(shared, common.vary(event, "seed", 0))  # create the db once, untimed
                sent = 1
            for i in range(starts):
                home = Home() if fresh else shared
                try:
                    r, a = one_start(home, common.vary(event, "st", i))
                    sent += 1
                    ready.append(r)
                    acked.append(a)
                    if fresh:
                        ok = common.db_counts(home.db)["events"] == 1 and ok
                finally:
                    if fresh:
                        home.cleanup()
            if not fresh:
                ok = common.db_counts(shared.db)["events"] == sent and ok
        finally:
            shared.cleanup()
        passed = median(acked) / 1e6 <= TARGET_START_MS
        print(
            f"start, {label}, {starts} starts: READY=1 median {ms(median(ready)):.0f} ms p90 {ms(p90(ready)):.0f} ms"
            f" | first ack median {ms(median(acked)):.0f} ms p90 {ms(p90(acked)):.0f} ms"
            f" (target <= {TARGET_START_MS:.0f} ms: {verdict(passed)})"
        )
    print(f"  db check: every first event stored once: {'OK' if ok else 'MISMATCH'}")
    return ok


def memory(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile in kB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            out[key] = int(line.split()[1])
    return out


def fmt(mem: dict[str, int]) -> str:
    return (
        f"VmRSS {mem['VmRSS'] / 1024:.1f} MB (anon {mem['RssAnon'] / 1024:.1f}, file {mem['RssFile'] / 1024:.1f}),"
        f" peak VmHWM {mem['VmHWM'] / 1024:.1f} MB"
    )


def worker_memory(pid: int) -> dict[str, int]:
    """The daemon's children (the extraction worker) summed; zeros when there are none."""
    out = dict.fromkeys(("VmRSS", "VmHWM", "RssAnon", "RssFile"), 0)
    for kid in common.child_pids(pid):
        for key, kb in memory(kid).items():
            out[key] += kb
    return out


def bench_rss(events: int, connections: int) -> bool:
    frames = [common.frame(b) for b in bench_ingest.make_bodies(events, "unique", os.urandom(3).hex())]
    with Home() as home:
        daemon = Daemon(home)
        try:
            daemon.start()
            common.ping(home.socket)
            time.sleep(SETTLE_S)
            idle, idle_worker = memory(daemon.pid), worker_memory(daemon.pid)
            elapsed, _ = asyncio.run(bench_ingest.load(home.socket, frames, connections))
            time.sleep(SETTLE_S)
            after, after_worker = memory(daemon.pid), worker_memory(daemon.pid)
        finally:
            daemon.stop()
        stored = common.db_counts(home.db)["events"]
    for label, mem, worker in (
        ("idle after start", idle, idle_worker),
        (f"idle after {events:,} events", after, after_worker),
    ):
        total = (mem["VmRSS"] + worker["VmRSS"]) / 1024
        passed = total <= TARGET_RSS_MB
        print(f"RSS {label}: daemon and worker {total:.1f} MB (target <= {TARGET_RSS_MB:.0f} MB: {verdict(passed)})")
        print(f"  daemon {fmt(mem)}")
        if worker["VmRSS"]:
            print(f"  extraction worker {fmt(worker)}")
    ok = stored == events
    print(
        f"  ({events:,} events over {connections} connections in {elapsed / 1e9:.1f} s;"
        f" db check: events={stored} expected {events}: {'OK' if ok else 'MISMATCH'})"
    )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=15, help="starts per scenario (>= 10)")
    parser.add_argument("--events", type=int, default=10_000, help="events before the second RSS reading")
    parser.add_argument("--connections", type=int, default=8, help="connections sending those events")
    parser.add_argument("--source", action="store_true", help="compile no bytecode first (see above)")
    common.add_quiet_arg(parser)
    args = parser.parse_args()
    if args.starts < 10:
        parser.error("--starts must be >= 10")
    if not args.source:
        packages = [str(common.REPO / name) for name in ("nmemd", "nmem_client")]
        subprocess.run([common.PYTHON, "-m", "compileall", "-q", *packages], check=True, stdout=subprocess.DEVNULL)
    common.wait_quiet(args.wait_quiet)
    common.print_machine()
    print("modules: " + ("compiled from source at every start (--source)" if args.source else "bytecode, as installed"))
    ok = bench_start(args.starts)
    ok = bench_rss(args.events, args.connections) and ok
    if not ok:
        raise SystemExit("db check failed")


if __name__ == "__main__":
    main()
