"""The writer thread's batch at a million observations against an empty store, in process (issue #40).

`bench_scale.py`'s ingest phase gives the ratio of events/s into a copy of the cached store and into an
empty one, through the daemon under 32 connections: on a busy machine mostly waits. This runs the
daemon's batch transaction itself (`Store.commit_on_thread` -> `batches.write_batch`) on the writer
thread's connection settings, over bench_ingest's unique PostToolUse events extracted as the daemon
extracts them, in batches of `--batch` events, into a copy of the store and into an empty store batch by
batch in turn (the same events into each: the machine's load falls on both alike; measured one after the
other, the ratio moved 0.8-1.4x between rounds on a busy machine). Each statement is timed with
`time.thread_time` (this thread's CPU) and its SQLite page-cache misses counted (`sqlite3_db_status`). A
PASSIVE checkpoint from a second connection follows every `--checkpoint-every` batches, as the daemon's
checkpointer does (not timed).

    .venv/bin/python bench/bench_writer_batch.py --store /tmp/nmem-scale [--events 5000] [--rounds 3]
"""

from __future__ import annotations

import _sqlite3
import argparse
import ctypes
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_ingest
from bench_scale import copy_store
from common import print_machine

from nmem_client.protocol import new_event_id
from nmemd import config
from nmemd.capture.extract import extract
from nmemd.capture.redact import redact
from nmemd.store import database, grams, sqlite_tuning
from nmemd.store.batches import Incoming
from nmemd.store.database import Store
from nmemd.store.dedup import Deduper
from nmemd.store.keys import KEY_DIGEST_FUNCTION, key_digest
from nmemd.store.migrations import MIGRATIONS, MIGRATIONS_DDL

_LIB = ctypes.CDLL(_sqlite3.__file__)
DBSTATUS_CACHE_MISS, DBSTATUS_CACHE_WRITE = 8, 9  # sqlite3.h


def _handle(db: sqlite3.Connection) -> int:
    """The connection's `sqlite3 *` (CPython's pysqlite_Connection: the head, then the handle)."""
    return ctypes.c_void_p.from_address(id(db) + object.__basicsize__).value or 0


def db_status(db: sqlite3.Connection, op: int) -> int:
    current, high = ctypes.c_int(0), ctypes.c_int(0)
    _LIB.sqlite3_db_status(ctypes.c_void_p(_handle(db)), op, ctypes.byref(current), ctypes.byref(high), 0)
    return current.value


class _Timed:
    """The connection `write_batch` sees: each statement's CPU (this thread's) and page-cache misses."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.seconds: dict[str, float] = {}
        self.misses: dict[str, int] = {}

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def _timed(self, run: Callable[[], Any], sql: str) -> Any:
        missed = db_status(self.db, DBSTATUS_CACHE_MISS)
        started = time.thread_time()
        cursor = run()
        rows = cursor.fetchall()
        words = sql.split()
        what = " ".join(words[:3] if words[0] in ("INSERT", "UPDATE", "DELETE") else words[:2])
        if "observations_fts" in sql:
            what = "INSERT observations_fts"
        elif "observations_grams" in sql:
            what = "INSERT observations_grams"
        self.seconds[what] = self.seconds.get(what, 0.0) + time.thread_time() - started
        self.misses[what] = self.misses.get(what, 0) + db_status(self.db, DBSTATUS_CACHE_MISS) - missed
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


def open_writer(path: str, pragmas: list[str] = []) -> sqlite3.Connection:  # noqa: B006 - never mutated
    """The daemon's write connection: its pragmas (and `pragmas` after them), functions and migrations."""
    db = sqlite3.connect(path, isolation_level=None, cached_statements=256, check_same_thread=False)
    db.execute("PRAGMA auto_vacuum=INCREMENTAL")
    for pragma in [*database.connection_pragmas(config.load()), *(f"PRAGMA {p}" for p in pragmas)]:
        db.execute(pragma)
    db.create_function(grams.SQL_FUNCTION, 2, grams.pairs, deterministic=True)
    db.create_function(KEY_DIGEST_FUNCTION, 1, key_digest, deterministic=True)
    db.execute(MIGRATIONS_DDL)
    applied = {r[0] for r in db.execute("SELECT name FROM schema_migrations")}
    for name, sql in MIGRATIONS:
        if name not in applied:
            db.executescript(f"BEGIN; {sql}; INSERT INTO schema_migrations VALUES ('{name}', {time.time()}); COMMIT;")
    return db


def events(n: int) -> list[Incoming]:
    tag = new_event_id().decode()[-6:]
    return [
        Incoming(event_id=new_event_id().decode(), received_at=time.time(), extracted=extract(json.loads(body)))
        for body in bench_ingest.make_bodies(n, "unique", tag)
    ]


