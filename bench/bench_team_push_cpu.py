"""What a team push costs in CPU, this tree against a baseline tree, alternating (issue #36).

A push's rate on a shared 2-core machine follows the load of the moment; the CPU seconds it takes
do not. Each run is bench_team_sync.py's throughput phase of one tree (its own code, its own venv):
--push observations waiting in A's outbox, pushed by A's daemon to a fresh cluster, with the CPU
time of A's daemon (and its children) and of the whole PostgreSQL cluster counted around it, from
/proc (Linux). Prints each run and the medians per 1,000 rows, and their ratio. Nothing here asserts.
Run from the repo root:
  .venv/bin/python bench/bench_team_push_cpu.py --baseline /work/base-x [--runs 3] [--push 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
TICK = os.sysconf("SC_CLK_TCK")

from common import median, print_machine  # noqa: E402


def cpu_of_tree(pid: int) -> float:
    """CPU seconds of `pid`, its reaped children and its live descendants."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    total = sum(int(x) for x in fields[11:15]) / TICK  # utime, stime, cutime, cstime
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                total += sum(cpu_of_tree(int(c)) for c in f.read().split())
        except OSError:
            pass
    return total


def one(tree: Path, count: int) -> dict[str, float]:
    """One throughput phase of `tree`'s bench_team_sync.py, in this process (run by `tree`'s python)."""
    sys.path[:0] = [str(tree / "bench"), str(tree / "tests"), str(tree)]
    import bench_team_sync as sync  # type: ignore[import-not-found]
    from support.pg_cluster import running_cluster  # type: ignore[import-not-found]
    from support.team_world import Member, Proxy, via  # type: ignore[import-not-found]

    from nmemd.team import admin

    with running_cluster() as cluster, cluster.database() as db:
        admin.init(db.admin_dsn, "acme")
        postmaster = int((cluster.datadir / "postmaster.pid").read_text().split()[0])
        root = Path(tempfile.mkdtemp(prefix="nmem-push-cpu-", dir="/tmp"))
        a = Member("al", root / "al")
        proxy = Proxy((cluster.host, cluster.port))
        try:
            a.dsn = admin.add_member(db.admin_dsn, "acme", "al").dsn
            repo = a.checkout("api", "git@github.com:acme/api.git")
            a.start()
            sync.join(a, via(a.dsn, proxy), repo)
            start, marks = a.start, {}

            def start_counted(*args: object, **kw: object) -> None:  # the phase restarts A: count from READY
                start(*args, **kw)
                marks["pid"], marks["daemon"] = a.proc.pid, cpu_of_tree(a.proc.pid)

            a.start = start_counted
            pg = cpu_of_tree(postmaster)
            began = time.monotonic()
            sync.phase_throughput(a, db, repo, count)
            took = time.monotonic() - began
            return {
                "daemon_ms": (cpu_of_tree(marks["pid"]) - marks["daemon"]) / count * 1e6,
                "postgres_ms": (cpu_of_tree(postmaster) - pg) / count * 1e6,
                "rate": count / took,
                "load": os.getloadavg()[0],
            }
        finally:
            proxy.close()
            a.stop()
            a.cleanup()
            shutil.rmtree(root, ignore_errors=True)


def run(tree: Path, count: int) -> dict[str, float]:
    python = tree / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--one", str(tree), "--push", str(count)],
        cwd=tree, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    return dict(json.loads(lines[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, help="a worktree of the baseline commit, with its own .venv")
    ap.add_argument("--runs", type=int, default=3, help="runs of each tree, alternating")
    ap.add_argument("--push", type=int, default=20000)
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.push)), flush=True)  # noqa: T201 - read by run()
        return
    print_machine()
    trees = {"this tree": HERE.parent, "baseline": args.baseline} if args.baseline else {"this tree": HERE.parent}
    got: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for r in range(args.runs):
        for name in list(trees) if r % 2 == 0 else list(reversed(trees)):
            got[name].append(run(trees[name], args.push))
            g = got[name][-1]
            print(f"  {name}: daemon {g['daemon_ms']:.0f} ms, PostgreSQL {g['postgres_ms']:.0f} ms CPU per 1,000 rows;"
                  f" {g['rate']:,.0f} obs/s over the phase (load {g['load']:.1f})", flush=True)  # fmt: skip
    med = {
        name: {k: median([g[k] for g in runs]) for k in ("daemon_ms", "postgres_ms", "rate")}
        for name, runs in got.items()
    }
    for name, m in med.items():
        print(f"{name}: daemon {m['daemon_ms']:.0f} ms, PostgreSQL {m['postgres_ms']:.0f} ms CPU per 1,000 rows pushed,"
              f" {m['rate']:,.0f} obs/s over the phase (A stopped, its outbox filled, A restarted and drained;"
              f" medians of {args.runs})")  # fmt: skip
    if args.baseline:
        new, base = med["this tree"], med["baseline"]
        print(
            f"ratio this tree / baseline: daemon CPU {new['daemon_ms'] / base['daemon_ms']:.2f}x,"
            f" PostgreSQL CPU {new['postgres_ms'] / base['postgres_ms']:.2f}x, rate {new['rate'] / base['rate']:.2f}x"
        )


if __name__ == "__main__":
    main()
