"""Maintenance on a big store: sizes before/after, and ingestion latency during maintenance vs idle.

Builds a store of `--observations` (default 100,000) observations directly with
the daemon's own store code (extracted from the shared fixture's PostToolUse
payloads, made unique), half of them 60 days old. Then a real `nmemd` is
started on it with every type's retention at 30 days and the scheduler off, and:

1. idle: `--events` hook events sent one at a time, each on a new connection
   like a hook, ack latency measured (acked = committed);
2. maintenance: `nmem maintain` (all jobs, through the daemon: the retention
   sweep deletes the old half, then FTS merge, incremental vacuum, optimize,
   integrity, checkpoint) while the same sender keeps going; latency of the
   events acked while it ran;
3. idle again, the same count.

Database file and WAL sizes (and the freelist) are read before and after. The
verdict compares p50 and p99 during maintenance with the idle runs (both idle
runs pooled), target <= 2x. `--delete purge` deletes the old half with
`nmem purge --until` instead (a purge compacts by itself; shown for comparison).
`--store DB` runs on a copy of an existing store instead of building one (bench_scale's
million-observation store), `--job NAME` runs that one job instead of all of them.

    .venv/bin/python bench/bench_maintenance.py [--observations 100000] [--events 1000] [--wait-quiet 120]
    .venv/bin/python bench/bench_maintenance.py --store /tmp/nmem-scale/obs-1000000/nmem.db --job fts_merge
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import threading
import time
from typing import Any

import anyio
import common
from common import Daemon, Home, median, p99, verdict

from nmemd import config
from nmemd.capture.extract import extract_event
from nmemd.model import OBSERVATION_TYPES
from nmemd.store.batches import Incoming
from nmemd.store.database import open_store

TARGET_RATIO = 2.0
DAY_S = 86400.0
OLD_AGE_DAYS = 60.0
RETENTION_DAYS = 30
NMEM = str(common.VENV_BIN / "nmem")
BUILD_BATCH = 1000
MAINTAIN_TIMEOUT_S = 900.0


# --- building the store --------------------------------------------------------------------------


def _payloads() -> list[dict[str, Any]]:
    return [e for e in common.load_fixture("PostToolUse") if e.get("tool_name")]


async def build(home: Home, count: int) -> dict[str, float]:
    """`count` observations through `Store.commit_batch`; every other one OLD_AGE_DAYS old."""
    settings = config.load({"home": home.home, "db": home.db, "socket": home.socket})
    templates = _payloads()
    now = time.time()
    started = time.perf_counter()
    async with open_store(settings) as store:
        for start in range(0, count, BUILD_BATCH):
            batch = []
            for n in range(start, min(start + BUILD_BATCH, count)):
                body = common.vary(templates[n % len(templates)], "b", n, sessions=count // 200 or 1)
                extracted = extract_event(body, frozenset())
                extracted.observations = extracted.observations[:1]  # one observation per event
                age = OLD_AGE_DAYS * DAY_S if n % 2 == 0 else (n % 1000) * 60.0
                batch.append(Incoming(event_id=common.new_event_id().decode(), received_at=now - age,
                                      extracted=extracted))  # fmt: skip
            await store.commit_batch(batch)
    return {"seconds": time.perf_counter() - started}


def sizes(db: str) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    try:
        free, pages, page_size = conn.execute(
            "SELECT * FROM pragma_freelist_count, pragma_page_count, pragma_page_size"
        ).fetchone()
        observations = conn.execute("SELECT count(*) FROM observations").fetchone()[0]
    finally:
        conn.close()
    wal = os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0
    return {"file": os.path.getsize(db), "wal": wal, "free_pages": free, "pages": pages, "page_size": page_size,
            "observations": observations}  # fmt: skip


def mb(n: int) -> str:
    return f"{n / 1048576:.1f} MB"


def show_sizes(label: str, s: dict[str, int]) -> None:
    print(f"  {label:<28} file {mb(s['file']):>9}  WAL {mb(s['wal']):>8}  free pages {s['free_pages']:>7}"
          f"  observations {s['observations']:>7}")  # fmt: skip


# --- ingestion latency ---------------------------------------------------------------------------


class Sender:
    """One hook-like client at a time: new connection, one event, wait for the ack."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.template = common.template("Read")
        self.sent = 0

    def one(self, tag: str) -> float:
        body = common.vary(self.template, tag, self.sent, sessions=50)
        self.sent += 1
        start = time.perf_counter_ns()
        head = common.send_one(self.home.socket, body, timeout=30.0)
        elapsed = time.perf_counter_ns() - start
        if not head.startswith(b"OK"):
            raise RuntimeError(f"event refused: {head!r}")
        return elapsed / 1e6

    def run(self, n: int, tag: str) -> list[float]:
        return [self.one(tag) for _ in range(n)]

    def while_alive(self, thread: threading.Thread, tag: str) -> list[float]:
        out = []
        while thread.is_alive():
            out.append(self.one(tag))
        return out


def nmem(args: list[str], home: Home) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NMEM, *args], capture_output=True, text=True, timeout=MAINTAIN_TIMEOUT_S,
                          env=home.env(), check=False)  # fmt: skip


