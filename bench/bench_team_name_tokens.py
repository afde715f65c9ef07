"""The rows' names on the team server: M014's `nmem.name_tokens` against M012's, every row compared
and the CPU of each per row (issue #40).

M012 indexed `nmem.name_tokens(title, files)` (GIN, with the scope); every row a push inserts pays
for the function. M014 replaced it with the same names at less CPU, so the index stays valid only
if both give the same names for every row: this compares them on a team grown from the real
transcripts of ../shared/corpus (bench/team_corpus.py, as bench_team_search.py grows its 10M rows:
copied, varied, the corpus's own paths), on the rows of bench_team_sync.py's push phase, and on
tests/support/team_names.py's titles shaped like an agent's. A cluster of its own: schema up to v13,
M012's function kept as `nmem.name_tokens_m012`, then this tree's newest schema. Any difference is
printed and the exit status is 1. Then the server backend's CPU per row (/proc: the machine's load
hardly moves it), each function in turn, --runs times alternating: medians and the ratio.
Run from the repo root:
  .venv/bin/python bench/bench_team_name_tokens.py [--rows 200000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import psycopg  # noqa: E402
from bench_team_search import COLUMNS, Grower  # noqa: E402
from common import median, print_machine  # noqa: E402
from support import team_names  # noqa: E402
from support.pg_cluster import running_cluster  # noqa: E402
from team_corpus import sessions  # noqa: E402

from nmemd.team import schema  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
OLD, NEW = "nmem.name_tokens_m012", "nmem.name_tokens"


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def load_grown(conn: psycopg.Connection[Any], rows: int) -> None:
    """`rows` observations grown from the corpus, as bench_team_search.py COPYs them, into `grown`."""
    columns = ", ".join(f"{c} {'text[]' if c == 'files' else 'text'}" for c in COLUMNS.split(", "))
    conn.execute(f"CREATE TABLE grown ({columns})".encode())
    grower = Grower(sessions())
    with conn.cursor().copy(f"COPY grown ({COLUMNS}) FROM STDIN".encode()) as copy:
        chunk: list[str] = []
        for line in grower.rows(rows, 0, rows):
            chunk.append(line)
            if len(chunk) == 2000:
                copy.write("".join(chunk))
                chunk = []
        copy.write("".join(chunk))


def cpu_per_row(conn: psycopg.Connection[Any], table: str, function: str, count: int) -> float:
    pid = conn.info.backend_pid
    before = backend_cpu(pid)
    conn.execute(f"SELECT count({function}(title, files)) FROM {table}".encode()).fetchone()
    return (backend_cpu(pid) - before) / count * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000, help="observations grown from the corpus")
    ap.add_argument("--runs", type=int, default=5, help="timed passes of each function, alternating")
    args = ap.parse_args()
    print_machine()
    with running_cluster() as cluster, cluster.database() as db, psycopg.connect(db.admin_dsn, autocommit=True) as conn:
        assert schema.migrate(conn, upto=13) == (0, 13)
        team_names.keep_function(conn, OLD.split(".")[1])
        schema.migrate(conn)
        began = time.monotonic()
        load_grown(conn, args.rows)
        conn.execute(
            "CREATE TABLE sync AS SELECT '$ make step' || i AS title, ARRAY['src/mod' || (i % 50) || '.py'] AS files"
            " FROM generate_series(0, 19999) AS i"
        )
        team_names.load(conn, "shaped", team_names.texts(50_000))
        conn.execute("SET max_parallel_workers_per_gather = 0")  # one backend does all the work (its CPU counted)
        conn.execute("SET jit = off")
        print(f"rows ready in {time.monotonic() - began:.0f} s")
        tables = {"grown": "the corpus's rows", "sync": "bench_team_sync.py's push", "shaped": "agent-shaped texts"}
        differ = 0
        for table, what in tables.items():
            count, named, names = conn.execute(
                f"SELECT count(*), count(n), coalesce(sum(cardinality(n)), 0)"
                f" FROM (SELECT {OLD}(title, files) AS n FROM {table}) AS t".encode()
            ).fetchone() or (0, 0, 0)
            bad = team_names.differing(conn, table, OLD, NEW)
            differ += len(bad)
            print(f"{table} ({what}): {count:,} rows, {named:,} with names, {names:,} names: {len(bad)} differ")
            for row in bad:
                print(f"  {row!r}")
        for table in tables:
            count = conn.execute(f"SELECT count(*) FROM {table}".encode()).fetchone()[0]  # type: ignore[index]
            got: dict[str, list[float]] = {OLD: [], NEW: []}
            for r in range(args.runs):
                for function in (OLD, NEW) if r % 2 == 0 else (NEW, OLD):
                    got[function].append(cpu_per_row(conn, table, function, count))
            old, new = median(got[OLD]), median(got[NEW])
            print(
                f"{table}: M012 {old:.1f} us, M014 {new:.1f} us CPU per row ({new / old:.2f}x; medians of"
                f" {args.runs}, load {os.getloadavg()[0]:.1f})"
            )
    if differ:
        raise SystemExit("M014's names differ from M012's: the names index would not stay valid")


if __name__ == "__main__":
    main()
