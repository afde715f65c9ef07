"""Keep the WAL short without making a commit wait for a checkpoint.

SQLite's automatic checkpoint runs inside the COMMIT that crosses 1000 WAL
pages, on the writer's thread: every few hundred events one batch waited for a
checkpoint (an fsync included) before its events were acknowledged. The writer
turns it off (`wal_autocheckpoint=0`) and this task checkpoints PASSIVE from
its own connection on a worker thread instead, after a commit, then again after
`every` commits or `interval`, whichever comes first. PASSIVE never blocks the
writer nor readers. The pages every batch rewrites (the indexes' newest leaves,
the counts) are copied and fsynced once per checkpoint: every 64 batches rather
than every 250 ms (~30 batches under load) halves the checkpoints' CPU (issue #40).

Under sustained writes a commit always lands while PASSIVE copies, so the WAL
is never fully copied and never restarts from its beginning: it would grow
without bound. Past `restart_frames` the checkpointer takes the store's lock
(no batch starts meanwhile), and a RESTART checkpoint copies the few frames
PASSIVE left and makes the next commit start the WAL over. That pause (two
fsyncs: 10-60 ms on a busy machine at a million observations) waits for the
writer to be quiet for `quiet_s`; while commits keep coming it is put off until
`force_frames`, once per ~48 MB of writes instead of every ~16 MB (issue #40).
Background writes (team sync's pulled rows: ~5 KB of WAL per row) wait from the
second PASSIVE to the end of the RESTART, so that it copies only the hooks' few
frames (issue #40: 7-120 ms a time, the hooks' commits held, while a pull ran).
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import TYPE_CHECKING

import anyio

from nmemd.config import tunable

if TYPE_CHECKING:
    from nmemd.store.database import Store

LOG = logging.getLogger("nmemd.checkpointer")
INTERVAL_S = 1.0  # at most this long between checkpoints while commits keep coming
EVERY_COMMITS = 64  # ... or this many commits
# PASSIVE never waits. RESTART and TRUNCATE hold the write lock while they wait for readers,
# so every commit waits with them: they wait this long at most, then report busy (retried later).
BUSY_TIMEOUT_S = 0.05
RESTART_FRAMES = 4096  # ~16 MB of WAL at 4 KB pages: a RESTART once no commit came for QUIET_S
QUIET_S = 0.25
# x RESTART_FRAMES, ~48 MB: a RESTART even while commits keep coming (under journal_size_limit, 64 MB,
# so the WAL file restarts in place instead of being cut back and grown again).
FORCE_FACTOR = 3
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
    def __init__(
        self,
        store: Store,
        interval: float = INTERVAL_S,
        restart_frames: int = RESTART_FRAMES,
        quiet_s: float = QUIET_S,
        force_frames: int | None = None,
        every: int = EVERY_COMMITS,
    ):
        self.store = store
        self.db = store.settings.db
        self.interval = interval
        self.every = every
        self.commits = 0  # since the last checkpoint started
        self._many = anyio.Event()  # `every` commits since then
        self.restart_frames = restart_frames
        self.quiet_s = quiet_s
        self.force_frames = FORCE_FACTOR * restart_frames if force_frames is None else force_frames
        self._dirty = anyio.Event()
        self.last_commit = time.monotonic()
        self.runs = 0
        self.restarts = 0
        self.deferred = False  # the WAL is past restart_frames: RESTART at the first quiet moment
        self.wal_frames = 0  # frames in the WAL at the last checkpoint (-1: another checkpoint was running)

    def committed(self) -> None:
        """Called after every commit: there are frames to copy."""
        self.last_commit = time.monotonic()
        self._dirty.set()
        self.commits += 1
        if self.commits >= self.every:
            self._many.set()

    async def run(self) -> None:
        while True:
            if self.deferred:  # no commit for quiet_s: the RESTART keeps no batch waiting
                with anyio.move_on_after(self.quiet_s):
                    await self._dirty.wait()
            else:
                await self._dirty.wait()
            self._dirty = anyio.Event()
            self.commits = 0
            try:
                await self.checkpoint()
            except sqlite3.Error as exc:  # the next commit asks again
                LOG.warning("background checkpoint failed: %s", exc)
            with anyio.move_on_after(self.interval):
                await self._many.wait()
            self._many = anyio.Event()

    async def checkpoint(self) -> None:
        quiet = time.monotonic() - self.last_commit >= self.quiet_s
        frames, restarted = await keep_wal_short(self.store, self.restart_frames if quiet else self.force_frames)
        self.runs += 1
        self.wal_frames = frames
        self.restarts += restarted
        self.deferred = not restarted and frames >= self.restart_frames


async def keep_wal_short(store: Store, restart_frames: int = RESTART_FRAMES) -> tuple[int, bool]:
    """PASSIVE; past `restart_frames`, a second PASSIVE and then a RESTART with our writer held off
    (and background writes, `Store.restarting`, from the second PASSIVE on).

    The second pass copies what was committed during the first without the lock, so the
    locked pass has only a few frames left. Returns (WAL frames seen, whether it restarted).
    Shared by the background checkpointer and the maintenance jobs' steps.
    """
    db = store.settings.db
    async with store.checkpoint_lock:  # always before store.lock, never after
        _, frames, _ = await anyio.to_thread.run_sync(side_checkpoint, db, "PASSIVE")
        if frames < restart_frames:
            return frames, False
        store.restarting = True  # background writes pause: the locked pass copies only the hooks' frames
        try:
            await anyio.to_thread.run_sync(side_checkpoint, db, "PASSIVE")
            async with store.lock:
                busy, left, done = await anyio.to_thread.run_sync(side_checkpoint, db, "RESTART")
        finally:
            store.restarting = False
    LOG.debug("WAL at %d frames: RESTART %s", frames, "deferred (a reader)" if busy else f"copied {done}/{left}")
    return frames, not busy
