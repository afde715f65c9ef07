"""Keep the WAL short without making a commit wait for a checkpoint.

SQLite's automatic checkpoint runs inside the COMMIT that crosses 1000 WAL
pages, on the writer's thread: every few hundred events one batch waited for a
checkpoint (an fsync included) before its events were acknowledged. The writer
turns it off (`wal_autocheckpoint=0`) and this task checkpoints PASSIVE from
its own connection on a worker thread instead, at most once per `interval`
while commits keep coming. PASSIVE never blocks the writer nor readers.

Under sustained writes a commit always lands while PASSIVE copies, so the WAL
is never fully copied and never restarts from its beginning: it would grow
without bound. Past `restart_frames` the checkpointer takes the store's lock
(no batch starts meanwhile), and a RESTART checkpoint copies the few frames
PASSIVE left and makes the next commit start the WAL over: a pause of a few
milliseconds every ~16 MB of writes, and only under sustained load.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

import anyio

from nmemd.config import tunable

if TYPE_CHECKING:
    from nmemd.store.database import Store

LOG = logging.getLogger("nmemd.checkpointer")
INTERVAL_S = 0.25
# PASSIVE never waits. RESTART and TRUNCATE hold the write lock while they wait for readers,
# so every commit waits with them: they wait this long at most, then report busy (retried later).
BUSY_TIMEOUT_S = 0.05
RESTART_FRAMES = 4096  # ~16 MB of WAL at 4 KB pages
# The checkpoint job (nmemd.jobs.maintenance) truncates a WAL file larger than this; doctor warns at twice it.
WAL_TRUNCATE_BYTES = tunable("WAL_TRUNCATE_BYTES", 32 * 1024 * 1024, 1)


def side_checkpoint(db: str, mode: str, busy_timeout_s: float = BUSY_TIMEOUT_S) -> tuple[int, int, int]:
    """Checkpoint from a separate connection; return SQLite's (busy, WAL frames, frames copied).

    It writes no transaction; it only copies committed frames into the database file.
    """
    conn = sqlite3.connect(db, timeout=busy_timeout_s, isolation_level=None)
    try:
        row = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        return int(row[0]), int(row[1]), int(row[2])
    finally:
        conn.close()


class Checkpointer:
    def __init__(self, store: Store, interval: float = INTERVAL_S, restart_frames: int = RESTART_FRAMES):
        self.store = store
        self.db = store.settings.db
        self.interval = interval
        self.restart_frames = restart_frames
        self._dirty = anyio.Event()
        self.runs = 0
        self.restarts = 0
        self.wal_frames = 0  # frames in the WAL at the last checkpoint (-1: another checkpoint was running)

    def committed(self) -> None:
        """Called after every commit: there are frames to copy."""
        self._dirty.set()

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty = anyio.Event()
            try:
                await self.checkpoint()
            except sqlite3.Error as exc:  # the next commit asks again
                LOG.warning("background checkpoint failed: %s", exc)
            await anyio.sleep(self.interval)

    async def checkpoint(self) -> None:
        frames, restarted = await keep_wal_short(self.store, self.restart_frames)
        self.runs += 1
        self.wal_frames = frames
        self.restarts += restarted


async def keep_wal_short(store: Store, restart_frames: int = RESTART_FRAMES) -> tuple[int, bool]:
    """PASSIVE; past `restart_frames`, a second PASSIVE and then a RESTART with our writer held off.

    The second pass copies what was committed during the first without the lock, so the
    locked pass has only a few frames left. Returns (WAL frames seen, whether it restarted).
    Shared by the background checkpointer and the maintenance jobs' steps.
    """
    db = store.settings.db
    async with store.checkpoint_lock:  # always before store.lock, never after
        _, frames, _ = await anyio.to_thread.run_sync(side_checkpoint, db, "PASSIVE")
        if frames < restart_frames:
            return frames, False
        await anyio.to_thread.run_sync(side_checkpoint, db, "PASSIVE")
        async with store.lock:
            busy, left, done = await anyio.to_thread.run_sync(side_checkpoint, db, "RESTART")
    LOG.debug("WAL at %d frames: RESTART %s", frames, "deferred (a reader)" if busy else f"copied {done}/{left}")
    return frames, not busy
