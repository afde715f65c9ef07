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
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import msgspec

from nmemd.jobs import purge
from nmemd.store.database import FTS_AUTOMERGE, Store

LOG = logging.getLogger("nmemd.retention")
STEP_TARGET_MS = 3.0  # aim for steps this long: ingestion waits at most about one step
MIN_BATCH = 8
FIRST_BATCH = 32
MAX_STEPS = 100_000  # a runaway loop guard
DAY_S = 86400.0


class Swept(msgspec.Struct, kw_only=True):
    """What one sweep removed, per type, and how it went."""

    removed: dict[str, int] = {}
    pinned_kept: int = 0  # expired by age but pinned
    steps: int = 0
    longest_step_ms: float = 0.0

    def line(self) -> str:
        total = sum(self.removed.values())
        if not total:
            text = "nothing expired"
        else:
            parts = ", ".join(f"{k} {v}" for k, v in sorted(self.removed.items(), key=lambda kv: -kv[1]))
            text = f"removed {total} observations ({parts}) in {self.steps} steps"
            text += f", longest {self.longest_step_ms:.1f} ms"
        if self.pinned_kept:
            text += f"; kept {self.pinned_kept} pinned"
        return text


def cutoffs(days: dict[str, float], now: float) -> dict[str, float]:
    """Type -> timestamp before which it expires; types kept forever (0 days) are absent."""
    return {kind: now - d * DAY_S for kind, d in sorted(days.items()) if d > 0}


_EXPIRED = "FROM observations WHERE type = ? AND ts < ? AND last_ts < ?"  # (type, ts) index; last_ts >= ts


async def _step(store: Store, kind: str, before: float, batch: int) -> tuple[list[int], float]:
    """Delete up to `batch` expired, unpinned observations of one type; their ids, and ms under the lock."""
    async with store.write() as conn:
        started = time.perf_counter()
        await purge.clear_listed(conn)
        await conn.execute(
            f"INSERT INTO temp.purge_ids(id) SELECT id {_EXPIRED} AND NOT pinned ORDER BY ts LIMIT ?",
            (kind, before, before, batch),
        )
        ids = [int(r[0]) for r in await conn.execute_fetchall("SELECT id FROM temp.purge_ids")]
        if ids:
            await purge.delete_listed(conn, scan_ledger=False)
        await conn.execute("DELETE FROM temp.purge_ids")
    return ids, (time.perf_counter() - started) * 1000  # the commit included


async def _pinned_expired(store: Store, kind: str, before: float) -> int:
    async with store.lock:
        value = await store.scalar(f"SELECT count(*) {_EXPIRED} AND pinned", (kind, before, before))
    return int(value or 0)


async def _yield(store: Store) -> None:
    await anyio.lowlevel.checkpoint()


async def sweep(
    store: Store, now: float | None = None, between_steps: Callable[[Store], Awaitable[None]] = _yield
) -> Swept:
    """Delete every expired observation, type by type, in steps of a few ms.

    `between_steps` runs after each full step (the maintenance job passes one that
    also checkpoints, so the WAL stays short while a big sweep runs).
    """
    settings = store.settings
    limits = cutoffs({str(k): v for k, v in settings.retention_days.items()}, time.time() if now is None else now)
    batch = min(FIRST_BATCH, settings.maintenance_retention_batch)  # grows while steps stay short
    out = Swept()
    async with _no_automerge(store):
        await _sweep(store, limits, batch, out, between_steps)
    if out.removed:
        LOG.info("retention: %s", out.line())
    return out


@asynccontextmanager
async def _no_automerge(store: Store) -> AsyncIterator[None]:
    """FTS5 automerge off while a sweep runs; the `fts_merge` job merges afterwards, in bounded steps.

    Every step's commit writes a small FTS5 segment of delete markers, and FTS5 merges
    segments inside the commit that makes a level overflow: an occasional step held the
    lock 30+ ms for it. The setting is stored in the database; a crash mid-sweep leaves it
    off until `open_store` sets it back.
    """
    await _set_automerge(store, 0)
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await _set_automerge(store, FTS_AUTOMERGE)


async def _set_automerge(store: Store, value: int) -> None:
    async with store.write() as conn:
        await conn.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES ('automerge', ?)", (value,))


async def _sweep(
    store: Store,
    limits: dict[str, float],
    batch: int,
    out: Swept,
    between_steps: Callable[[Store], Awaitable[None]],
) -> None:
    settings = store.settings
    for kind, before in limits.items():
        while out.steps < MAX_STEPS:
            ids, took_ms = await _step(store, kind, before, batch)
            out.steps += 1
            out.longest_step_ms = max(out.longest_step_ms, took_ms)
            if ids:
                out.removed[kind] = out.removed.get(kind, 0) + len(ids)
                store.dedup.forget(set(ids))
            if len(ids) < batch:
                break
            # Resize towards the target from what this step cost, never above the configured batch.
            scaled = min(2 * batch, int(batch * STEP_TARGET_MS / max(took_ms, 0.1)))
            batch = max(MIN_BATCH, min(settings.maintenance_retention_batch, scaled))
            await between_steps(store)  # a batch waiting for the lock goes first
        out.pinned_kept += await _pinned_expired(store, kind, before)
