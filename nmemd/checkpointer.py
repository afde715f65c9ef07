"""Keep the WAL short without making a commit wait for a checkpoint.

SQLite's automatic checkpoint runs inside the COMMIT that crosses 1000 WAL
pages, on the writer's thread: every few hundred events one batch waited for a
checkpoint (an fsync included) before its events were acknowledged. The writer
turns it off (`wal_autocheckpoint=0`) and this task checkpoints PASSIVE from
its own connection on a worker thread instead, at most once per `interval`
while commits keep coming. PASSIVE never blocks the writer nor readers.
"""

from __future__ import annotations

import logging
import sqlite3

import anyio

LOG = logging.getLogger("nmemd.checkpointer")
INTERVAL_S = 0.25
BUSY_TIMEOUT_S = 0.2


def side_checkpoint(db: str, mode: str) -> tuple[int, int, int]:
    """Checkpoint from a separate connection; return SQLite's (busy, WAL frames, frames copied).

    It writes no transaction; it only copies committed frames into the database file.
    """
    conn = sqlite3.connect(db, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        row = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        return int(row[0]), int(row[1]), int(row[2])
    finally:
        conn.close()


class Checkpointer:
    def __init__(self, db: str, interval: float = INTERVAL_S):
        self.db = db
        self.interval = interval
        self._dirty = anyio.Event()
        self.runs = 0

    def committed(self) -> None:
        """Called after every commit: there are frames to copy."""
        self._dirty.set()

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            try:
                await anyio.to_thread.run_sync(side_checkpoint, self.db, "PASSIVE")
                self.runs += 1
            except sqlite3.Error as exc:  # the next commit asks again
                LOG.warning("background checkpoint failed: %s", exc)
            await anyio.sleep(self.interval)
