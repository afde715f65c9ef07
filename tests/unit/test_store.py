"""The store in-process: idempotency by event_id, dedup with counts, sessions and prompts."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
from support.db import db_rows, integrity_ok

from nmemd import config, remembered
from nmemd.model import Extracted, Observation
from nmemd.recall import lookups, search
from nmemd.store import batches, fts, readers, repair
from nmemd.store.batches import Incoming
from nmemd.store.database import open_store
from nmemd.store.migrations import MIGRATIONS, MIGRATIONS_DDL

pytestmark = pytest.mark.anyio


def _event(
    eid: str, obs: Observation, *, session: str = "s1", ts: float = 1000.0, hook: str = "PostToolUse", **extra: object
) -> Incoming:
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
        await store.commit_batch(
            [
                _event("s", start, hook="SessionStart", ts=10, source="startup", model="m1"),
                _event("p1", prompt, hook="UserPromptSubmit", ts=11),
                _event("p2", prompt, hook="UserPromptSubmit", ts=12),
            ]
        )
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
        assert _fts_hits(settings.db, query) == [1], query
    assert _fts_hits(settings.db, '"auth.src"') == []  # the words, not in that order


async def test_ids_continue_after_reopen() -> None:
    settings = config.load()
    async with open_store(settings) as store:
        await store.commit_batch([_event("a", _read("/p/a.py"))])
    async with open_store(settings) as store:
        await store.commit_batch([_event("b", Observation(type="edit", title="e"))])
    assert db_rows(settings.db, "SELECT id FROM observations ORDER BY id") == [(1,), (2,)]


async def test_statistics_taken_on_a_young_store_are_taken_again_once_it_grew() -> None:
    """The first start's ANALYZE sees an empty file; an import then brings thousands of rows: the next
    start analyses again (it used to keep `observations` believed empty, and plans to match, for good)."""
    settings = config.load()
    async with open_store(settings):
        pass  # the first start: statistics of an empty store
    assert db_rows(settings.db, "SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'observations'") == [(0,)] or all(
        int(str(r[0]).split()[0]) < 10 for r in db_rows(settings.db, "SELECT stat FROM sqlite_stat1")
    )
    async with open_store(settings) as store:
        rows = [_event(f"g{i}", Observation(type="edit", title=f"e{i}"), session=f"s{i % 40}") for i in range(2500)]
        await store.commit_batch(rows)
    async with open_store(settings):
        pass
    recorded = db_rows(settings.db, "SELECT stat FROM sqlite_stat1 WHERE tbl = 'observations' LIMIT 1")
    assert recorded and int(str(recorded[0][0]).split()[0]) >= 2500


async def test_the_already_stored_check_reads_the_session_index_after_a_bulk_session_without_tool_ids() -> None:
    """A session of thousands of rows without tool-call ids, then statistics: every (session_id, tool_use_id)
    looks shared by thousands of rows, and the check of a batch's tool calls planned a scan of the table."""
    settings = config.load()
    async with open_store(settings) as store:
        bulk = [_event(f"b{i}", Observation(type="edit", title=f"e{i}"), session="bulk") for i in range(2000)]
        await store.commit_batch(bulk)
    conn = sqlite3.connect(settings.db)
    try:
        conn.execute("ANALYZE")
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + batches._KNOWN, ("[]", "[]", '[["s1", "t1"]]'))]
    finally:
        conn.close()
    assert any("USING INDEX observations_session_tool (session_id=? AND tool_use_id=?)" in p for p in plan), plan
    assert not any(p.startswith("SCAN observations") for p in plan), plan
    done = Observation(type="command", title="Bash: ls", command="ls")
    async with open_store(settings) as store:  # and a finished tool call is still stored once
        call = {"hook": "PostToolUse", "tool_use_id": "toolu_1"}
        assert await store.commit_batch([_event("c1", done, **call)]) == 1
        assert await store.commit_batch([_event("c2", done, **call)]) == 0


# --- the FTS watermark (migration m004): indexing trails the commit, never loses a row -------------


