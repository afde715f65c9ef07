"""Move events that clients left in the inbox table or the spool directory into memory.

Each inbox row is deleted in the same transaction that stores its event, and
each spool file is unlinked only after that commit, so a crash at any point
leaves the event either still waiting or stored once (the ledger skips repeats).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time

import anyio

from nmem_client import fallback, malformed
from nmemd.capture import clock
from nmemd.capture.extract import extract_event
from nmemd.capture.ingest import Ingestor
from nmemd.config import Settings
from nmemd.errors import InvalidEvent
from nmemd.store.batches import Incoming
from nmemd.store.checkpointer import side_checkpoint

LOG = logging.getLogger("nmemd.drain")
DRAIN_BATCH = 256
SPOOL_SUFFIX = ".event"
TMP_SUFFIX = ".tmp"  # a spool file being written: `<event_id>.event.<pid>.tmp`, renamed once complete
# A client writes its spool file in one go under the hook's timeout (seconds; the longest
# Claude Code hook timeout is 60 s by default). A temp file untouched for this long was left by a
# client that died or failed mid-write (disk full): nobody will rename it, and it may hold an
# unredacted payload, so the drain removes it. Ten times any live writer's lifetime.
STALE_TMP_S = 600.0


async def drain_once(ingestor: Ingestor, settings: Settings) -> int:
    """Drain everything waiting now; return how many events were handled."""
    handled = await _drain_inbox(ingestor, settings)
    handled += await _drain_spool(ingestor, settings, settings.spool)
    _remove_stale_tmp(settings.spool)
    handled += await _drain_fallback(ingestor, settings)
    if handled:
        # The raw payloads (which may hold secrets) were deleted with secure_delete
        # on; truncating the WAL removes their last copies from disk.
        try:
            async with ingestor.store.checkpoint_lock:
                await anyio.to_thread.run_sync(side_checkpoint, settings.db, "TRUNCATE")
        except sqlite3.Error as exc:
            LOG.debug("checkpoint after drain skipped: %s", exc)
    return handled


async def _drain_inbox(ingestor: Ingestor, settings: Settings) -> int:
    store = ingestor.store
    skip = frozenset(settings.skip_tools)
    handled = 0
    last_key = ""
    while True:
        rows = await store.conn.execute_fetchall(
            "SELECT event_id, received_at, payload FROM inbox WHERE event_id > ? ORDER BY event_id LIMIT ?",
            (last_key, DRAIN_BATCH),
        )
        rows = list(rows)
        if not rows:
            return handled
        last_key = rows[-1][0]
        items: list[Incoming] = []
        invalid: list[tuple[str]] = []
        now = clock.stamps.now()  # a client's clock may have leapt ahead too
        for event_id, received_at, payload in rows:
            if len(payload) > settings.max_frame_bytes:
                LOG.warning("dropping inbox event %s: %d bytes, over max_frame_bytes", event_id, len(payload))
                invalid.append((event_id,))
                continue
            try:
                extracted = extract_event(bytes(payload), skip)
            except InvalidEvent as exc:
                LOG.warning("dropping invalid inbox event %s: %s", event_id, exc)
                malformed.note(f"refused from the inbox: {exc}", settings.home)
                invalid.append((event_id,))
                continue
            at = min(float(received_at), now)
            items.append(Incoming(event_id=event_id, received_at=at, extracted=extracted, from_inbox=True))
        if invalid:
            async with store.write() as conn:
                await conn.executemany("DELETE FROM inbox WHERE event_id = ?", invalid)
        if items:
            await ingestor.submit_many(items)
        handled += len(rows)


def _remove_stale_tmp(spool: str, now: float | None = None) -> int:
    """Unlink spool temp files no live client can still be writing (untouched for STALE_TMP_S)."""
    now = time.time() if now is None else now
    removed = 0
    try:
        names = [n for n in os.listdir(spool) if n.endswith(TMP_SUFFIX)]
    except OSError:
        return 0
    for name in names:
        path = os.path.join(spool, name)
        try:
            st = os.lstat(path)
            if now - st.st_mtime < STALE_TMP_S:  # every write (and the O_TRUNC open) sets mtime
                continue  # possibly being written right now
            os.unlink(path)
            removed += 1
        except OSError:
            continue
    if removed:
        LOG.warning("removed %d stale spool temp file%s (a client died mid-write)", removed, "s" * (removed > 1))
    return removed


async def _drain_fallback(ingestor: Ingestor, settings: Settings) -> int:
    """Events a client kept outside NMEM_HOME while the home could not be used (nmem_client.fallback),
    from private folders of ours only; the reason is removed with the last of them."""
    handled = 0
    for folder in fallback.candidates(settings.home):
        if fallback.private_folder_problem(folder) is not None:
            continue
        done = await _drain_spool(ingestor, settings, folder)
        if done:
            LOG.warning(
                "stored %d event%s kept in %s while NMEM_HOME could not be used", done, "s" * (done > 1), folder
            )
        handled += done
        _remove_stale_tmp(folder)
        try:
            if not any(n.endswith(SPOOL_SUFFIX) for n in os.listdir(folder)):
                os.unlink(os.path.join(folder, fallback.REASON))
        except OSError:
            pass
    return handled


async def _drain_spool(ingestor: Ingestor, settings: Settings, folder: str) -> int:
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(SPOOL_SUFFIX))
    except FileNotFoundError:
        return 0
    skip = frozenset(settings.skip_tools)
    handled = 0
    for start in range(0, len(names), DRAIN_BATCH):
        chunk = names[start : start + DRAIN_BATCH]
        items: list[Incoming] = []
        done: list[str] = []
        for name in chunk:
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
                received_at = st.st_mtime
                if st.st_size > settings.max_frame_bytes:
                    LOG.warning("dropping spooled event %s: over max_frame_bytes", name)
                    done.append(path)
                    continue
                body = await anyio.Path(path).read_bytes()
            except OSError:
                continue
            event_id = name[: -len(SPOOL_SUFFIX)]
            done.append(path)
            try:
                extracted = extract_event(body, skip)
            except InvalidEvent as exc:
                LOG.warning("dropping invalid spooled event %s: %s", event_id, exc)
                malformed.note(f"refused from the spool: {exc}", settings.home)
                continue
            items.append(Incoming(event_id=event_id, received_at=received_at, extracted=extracted))
        if items:
            await ingestor.submit_many(items)
        for path in done:
            try:
                os.unlink(path)
            except OSError:
                pass
        handled += len(done)
    return handled
