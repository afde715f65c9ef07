"""Ingest while searches run: readers must not starve the writer (issue #16, finding 14).

One daemon on a store preloaded with `--preload` events; then, alternating, `--rounds` times:
ingest alone (`--events` unique PostToolUse events over 8 persistent connections, acked after
COMMIT, as bench_ingest.py sends them), and the same ingest while `--searchers` processes each
loop `search` RPCs through the socket (common words and a prefix, all projects: the searches
that cost most). Events per second with searchers over alone (target >= 0.5) and the ack p99
with searchers (target <= 50 ms); medians over the rounds. The db must hold every event sent.

    .venv/bin/python bench/bench_contention.py [--searchers 8] [--events 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

import common
from bench_ingest import load, make_bodies
from common import Daemon, Home, median, ms, p99, verdict

TARGET_RATIO = 0.5
TARGET_P99_MS = 50.0
CONNECTIONS = 8

# A searcher: one `search` RPC after another until stdin closes; prints how many it answered.
SEARCHER = r"""
import json, os, sys, threading
from nmem_client import protocol
from nmem_client.hook import deliver
queries = ["error", "file", "test", "the", "run", "co*", "config", "import"]
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
done = 0
print("ready", flush=True)
while not stop.is_set():
    body = json.dumps({"method": "search", "params": {"query": queries[done % len(queries)], "project": "*"}})
    status, _ = deliver(protocol.KIND_RPC, protocol.NO_EVENT_ID, body.encode(), 30.0)
    if status != b"OK":
        sys.exit(f"search failed: {status!r} {_[:200]!r}")
    done += 1
print(done, flush=True)
"""


def ingest(home: Home, events: int, tag: str) -> tuple[float, list[int]]:
    frames = [common.frame(body) for body in make_bodies(events, "unique", tag)]
    elapsed_ns, latencies = asyncio.run(load(home.socket, frames, CONNECTIONS))
    return events / (elapsed_ns / 1e9), latencies


def with_searchers(home: Home, count: int, events: int, tag: str) -> tuple[float, list[int], int, float]:
    """Ingest while `count` searcher processes run; (events/s, ack latencies, searches, searches/s)."""
    env = home.env()
    procs = [
        subprocess.Popen([common.PYTHON, "-c", SEARCHER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        for _ in range(count)
    ]
    try:
        for proc in procs:  # each has sent its first search before the ingest starts
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != b"ready":
                raise RuntimeError(f"a searcher did not start: {line!r}")
        started = time.perf_counter()
        rate, latencies = ingest(home, events, tag)
        took = time.perf_counter() - started
    finally:
        outs = [proc.communicate(input=b"", timeout=60)[0] for proc in procs]
    searches = sum(int(out.split()[-1]) for out in outs if out.split())
    return rate, latencies, searches, searches / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searchers", type=int, default=8)
    parser.add_argument("--events", type=int, default=10_000, help="events per ingest run")
    parser.add_argument("--preload", type=int, default=30_000, help="events stored before the runs")
    parser.add_argument("--rounds", type=int, default=3)
    common.add_quiet_arg(parser)
    args = parser.parse_args()
    if args.wait_quiet:
        common.wait_quiet(args.wait_quiet)
    common.print_machine()
    alone: list[float] = []
    loaded: list[float] = []
    lat_alone: list[int] = []
    lat_loaded: list[int] = []
    sent = 0
    with Home() as home:
        daemon = Daemon(home)
        daemon.start()
        try:
            common.ping(home.socket)
            ingest(home, args.preload, "pre")
            sent += args.preload
            for r in range(args.rounds):
                rate, lat = ingest(home, args.events, f"a{r}")
                alone.append(rate)
                lat_alone += lat
                rate, lat, searches, per_s = with_searchers(home, args.searchers, args.events, f"s{r}")
                loaded.append(rate)
                lat_loaded += lat
                sent += 2 * args.events
                print(f"  round {r + 1}: alone {alone[-1]:,.0f} ev/s, with {args.searchers} searchers "
                      f"{rate:,.0f} ev/s ({searches} searches, {per_s:.0f}/s)", flush=True)  # fmt: skip
        finally:
            daemon.stop()
        stored = common.db_counts(home.db)["events"]
    ratio = median(loaded) / median(alone)
    print(f"ingest alone: median {median(alone):,.0f} ev/s, ack p50 {ms(median(lat_alone)):.1f} ms, "
          f"p99 {ms(p99(lat_alone)):.1f} ms")  # fmt: skip
    print(f"with {args.searchers} searchers: median {median(loaded):,.0f} ev/s, ack p50 {ms(median(lat_loaded)):.1f} "
          f"ms, p99 {ms(p99(lat_loaded)):.1f} ms")  # fmt: skip
    print(f"ratio with / alone = {ratio:.2f} (target >= {TARGET_RATIO}: {verdict(ratio >= TARGET_RATIO)}); "
          f"ack p99 with searchers {ms(p99(lat_loaded)):.1f} ms (target <= {TARGET_P99_MS:.0f}: "
          f"{verdict(ms(p99(lat_loaded)) <= TARGET_P99_MS)})")  # fmt: skip
    print(f"db check: {stored} events stored, {sent} sent: {verdict(stored == sent)}")
    if stored != sent:
        sys.exit(1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
