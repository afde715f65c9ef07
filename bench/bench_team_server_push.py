"""The team server's side of a push, measured: v1's schema against this nmem's, on one cluster.

Two databases of one throwaway cluster, one at schema v1 (as v1's `nmem team init` left it) and one
at this nmem's; a member pushes batches of observations into each with v1's statements (the
client's INSERT ... SELECT FROM unnest, one transaction a batch), alternating rounds, so the only
difference is what the server does per row (v2: the team's row lock, its own sequence, the
tombstone check, the clamp, the size check). Prints rows/s of each and their ratio (median of the
rounds). Nothing here asserts. Run from the repo root:
  .venv/bin/python bench/bench_team_server_push.py [--rounds 6] [--batches 10] [--batch 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import psycopg  # noqa: E402
from common import median, print_machine  # noqa: E402
from support import team_v1 as v1  # noqa: E402
from support.pg_cluster import running_cluster  # noqa: E402

from nmemd.team import admin, schema  # noqa: E402


def push_round(dsn: str, tag: str, batches: int, batch: int) -> float:
    """Rows per second of `batches` pushes of `batch` new observations each."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        began = time.perf_counter()
        for b in range(batches):
            ops = [v1.obs(f"{tag}-{b}-{i}", f"edited src/module_{i % 50}.py to fix the parser") for i in range(batch)]
            v1.push(conn, "acme", ops)
        return batches * batch / (time.perf_counter() - began)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch", type=int, default=1000)
    args = ap.parse_args()
    print_machine()
    with running_cluster() as cluster, cluster.database() as old:
        with psycopg.connect(old.admin_dsn) as conn:  # v1's roles first: the second database's clean-up keeps them
            v1.create_v1_server(conn)
            conn.execute("INSERT INTO nmem.teams (name) VALUES ('acme')")
            conn.commit()
        old_dsn = admin.add_member(old.admin_dsn, "acme", "al").dsn
        with cluster.database() as new:
            admin.init(new.admin_dsn, "acme")
            dsn = {"v1": old_dsn, f"v{schema.SCHEMA_VERSION}": admin.add_member(new.admin_dsn, "acme", "bo").dsn}
            measure(dsn, args.rounds, args.batches, args.batch)


def measure(dsn: dict[str, str], rounds: int, batches: int, batch: int) -> None:
    """Alternating rounds (v1 first, then v2 first, ...): the load of the moment falls on both."""
    rates: dict[str, list[float]] = {k: [] for k in dsn}
    for r in range(rounds):
        for name in list(dsn) if r % 2 == 0 else list(reversed(dsn)):
            rates[name].append(push_round(dsn[name], f"r{r}", batches, batch))
    for name, got in rates.items():
        print(f"{name} server: push {median(got):,.0f} rows/s (median of {len(got)} rounds of "
              f"{batches} x {batch}; min {min(got):,.0f}, max {max(got):,.0f})")  # fmt: skip
    old_rate, new_rate = (median(v) for v in rates.values())
    print(f"ratio v{schema.SCHEMA_VERSION}/v1: {new_rate / old_rate:.2f}")


if __name__ == "__main__":
    main()
