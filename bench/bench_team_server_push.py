"""The team server's side of a push, measured: v1's schema against this nmem's, on one cluster.

Two databases of one throwaway cluster, one at schema v1 (as v1's `nmem team init` left it) and one
at this nmem's. Pushes of `batches` x `batch` new observations each, one transaction a batch, in
alternating rounds (the load of the moment falls on each), three ways:
  * `v1`: v1's statements into the v1 database (the client's advisory lock, INSERT ... FROM unnest);
  * `vN insert`: the INSERT of a v2-v7 client into this nmem's database: the server's per-row
    trigger locks the team's feed and draws each seq (what older clients and raw SQL get);
  * `vN push`: this nmem's own push (nmemd.team.pg.push: from v8, nmem.push_observations, the lock
    taken once and the seqs drawn in one statement).
For each: the server's CPU per 1,000 rows (the backend's utime + stime from /proc, which the
machine's load hardly moves) and rows/s, medians of the rounds, and their ratio to v1. Nothing
here asserts. Run from the repo root:
  .venv/bin/python bench/bench_team_server_push.py [--rounds 6] [--batches 10] [--batch 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import psycopg  # noqa: E402
from common import median, print_machine  # noqa: E402
from support import team_v1 as v1  # noqa: E402
from support.pg_cluster import running_cluster  # noqa: E402

from nmemd.team import admin, pg, schema  # noqa: E402
from nmemd.team.local import OutRow  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
TITLE = "edited src/module_{}.py to fix the parser"


def backend_cpu(pid: int) -> float:
    """CPU seconds of one server backend (Linux /proc: utime + stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rows_of(tag: str, batch: int) -> list[OutRow]:
    return [
        OutRow(outbox_id=i, op="obs", project_id=v1.PROJECT, event_id=f"{tag}-{i}", session_id="s1", agent="codex",
               kind="edit", title=TITLE.format(i % 50), body=f"body of {TITLE.format(i % 50)}", files=["src/app.py"],
               created_at=time.time())
        for i in range(batch)
    ]  # fmt: skip


def v1_round(dsn: str, tag: str, batches: int, batch: int) -> tuple[float, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid, cpu, began = conn.info.backend_pid, backend_cpu(conn.info.backend_pid), time.perf_counter()
        for b in range(batches):
            v1.push(conn, "acme", [v1.obs(f"{tag}-{b}-{i}", TITLE.format(i % 50)) for i in range(batch)])
        return backend_cpu(pid) - cpu, time.perf_counter() - began


def nmem_round(dsn: str, tag: str, batches: int, batch: int, version: int) -> tuple[float, float]:
    """This nmem's pg.push, as against a server of `version` (7: the INSERT and its per-row trigger)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid, cpu, began = conn.info.backend_pid, backend_cpu(conn.info.backend_pid), time.perf_counter()
        for b in range(batches):
            pg.push(conn, "acme", "laptop", rows_of(f"{tag}-{b}", batch), version)
        return backend_cpu(pid) - cpu, time.perf_counter() - began


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
            measure(old_dsn, admin.add_member(new.admin_dsn, "acme", "bo").dsn, args.rounds, args.batches, args.batch)


def measure(old_dsn: str, new_dsn: str, rounds: int, batches: int, batch: int) -> None:
    """Alternating rounds (the order turned each round): the load of the moment falls on all three."""
    v = schema.SCHEMA_VERSION
    ways = {
        "v1": lambda tag: v1_round(old_dsn, tag, batches, batch),
        f"v{v} insert": lambda tag: nmem_round(new_dsn, tag, batches, batch, 7),
        f"v{v} push": lambda tag: nmem_round(new_dsn, tag, batches, batch, v),
    }
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in ways}
    for r in range(rounds):
        for name in list(ways) if r % 2 == 0 else list(reversed(ways)):
            got[name].append(ways[name](f"r{r}-{name.replace(' ', '-')}"))
    rows = batches * batch
    base_cpu = median([c for c, _ in got["v1"]]) / rows * 1e6
    base_rate = median([rows / t for _, t in got["v1"]])
    for name, runs in got.items():
        cpu = median([c for c, _ in runs]) / rows * 1e6
        rate = median([rows / t for _, t in runs])
        print(f"{name:>10} server: {cpu:5.1f} ms CPU per 1,000 rows ({cpu / base_cpu:.2f}x v1),"
              f" push {rate:,.0f} rows/s ({rate / base_rate:.2f}x v1)"
              f" (median of {len(runs)} rounds of {batches} x {batch})")  # fmt: skip


if __name__ == "__main__":
    main()