class _Side:
    """One store under test: a scratch copy (or an empty store), its writer connection and its figures."""

    def __init__(self, source: Path | None, work: Path, name: str, pragmas: list[str]) -> None:
        self.path = str(work / f"{name}.db")
        if source is not None:
            copy_store(source, self.path)
        self.db = open_writer(self.path, pragmas)
        settings = config.load()
        self.store = Store(conn=None, settings=settings, dedup=Deduper(settings.dedup_window_s), redact=redact)  # type: ignore[arg-type]
        self.store.next_observation_id = (
            int(
                self.db.execute(
                    "SELECT max(coalesce((SELECT max(id) FROM observations), 0),"
                    " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'observations'), 0))"
                ).fetchone()[0]
            )
            + 1
        )
        self.store.indexed_below = int(self.db.execute("SELECT indexed_below FROM fts_state").fetchone()[0])
        self.timed = _Timed(self.db)
        self.per_batch: list[float] = []
        self.checkpoint_s = 0.0  # the checkpoints' CPU (the daemon's checkpointer thread's share)
        self.pages_written = 0  # pages the commits wrote to the WAL
        self.checkpoint_disk = 0  # bytes the checkpoints had the kernel write to the disk (its fsync)

    def commit(self, items: list[Incoming]) -> None:
        written, t0 = db_status(self.db, DBSTATUS_CACHE_WRITE), time.thread_time()
        self.store.commit_on_thread(self.timed, items)  # type: ignore[arg-type]
        self.per_batch.append(time.thread_time() - t0)
        self.pages_written += db_status(self.db, DBSTATUS_CACHE_WRITE) - written

    def figures(self) -> dict[str, Any]:
        return {"per_batch": self.per_batch, "statements": self.timed.seconds, "misses": self.timed.misses,
                "batches": len(self.per_batch), "checkpoint_s": self.checkpoint_s,
                "pages_written": self.pages_written, "checkpoint_disk": self.checkpoint_disk}  # fmt: skip


def run(source: Path, n: int, batch: int, checkpoint_every: int, pragmas: list[str]) -> dict[str, dict[str, Any]]:
    """CPU per batch and per statement kind over `n` events into a copy of `source` and into an empty store,
    batch by batch in turn (the same events into each), so the machine's load falls on both alike."""
    work = Path(tempfile.mkdtemp(prefix="nmem-wb-", dir="/tmp"))
    try:
        sides = {"store": _Side(source, work, "store", pragmas), "empty": _Side(None, work, "empty", pragmas)}
        items = events(n)
        for k, start in enumerate(range(0, n, batch)):
            order = ("store", "empty") if k % 2 == 0 else ("empty", "store")
            for name in order:
                sides[name].commit(items[start : start + batch])
            if (k + 1) % checkpoint_every == 0:
                for side in sides.values():
                    t0, disk0 = time.thread_time(), _disk_writes()
                    database_checkpoint(side.path)
                    side.checkpoint_s += time.thread_time() - t0
                    side.checkpoint_disk += _disk_writes() - disk0
        for side in sides.values():
            side.db.close()
        return {name: side.figures() for name, side in sides.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _disk_writes() -> int:
    """Bytes this thread had the kernel send to the disk (`write_bytes` of /proc/thread-self/io)."""
    with open("/proc/thread-self/io") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("write_bytes:"))


def database_checkpoint(path: str) -> None:
    conn = sqlite3.connect(path, timeout=0.05, isolation_level=None)
    try:
        frames = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[1]
        if frames >= 4096:
            conn.execute("PRAGMA wal_checkpoint(RESTART)")
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("/tmp/nmem-scale"), help="bench_scale.py's --store")
    parser.add_argument("--observations", type=int, default=1_000_000)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each on fresh copies")
    parser.add_argument("--checkpoint-every", type=int, default=16)
    parser.add_argument("--pragma", action="append", default=[], help="e.g. cache_size=-65536, on both writers")
    args = parser.parse_args()
    print_machine()
    sqlite_tuning.disable_memstatus()
    source = args.store / f"obs-{args.observations}" / "nmem.db"
    results: dict[str, list[dict[str, Any]]] = {"store": [], "empty": []}
    for r in range(args.rounds):
        both = run(source, args.events, args.batch, args.checkpoint_every, args.pragma)
        for label, out in both.items():
            results[label].append(out)
            print(f"  round {r + 1} {label}: {statistics.mean(out['per_batch']) * 1e3:.3f} ms CPU a batch"
                  f" (median {statistics.median(out['per_batch']) * 1e3:.3f})", flush=True)  # fmt: skip
    means = {k: statistics.median(statistics.mean(o["per_batch"]) for o in v) for k, v in results.items()}
    print(
        f"writer CPU a {args.batch}-event batch, medians of round means: store {means['store'] * 1e3:.3f} ms,"
        f" empty {means['empty'] * 1e3:.3f} ms = {means['store'] / means['empty']:.2f}x"
    )
    checkpoint = {k: statistics.median(o["checkpoint_s"] / o["batches"] for o in v) * 1e6 for k, v in results.items()}
    print(
        f"checkpoints (not in a batch): store {checkpoint['store']:.1f} µs, empty {checkpoint['empty']:.1f} µs a batch"
    )
    disk = {k: statistics.median(o["checkpoint_disk"] / o["batches"] for o in v) / 1024 for k, v in results.items()}
    print(f"  to the disk by the checkpoints: store {disk['store']:.0f} KB, empty {disk['empty']:.0f} KB a batch")
    pages = {k: statistics.median(o["pages_written"] / o["batches"] for o in v) for k, v in results.items()}
    print(f"pages written to the WAL: store {pages['store']:.1f}, empty {pages['empty']:.1f} a batch")
    kinds = sorted({k for v in results.values() for o in v for k in o["statements"]})
    print(f"  {'statement':<32} {'store us/batch':>15} {'empty us/batch':>15} {'ratio':>6}"
          f" {'cache misses/batch store, empty':>32}")  # fmt: skip
    for kind in sorted(kinds, key=lambda k: -sum(o["statements"].get(k, 0) for o in results["store"])):
        s, e = (
            statistics.median(o["statements"].get(kind, 0.0) / o["batches"] for o in results[label]) * 1e6
            for label in ("store", "empty")
        )
        ms, me = (
            statistics.median(o["misses"].get(kind, 0) / o["batches"] for o in results[label])
            for label in ("store", "empty")
        )
        print(f"  {kind:<32} {s:>15.1f} {e:>15.1f} {s / e if e else float('nan'):>6.2f} {ms:>20.1f} {me:>10.1f}")


if __name__ == "__main__":
    main()
