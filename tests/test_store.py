"""The store in-process: idempotency by event_id, dedup with counts, sessions and prompts."""

from __future__ import annotations

import pytest
from conftest import db_rows, integrity_ok

from nmemd import config
from nmemd.model import Extracted, Observation
from nmemd.store import Incoming, open_store

pytestmark = pytest.mark.anyio


def _event(eid: str, obs: Observation, *, session: str = "s1", ts: float = 1000.0, hook: str = "PostToolUse",
           **extra: object) -> Incoming:
    ex = Extracted(hook_event=hook, session_id=session, cwd="/p", project="/p", observations=[obs], **extra)
    return Incoming(event_id=eid, received_at=ts, extracted=ex)


def _read(path: str) -> Observation:
    return Observation(type="read", title=f"Read {path}", file_path=path, dedup_key=f"read:{path}::")


async def test_same_event_id_twice_is_stored_once() -> None:
    settings = config.load()
    async with open_store(settings) as store:
        assert await store.commit_batch([_event("e1", _read("/p/a.py"))]) == 1
        assert await store.commit_batch([_event("e1", _read("/p/a.py")), _event("e1", _read("/p/a.py"))]) == 0
    assert db_rows(store.settings.db, "SELECT count(*) FROM observations") == [(1,)]
    integrity_ok(settings.db)


async def test_repeated_reads_collapse_with_a_count_but_edits_never() -> None:
    settings = config.load()
    edit = Observation(type="edit", title="Edit a.py", file_path="/p/a.py")
    async with open_store(settings) as store:
        await store.commit_batch([_event("r1", _read("/p/a.py"), ts=1000), _event("r2", _read("/p/a.py"), ts=1001)])
        await store.commit_batch([_event("r3", _read("/p/a.py"), ts=1002), _event("x1", edit), _event("x2", edit)])
        await store.commit_batch([_event("r4", _read("/p/a.py"), ts=1002, session="s2")])
    rows = db_rows(settings.db, "SELECT type, count, session_id FROM observations ORDER BY id")
    assert rows == [("read", 3, "s1"), ("edit", 1, "s1"), ("edit", 1, "s1"), ("read", 1, "s2")]
    # every event is in the ledger, pointing at the observation it became or joined
    assert db_rows(settings.db, "SELECT count(*), count(DISTINCT observation_id) FROM events") == [(6, 4)]


async def test_dedup_window_expires() -> None:
    settings = config.load({"dedup_window_s": 10})
    async with open_store(settings) as store:
        await store.commit_batch([_event("r1", _read("/p/a.py"), ts=1000)])
        await store.commit_batch([_event("r2", _read("/p/a.py"), ts=1011)])
    assert db_rows(settings.db, "SELECT count FROM observations") == [(1,), (1,)]


async def test_sessions_and_prompt_numbers() -> None:
    settings = config.load()
    prompt = Observation(type="prompt", title="fix the bug")
    start = Observation(type="session", title="Session started (startup)")
    end = Observation(type="session", title="Session ended (clear)")
    async with open_store(settings) as store:
        await store.commit_batch([
            _event("s", start, hook="SessionStart", ts=10, source="startup", model="m1"),
            _event("p1", prompt, hook="UserPromptSubmit", ts=11),
            _event("p2", prompt, hook="UserPromptSubmit", ts=12),
        ])
        await store.commit_batch([_event("e", end, hook="SessionEnd", ts=13, end_reason="clear")])
    assert db_rows(settings.db, "SELECT prompt_number FROM prompts ORDER BY ts") == [(1,), (2,)]
    row = db_rows(
        settings.db,
        "SELECT started_at, last_event_at, ended_at, source, end_reason, model, event_count FROM sessions",
    )
    assert row == [(10.0, 13.0, 13.0, "startup", "clear", "m1", 4)]


async def test_identifiers_and_paths_are_searchable() -> None:
    settings = config.load()
    obs = Observation(
        type="edit", title="Edit src/auth.ts", content="renamed save_hook to useState", file_path="/p/src/auth.ts"
    )
    async with open_store(settings) as store:
        await store.commit_batch([_event("e1", obs)])
    for query in ('"save_hook"', '"useState"', '"src/auth.ts"', '"auth.ts"', "usestate"):
        hits = db_rows(settings.db, "SELECT rowid FROM observations_fts WHERE observations_fts MATCH ?", (query,))
        assert hits == [(1,)], query


async def test_ids_continue_after_reopen() -> None:
    settings = config.load()
    async with open_store(settings) as store:
        await store.commit_batch([_event("a", _read("/p/a.py"))])
    async with open_store(settings) as store:
        await store.commit_batch([_event("b", Observation(type="edit", title="e"))])
    assert db_rows(settings.db, "SELECT id FROM observations ORDER BY id") == [(1,), (2,)]
