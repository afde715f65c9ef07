"""A read's round trip through the daemon, beside another checkout's in the same run (issue #40).

What a search costs beyond the search itself: the client's connect, the daemon's accept and read, its
ping's reply, the hop to the query thread and the reply back. Three of the cheapest calls measure it, as
`nmem` asks them (`nmemd.control.control.ask`: a read's ping and request on one connection): a ping alone,
a search of a word no row holds, `recent` of one row. Each tree's daemon on an empty store in turn (this
tree first in odd rounds), `--calls` of each kind a round; the figures are medians of the rounds' medians,
and of the daemon's CPU a call in each round.

    .venv/bin/python bench/bench_rpc_trip.py --tree /work/base-start
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
from bench_scale import NO_OPTIMIZE, Scratch, daemon_cpu_s, use_tree

from nmemd.control import control

KINDS: dict[str, Callable[[], Any]] = {
    "ping": lambda: control.ping(1.0),
    "search, a word no row holds": lambda: control.ask("search", {"query": "zzqqxx", "limit": 20}),
    "recent, one row": lambda: control.ask("recent", {"limit": 1}),
}


def one_round(tree: Path, calls: int) -> dict[str, float]:
    """Each kind's median round trip in us, and the daemon's CPU a call in us (`<kind> cpu`), on a fresh
    daemon of `tree` with an empty store."""
    use_tree(tree)
    with Scratch(None, env=NO_OPTIMIZE) as scratch:
        control.ask("recent", {"limit": 1})  # the first read imports the read path
        out = {}
        for kind, call in KINDS.items():
            times = []
            cpu = daemon_cpu_s(scratch.daemon.pid)
            for _ in range(calls):
                start = time.perf_counter_ns()
                call()
                times.append((time.perf_counter_ns() - start) / 1e3)
            out[f"{kind} cpu"] = (daemon_cpu_s(scratch.daemon.pid) - cpu) / calls * 1e6
            out[kind] = statistics.median(times)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="the other checkout (the baseline)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=300, help="calls of each kind a round")
    common.add_quiet_arg(parser)
    args = parser.parse_args()
    common.wait_quiet(args.wait_quiet)
    common.print_machine()
    here = common.REPO
    trees = {"this tree": here, "baseline": args.tree.resolve()}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    environ = dict(os.environ)
    for r in range(args.rounds):
        for name in list(trees) if r % 2 == 0 else list(trees)[::-1]:
            results[name].append(one_round(trees[name], args.calls))
            os.environ.clear()
            os.environ.update(environ)  # Scratch points NMEM_SOCKET and NMEM_HOME at its home
    print(f"round trip, median of {args.rounds} rounds' medians ({args.calls} calls each), us:")
    print(f"  {'call':30} {'this tree':>10} {'baseline':>10} {'ratio':>7}")
    for kind in KINDS:
        mine = statistics.median(r[kind] for r in results["this tree"])
        base = statistics.median(r[kind] for r in results["baseline"])
        print(f"  {kind:30} {mine:10.0f} {base:10.0f} {mine / base:7.2f}")
    print("the daemon's CPU a call (user + system, /proc; 10 ms ticks over the round), median of the rounds, us:")
    for kind in KINDS:
        mine = statistics.median(r[f"{kind} cpu"] for r in results["this tree"])
        base = statistics.median(r[f"{kind} cpu"] for r in results["baseline"])
        print(f"  {kind:30} {mine:10.0f} {base:10.0f} {mine / base:7.2f}")


if __name__ == "__main__":
    main()