def _fts_hits(db: str | Path, query: str) -> list[int]:
    """What the index finds, a phrase checked on the rows holding its words as search does (m008)."""
    relaxed = fts.relax(query)
    sql = "SELECT -rowid FROM observations_fts WHERE observations_fts MATCH ?"  # ids negated (m016)
    ids = sorted(int(str(r[0])) for r in db_rows(db, sql, (relaxed.match if relaxed else query,)))
    if relaxed is None or not ids:
        return ids
    check = fts.PhraseCheck(relaxed)
    marks = ",".join("?" * len(ids))
    check.add(
        db_rows(
            db, f"SELECT id, title, content, file_path, command FROM observations WHERE id IN ({marks})", tuple(ids)
        )
    )
    return [i for i in ids if check.holds(i)]


def _watermark(db: str) -> int:
    return int(db_rows(db, "SELECT indexed_below FROM fts_state")[0][0])


async def test_live_batches_index_in_chunks_and_searches_catch_up_first() -> None:
    """Small batches leave their rows for the next chunk; `searchable()` indexes them before a read."""
    from nmemd.store.batches import FTS_CHUNK

    settings = config.load()
    edit = Observation(type="edit", title="Edit zebra.py", content="zebra crossing", file_path="/p/zebra.py")
    async with open_store(settings) as store:
        await store.commit_batch([_event("z1", edit)])
        assert store.unindexed == 1 and _watermark(settings.db) == 1
        assert _fts_hits(settings.db, "zebra") == []  # committed, not indexed yet
        await store.searchable()
        assert _fts_hits(settings.db, "zebra") == [1] and _watermark(settings.db) == 2
        # A batch that brings the waiting rows to FTS_CHUNK indexes all of them in its transaction.
        reads = [_event(f"c{i:05d}", _read(f"/p/f{i}.py")) for i in range(FTS_CHUNK)]
        await store.commit_batch(reads[: FTS_CHUNK // 2])
        assert store.unindexed == FTS_CHUNK // 2
        await store.commit_batch(reads[FTS_CHUNK // 2 :])
        assert store.unindexed == 0 and _watermark(settings.db) == FTS_CHUNK + 2
    integrity_ok(settings.db)


async def test_an_index_step_commits_at_a_statement_when_told_and_the_next_one_takes_the_rest() -> None:
    """The writer's index step between batches (`Store.index_step_on_thread`): an event's arrival ends it
    after the statement under way; what it indexed is committed and found, the rest is indexed next."""
    from nmemd.store.batches import FTS_CHUNK, INDEX_STEP
    from nmemd.store.database import on_writer_thread

    settings = config.load()
    edits = [
        _event(f"i{n:05d}", Observation(type="edit", title=f"Edit f{n}.py", content="zebra crossing"))
        for n in range(3 * INDEX_STEP)
    ]
    async with open_store(settings) as store:
        await store.commit_batch(edits)  # fewer than FTS_CHUNK: left to the next chunk
        assert store.unindexed == 3 * INDEX_STEP
        looks: list[int] = []

        def an_event_waits() -> bool:
            looks.append(1)
            return True

        async with store.lock:
            done = await on_writer_thread(store.conn, store.index_step_on_thread, FTS_CHUNK, an_event_waits)
        assert done == INDEX_STEP and looks == [1]
        assert store.unindexed == 2 * INDEX_STEP and _watermark(settings.db) == INDEX_STEP + 1
        assert _fts_hits(settings.db, "zebra") == list(range(1, INDEX_STEP + 1))
        async with store.lock:
            done = await on_writer_thread(store.conn, store.index_step_on_thread, FTS_CHUNK, lambda: False)
        assert done == 2 * INDEX_STEP and store.unindexed == 0
        assert _fts_hits(settings.db, "zebra") == list(range(1, 3 * INDEX_STEP + 1))
    integrity_ok(settings.db)


async def test_deleting_and_updating_unindexed_rows_leaves_the_index_consistent() -> None:
    """The delete and update triggers skip rows above the watermark (an FTS5 'delete' of a row it
    never indexed would corrupt it); indexing later picks up the updated text."""
    settings = config.load()
    async with open_store(settings) as store:
        await store.commit_batch([_event("a", _read("/p/a.py")), _event("b", _read("/p/b.py"))])
        await store.searchable()
        await store.commit_batch([_event("c", _read("/p/c.py")), _event("d", _read("/p/d.py"))])
        assert store.unindexed == 2
        async with store.write() as conn:
            await conn.execute("DELETE FROM observations WHERE id IN (1, 3)")  # one indexed, one not
            await conn.execute("UPDATE observations SET title = 'Read platypus.py' WHERE id = 4")
        integrity_ok(settings.db)
        await store.searchable()
        assert _fts_hits(settings.db, "platypus") == [4]
        assert _fts_hits(settings.db, '"c.py"') == []
    integrity_ok(settings.db)


async def test_a_crash_before_indexing_is_caught_up_at_the_next_open(tmp_path: object) -> None:
    """Rows committed without their index (a kill -9 between chunks) are indexed when the store opens."""
    import sqlite3

    settings = config.load()
    async with open_store(settings) as store:
        await store.commit_batch([_event("k1", Observation(type="edit", title="Edit kiwi.py", file_path="/p/kiwi.py"))])
    # Simulate the crash: the row stays, the watermark goes back below it, the index loses it.
    conn = sqlite3.connect(settings.db, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute(
        f"INSERT INTO observations_fts(observations_fts, rowid, {fts.COLUMNS})"
        f" SELECT 'delete', -id, {fts.COLUMNS} FROM observations"
    )
    conn.execute("UPDATE fts_state SET indexed_below = 1")
    conn.execute("COMMIT")
    conn.close()
    assert _fts_hits(settings.db, "kiwi") == []
    async with open_store(settings) as store:
        assert store.unindexed == 0
    assert _fts_hits(settings.db, "kiwi") == [1]
    integrity_ok(settings.db)


async def test_purge_by_query_reaches_rows_not_indexed_yet() -> None:
    """A purge's full-text match must see the newest observations: it indexes them first."""
    from nmemd.history.purge import PurgeFilter, purge

    settings = config.load()
    secret = Observation(type="command", title="echo wombat-7731", content="wombat-7731", command="echo wombat-7731")
    async with open_store(settings) as store:
        await store.commit_batch([_event("w1", secret), _event("w2", _read("/p/keep.py"))])
        assert store.unindexed == 2
        counts = await purge(store, PurgeFilter(query="wombat-7731"))
        assert counts.observations == 1
    assert db_rows(settings.db, "SELECT count(*) FROM observations WHERE content LIKE '%wombat%'") == [(0,)]
    assert db_rows(settings.db, "SELECT count(*) FROM observations") == [(1,)]
    integrity_ok(settings.db)


async def test_purge_empties_the_caches_of_stored_text() -> None:
    """A search leaves the rows' commands, titles and lines as cache keys; a purge drops them all, so the
    forgotten words do not stay in the daemon's memory until evicted."""
    from nmemd.history.purge import PurgeFilter, purge

    settings = config.load()
    secret = Observation(type="command", title="echo wombat-7731", content="wombat-7731 ok", command="echo wombat-7731")
    async with open_store(settings) as store:
        await store.commit_batch([_event("w1", secret), _event("w2", _read("/p/keep.py"))])
        await store.index_pending()
        conn = readers.open_readonly(str(settings.db))
        try:
            assert [h.title for h in search.search(conn, "wombat")] == ["echo wombat-7731"]
        finally:
            conn.close()
        assert remembered.held() > 0
        await purge(store, PurgeFilter(query="wombat-7731"))
        assert remembered.held() == 0
        assert fts.relax.cache_info().currsize == 0  # type: ignore[attr-defined]  # the purge relaxed its words too


# --- the index without positions (migration m008) ----------------------------------------------------


def _store_at_m007(db: Path, rows: list[tuple[str, str, str | None]], version: int = 7) -> None:
    """A database as version 7 (or a later `version`) left it: at 7 every row in the positional index."""
    db.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(MIGRATIONS_DDL)
        record = ", ".join(f"('{name}', 0)" for name, _ in MIGRATIONS[:version])
        ddl = "; ".join(sql for _, sql in MIGRATIONS[:version])
        conn.executescript(f"BEGIN; {ddl}; INSERT INTO schema_migrations VALUES {record}; COMMIT;")
        conn.execute("BEGIN")
        for i, (title, content, path) in enumerate(rows):
            conn.execute(
                "INSERT INTO observations(event_id, session_id, project, ts, last_ts, hook_event, type, title, content,"
                " file_path) VALUES (?, 's1', '/p', ?, ?, 'PostToolUse', 'edit', ?, ?, ?)",
                (f"old{i}", 1000.0 + i, 1000.0 + i, title, content, path),
            )
        columns = fts.COLUMNS if version >= 10 else "title, content, file_path, command"  # m010: the project
        conn.execute(  # as versions 7-15 indexed: the ids themselves
            f"INSERT INTO observations_fts(rowid, {columns}) SELECT id, {columns} FROM observations"
        )
        conn.execute("UPDATE fts_state SET indexed_below = (SELECT max(id) + 1 FROM observations)")
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_an_old_store_is_indexed_again_and_still_finds_phrases_identifiers_and_prefixes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = config.load()
    _store_at_m007(
        Path(settings.db),
        [
            ("Edit src/auth.ts", "renamed save_hook to useState", "/p/src/auth.ts"),  # 1
            ("Edit notes.md", "the hook to save, then auth src ts", "/p/notes.md"),  # 2: the words, not in order
            ("Edit cache.py", "saving hooks in the connection pool", "/p/cache.py"),  # 3: stems of "save hook"
            ("Edit hookah.py", "saved hookahs; src/authority.ts", "/p/hookah.py"),  # 4: longer words
        ],
    )
    monkeypatch.setattr(repair, "FTS_REINDEX_CHUNK", 2)  # several chunks, each logged
    with caplog.at_level(logging.INFO, logger="nmemd.store"):
        async with open_store(settings) as store:
            await store.commit_batch([_event("new", Observation(type="edit", title="Edit x.py", content="save_hook"))])
    assert "indexed observations up to id 5 of 5" in caplog.text
    assert db_rows(settings.db, "SELECT reindex_from, reindex_below FROM fts_state") == [(5, 5)]
    integrity_ok(settings.db)
    conn = readers.open_readonly(str(settings.db))
    try:

        def ids(text: str) -> set[int]:
            return {h.id for h in search.search(conn, text, limit=50)}

        # FTS5's phrase, as with positions: each word by its stem (saving hooks), in order, adjacent
        assert ids('"save hook"') == {1, 3, 5}
        # an identifier or a path as typed (ASCII case aside), between word edges: not its stems
        assert ids("save_hook") == ids("SAVE_HOOK") == {1, 5}
        assert ids("src/auth.ts") == ids('"src/auth.ts"') == {1}
        assert ids("src/auth*") == {1, 4}
        assert ids("co*") == {3}
        assert ids("hoo*") == {1, 2, 3, 4, 5}
        assert ids("useState") == {1}
        assert _fts_hits(settings.db, '"auth src"') == [2]
    finally:
        conn.close()
    async with open_store(settings) as store, store.write() as conn2:  # the triggers keep the index right
        await conn2.execute("DELETE FROM observations WHERE id IN (1, 3)")
        await conn2.execute("UPDATE observations SET content = 'nothing' WHERE id = 2")
    integrity_ok(settings.db)
    assert _fts_hits(settings.db, '"save_hook"') == [5]


# --- the project in the index (migration m010) -----------------------------------------------------


def _in(project: str, eid: str, obs: Observation, ts: float) -> Incoming:
    ex = Extracted(
        hook_event="PostToolUse", session_id=f"s-{project}", cwd=project, project=project, observations=[obs]
    )
    return Incoming(event_id=eid, received_at=ts, extracted=ex)


def _rows(hits: list[search.Hit]) -> int:
    return sum(1 + h.similar for h in hits)  # near-identical rows fold into one hit


async def test_a_project_search_finds_its_rows_beneath_a_busier_projects_newer_ones() -> None:
    """A project asks the index for its own rows: before m010, a word common in a busier project filled
    every lookup with that project's newer rows and the quiet project's search found none of its own."""
    settings = config.load()
    newer = lookups.SCAN_LIMIT + 50
    async with open_store(settings) as store:
        quiet = [
            _in(
                "/quiet",
                f"q{i}",
                Observation(type="command", title=f"deploy staging {i}", command=f"make deploy {i}"),
                i,
            )
            for i in range(5)
        ]
        sub = [
            _in(
                "/quiet/web",
                "w0",
                Observation(type="command", title="deploy the web app", command="deploy web"),
                1010.0,
            )
        ]
        busy = [_in("/busy", f"b{i}", Observation(type="command", title=f"deploy run {i}", command=f"deploy {i}"),
                    2000.0 + i) for i in range(newer)]  # fmt: skip
        await store.commit_batch(quiet + sub)
        await store.commit_batch(busy)
        await store.index_pending()
    integrity_ok(settings.db)
    conn = readers.open_readonly(str(settings.db))
    try:
        hits = search.search(conn, "deploy", search.Filters(project="/quiet"), limit=50)
        assert {h.project for h in hits} == {"/quiet", "/quiet/web"} and _rows(hits) == 6
        assert {h.title for h in search.search(conn, "web app", search.Filters(project="/quiet"))} == {
            "deploy the web app"
        }
        assert _rows(search.search(conn, "deploy", search.Filters(project="/busy"), limit=50)) > 50
        assert search.search(conn, "deploy", search.Filters(project="/qui")) == []  # a project, not a prefix
    finally:
        conn.close()
    async with open_store(settings) as store, store.write() as conn2:  # the triggers keep the scope right
        await conn2.execute("UPDATE observations SET project = '/elsewhere' WHERE event_id = 'q0'")
        await conn2.execute("DELETE FROM observations WHERE event_id = 'q1'")
    integrity_ok(settings.db)
    conn = readers.open_readonly(str(settings.db))
    try:
        assert _rows(search.search(conn, "deploy", search.Filters(project="/quiet"), limit=50)) == 4
        assert [h.project for h in search.search(conn, "deploy", search.Filters(project="/elsewhere"))] == [
            "/elsewhere"
        ]
    finally:
        conn.close()


def test_a_store_not_migrated_yet_is_searched_by_project_as_before() -> None:
    """The CLI reads a store read-only when no daemon runs: before m010 its index holds no projects."""
    settings = config.load()
    _store_at_m007(Path(settings.db), [("Edit src/auth.ts", "renamed save_hook", "/p/src/auth.ts")], version=9)
    conn = readers.open_readonly(str(settings.db))
    try:
        assert [h.id for h in search.search(conn, "save_hook", search.Filters(project="/p"))] == [1]
        assert [h.id for h in search.search(conn, "renamed", search.Filters(project="/p"))] == [1]
    finally:
        conn.close()


# --- what `nmem status` counts, kept as rows are written (migration m015) ---------------------------


def _counted(db: str) -> tuple[int, int, dict[str, int], float | None]:
    """What `nmem status` reports of the store's rows: observations, ledger rows, types, newest event."""
    from nmemd.daemon.status import database_facts

    f = database_facts(db, "/nonexistent")
    return f.observations, f.events, f.by_type, f.last_event_at


def _scanned(db: str) -> tuple[int, int, dict[str, int], float | None]:
    """The same, by reading every row."""
    (observations,), (events, last) = (
        db_rows(db, "SELECT count(*) FROM observations")[0],
        db_rows(db, "SELECT count(*), max(received_at) FROM events")[0],
    )
    by_type = db_rows(db, "SELECT type, count(*) FROM observations GROUP BY type ORDER BY 2 DESC, 1")
    return observations, events, dict(by_type), last


async def test_status_counts_kept_as_rows_are_written_match_a_count_of_the_rows() -> None:
    """Counted once when an older store is migrated, then by triggers: written, merged, purged rows."""
    from nmemd.history.purge import PurgeFilter, purge

    settings = config.load()
    _store_at_m007(Path(settings.db), [("Edit a.py", "x", "/p/a.py"), ("Edit b.py", "y", "/p/b.py")], version=14)
    async with open_store(settings) as store:
        assert _counted(settings.db) == _scanned(settings.db) == (2, 0, {"edit": 2}, None)
        secret = Observation(type="command", title="echo wombat-7731", content="x", command="echo wombat-7731")
        await store.commit_batch([_event("r1", _read("/p/a.py"), ts=2000), _event("r2", _read("/p/a.py"), ts=2001)])
        await store.commit_batch([_event("c1", secret, ts=2002), _event("r1", _read("/p/a.py"), ts=2003)])
        assert _counted(settings.db) == _scanned(settings.db) == (4, 3, {"edit": 2, "command": 1, "read": 1}, 2002.0)
        await purge(store, PurgeFilter(query="wombat-7731"))
        assert _counted(settings.db) == _scanned(settings.db) == (3, 3, {"edit": 2, "read": 1}, 2002.0)


# --- the index newest first (migration m016) ----------------------------------------------------------


async def test_a_store_from_before_m016_is_indexed_newest_first_and_answers_the_same() -> None:
    """m016 indexes a version-15 store's rows again under their ids negated (FTS5's own order is then
    newest first): a read-only search before the daemon migrates the store and one after answer alike;
    FTS5's integrity check agrees with the rows (its content view), and so does purge's rebuild."""
    from nmemd.history.purge import PurgeFilter, purge

    settings = config.load()
    rows = [(f"Edit f{i}.py", f"alpha {'beta ' if i % 2 else ''}save_hook", f"/p/f{i}.py") for i in range(12)]
    _store_at_m007(Path(settings.db), rows, version=15)

    def answers() -> list[list[int]]:
        conn = readers.open_readonly(str(settings.db))
        try:
            return [[h.id for h in search.search(conn, q, limit=50)] for q in ("alpha", "beta", "save_hook", "alph*")]
        finally:
            conn.close()

    before = answers()
    async with open_store(settings) as store:
        assert db_rows(settings.db, "SELECT min(rowid), max(rowid) FROM observations_fts") == [(-12, -1)]
        assert answers() == before and sorted(before[1]) == [2, 4, 6, 8, 10, 12]
        integrity_ok(settings.db)
        await purge(store, PurgeFilter(query="beta"))  # FTS5's 'rebuild' from the view, newest first
    integrity_ok(settings.db)
    assert _fts_hits(settings.db, "alpha") == [1, 3, 5, 7, 9, 11]
    assert db_rows(settings.db, "SELECT count(DISTINCT id >> 37) FROM observations_fts_data WHERE id >= (1 << 37)") == [
        (1,)
    ]  # one segment: the rebuild met no rowid below the last


async def test_a_lookup_reads_a_words_newest_rows_in_order_from_one_row() -> None:
    """`lookups._Newest` takes a word's rowids from SQLite as one `group_concat` row, whose order SQLite does
    not promise: what it hands on is what `ORDER BY rowid DESC LIMIT n` returns, row by row, in that order;
    a second ask of fewer is answered from the first, and a word no row holds gives nothing."""
    settings = config.load()
    async with open_store(settings) as store:
        titles = [f"gamma edit {i}" + (" delta" if i % 3 else "") for i in range(40)]
        rows = [_event(f"g{i}", Observation(type="edit", title=title)) for i, title in enumerate(titles)]
        await store.commit_batch(rows)
        await store.index_pending()
    conn = readers.open_readonly(str(settings.db))
    try:
        newest = lookups._Newest(conn, fts.MAIN)
        sql = "SELECT -rowid FROM observations_fts WHERE observations_fts MATCH ? ORDER BY rowid LIMIT ?"
        for match, limit in (('"gamma"', 25), ('"delta"', 7), ('"gamma" AND "delta"', 100), ('"epsilon"', 5)):
            assert newest(match, limit) == [r[0] for r in conn.execute(sql, (match, limit))], match
        assert newest('"gamma"', 25)[:3] == newest('"gamma"', 3) and len(newest('"gamma"', 3)) == 3
        assert newest.read('"gamma" AND "delta"') == [r[0] for r in conn.execute(sql, ('"gamma" AND "delta"', 100))]
    finally:
        conn.close()
