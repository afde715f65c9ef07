"""What `nmem status` reports, read from the database without writing to it.

One function serves both the daemon (run in a worker thread) and the CLI
when no daemon runs, so both always print the same facts.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import msgspec

from nmemd.model import WorkerFacts


class JobFacts(msgspec.Struct, kw_only=True):
    name: str
    last_run: float | None = None
    outcome: str | None = None


class DatabaseFacts(msgspec.Struct, kw_only=True):
    path: str
    exists: bool
    size_bytes: int = 0
    wal_bytes: int = 0
    observations: int = 0
    events: int = 0
    sessions: int = 0
    by_type: dict[str, int] = {}
    last_event_at: float | None = None
    inbox_backlog: int = 0
    spool_backlog: int = 0
    schema: list[str] = []
    jobs: list[JobFacts] = []  # maintenance runs (nmemd.jobs.maintenance), newest first


class DaemonFacts(msgspec.Struct, kw_only=True):
    running: bool
    pid: int | None = None
    socket: str
    started_at: float | None = None
    started_by: str | None = None
    connections: int = 0
    queued: int = 0
    committed: int = 0
    batches: int = 0
    last_error: str | None = None
    version: str | None = None
    executable: str | None = None  # the Python it runs on, and the folder it imports nmemd from:
    package: str | None = None  # which installation it is (`nmem doctor` compares them with its own)
    post_commit_pending: int = 0  # summaries etc. still running after their events were acked
    mcp_building: bool = False  # the MCP server is being built (~1 s of imports after the first SessionStart)
    worker: WorkerFacts | None = None  # None: the extraction worker is off (the loop extracts)
    config_problems: list[str] = []  # settings it left out at start (nmemd.config.load_checked)
    home: str | None = None  # the store it serves, and its id (nmem_client.paths.store_id): a client
    store: str | None = None  # of another NMEM_HOME is refused (issue #37, 1); None: an older daemon
    note: str | None = None  # not running: why not what it seems (not answering, another store's daemon)


class Status(msgspec.Struct, kw_only=True):
    daemon: DaemonFacts
    database: DatabaseFacts
    # Filled by the CLI: what keeps events from the store (`nmem status` fails on them), and hook
    # input that could not be used (issue #31, item 2).
    problems: list[str] = []
    malformed_inputs: int = 0
    malformed_last: str | None = None


def capture_problems(home: str, socket_path: str) -> list[str]:
    """Why events do not reach the store: an NMEM_HOME the daemon cannot use, events a client kept
    outside it meanwhile (nmem_client.fallback). [] when none."""
    from nmem_client import fallback
    from nmemd.daemon.instance import startup_problem

    out = []
    refused = startup_problem(home, socket_path)
    if refused:
        out.append(f"NMEM_HOME cannot be used: {refused}")
    kept = fallback.waiting(home)
    if kept:
        folder, count, reason = kept
        events = f"{count} event{'s wait' if count > 1 else ' waits'}"
        out.append(f"{events} in {folder} ({reason}): stored once the home works")
    return out


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone()
    return row is not None


def database_facts(db_path: str, spool_dir: str) -> DatabaseFacts:
    """Counts and sizes, read through a read-only connection."""
    facts = DatabaseFacts(path=db_path, exists=os.path.exists(db_path))
    try:
        facts.spool_backlog = sum(1 for n in os.listdir(spool_dir) if n.endswith(".event"))
    except OSError:
        pass
    if not facts.exists:
        return facts
    facts.size_bytes = _size(db_path)
    facts.wal_bytes = _size(db_path + "-wal")
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=2.0)
    try:
        q: Any = conn.execute
        if _table_exists(conn, "inbox"):
            facts.inbox_backlog = q("SELECT count(*) FROM inbox").fetchone()[0]
        if _table_exists(conn, "schema_migrations"):
            facts.schema = [r[0] for r in q("SELECT name FROM schema_migrations ORDER BY name")]
        if _table_exists(conn, "counts"):  # kept as rows are written (migration m015)
            counts = {name: (n, latest) for name, n, latest in q("SELECT name, n, latest FROM counts")}
            by_type = sorted(((k[5:], n) for k, (n, _) in counts.items() if k.startswith("type:") and n > 0),
                             key=lambda kv: (-kv[1], kv[0]))  # fmt: skip
            facts.by_type = dict(by_type)
            facts.observations = sum(facts.by_type.values())
            facts.events, facts.last_event_at = counts.get("events", (0, None))
            facts.sessions = q("SELECT count(*) FROM sessions").fetchone()[0]  # a row per session: few
        elif _table_exists(conn, "observations"):  # a store the daemon has not migrated yet
            facts.observations = q("SELECT count(*) FROM observations").fetchone()[0]
            facts.events = q("SELECT count(*) FROM events").fetchone()[0]
            facts.sessions = q("SELECT count(*) FROM sessions").fetchone()[0]
            facts.by_type = dict(q("SELECT type, count(*) FROM observations GROUP BY type ORDER BY 2 DESC"))
            facts.last_event_at = q("SELECT max(received_at) FROM events").fetchone()[0]
        if _table_exists(conn, "jobs"):
            rows = q("SELECT name, last_run, outcome FROM jobs ORDER BY last_run DESC, name")
            facts.jobs = [JobFacts(name=n, last_run=t, outcome=o) for n, t, o in rows]
    finally:
        conn.close()
    return facts
