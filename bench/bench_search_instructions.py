"""A search's CPU as instructions, which do not follow the host's speed: callgrind counts them.

On a shared 2-core VM the same code's search p50 went from 5.3 to 9.9 ms within an hour (BENCHMARKS.md),
so timed ratios need many alternating pairs. The instructions executed barely move from run to run,
whatever else the machine does. This runs `bench_scale.py`'s 284 searches of a scale store (its `meta.json`), in
its order (shuffled, each query's first run, as a fresh daemon sees them), on a read-only connection
through `recall.methods.execute` and the reply's encoding, under `valgrind --tool=callgrind`; once more
with no search, so that start-up and imports cancel out. The hash seed is fixed; the count repeats within
0.05 % (objects' addresses, the clock). A tree's two runs go side by side, one per core; trees in turn.

Instructions leave out the kernel (a page SQLite reads is a `pread`, ~2 us here) and the memory
stalls that make one instruction dearer than another: a cut in instructions is a cut in CPU, not
always the same cut in milliseconds.

    .venv/bin/python bench/bench_search_instructions.py --store /tmp/nmem-1m-b/obs-1000000 --tree /work/base
    .venv/bin/python bench/bench_search_instructions.py --store /tmp/nmem-1m-n/obs-1000000 --tree /work/base \
        --tree-store /tmp/nmem-1m-b/obs-1000000    # each on a store its own code built
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import common

ROOT = Path(__file__).resolve().parent.parent

# The child: one tree on sys.path; a warm-up search, then (with "run") bench_scale's searches in its order.
CHILD = r"""
import json, random, sqlite3, sys
sys.path.insert(0, sys.argv[1])
import msgspec
from nmemd.recall.methods import execute, parse_params
meta = json.load(open(sys.argv[2] + "/meta.json"))
conn = sqlite3.connect(f"file:{sys.argv[2]}/nmem.db?mode=ro", uri=True)
runs = [(q, p) for q in meta["queries"] for p in (None, meta["largest"])]
random.Random(7).shuffle(runs)  # bench_scale.run_searches' first round
def ask(query, project):
    params = {"query": query, "limit": 20, **({"project": project} if project else {})}
    msgspec.json.encode(execute(conn, "search", parse_params("search", params)))
ask("nmem bench warm-up zzqx", None)  # imports and first-use work, counted in both runs
if sys.argv[3] == "run":
    for q, p in runs:
        ask(q["query"], p)
print(len(runs))
"""


def instructions(tree: Path, store: Path, mode: str, scratch: Path) -> tuple[int, int]:
    """(instructions the child ran, searches in a full run) under callgrind."""
    out = scratch / f"cg.{abs(hash((str(tree), mode)))}"
    python = tree / ".venv" / "bin" / "python"
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         str(python if python.exists() else common.PYTHON), "-c", CHILD, str(tree), str(store), mode],
        capture_output=True, text=True, timeout=3600, cwd=scratch, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"refs:\s*([\d,]+)", done.stderr)
    if done.returncode or found is None:
        raise SystemExit(f"callgrind run of {tree} failed ({done.returncode}): {done.stderr[-800:]}")
    return int(found.group(1).replace(",", "")), int(done.stdout.strip() or 0)


def per_search(tree: Path, store: Path, scratch: Path) -> float:
    """Instructions per search: a full run less a warm-up-only run, over the searches."""
    with ThreadPoolExecutor(2) as pool:
        base, run = pool.map(lambda mode: instructions(tree, store, mode, scratch), ("none", "run"))
    return (run[0] - base[0]) / run[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("/tmp/nmem-scale/obs-1000000"),
                        help="a store bench_scale.py built (the folder with nmem.db and meta.json)")  # fmt: skip
    parser.add_argument("--tree", type=Path, help="another checkout (with its .venv) to count too")
    common.add_tree_store_arg(parser)
    args = parser.parse_args()
    if not (args.store / "meta.json").is_file():
        sys.exit(f"no scale store at {args.store}: build one with bench/bench_scale.py --build-only")
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    common.print_machine()
    queries = len(json.loads((args.store / "meta.json").read_text())["queries"])
    print(f"store {args.store}: {queries} queries, each with and without its largest project, first runs")
    trees = common.trees_and_stores(ROOT, args.store, args.tree, args.tree_store)
    counts: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="nmem-cg-") as scratch:
        for label, tree, store in trees:
            counts[label] = per_search(tree, store, Path(scratch))
            print(f"  {label}: {counts[label] / 1e6:.3f} M instructions a search")
    if args.tree:
        mine, other = (counts[label] for label, _, _ in trees)
        print(f"this tree / --tree = {mine / other:.3f}")


if __name__ == "__main__":
    main()