def stats(label: str, values: list[float]) -> str:
    return f"{label}: n={len(values)} p50 {median(values):.2f} ms  p99 {p99(values):.2f} ms  max {max(values):.1f} ms"


# --- the run -------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--observations", type=int, default=100_000, help="size of the store built")
    parser.add_argument("--events", type=int, default=1000, help="events per idle run")
    parser.add_argument(
        "--delete",
        choices=["retention", "purge"],
        default="retention",
        help="how the old half goes: the retention job (part of maintenance) or nmem purge first",
    )
    parser.add_argument("--store", help="a copy of this database instead of a built one")
    parser.add_argument("--job", help="only this job (nmem maintain --job)")
    common.add_quiet_arg(parser)
    args = parser.parse_args()
    common.wait_quiet(args.wait_quiet)
    common.print_machine()
    retention = ",".join(f"{t}={RETENTION_DAYS}" for t in OBSERVATION_TYPES)
    with Home() as home:
        if args.store:
            shutil.copyfile(args.store, home.db)
            print(f"copied {args.store} ({sizes(home.db)['observations']:,} observations)")
        else:
            built = anyio.run(build, home, args.observations)
            print(
                f"built {args.observations} observations in {built['seconds']:.1f} s (half {OLD_AGE_DAYS:.0f} days old)"
            )
        events_before = common.db_counts(home.db)["events"]
        env = {
            "NMEM_RETENTION_DAYS": retention,
            **{
                f"NMEM_MAINTENANCE_{k}_INTERVAL_S": "0" for k in ("RETENTION", "CHECKPOINT", "OPTIMIZE", "INTEGRITY")
            },  # fmt: skip
            "NMEM_MAINTENANCE_INTERVAL_S": "0",  # the scheduler is off: only the run below
            "NMEM_INBOX_DRAIN_INTERVAL_S": "3600",
        }
        daemon = Daemon(home, env=env)
        daemon.start()
        try:
            sender = Sender(home)
            sender.run(50, "warm")  # connections, caches, the first batches
            before = sizes(home.db)
            show_sizes("built, daemon up", before)
            idle1 = sender.run(args.events, "idle1")
            print("  " + stats("idle (before)", idle1))
            if args.delete == "purge":
                cutoff = time.time() - (OLD_AGE_DAYS - 1) * DAY_S
                started = time.perf_counter()
                done = nmem(["purge", "--all-projects", "--until", time.strftime("%Y-%m-%dT%H:%M:%S",
                             time.localtime(cutoff)), "--yes", "--json"], home)  # fmt: skip
                if done.returncode != 0:
                    raise RuntimeError(f"purge failed: {done.stderr}")
                print(
                    f"  purge: {json.loads(done.stdout)['observations']} observations in"
                    f" {time.perf_counter() - started:.1f} s (not measured for latency: a purge is on demand)"
                )
                before = sizes(home.db)
                show_sizes("after purge", before)
            result: dict[str, subprocess.CompletedProcess[str]] = {}
            job = ["--job", args.job] if args.job else []
            runner = threading.Thread(target=lambda: result.update(run=nmem(["maintain", "--json", *job], home)))
            started = time.perf_counter()
            runner.start()
            during = sender.while_alive(runner, "during")
            runner.join(MAINTAIN_TIMEOUT_S)
            took = time.perf_counter() - started
            done = result["run"]
            if done.returncode != 0:
                raise RuntimeError(f"maintain failed: {done.stderr}")
            print(f"  maintenance ({args.job or 'all jobs'}, through the daemon) took {took:.1f} s:")
            for line in done.stdout.splitlines():
                job = json.loads(line)
                print(f"    {job['name']:<11} {job['duration_ms']:>8.0f} ms  {job['outcome']}")
            print("  " + stats("during maintenance", during))
            after = sizes(home.db)
            show_sizes("after maintenance", after)
            idle2 = sender.run(args.events, "idle2")
            print("  " + stats("idle (after)", idle2))
            stored = common.db_counts(home.db)
        finally:
            daemon.stop()
        conn = sqlite3.connect(home.db)
        try:
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            conn.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES ('integrity-check', 1)")
        finally:
            conn.close()
    idle = idle1 + idle2
    r50 = median(during) / median(idle)
    r99 = p99(during) / p99(idle)
    expected = events_before + sender.sent
    print(
        f"sizes: file {mb(before['file'])} -> {mb(after['file'])}, WAL {mb(before['wal'])} -> {mb(after['wal'])},"
        f" free pages {before['free_pages']} -> {after['free_pages']}"
    )
    print(
        f"latency during maintenance / idle: p50 {median(during):.2f} / {median(idle):.2f} ms = {r50:.2f},"
        f" p99 {p99(during):.2f} / {p99(idle):.2f} ms = {r99:.2f}"
        f" (target <= {TARGET_RATIO:.0f}: {verdict(max(r50, r99) <= TARGET_RATIO)})"
    )
    print(
        f"db check: events {stored['events']} expected {expected}, inbox {stored['inbox']},"
        f" quick_check {check}, FTS integrity ok: {verdict(stored['events'] == expected and check == 'ok')}"
    )


if __name__ == "__main__":
    main()
