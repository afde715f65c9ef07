"""The team sync protocol against its model, longer than CI runs it (tests/support/team_model.py):
--seeds seeds of --steps steps each on a throwaway PostgreSQL cluster; prints the steps run and the
violations found (a member's view of the shared project that differs from the model's after
quiescence: an event lost, duplicated or resurrected).

  .venv/bin/python bench/bench_team_model.py [--seeds 5] [--steps 40] [--first-seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from common import print_machine  # noqa: E402
from hypothesis import HealthCheck, seed, settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402
from support.pg_cluster import running_cluster  # noqa: E402
from support.team_model import TeamSyncModel  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--first-seed", type=int, default=1)
    args = ap.parse_args()
    print_machine()
    violations: list[str] = []
    began = time.monotonic()
    with running_cluster() as cluster:
        TeamSyncModel.cluster = cluster
        for n in range(args.first_seed, args.first_seed + args.seeds):
            seeded = seed(n)(type(f"Model{n}", (TeamSyncModel,), {}))
            before = TeamSyncModel.steps_run
            try:
                run_state_machine_as_test(
                    seeded,
                    settings=settings(max_examples=1, stateful_step_count=args.steps, deadline=None, database=None,
                                      suppress_health_check=list(HealthCheck), phases=settings().phases[:4]),
                )  # fmt: skip
                verdict = "ok"
            except AssertionError as exc:
                violations.append(f"seed {n}: {exc}")
                verdict = f"VIOLATION: {str(exc).splitlines()[0][:300]}"
            print(f"seed {n}: {TeamSyncModel.steps_run - before} steps run, {verdict}", flush=True)
    print(
        f"team sync model: {args.seeds} seeds x up to {args.steps} steps, {TeamSyncModel.steps_run} steps run"
        f" ({time.monotonic() - began:.0f} s): {len(violations)} violations"
    )
    for v in violations:
        print("  " + v)


if __name__ == "__main__":
    main()
