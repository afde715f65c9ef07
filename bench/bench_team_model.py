"""The team sync protocol against its model, longer than CI runs it (tests/support/team_model.py):
--seeds seeds of --steps operations each on a throwaway PostgreSQL cluster; prints each seed's
operations and verdict, the operations run in all, and the violations found (after quiescence, a
member's view of the shared project or the server's that differs from the model's: an event lost,
duplicated or resurrected; a full-text index naming a deleted row; a deleted event's bytes in a
member's store file).

  .venv/bin/python bench/bench_team_model.py [--seeds 5] [--steps 40] [--first-seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from common import print_machine  # noqa: E402
from support.pg_cluster import running_cluster  # noqa: E402
from support.team_model import Violation, run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--first-seed", type=int, default=1)
    args = ap.parse_args()
    print_machine()
    violations: list[str] = []
    ran: Counter[str] = Counter()
    began = time.monotonic()
    with running_cluster() as cluster:
        for n in range(args.first_seed, args.first_seed + args.seeds):
            try:
                done = run(cluster, n, args.steps)
                ran.update(done.steps)
                print(f"seed {n}: ok: {' '.join(done.steps)}", flush=True)
            except Violation as exc:
                violations.append(f"seed {n}: {exc}")
                print(f"seed {n}: VIOLATION: {str(exc)[:600]}", flush=True)
    print(
        f"team sync model: {args.seeds} seeds x {args.steps} operations ({time.monotonic() - began:.0f} s):"
        f" {len(violations)} violations; operations run: {dict(sorted(ran.items()))}"
    )
    for v in violations:
        print("  " + v)


if __name__ == "__main__":
    main()
