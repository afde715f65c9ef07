"""Whether two trees give the same search answers on a scale store, hit by hit (issue #40).

A change meant to make search cheaper must not change what it answers. This runs every query of a
cached scale store (its `meta.json`, as `bench_search_cpu.py` does) unscoped, in the largest project
and in the eighth largest, on a read-only connection in each tree in turn (a child process with that
tree first on sys.path), with a fixed `now` and a time budget no machine's load reaches; and compares
every hit: id, order, type, title, score, count, folded twins, snippet text and spans.

    .venv/bin/python bench/compare_answers.py --store /tmp/nmem-1m --tree /work/wt-base
    .venv/bin/python bench/compare_answers.py --store /tmp/nmem-1m-n --tree /work/wt-base --tree-store /tmp/nmem-1m
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import common

ROOT = Path(__file__).resolve().parent.parent

# The child: one tree on sys.path; each query in each scope, its hits as JSON.
CHILD = r"""
import json, sqlite3, sys
sys.path.insert(0, sys.argv[1])
import msgspec
from nmemd.recall import search as S
from nmemd.recall.queries import Filters
meta = json.load(open(sys.argv[2] + "/meta.json"))
conn = sqlite3.connect(f"file:{sys.argv[2]}/nmem.db?mode=ro", uri=True)
scopes = [None, meta["projects"][0], meta["projects"][min(7, len(meta["projects"]) - 1)]]
now = float(meta["built_at"])
out = []
for q in meta["queries"]:
    for p in scopes:
        try:
            hits = S.search(conn, q["query"], Filters(project=p) if p else Filters(), now=now, budget_s=600.0)
            out.append([q["query"], p, msgspec.to_builtins(hits)])
        except Exception as exc:  # the same error in both trees is the same answer
            out.append([q["query"], p, f"{type(exc).__name__}: {exc}"])
print(json.dumps(out))
"""


def answers(tree: Path, store: Path) -> list[list[Any]]:
    done = subprocess.run([common.PYTHON, "-c", CHILD, str(tree), str(store)],
                          capture_output=True, text=True, check=True, timeout=3600)  # fmt: skip
    return list(json.loads(done.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store bench_scale.py built (nmem.db, meta.json)")
    parser.add_argument("--tree", type=Path, required=True, help="the other checkout (the baseline)")
    common.add_tree_store_arg(parser)
    parser.add_argument("--show", type=int, default=5, help="differences printed at most")
    args = parser.parse_args()
    if not (args.store / "meta.json").is_file():
        sys.exit(f"no scale store at {args.store}: build one with bench/bench_scale.py --build-only")
    mine, theirs = answers(ROOT, args.store), answers(args.tree.resolve(), args.tree_store or args.store)
    if len(mine) != len(theirs):
        sys.exit(f"different searches run: {len(mine)} and {len(theirs)}")
    differ = 0
    hits = 0
    for a, b in zip(mine, theirs, strict=True):
        hits += len(a[2]) if isinstance(a[2], list) else 0
        if a != b:
            differ += 1
            if differ <= args.show:
                print(f"DIFFERENT: {a[0]!r} in {a[1] or 'every project'}")
                for n, (x, y) in enumerate(zip(a[2], b[2], strict=False)):
                    if x != y:
                        print(f"    hit {n}: this tree {json.dumps(x)[:400]}\n    {' ' * len(str(n))}  --tree    "
                              f"{json.dumps(y)[:400]}")  # fmt: skip
                        break
                else:
                    print(f"    {len(a[2])} hits against {len(b[2])}")
    print(f"{len(mine)} searches, {hits} hits: {len(mine) - differ} equal, {differ} different")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
