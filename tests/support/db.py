"""Reads of a store's SQLite file from outside the daemon, and the integrity checks every test can end with."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nmemd.store import fts


def db_rows(db: str | Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(conn.execute(sql, params))
    finally:
        conn.close()


def integrity_ok(db: str | Path) -> None:
    """PRAGMA integrity_check and the FTS5 integrity check (rank 1 compares with content).

    The FTS check runs on an in-memory copy (a daemon may be running): the observations
    above the watermark (migration m004) are indexed there first, so the check proves the
    index plus what waits for it is exactly the content, and the file is never written.
    """
    conn = sqlite3.connect(db)
    copy = sqlite3.connect(":memory:")
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        dup = conn.execute("SELECT count(*) - count(DISTINCT event_id) FROM events").fetchone()[0]
        assert dup == 0
        conn.backup(copy)
        if copy.execute("SELECT 1 FROM sqlite_master WHERE name = 'fts_state'").fetchone():
            negated = copy.execute("SELECT 1 FROM schema_migrations WHERE name = ?", (fts.NEGATED_SINCE,)).fetchone()
            copy.execute(
                f"INSERT INTO observations_fts(rowid, {fts.COLUMNS})"
                f" SELECT {'-id' if negated else 'id'}, {fts.COLUMNS} FROM observations"
                f" WHERE id >= (SELECT indexed_below FROM fts_state) ORDER BY id {'DESC' if negated else ''}"
            )
        copy.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES ('integrity-check', 1)")
    finally:
        copy.close()
        conn.close()
