"""Retention sweeps: observations older than their type's retention go, pinned ones stay.

A sweep is a maintenance job (`nmem maintain --job retention`, and hourly in
the daemon). It deletes in small steps, each its own short write transaction
on the daemon's one connection, so a batch of hook events waiting for the
lock waits a few ms at most: the step size adapts to keep each step near
`STEP_TARGET_MS`, whatever the machine and the size of the rows.

Deletion is purge's (`purge.delete_listed`): prompts go with their
observations, the FTS delete trigger removes their index entries and
`secure_delete=ON` zeroes the freed pages. Unlike a purge there is no full
FTS rebuild (seconds under the lock on a large store) nor a forced WAL
truncate: the `fts_merge`, `vacuum` and `checkpoint` jobs, which run after
this one, merge the deleted entries out of the index, give the pages back
and shrink the WAL in their own small steps. Session rows (and their
summaries) are never swept: they are small and are what recall shows of the
past; `nmem purge --session` removes one for good.

The daemon's sweeps give notice (issue #16, finding 16): what has expired is announced (log,
`nmem status`) and removed at the first sweep a day later, and only what was stored when it was
announced. So a store met for the first time, history imported today, or a wall clock that
leapt ahead lose nothing at once: there is a day to pin, raise `retention_days`, or fix the
clock (a notice from the clock's future is dropped and made again). `nmem maintain` removes what
has expired at once: the person running it asked for that, and it prints what it removed.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import msgspec

from nmemd.capture import clock
from nmemd.config import tunable
from nmemd.history import purge
from nmemd.store import readers
from nmemd.store.database import Store
from nmemd.store.repair import FTS_MERGES, set_fts_merges

LOG = logging.getLogger("nmemd.retention")
STEP_TARGET_MS = 3.0  # aim for steps this long: ingestion waits at most about one step
MIN_BATCH = 8
FIRST_BATCH = 32
RETENTION_BATCH = tunable("RETENTION_BATCH", 200, 1)  # rows one step deletes at most (team_window's too)
MAX_STEPS = 100_000  # a runaway loop guard
STEP_BYTES = 1024 * 1024  # text one step deletes at most: FTS5 re-reads a deleted row's words (a summary is whole)
DAY_S = 86400.0
SWEEP_CRISISMERGE = 128  # segments a level holds, during a sweep, before FTS5 merges them in a commit (2,000 in all)
NOTICE_S = DAY_S  # how long before the daemon removes what it announced
CLOCK_SLACK_S = 300.0  # a notice this far in the clock's future was made before the clock went back


class Notice(msgspec.Struct, kw_only=True):
    """What had expired when a sweep announced it: removed by the first sweep NOTICE_S later."""

    announced_at: float
    upto_id: int  # the newest observation then: rows stored later wait for a notice of their own
    cutoffs: dict[str, float]  # type -> rows older than this had expired
    expiring: dict[str, int]  # type -> about how many rows that was (pinned ones included)

    def line(self) -> str:
        total = sum(self.expiring.values())
        if not total:
            return ""
        due = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.announced_at + NOTICE_S))
        return (
            f"{total} expired observations ({_parts(self.expiring)}) go after {due}:"
            " pin them or raise retention_days to keep them"
        )


class Swept(msgspec.Struct, kw_only=True):
    """What one sweep removed, per type, and how it went; and what it announced for later."""

    removed: dict[str, int] = {}
    pinned_kept: int = 0  # expired by age but pinned
    steps: int = 0
    longest_step_ms: float = 0.0
    notice: Notice | None = None  # announced by this sweep

    def line(self) -> str:
        total = sum(self.removed.values())
        if not total:
            text = "nothing removed yet" if self.notice is not None and self.notice.expiring else "nothing expired"
        else:
            observations = "observation" if total == 1 else "observations"
            steps = "step" if self.steps == 1 else "steps"
            text = f"removed {total} {observations} ({_parts(self.removed)}) in {self.steps} {steps}"
            text += f", longest {self.longest_step_ms:.1f} ms"
        if self.pinned_kept:
            text += f"; kept {self.pinned_kept} pinned"
        if self.notice is not None and self.notice.line():
            text += f"; {self.notice.line()}"
        return text


def _parts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v)


def cutoffs(days: dict[str, float], now: float) -> dict[str, float]:
    """Type -> timestamp before which it expires; types kept forever (0 days) are absent."""
    return {kind: now - d * DAY_S for kind, d in sorted(days.items()) if d > 0}


# (type, ts) index; last_ts >= ts. Rows stored after a notice (ids above its upto_id) are not in it.
_EXPIRED = "FROM observations WHERE type = ? AND ts < ? AND last_ts < ? AND +id <= ?"  # `+`: not the rowid range
_NEWEST = 1 << 62  # upto_id of a sweep without notice: every row


async def _step(store: Store, kind: str, before: float, upto_id: int, batch: int) -> tuple[list[int], float]:
    """Delete up to `batch` expired, unpinned observations of one type, STEP_BYTES of text at most (one
    at least); their ids, and ms under the lock."""
    async with store.write() as conn:
        started = time.perf_counter()
        await purge.clear_listed(conn)
        rows = await conn.execute_fetchall(
            f"SELECT id, length(content) + length(title) {_EXPIRED} AND NOT pinned ORDER BY ts LIMIT ?",
            (kind, before, before, upto_id, batch),
        )
        ids: list[int] = []
        size = 0
        for rowid, chars in rows:
            size += int(chars or 0)
            if ids and size > STEP_BYTES:
                break
            ids.append(int(rowid))
        if ids:
            await conn.execute("INSERT INTO temp.purge_ids(id) SELECT value FROM json_each(?)", (json.dumps(ids),))
            await purge.delete_listed(conn, scan_ledger=False)
        await conn.execute("DELETE FROM temp.purge_ids")
    return ids, (time.perf_counter() - started) * 1000  # the commit included


async def _pinned_expired(store: Store, kind: str, before: float, upto_id: int) -> int:
    async with store.lock:
        value = await store.scalar(f"SELECT count(*) {_EXPIRED} AND pinned", (kind, before, before, upto_id))
    return int(value or 0)


async def _yield(store: Store) -> None:
    await anyio.lowlevel.checkpoint()


async def sweep(
    store: Store,
    now: float | None = None,
    between_steps: Callable[[Store], Awaitable[None]] = _yield,
    *,
    notice_s: float = 0.0,
) -> Swept:
    """Delete expired observations, type by type, in steps of a few ms.

    `notice_s` > 0 (the daemon's schedule): remove only what a notice announced at least that long
    ago, then announce what has expired since. 0: remove everything expired now. `between_steps`
    runs after each full step (the maintenance job passes one that also checkpoints, so the WAL
    stays short while a big sweep runs)."""
    now = clock.stamps.now() if now is None else now  # not a leap of the wall clock (capture/clock.py)
    current = cutoffs({str(k): v for k, v in store.settings.retention_days.items()}, now)
    out = Swept()
    if notice_s <= 0:
        limits, upto_id = current, _NEWEST
    else:
        notice = await read_notice(store)
        if notice is not None and notice.announced_at > now + CLOCK_SLACK_S:
            LOG.warning("retention: the notice of %s is in the clock's future: announced again", notice.announced_at)
            notice = None
        if notice is not None and now - notice.announced_at < notice_s:
            out.notice = notice  # announced, not due yet
            return out
        # Due: what it announced, unless the config keeps a type longer now (or forever) than it did then.
        limits = {k: min(v, current[k]) for k, v in (notice.cutoffs if notice else {}).items() if k in current}
        upto_id = notice.upto_id if notice else 0
    if limits:
        batch = min(FIRST_BATCH, RETENTION_BATCH)  # grows while steps stay short
        async with _no_automerge(store):
            await _sweep(store, limits, upto_id, batch, out, between_steps)
    if notice_s > 0:
        out.notice = await _announce(store, current, now)
    if out.removed:
        LOG.info("retention: %s", out.line())
    return out


async def read_notice(store: Store) -> Notice | None:
    return await readers.run(store.settings.db, notice_in)


def notice_in(conn: sqlite3.Connection) -> Notice | None:
    """The store's retention notice (None: none yet, or a store from before notices)."""
    try:
        row = conn.execute("SELECT announced_at, upto_id, cutoffs, expiring FROM retention_notice").fetchone()
    except sqlite3.OperationalError:
        return None
    if row is None:
        return None
    return Notice(announced_at=row[0], upto_id=row[1], cutoffs=json.loads(row[2]), expiring=json.loads(row[3]))


async def _announce(store: Store, limits: dict[str, float], now: float) -> Notice:
    """Count what has expired by `limits` (on a reader: the index alone, no lock) and record the notice."""

    def count(conn: sqlite3.Connection) -> tuple[int, dict[str, int]]:
        upto = int(conn.execute("SELECT coalesce(max(id), 0) FROM observations").fetchone()[0])
        sql = "SELECT count(*) FROM observations WHERE type = ? AND ts < ? AND id <= ?"
        return upto, {k: int(conn.execute(sql, (k, cut, upto)).fetchone()[0]) for k, cut in limits.items()}

    upto_id, expiring = await readers.run(store.settings.db, count)
    expiring = {k: v for k, v in expiring.items() if v}
    notice = Notice(announced_at=now, upto_id=upto_id, cutoffs=limits, expiring=expiring)
    async with store.write() as conn:
        await conn.execute(
            "INSERT OR REPLACE INTO retention_notice(id, announced_at, upto_id, cutoffs, expiring)"
            " VALUES (1, ?, ?, ?, ?)",
            (now, upto_id, json.dumps(limits), json.dumps(notice.expiring)),
        )
    if notice.expiring:
        LOG.info("retention: %s", notice.line())
    return notice


@asynccontextmanager
async def _no_automerge(store: Store) -> AsyncIterator[None]:
    """FTS5 merges deferred while a sweep runs; the `fts_merge` job merges afterwards, in bounded steps.

    Every step's commit writes a small FTS5 segment of delete markers, and FTS5 merges segments
    inside the commit that makes a level overflow: with automerge on, an occasional step held the
    lock 30+ ms for it; with it off, the "crisis merge" of 16 segments on one level still ran
    inside a step, up to 190 ms at 100,000 observations and 606 ms on a year's store. Both are
    set in the database; a crash mid-sweep leaves them until `open_store` sets them back.
    """
    await _set_merges(store, {"automerge": 0, "crisismerge": SWEEP_CRISISMERGE})
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await _set_merges(store, FTS_MERGES)


async def _set_merges(store: Store, options: dict[str, int]) -> None:
    async with store.write() as conn:
        await set_fts_merges(conn, options)


async def _sweep(
    store: Store,
    limits: dict[str, float],
    upto_id: int,
    batch: int,
    out: Swept,
    between_steps: Callable[[Store], Awaitable[None]],
) -> None:
    for kind, before in limits.items():
        while out.steps < MAX_STEPS:
            ids, took_ms = await _step(store, kind, before, upto_id, batch)
            out.steps += 1
            out.longest_step_ms = max(out.longest_step_ms, took_ms)
            if ids:
                out.removed[kind] = out.removed.get(kind, 0) + len(ids)
                store.dedup.forget(set(ids))
            if not ids:
                break
            # Resize towards the target from what this step cost, never above RETENTION_BATCH.
            scaled = min(2 * batch, int(batch * STEP_TARGET_MS / max(took_ms, 0.1)))
            batch = max(MIN_BATCH, min(RETENTION_BATCH, scaled))
            await between_steps(store)  # a batch waiting for the lock goes first
        out.pinned_kept += await _pinned_expired(store, kind, before, upto_id)
