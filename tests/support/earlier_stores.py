"""Databases as each earlier schema version left them (issue #5, scenario 12): its tables, its rows written
as that version wrote them, and inbox rows a client left over; a new migration adds a row to
EARLIER_VERSIONS that builds its predecessor's database (tests/daemon/test_reliability.py checks one
exists for every prefix of MIGRATIONS)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from nmem_client import inbox
from nmemd.capture.extract import extract_event
from nmemd.store import fts
from nmemd.store.migrations import MIGRATIONS, MIGRATIONS_DDL
from support.db import db_rows
from support.helpers import new_id, payload

MIGRATION_EVENTS = 25
MIGRATION_INBOX = 10


def _build_at(home: Path, tag: str, applied: int) -> set[str]:
    """A database at MIGRATIONS[:applied], its rows written as that version wrote them (indexed by the
    FTS insert trigger while it existed, by one INSERT per batch after m002), plus inbox rows left over."""
    markers = {f"mg-{tag}-{i:03d}" for i in range(MIGRATION_EVENTS)}
    versions = MIGRATIONS[:applied]
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    conn = sqlite3.connect(home / "nmem.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(MIGRATIONS_DDL)
        ddl = "; ".join(sql for _, sql in versions)
        record = "INSERT INTO schema_migrations VALUES " + ", ".join(f"('{name}', 0)" for name, _ in versions)
        conn.executescript(f"BEGIN; {ddl}; {record}; COMMIT;")
        conn.execute("BEGIN")
        for marker in sorted(markers):
            ex = extract_event(payload(marker), frozenset())
            obs = ex.observations[0]
            event_id = new_id()
            cur = conn.execute(
                "INSERT INTO observations(event_id, session_id, project, ts, last_ts, hook_event, type, title, content,"
                " tool_name, file_path, command) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    event_id,
                    ex.session_id,
                    ex.project,
                    time.time(),
                    time.time(),
                    ex.hook_event,
                    obs.type,
                    obs.title,
                    obs.content,
                    obs.tool_name,
                    obs.file_path,
                    obs.command,
                ),
            )
            conn.execute(
                "INSERT INTO events(event_id, received_at, session_id, hook_event, observation_id)"
                " VALUES (?, ?, ?, ?, ?)",
                (event_id, time.time(), ex.session_id, ex.hook_event, cur.lastrowid),
            )
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'observations_ai'").fetchone():
            # From m010 the index holds each row's project too (its generated `scope` column).
            columns = fts.COLUMNS if applied >= 10 else "title, content, file_path, command"
            conn.execute(f"INSERT INTO observations_fts(rowid, {columns}) SELECT id, {columns} FROM observations")
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'fts_state'").fetchone():  # m004: all indexed
            conn.execute("UPDATE fts_state SET indexed_below = (SELECT max(id) + 1 FROM observations)")
        conn.execute("COMMIT")
    finally:
        conn.close()
    for i in range(MIGRATION_INBOX):
        marker = f"mg-{tag}-inbox-{i:03d}"
        markers.add(marker)
        assert inbox.store(new_id(), payload(marker)) == "inbox"
    return markers


def build_v1(home: Path) -> set[str]:
    """Version 1 (m001_initial only)."""
    return _build_at(home, "v1", 1)


def build_v2(home: Path) -> set[str]:
    """Version 2 (m001 + m002_fts_batch_index): no FTS insert trigger, the ledger without natural keys."""
    return _build_at(home, "v2", 2)


def build_v3(home: Path) -> set[str]:
    """Version 3 (m001-m003_natural_keys): every observation indexed in its own commit, no watermark."""
    return _build_at(home, "v3", 3)


def build_v4(home: Path) -> set[str]:
    """Version 4 (m001-m004_fts_watermark): the session index on (session_id, ts), tool calls keyed in the ledger."""
    return _build_at(home, "v4", 4)


def build_v5(home: Path) -> set[str]:
    """Version 5 (m001-m005_tool_calls_by_row): with the file-path index no query used."""
    return _build_at(home, "v5", 5)


def build_v6(home: Path) -> set[str]:
    """Version 6 (m001-m006_drop_file_index): no index of unspaced-script pairs."""
    return _build_at(home, "v6", 6)


def build_v7(home: Path) -> set[str]:
    """Version 7 (m001-m007_unspaced_grams): the main index with positions (detail=full)."""
    return _build_at(home, "v7", 7)


def build_v8(home: Path) -> set[str]:
    """Version 8 (m001-m008_positionless_fts): no retention notice yet."""
    return _build_at(home, "v8", 8)


def build_v9(home: Path) -> set[str]:
    """Version 9 (m001-m009_retention_notice): the main index without each row's project."""
    return _build_at(home, "v9", 9)


