"""Where a search's time goes at scale: in-process, per kind of query, lookups vs ranking (issue #14).

`bench_scale.py` times searches through the daemon; this runs the same 284 queries of a cached
scale store (its `meta.json`) straight on a read-only connection, so the cost splits into the
index lookups (`lookups.candidates`) and the ranking in Python (`ranking.rank`), and compares two trees in
turn: this checkout and `--tree DIR` (a worktree of another commit), alternating rounds, medians; the
wall time and the search thread's CPU time (on a busy machine the wall is mostly waiting for a core).

    .venv/bin/python bench/bench_search_cpu.py --store /tmp/nmem-scale-s/obs-1000000 --tree /work/wt-base
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import common

ROOT = Path(__file__).resolve().parent.parent

# The child: one tree on sys.path, each query with and without the largest project, `rounds` times.
CHILD = r"""
import json, sqlite3, sys, time
sys.path.insert(0, sys.argv[1])
from nmemd.recall import search as S
from nmemd.recall.queries import Filters
meta = json.load(open(sys.argv[2] + "/meta.json"))
conn = sqlite3.connect(f"file:{sys.argv[2]}/nmem.db?mode=ro", uri=True)
spent = {}
def timed(name, fn):
    def run(*a):
        t = time.perf_counter(); r = fn(*a); spent[name] = time.perf_counter() - t; return r
    return run
try:  # lookups and ranking in modules of their own (a tree from before: both in search.py)
    from nmemd.recall import lookups, ranking
    steps = ((lookups, "candidates", "lookups"), (ranking, "rank", "rank"))
except ImportError:
    steps = ((S, "_candidates", "lookups"), (S, "_rank", "rank"))
for module, attr, name in steps:
    setattr(module, attr, timed(name, getattr(module, attr)))
out = []
for rnd in range(int(sys.argv[3]) + 1):
    for q in meta["queries"]:
        for p in (None, meta["largest"]):
            t, cpu = time.perf_counter(), time.thread_time()
            S.search(conn, q["query"], Filters(project=p) if p else Filters())
            total, cpu = time.perf_counter() - t, time.thread_time() - cpu
            if rnd:  # the first round warms the page cache and the regex caches
                out.append([q["kind"].split()[0] + ("+project" if p else ""), q["query"],
                            total * 1e3, spent["lookups"] * 1e3, spent["rank"] * 1e3, cpu * 1e3])
print(json.dumps(out))
"""


def run_tree(tree: Path, store: Path, rounds: int) -> list[list[Any]]:
    done = subprocess.run([common.PYTHON, "-c", CHILD, str(tree), str(store), str(rounds)],
                          capture_output=True, text=True, check=True, timeout=1800)  # fmt: skip
    return list(json.loads(done.stdout))


def report(label: str, rows: list[list[Any]]) -> None:
    every = sorted(r[2] for r in rows)
    print(f"{label}: {len(rows)} searches, p50 {common.percentile(every, 50):.1f} ms, "
          f"p90 {common.percentile(every, 90):.1f} ms, p99 {common.percentile(every, 99):.1f} ms")  # fmt: skip
    for kind in dict.fromkeys(r[0] for r in rows):
        sel = [r for r in rows if r[0] == kind]
        total, lookups, rank = (statistics.median(r[i] for r in sel) for i in (2, 3, 4))
        print(f"    {kind:20} p50 {total:6.1f} ms   max {max(r[2] for r in sel):6.1f}"
              f"   lookups p50 {lookups:5.1f}   rank p50 {rank:5.1f}")  # fmt: skip
    slow = sorted(rows, key=lambda r: -r[2])[:5]
    print("    slowest: " + "; ".join(f"{r[1][:50]!r} {r[0]} {r[2]:.0f} ms" for r in slow))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("/tmp/nmem-scale/obs-1000000"),
                        help="a store bench_scale.py built (the folder with nmem.db and meta.json)")  # fmt: skip
    parser.add_argument("--tree", type=Path, help="another checkout to compare, run in turn with this one")
    common.add_tree_store_arg(parser)
    parser.add_argument("--rounds", type=int, default=2, help="alternations (each runs every query twice)")
    args = parser.parse_args()
    if not (args.store / "meta.json").is_file():
        sys.exit(f"no scale store at {args.store}: build one with bench/bench_scale.py --build-only")
    common.print_machine()
    trees = common.trees_and_stores(ROOT, args.store, args.tree, args.tree_store)
    results: dict[str, list[list[Any]]] = {label: [] for label, _, _ in trees}
    for _ in range(args.rounds):
        for label, tree, store in trees:
            started = time.perf_counter()
            results[label] += run_tree(tree, store, 2)
            print(f"  {label}: a round in {time.perf_counter() - started:.0f} s")
    for label, rows in results.items():
        report(label, rows)
    for label, rows in results.items():  # CPU: what a busy machine's waits leave out
        cpu = sorted(r[5] for r in rows if len(r) > 5)
        if cpu:
            print(f"{label}: CPU p50 {common.percentile(cpu, 50):.2f} ms, p90 {common.percentile(cpu, 90):.2f} ms,"
                  f" p99 {common.percentile(cpu, 99):.2f} ms")  # fmt: skip
    if args.tree:
        for col, what in ((2, "wall"), (5, "CPU")):
            a, b = (sorted(r[col] for r in results[label] if len(r) > col) for label, _, _ in trees)
            if a and b:
                ratios = [common.percentile(b, pct) / common.percentile(a, pct) for pct in (50, 90, 99)]
                print(f"{what}: --tree / this tree = " + ", ".join(f"p{pct} {x:.2f}" for pct, x in
                                                                 zip((50, 90, 99), ratios, strict=True)))  # fmt: skip


if __name__ == "__main__":
    main()
