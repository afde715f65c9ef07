"""Search at scale through a fresh daemon: this checkout and `--tree` in alternating runs, pair by pair.

Each run is one `bench_scale.py` search phase (each query's first run, through a daemon started on a
fresh copy of the store): this checkout's daemon, then `--tree`'s, `--pairs` times. On a shared host
whose speed swings within minutes (BENCHMARKS.md: the same code at a p50 of 6.9 and 11.5 ms twenty
minutes apart), the two runs of a pair meet the same minute; the pairs say how often each tree was
ahead, and the medians how far.

    .venv/bin/python bench/bench_search_pairs.py --store /tmp/nmem-1m-m --tree /work/base \\
        --tree-store /tmp/nmem-1m-b --pairs 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import common

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 1800


def run(store: Path, tree: Path | None) -> dict[str, Any]:
    """One search phase; its figures (bench_scale's `search_fresh`)."""
    argv = [common.PYTHON, str(ROOT / "bench" / "bench_scale.py"), "--store", str(store), "--skip", "maintain",
            "--skip", "ingest", "--skip", "sessionstart", "--search-rounds", "1", "--json"]  # fmt: skip
    if tree is not None:
        argv += ["--tree", str(tree)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench_scale.py failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    phase: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])["search_fresh"]
    return phase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True, help="a bench_scale.py store folder")
    parser.add_argument("--tree", type=Path, required=True, help="another checkout (with its .venv) to compare")
    parser.add_argument("--tree-store", type=Path, help="the store folder --tree searches (default --store)")
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")
    common.print_machine()
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for n in range(1, args.pairs + 1):
        ours.append(run(args.store, None))
        theirs.append(run(args.tree_store or args.store, args.tree))
        a, b = ours[-1], theirs[-1]
        print(f"pair {n} ({time.strftime('%H:%M:%S', time.gmtime())} UTC): p50 {a['p50']:.1f} / {b['p50']:.1f} ms,"
              f" p99 {a['p99']:.1f} / {b['p99']:.1f} ms, daemon CPU {a['daemon_cpu_ms']:.2f} /"
              f" {b['daemon_cpu_ms']:.2f} ms a search (this checkout / --tree)", flush=True)  # fmt: skip
    for key, label in (("p50", "p50"), ("p99", "p99"), ("daemon_cpu_ms", "daemon CPU a search")):
        mine, other = [r[key] for r in ours], [r[key] for r in theirs]
        ahead = sum(1 for x, y in zip(mine, other, strict=True) if x < y)
        print(f"{label}: median {common.median(mine):.2f} / {common.median(other):.2f} ms"
              f" ({common.median(mine) / common.median(other):.3f}x); this checkout lower in {ahead} of"
              f" {len(mine)} pairs")  # fmt: skip


if __name__ == "__main__":
    main()