def build_v10(home: Path) -> set[str]:
    """Version 10 (m001-m010_project_in_index): no agent on sessions and observations (issue #19)."""
    return _build_at(home, "v10", 10)


def build_v11(home: Path) -> set[str]:
    """Version 11 (m001-m011_agent): no team tables, outbox triggers or teammates' columns (issue #30)."""
    return _build_at(home, "v11", 11)


def build_v12(home: Path) -> set[str]:
    """Version 12 (m001-m012_team): no places a session worked in besides its project (issue #39)."""
    return _build_at(home, "v12", 12)


def build_v13(home: Path) -> set[str]:
    """Version 13 (m001-m013_session_places): teammates' rows in the sessions of their own ids (issue #36)."""
    return _build_at(home, "v13", 13)


def build_v14(home: Path) -> set[str]:
    """Version 14 (m001-m014_team_apart): `nmem status` counted every row, no counts kept as rows are
    written."""
    return _build_at(home, "v14", 14)


def build_v15(home: Path) -> set[str]:
    """Version 15 (m001-m015_counts): the main index's rowids the ids themselves, oldest first (issue #40)."""
    return _build_at(home, "v15", 15)


def build_client_only(home: Path) -> set[str]:
    """A database created by the hook client alone: the inbox table, no schema_migrations."""
    assert not home.exists()
    markers = {f"mg-cl-{i:03d}" for i in range(MIGRATION_INBOX)}
    for marker in sorted(markers):
        assert inbox.store(new_id(), payload(marker)) == "inbox"
    tables = {r[0] for r in db_rows(home / "nmem.db", "SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"inbox"}, tables
    return markers


# One row per earlier schema version; a new migration adds a row that builds its predecessor's db.
EARLIER_VERSIONS: list[tuple[str, Callable[[Path], set[str]], tuple[str, ...]]] = [
    ("client-only", build_client_only, ()),
    ("v1-m001_initial", build_v1, ("m001_initial",)),
    ("v2-m002_fts_batch_index", build_v2, ("m001_initial", "m002_fts_batch_index")),
    ("v3-m003_natural_keys", build_v3, ("m001_initial", "m002_fts_batch_index", "m003_natural_keys")),
    (
        "v4-m004_fts_watermark",
        build_v4,
        ("m001_initial", "m002_fts_batch_index", "m003_natural_keys", "m004_fts_watermark"),
    ),
    (
        "v5-m005_tool_calls_by_row",
        build_v5,
        ("m001_initial", "m002_fts_batch_index", "m003_natural_keys", "m004_fts_watermark", "m005_tool_calls_by_row"),
    ),
    (
        "v6-m006_drop_file_index",
        build_v6,
        tuple(name for name, _ in MIGRATIONS[:6]),
    ),
    ("v7-m007_unspaced_grams", build_v7, tuple(name for name, _ in MIGRATIONS[:7])),
    ("v8-m008_positionless_fts", build_v8, tuple(name for name, _ in MIGRATIONS[:8])),
    ("v9-m009_retention_notice", build_v9, tuple(name for name, _ in MIGRATIONS[:9])),
    ("v10-m010_project_in_index", build_v10, tuple(name for name, _ in MIGRATIONS[:10])),
    ("v11-m011_agent", build_v11, tuple(name for name, _ in MIGRATIONS[:11])),
    ("v12-m012_team", build_v12, tuple(name for name, _ in MIGRATIONS[:12])),
    ("v13-m013_session_places", build_v13, tuple(name for name, _ in MIGRATIONS[:13])),
    ("v14-m014_team_apart", build_v14, tuple(name for name, _ in MIGRATIONS[:14])),
    ("v15-m015_counts", build_v15, tuple(name for name, _ in MIGRATIONS[:15])),
]
