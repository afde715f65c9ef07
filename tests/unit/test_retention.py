"""Retention: per-type sweeps in small steps, pinned observations kept, config layers (the same through the
CLI, as a subprocess: tests/daemon/test_retention_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.db import db_rows, integrity_ok
from support.store import DAY, NOW, aged_event, fill_by_age

from nmemd import config
from nmemd.jobs import retention, scheduler
from nmemd.model import Extracted, Observation
from nmemd.store.batches import Incoming
from nmemd.store.database import open_store
from nmemd.store.keys import key_digest


def _by_type(db: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in db_rows(db, "SELECT type, count(*) FROM observations GROUP BY type")}  # type: ignore[call-overload]


def _write_config(nmem_env: dict[str, str], text: str) -> Path:
    home = Path(nmem_env["NMEM_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)
    return home


@pytest.mark.anyio
async def test_sweep_removes_expired_types_keeps_pinned_fresh_and_forever_types(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retention, "RETENTION_BATCH", 7)  # many steps: the loop and resizing are exercised
    settings = config.load()
    await fill_by_age(settings)
    old_read = db_rows(settings.db, "SELECT id FROM observations WHERE type = 'read' ORDER BY ts LIMIT 2")
    pinned = [int(r[0]) for r in old_read]  # type: ignore[call-overload]
    async with open_store(settings) as store:
        async with store.write() as conn:
            await conn.execute(f"UPDATE observations SET pinned = 1 WHERE id IN ({pinned[0]}, {pinned[1]})")
            # a read seen again yesterday (dedup merged into the old row): its last_ts keeps it
            await conn.execute(
                "UPDATE observations SET last_ts = ? WHERE type = 'read' AND title = 'read number5'", (NOW - DAY,)
            )
        result = await scheduler.run_job(store, "retention")
        assert result.ok, result
        assert "removed" in result.outcome and "kept 2 pinned" in result.outcome, result.outcome
        again = await retention.sweep(store)  # nothing left to do: idempotent
        assert again.removed == {} and again.pinned_kept == 2
    counts = _by_type(settings.db)
    # defaults: read/search 30 days, command 90, prompt/edit/error forever
    assert counts == {"read": 5 + 2 + 1, "search": 5, "command": 5, "prompt": 45, "edit": 45, "error": 45}
    kept_pinned = db_rows(settings.db, f"SELECT count(*) FROM observations WHERE id IN ({pinned[0]}, {pinned[1]})")
    assert kept_pinned == [(2,)]
    assert db_rows(settings.db, "SELECT count(*) FROM prompts") == [(45,)]
    # the ledger keeps every event, unlinked from what was removed
    assert db_rows(settings.db, "SELECT count(*) FROM events") == [(270,)]
    assert db_rows(settings.db, "SELECT count(*) FROM events WHERE observation_id IS NULL") == [(40 + 40 + 37,)]
    assert db_rows(settings.db, "SELECT count(*) FROM sessions") == [(1,)]  # session rows are never swept
    fts = db_rows(settings.db, "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH 'lemming3'")
    assert fts == [(3,)]  # prompt, edit, error (read 3 / search 3 / command 3 were old and unpinned)
    integrity_ok(settings.db)
    status = db_rows(settings.db, "SELECT outcome FROM jobs WHERE name = 'retention'")
    assert status and "removed" in str(status[0][0])


@pytest.mark.anyio
async def test_an_expired_tool_call_stays_known_so_an_import_does_not_bring_it_back() -> None:
    """A tool call recorded by its row alone (m005): the sweep moves its key into the ledger first."""
    settings = config.load({})
    obs = Observation(type="read", title="read old.py", content="x = 1", tool_name="Read")
    ex = Extracted(hook_event="PostToolUse", session_id="s9", cwd="/p", project="/p", tool_use_id="toolu_old",
                   observations=[obs])  # fmt: skip
    async with open_store(settings) as store:
        assert await store.commit_batch([Incoming(event_id="ev-old", received_at=NOW - 100 * DAY, extracted=ex)]) == 1
        assert db_rows(settings.db, "SELECT natural_key FROM events") == [(None,)]  # its row is its record
        swept = await retention.sweep(store)
        assert swept.removed == {"read": 1}
        # kept as its digest (issue #28, finding 12): the call is recognised, its ids are not kept
        assert db_rows(settings.db, "SELECT natural_key FROM events") == [(key_digest("tool:s9:toolu_old"),)]
        again = Incoming(event_id="imp-again", received_at=NOW - 100 * DAY, extracted=ex)  # as an import sends it
        assert await store.commit_batch([again]) == 0
    assert db_rows(settings.db, "SELECT count(*) FROM observations") == [(0,)]


@pytest.mark.anyio
async def test_retention_config_changes_only_the_types_it_names(nmem_env: dict[str, str]) -> None:
    _write_config(nmem_env, "[retention_days]\nprompt = 50\nread = 0\n")
    settings = config.load()
    assert settings.retention_days["prompt"] == 50 and settings.retention_days["read"] == 0
    assert settings.retention_days["search"] == config.RETENTION_DEFAULTS["search"]
    await fill_by_age(settings)
    async with open_store(settings) as store:
        swept = await retention.sweep(store)
    assert swept.removed == {"prompt": 40, "search": 40, "command": 40}
    assert _by_type(settings.db)["read"] == 45  # 0 days: kept forever
    integrity_ok(settings.db)


@pytest.mark.anyio
async def test_merges_left_deferred_by_an_interrupted_sweep_are_restored_on_open() -> None:
    settings = config.load()
    async with open_store(settings) as store:
        await store.conn.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES ('automerge', 0)")
        await store.conn.execute("INSERT INTO observations_fts(observations_fts, rank) VALUES ('crisismerge', 2000)")
    async with open_store(settings):
        pass
    rows = db_rows(settings.db, "SELECT k, v FROM observations_fts_config WHERE k IN ('automerge', 'crisismerge')")
    assert sorted(rows) == [("automerge", 4), ("crisismerge", 16)]


# --- issue #16, findings 12 and 16: the daemon's sweeps give a day's notice ---------------------------


async def _import_old(settings: config.Settings, start: int) -> None:
    """History brought in later (an import): 10 reads 200 days old."""
    async with open_store(settings) as store:
        await store.commit_batch([aged_event(n, "read", 200.0, session="imp") for n in range(start, start + 10)])


@pytest.mark.anyio
async def test_the_daemons_sweep_announces_a_day_before_it_removes_and_spares_what_came_later() -> None:
    """Finding 16: one sweep over a year-old store deleted half of it at once, history imported that
    day included, with no word before. Now the first sweep removes nothing and says what has expired;
    the first sweep a day later removes exactly that; what was stored after the notice waits for one."""
    settings = config.load()
    await fill_by_age(settings)
    day = retention.NOTICE_S
    async with open_store(settings) as store:
        first = await retention.sweep(store, now=NOW, notice_s=day)
        assert first.removed == {} and first.notice is not None
        assert first.notice.expiring == {"read": 40, "search": 40, "command": 40}
        assert "120 expired observations" in first.line() and "go after" in first.line(), first.line()
        early = await retention.sweep(store, now=NOW + day / 2, notice_s=day)
        assert early.removed == {} and early.notice == first.notice  # not due yet: said again
    await _import_old(settings, 100)  # imported half a day after the notice
    async with open_store(settings) as store:
        due = await retention.sweep(store, now=NOW + day + 1, notice_s=day)
        assert due.removed == {"read": 40, "search": 40, "command": 40}
        assert _by_type(settings.db)["read"] == 5 + 10  # the imported reads were not in the notice
        assert due.notice is not None and due.notice.expiring == {"read": 10}
        later = await retention.sweep(store, now=NOW + 2 * day + 2, notice_s=day)
        assert later.removed == {"read": 10}
    integrity_ok(settings.db)


@pytest.mark.anyio
async def test_a_wall_clock_leap_removes_nothing_that_was_not_announced() -> None:
    """Finding 12: with the clock 400 days ahead, a sweep deleted yesterday's reads. Now a sweep removes
    what its notice announced under the right clock; the leap's own notice is dropped when the clock
    comes back (it is dated in the clock's future) and nothing recent goes."""
    settings = config.load()
    await fill_by_age(settings)  # per type: 40 rows 100 days old, 5 rows a day old
    day = retention.NOTICE_S
    async with open_store(settings) as store:
        await retention.sweep(store, now=NOW, notice_s=day)
        leap = await retention.sweep(store, now=NOW + 400 * day, notice_s=day)
        assert leap.removed == {"read": 40, "search": 40, "command": 40}  # what was announced, nothing more
        assert _by_type(settings.db) == {"read": 5, "search": 5, "command": 5, "prompt": 45, "edit": 45, "error": 45}
        back = await retention.sweep(store, now=NOW + day + 1, notice_s=day)  # the clock is right again
        assert back.removed == {} and back.notice is not None and back.notice.expiring == {}
        assert back.line() == "nothing expired"  # an empty notice announces nothing
        assert _by_type(settings.db)["read"] == 5
    integrity_ok(settings.db)


@pytest.mark.anyio
async def test_a_config_that_keeps_a_type_longer_overrides_a_notice() -> None:
    settings = config.load()
    await fill_by_age(settings)
    day = retention.NOTICE_S
    async with open_store(settings) as store:
        await retention.sweep(store, now=NOW, notice_s=day)
    kept = config.load({"retention_days": {"read": 0, "search": 200}})  # read forever, search 200 days
    async with open_store(kept) as store:
        due = await retention.sweep(store, now=NOW + day + 1, notice_s=day)
    assert due.removed == {"command": 40}
    assert _by_type(settings.db)["read"] == 45 and _by_type(settings.db)["search"] == 45


@pytest.mark.anyio
async def test_a_step_deletes_a_bounded_amount_of_text() -> None:
    """Finding 16: one step took 606 ms (the client's timeout is 500): FTS5 re-reads every deleted row's
    words, and a step of 32 long rows (whole compaction summaries) read megabytes. A step now takes
    STEP_BYTES of text at most, one row at least."""
    settings = config.load()
    big = "word " * (retention.STEP_BYTES // 5 // 3)  # three rows fill a step
    obs = [Observation(type="read", title=f"big {n}", content=f"{big} n{n}") for n in range(12)]  # type: ignore[arg-type]
    ex = Extracted(hook_event="PostToolUse", session_id="sb", cwd="/p", project="/p", observations=obs)
    async with open_store(settings) as store:
        await store.commit_batch([Incoming(event_id="ev-big", received_at=NOW - 100 * DAY, extracted=ex)])
        swept = await retention.sweep(store, now=NOW)
    assert swept.removed == {"read": 12}
    assert swept.steps >= 12 // 3, swept  # 32 rows in one step before
    integrity_ok(settings.db)
