"""What an import costs before any pipe, loop or second process: each side's own work, alone.

`bench_import.py` times the whole `nmem import-transcripts` against its floor (reading and
msgspec-decoding every line). This splits the import into its two sides and times each on
its own, in this one process, on the same generated history, to show how close the whole
can get to that floor on two cores at best:

1. floor: read + decode every line (the same child as bench_import);
2. reader side: read, decode, `TranscriptReader`, the daemon's `extract`, natural keys:
   what the importer does, without encoding or sending anything;
3. storage side: the daemon's batch transaction (`store.batches.write_batch`, batches of
   `import_rpc.BATCH_EVENTS`, the daemon's pragmas and schema, the FTS catch-up at the end)
   over those events: what the daemon's writer does, without decoding or a loop.

On two free cores the import's wall time cannot drop below the larger of (2) and (3),
whatever the protocol between them; its ratio to (1) is the best the import can reach.

    .venv/bin/python bench/bench_store_floor.py [--size-mb 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_import import FLOOR, generate, run_child
from common import VENV_BIN, add_quiet_arg, print_machine, wait_quiet

from nmemd import config
from nmemd.agents.claude_code.history import TranscriptReader, decode_line
from nmemd.capture.extract import extract
from nmemd.history.import_rpc import BATCH_EVENTS, event_id_for
from nmemd.store import batches, database, fts, sqlite_tuning
from nmemd.store.batches import Incoming
from nmemd.store.dedup import Deduper
from nmemd.store.keys import natural_key
from nmemd.store.migrations import MIGRATIONS, MIGRATIONS_DDL

TARGET = 3.0


def read_side(root: Path) -> tuple[float, list[Incoming]]:
    """Every record of every transcript, extracted as the importer does; CPU seconds and the events."""
    events: list[Incoming] = []
    started = time.process_time()
    for path in sorted(str(p) for p in root.rglob("*.jsonl")):
        reader = TranscriptReader.for_file(path)
        offset = 0
        with open(path, "rb") as fh:
            for raw in fh:
                try:
                    line = decode_line(raw)
                except Exception:  # counted as invalid by the importer; none in generated data
                    continue
                for r in reader.feed(line, offset, len(raw), raw):
                    ex = extract(r.payload)
                    key = natural_key(ex) or r.key
                    events.append(Incoming(event_id=event_id_for(key, r.ts), received_at=r.ts, extracted=ex,
                                           natural_key=key, git_branch=r.git_branch))  # fmt: skip
                offset += len(raw)
    return time.process_time() - started, events


class _Timed:
    """The connection `batches.write_batch` sees, timing each statement by what it writes (SQLite's share)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.seconds: dict[str, float] = {}

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def _timed(self, run: Callable[[], Any], sql: str) -> Any:
        started = time.perf_counter()
        cursor = run()
        rows = cursor.fetchall() if sql.lstrip().startswith("SELECT") else []
        words = sql.split()
        what = " ".join(words[:3] if words[0] == "INSERT" else words[:2])
        self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - started
        return _Rows(rows)

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self._timed(lambda: self.db.execute(sql, params), sql)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self._timed(lambda: self.db.executemany(sql, rows), sql)


class _Rows:
    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def fetchall(self) -> list[Any]:
        return self.rows


def store_side(events: list[Incoming], db_path: str) -> tuple[float, float, dict[str, float]]:
    """The daemon's transactions over `events`; CPU seconds, wall seconds, seconds per statement kind."""
    db = sqlite3.connect(db_path, isolation_level=None, cached_statements=256)
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    for pragma in database.connection_pragmas(config.load()):
        db.execute(pragma)
    db.execute(MIGRATIONS_DDL)
    for _name, sql in MIGRATIONS:
        db.executescript(sql)
    dedup = Deduper(0)
    timed = _Timed(db)
    next_id = indexed_below = 1
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for start in range(0, len(events), BATCH_EVENTS):
        overlay = dedup.overlay()
        plan = batches.write_batch(timed, events[start : start + BATCH_EVENTS], next_id, indexed_below, overlay)
        next_id, indexed_below = plan.next_id, plan.indexed_below
        dedup.merge(overlay)
    timed.execute("BEGIN IMMEDIATE")  # the tail the daemon indexes once the writer is quiet
    timed.execute(fts.INDEX_RANGE, (indexed_below, next_id))
    timed.execute(batches.SET_INDEXED, (next_id,))
    timed.execute("COMMIT")
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    db.close()
    return cpu, wall, timed.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=200.0, help="size of the generated history (default 200)")
    add_quiet_arg(parser)
    args = parser.parse_args()
    wait_quiet(args.wait_quiet)
    print_machine()
    sqlite_tuning.disable_memstatus()  # as nmemd does before its first connection
    work = Path(tempfile.mkdtemp(prefix="nmem-bench-floor-", dir="/tmp"))
    try:
        size, files = generate(work, args.size_mb)
        _, out, _, _ = run_child([str(VENV_BIN / "python"), "-c", FLOOR, str(work)], dict(os.environ))
        floor = float(out.split()[0])
        read_cpu, events = read_side(work / "projects")
        n = len(events)
        store_cpu, store_wall, statements = store_side(events, str(work / "floor.db"))
        per = 1e6 / n
        best = max(read_cpu, store_wall)
        print(f"history: {size / 1e6:.1f} MB in {files} files, {n:,} events")
        print(f"(1) floor, read + decode every line:   {floor:6.2f} s      {floor * per:5.1f} us/event")
        print(f"(2) reader side, up to extract:        {read_cpu:6.2f} s CPU  {read_cpu * per:5.1f} us/event"
              f"  = {read_cpu / floor:.2f} x floor")  # fmt: skip
        print(f"(3) storage side, the transactions:    {store_wall:6.2f} s wall {store_wall * per:5.1f} us/event"
              f"  = {store_wall / floor:.2f} x floor (CPU {store_cpu:.2f} s)")  # fmt: skip
        shown = sorted(statements.items(), key=lambda kv: -kv[1])
        print(f"    of which SQLite statements {sum(statements.values()) * per:5.1f} us/event: "
              + ", ".join(f"{k} {v * per:.1f}" for k, v in shown[:6]))  # fmt: skip
        print(
            f"best import wall on two free cores, max of (2) and (3): {best:.2f} s = {best / floor:.2f} x floor"
            f" (import target <= {TARGET:g}: {'reachable' if best / floor <= TARGET else 'out of reach'})"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
