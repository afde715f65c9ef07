"""Forget, pin and purge: the user's explicit "remove this", leaving no bytes behind.

What a purge deletes: the matching observations (pinned ones too: pinning only
protects from retention, never from a deliberate purge or forget), their
`prompts` rows, sessions left with no observations, and inbox rows and spool
files whose raw payload matches (query and/or session only: nothing else can be
read from a raw payload). Copies of text on surviving sessions are scrubbed:
`last_assistant_message` is nulled when its Stop observation goes or it holds
the query terms, and `summary` is recomputed from what remains.

What it keeps: the `events` ledger rows (event id, time, session, hook name:
no content), unlinked from the deleted observation, so a retried or replayed
event (inbox, spool, a client retry) is recognised and not stored again.

Then the FTS index is rebuilt (SQLite < 3.42 has no FTS5 secure-delete, and
old segments keep deleted terms until merged), freed pages are zeroed by
`secure_delete=ON` and dropped by `incremental_vacuum`, and the WAL, which
still holds old page images, is truncated by a TRUNCATE checkpoint.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
from typing import Annotated, Any

import aiosqlite
import anyio
import msgspec

from nmemd.errors import QueryError
from nmemd.model import OBSERVATION_TYPES
from nmemd.recall import queries
from nmemd.recall.handoff import summarize_session
from nmemd.recall.queries import ALL_PROJECTS, Filters, convert_params
from nmemd.remembered import forget_stored_text
from nmemd.store import fts
from nmemd.store.database import Store
from nmemd.store.keys import KEY_DIGEST_FUNCTION, TOOL_CALL_ROW, TOOL_CALL_ROW_KEY
from nmemd.team.local import ENQUEUE_TOMBSTONES, HIDDEN_HERE_ONLY, HIDE_TEAMMATES_ROWS

LOG = logging.getLogger("nmemd.purge")

RowId = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
MAX_IDS = 10_000  # host parameters per statement stay far below SQLite's limit
CHECKPOINT_TRIES = 3
CHECKPOINT_PAUSE_S = 0.1  # between tries, a reader holding an old snapshot finishes


class PurgeFilter(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Which observations to remove; criteria are AND-ed and at least one is required.

    `project="*"` (or None) is every project and is a scope, not a criterion:
    an empty filter is an error, never "delete everything".
    """

    project: str | None = None
    session_id: str | None = None
    types: list[str] = []
    file: str | None = None  # as search takes it: the path, or its tail
    agent: str | None = None
    since: float | None = None
    until: float | None = None
    ids: Annotated[list[RowId], msgspec.Meta(max_length=MAX_IDS)] = []
    query: str | None = None


LISTED_ROWS = 50  # the observations a purge names (the count says how many more)


class PurgeRow(msgspec.Struct, kw_only=True):
    """One observation a purge removes, as a person recognises it."""

    id: int
    project: str | None
    type: str
    title: str


class PurgeCounts(msgspec.Struct, kw_only=True):
    """What a purge removed (or, with dry_run, would remove)."""

    observations: int = 0
    pinned: int = 0  # of `observations`, how many were pinned (a purge removes them too)
    events: int = 0  # ledger rows unlinked from removed observations (kept, they hold no content)
    sessions: int = 0  # sessions removed because nothing was left in them
    inbox: int = 0  # raw events waiting in the inbox table or spool directory, removed
    dry_run: bool = False
    checkpointed: bool = True  # False: a reader kept the WAL from being truncated; run again
    # Of `observations`, teammates' rows this member may not delete for the team (not their author,
    # not a team admin): removed from this machine only, and never pulled or shown here again.
    hidden_here_only: int = 0
    rows: list[PurgeRow] = []  # the first LISTED_ROWS of `observations`, oldest first
    projects: list[str | None] = []  # every project it touches (the viewer's confirmation names them)


class PinResult(msgspec.Struct, kw_only=True):
    changed: int
    missing: list[int] = []


def validate(f: PurgeFilter) -> str | None:
    """Refuse filters that match everything or nothing sensible; return the FTS match, if any."""
    criteria = [f.session_id, f.types, f.file, f.agent, f.since is not None, f.until is not None, f.ids, f.query]
    if not any(criteria) and f.project in (None, "", ALL_PROJECTS):
        raise QueryError(
            "purge needs at least one filter (project, session, type, file, agent, since, until, id or query)"
        )
    unknown = [t for t in f.types if t not in OBSERVATION_TYPES]
    if unknown:
        raise QueryError(f"unknown type {unknown[0]!r} (known: {', '.join(OBSERVATION_TYPES)})")
    if f.since is not None and f.until is not None and f.since > f.until:
        raise QueryError("since is after until: that matches nothing")
    if f.query is not None:
        return queries.fts_query(f.query)  # raises QueryError when nothing is searchable
    return None


def _terms(match: str | None) -> list[str]:
    """The query's terms, casefolded, for matching raw text that is not in the FTS index."""
    if match is None:
        return []
    return [t.replace('""', '"').casefold() for t in re.findall(r'"((?:[^"]|"")*)"', match)]


def _has_terms(text: str | None, terms: list[str]) -> bool:
    if not text or not terms:
        return False
    folded = text.casefold()
    return all(t in folded for t in terms)


PHRASE_CHECK_ROWS = 500  # rows holding a phrase's words read and checked at a time


async def _fill(conn: aiosqlite.Connection, f: PurgeFilter, match: str | None) -> None:
    """Put the matching observation ids in `temp.purge_ids` (memory: temp_store=MEMORY)."""
    await clear_listed(conn)
    filters = Filters(project=f.project, types=f.types, session_id=f.session_id, file=f.file, agent=f.agent,
                      since=f.since, until=f.until)  # fmt: skip
    clauses, params = queries.filter_clauses(filters)
    source = "observations o"
    if f.ids:
        clauses.append(f"o.id IN ({','.join('?' * len(f.ids))})")
        params.extend(f.ids)
    relaxed = fts.relax(match) if match is not None else None
    if match is not None:
        source = "observations_fts JOIN observations o ON o.id = -observations_fts.rowid"  # ids negated (m016)
        clauses.insert(0, "observations_fts MATCH ?")
        params.insert(0, relaxed.match if relaxed else match)
    where = " AND ".join(clauses) or "1"
    if relaxed is None:
        await conn.execute(f"INSERT OR IGNORE INTO temp.purge_ids(id) SELECT o.id FROM {source} WHERE {where}", params)
        return
    # A phrase (`save_hook`): the index has rows holding its words; only those where they stand in order go.
    async with conn.execute(
        f"SELECT o.id, o.title, o.content, o.file_path, o.command FROM {source} WHERE {where}", params
    ) as matches:
        while rows := list(await matches.fetchmany(PHRASE_CHECK_ROWS)):
            check = fts.PhraseCheck(relaxed)
            check.add(rows)
            held = [(r[0],) for r in rows if check.holds(r[0])]
            await conn.executemany("INSERT OR IGNORE INTO temp.purge_ids(id) VALUES (?)", held)


# --- the deletion itself, shared with retention (nmemd.jobs.retention) ---------------------------------

LISTED = "IN (SELECT id FROM temp.purge_ids)"


async def clear_listed(conn: aiosqlite.Connection) -> None:
    """An empty `temp.purge_ids`, the list `delete_listed` works from."""
    await conn.execute("CREATE TEMP TABLE IF NOT EXISTS purge_ids (id INTEGER PRIMARY KEY)")
    await conn.execute("DELETE FROM temp.purge_ids")


async def delete_listed(conn: aiosqlite.Connection, *, scan_ledger: bool = True) -> None:
    """Delete the observations in `temp.purge_ids` and their prompts; unlink their ledger rows.

    Runs inside the caller's write transaction. A deleted tool call's natural key moves to its
    ledger row (the row was its record, see store._plan). The FTS delete trigger removes
    their index entries and `secure_delete=ON` zeroes the freed pages. Ledger
    rows stay (content-free, they keep replays out). The ledger has no index on
    `observation_id`: `scan_ledger` finds every event linked to the rows (one
    full scan, ~20 ms per 150,000 events: fine once per purge); without it,
    only the events that created them are unlinked, through the primary key,
    so a retention step stays a few ms and merged repeats keep a dangling link
    (nothing reads it: ids are never reused).
    """
    # A finished tool call recorded by its row alone (migration m005) keeps its natural key in the
    # ledger once the row is gone: a transcript import must not bring a purged call back.
    await conn.execute(
        f"UPDATE OR IGNORE events SET natural_key = {KEY_DIGEST_FUNCTION}((SELECT {TOOL_CALL_ROW_KEY} FROM observations"
        " WHERE observations.event_id = events.event_id)) WHERE natural_key IS NULL AND event_id IN"
        f" (SELECT event_id FROM observations WHERE id {LISTED} AND {TOOL_CALL_ROW}"
        " AND tool_use_id IS NOT NULL AND session_id != 'unknown')"
    )
    if scan_ledger:
        await conn.execute(
            f"UPDATE events SET observation_id = NULL, natural_key = {KEY_DIGEST_FUNCTION}(natural_key)"
            f" WHERE observation_id {LISTED}"
        )
    else:
        await conn.execute(
            f"UPDATE events SET observation_id = NULL, natural_key = {KEY_DIGEST_FUNCTION}(natural_key)"
            " WHERE event_id IN (SELECT CASE WHEN instr(event_id, ':')"
            " THEN substr(event_id, 1, instr(event_id, ':') - 1) ELSE event_id END"
            f" FROM observations WHERE id {LISTED}) AND observation_id {LISTED}"
        )
    await conn.execute(f"DELETE FROM prompts WHERE observation_id {LISTED}")
    await conn.execute(f"DELETE FROM observations WHERE id {LISTED}")


async def _one(conn: aiosqlite.Connection, sql: str, params: tuple[Any, ...] = ()) -> int:
    rows = list(await conn.execute_fetchall(sql, params))
    return int(rows[0][0] or 0) if rows else 0


class _Plan(msgspec.Struct, kw_only=True):
    counts: PurgeCounts
    ids: list[int]
    affected: list[str]  # sessions that lose observations (or were named)
    emptied: list[str]  # of those, sessions left with nothing
    inbox_rows: list[str]
    spool_files: list[str]


async def _plan(conn: aiosqlite.Connection, store: Store, f: PurgeFilter, match: str | None) -> _Plan:
    await _fill(conn, f, match)
    ids = [int(r[0]) for r in await conn.execute_fetchall("SELECT id FROM temp.purge_ids")]
    counts = PurgeCounts(observations=len(ids))
    in_ids = "IN (SELECT id FROM temp.purge_ids)"
    counts.pinned = await _one(conn, f"SELECT count(*) FROM observations WHERE pinned AND id {in_ids}")
    counts.hidden_here_only = await _one(conn, HIDDEN_HERE_ONLY)
    counts.events = await _one(conn, f"SELECT count(*) FROM events WHERE observation_id {in_ids}")
    listed = await conn.execute_fetchall(
        f"SELECT id, project, type, title FROM observations WHERE id {in_ids} ORDER BY id LIMIT {LISTED_ROWS}"
    )
    counts.rows = [PurgeRow(id=int(r[0]), project=r[1], type=str(r[2]), title=str(r[3])) for r in listed]
    touched = await conn.execute_fetchall(f"SELECT DISTINCT project FROM observations WHERE id {in_ids}")
    counts.projects = sorted((r[0] for r in touched), key=lambda p: (p is None, p or ""))
    rows = await conn.execute_fetchall(f"SELECT DISTINCT session_id FROM observations WHERE id {in_ids}")
    affected = [str(r[0]) for r in rows]
    if f.session_id and f.session_id not in affected and not (f.ids or f.types or f.query or f.since or f.until):
        if await _one(conn, "SELECT count(*) FROM sessions WHERE session_id = ?", (f.session_id,)):
            affected.append(f.session_id)
    emptied = [
        sid
        for sid in affected
        if not await _one(
            conn, f"SELECT EXISTS(SELECT 1 FROM observations WHERE session_id = ? AND id NOT {in_ids})", (sid,)
        )
    ]
    counts.sessions = len(emptied)
    inbox_rows, spool_files = await _raw_matches(conn, store, f, _terms(match))
    counts.inbox = len(inbox_rows) + len(spool_files)
    return _Plan(counts=counts, ids=ids, affected=affected, emptied=emptied, inbox_rows=inbox_rows,
                 spool_files=spool_files)  # fmt: skip


def _raw_match(payload: bytes, received_at: float, f: PurgeFilter, terms: list[str]) -> bool:
    """A raw event matches on what a payload shows: the query terms, the session, the time."""
    if not terms and not f.session_id:
        return False
    if f.ids or f.file or f.agent:
        return False  # raw events have no observation ids yet, and a file or agent is read from them later
    if f.since is not None and received_at < f.since or f.until is not None and received_at > f.until:
        return False
    text = payload.decode("utf-8", "replace")
    if terms and not _has_terms(text, terms):
        # JSON may escape non-ASCII text; compare the decoded document too
        try:
            text = msgspec.json.encode(msgspec.json.decode(payload)).decode("utf-8", "replace")
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return False
        if not _has_terms(text, terms):
            return False
    if f.session_id:
        try:
            doc = msgspec.json.decode(payload)
        except (msgspec.DecodeError, RecursionError):
            return False
        if not isinstance(doc, dict) or doc.get("session_id") != f.session_id:
            return False
    return True


async def _raw_matches(
    conn: aiosqlite.Connection, store: Store, f: PurgeFilter, terms: list[str]
) -> tuple[list[str], list[str]]:
    if not terms and not f.session_id:
        return [], []
    inbox = [
        str(r[0])
        for r in await conn.execute_fetchall("SELECT event_id, received_at, payload FROM inbox")
        if _raw_match(bytes(r[2]), float(r[1]), f, terms)
    ]

    def spooled() -> list[str]:
        found = []
        try:
            names = sorted(n for n in os.listdir(store.settings.spool) if n.endswith(".event"))
        except OSError:
            return []
        for name in names:
            path = os.path.join(store.settings.spool, name)
            try:
                with open(path, "rb") as fh:
                    body = fh.read()
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            if _raw_match(body, mtime, f, terms):
                found.append(path)
        return found

    return inbox, await anyio.to_thread.run_sync(spooled)


async def count(store: Store, f: PurgeFilter) -> PurgeCounts:
    """What `purge` would remove, changing nothing (a read transaction that is rolled back)."""
    match = validate(f)
    await store.searchable()  # the count must see the newest observations, as the purge will
    async with store.lock:
        conn = store.conn
        try:
            await conn.execute("BEGIN")
            try:
                plan = await _plan(conn, store, f, match)
            finally:
                await conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            raise QueryError(f"purge count failed: {exc}") from exc
    plan.counts.dry_run = True
    return plan.counts


async def purge(store: Store, f: PurgeFilter, *, share: bool = True) -> PurgeCounts:
    """Remove what `f` matches and every copy of its text; see the module docstring. In a shared
    project the team forgets it too (tombstones through the outbox) where this member may delete it;
    `share=False` is a pulled tombstone's own delete (nothing goes back to the server)."""
    match = validate(f)
    terms = _terms(match)
    store.purges += 1
    async with store.write() as conn:
        await store.index_within(conn)  # a query must find the newest observations too
        plan = await _plan(conn, store, f, match)
        if plan.inbox_rows:
            await conn.executemany("DELETE FROM inbox WHERE event_id = ?", [(e,) for e in plan.inbox_rows])
        stop_sessions = {
            str(r[0])
            for r in await conn.execute_fetchall(
                f"SELECT DISTINCT session_id FROM observations WHERE hook_event = 'Stop' AND id {LISTED}"
            )
        }
        if share:
            await conn.execute(ENQUEUE_TOMBSTONES)  # team memory: the server and teammates forget them too
        await conn.execute(HIDE_TEAMMATES_ROWS, (time.time(),))  # and a pull never brings one back
        await delete_listed(conn)
        await conn.executemany("DELETE FROM sessions WHERE session_id = ?", [(s,) for s in plan.emptied])
        resummarize = await _scrub_sessions(conn, set(plan.affected) - set(plan.emptied), stop_sessions, terms)
        if plan.ids or plan.emptied or resummarize:
            await conn.execute("INSERT INTO observations_fts(observations_fts) VALUES('rebuild')")
            # Deleted rows left their pairs in the index's segments until a merge: rebuilt from what remains.
            await conn.execute("INSERT INTO observations_grams(observations_grams) VALUES('rebuild')")
            await store.all_indexed(conn)
        await conn.execute("DELETE FROM temp.purge_ids")
    store.dedup.forget(set(plan.ids))
    forget_stored_text()  # the purged words as cache keys in recall and capture
    for path in plan.spool_files:
        try:
            os.unlink(path)
        except OSError:
            LOG.warning("could not remove spooled event %s", path)
    await _resummarize(store, resummarize)
    plan.counts.checkpointed = await compact(store)
    LOG.info("purged %d observations, %d sessions, %d raw events", len(plan.ids), len(plan.emptied), plan.counts.inbox)
    return plan.counts


async def _scrub_sessions(
    conn: aiosqlite.Connection, affected: set[str], stop_sessions: set[str], terms: list[str]
) -> list[str]:
    """Null text copies on surviving sessions; return those whose summary must be recomputed."""
    rows = await conn.execute_fetchall(
        "SELECT session_id, last_assistant_message, summary FROM sessions"
        " WHERE last_assistant_message IS NOT NULL OR summary IS NOT NULL"
    )
    resummarize = []
    for sid, message, summary in rows:
        touched = sid in affected
        drop_message = message is not None and ((touched and sid in stop_sessions) or _has_terms(message, terms))
        drop_summary = summary is not None and (touched or drop_message or _has_terms(summary, terms))
        if drop_message or drop_summary:
            await conn.execute(
                "UPDATE sessions SET last_assistant_message = CASE WHEN ? THEN NULL ELSE last_assistant_message END,"
                " summary = CASE WHEN ? THEN NULL ELSE summary END WHERE session_id = ?",
                (drop_message, drop_summary, sid),
            )
        if drop_summary:
            resummarize.append(str(sid))
    return resummarize


async def _resummarize(store: Store, sessions: list[str]) -> None:
    """Recompute summaries from what remains (a failure leaves them NULL, which is safe)."""
    if not sessions:
        return

    def compute() -> list[tuple[str | None, str]]:
        conn = sqlite3.connect(f"file:{store.settings.db}?mode=ro", uri=True, timeout=5.0)
        try:
            return [(summarize_session(conn, sid) or None, sid) for sid in sessions]
        finally:
            conn.close()

    try:
        texts = await anyio.to_thread.run_sync(compute)
        async with store.write() as conn:
            await conn.executemany("UPDATE sessions SET summary = ? WHERE session_id = ? AND summary IS NULL", texts)
    except Exception:
        LOG.exception("recomputing summaries after a purge failed; they stay empty")


async def compact(store: Store) -> bool:
    """Drop freed pages and truncate the WAL; False if readers kept it from truncating.

    Each TRUNCATE attempt may wait busy_timeout for readers, so tries are few and
    the store lock is released between them: ingest waits seconds, never minutes.
    """
    async with store.lock:
        try:
            await store.conn.execute_fetchall("PRAGMA incremental_vacuum")
        except sqlite3.Error as exc:
            LOG.warning("incremental_vacuum after purge failed: %s", exc)
    for _ in range(CHECKPOINT_TRIES):
        async with store.checkpoint_lock, store.lock:  # in this order everywhere
            try:
                rows = list(await store.conn.execute_fetchall("PRAGMA wal_checkpoint(TRUNCATE)"))
            except sqlite3.Error as exc:
                LOG.debug("checkpoint after purge: %s", exc)
                rows = []
        if rows and rows[0][0] == 0:
            return True
        await anyio.sleep(CHECKPOINT_PAUSE_S)
    LOG.warning("the WAL could not be truncated after a purge (a reader kept it busy)")
    return False


async def forget(store: Store, ids: list[int]) -> PurgeCounts:
    """Remove these observations (pinned or not): a purge by ids."""
    if not ids:
        raise QueryError("forget needs at least one id")
    return await purge(store, PurgeFilter(ids=ids))


async def pin(store: Store, ids: list[int], pinned: bool = True) -> PinResult:
    """Mark observations as kept by retention (or not); unknown ids are reported, not an error."""
    if not ids:
        raise QueryError("pin needs at least one id")
    unique = list(dict.fromkeys(ids))
    marks = queries.marks(unique)
    async with store.write() as conn:
        rows = await conn.execute_fetchall(f"SELECT id FROM observations WHERE id IN ({marks})", unique)
        found = {int(r[0]) for r in rows}
        updated = await conn.execute(
            f"UPDATE observations SET pinned = ? WHERE id IN ({marks}) AND pinned != ?",
            [int(pinned), *unique, int(pinned)],
        )
        changed = max(updated.rowcount, 0)
    return PinResult(changed=changed, missing=[i for i in unique if i not in found])


# --- RPC methods (the daemon's dispatch and the CLI's no-daemon path share these) ----------------

Ids = Annotated[list[RowId], msgspec.Meta(min_length=1, max_length=MAX_IDS)]


class PurgeParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    filter: PurgeFilter
    dry_run: bool = False


class ForgetParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    ids: Ids


class PinParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    ids: Ids
    unpin: bool = False


METHODS: dict[str, type[msgspec.Struct]] = {"purge": PurgeParams, "forget": ForgetParams, "pin": PinParams}


def parse(method: str, params: dict[str, Any]) -> msgspec.Struct:
    """Validate a write method's params; a bad one is a QueryError naming it."""
    return convert_params(method, params, METHODS[method])


async def call(store: Store, method: str, params: dict[str, Any]) -> Any:
    """Run one of `METHODS` on the store; returns plain data for the wire."""
    p = parse(method, params)
    if isinstance(p, PurgeParams):
        result: msgspec.Struct = await (count(store, p.filter) if p.dry_run else purge(store, p.filter))
    elif isinstance(p, ForgetParams):
        result = await forget(store, p.ids)
    else:
        assert isinstance(p, PinParams)
        result = await pin(store, p.ids, pinned=not p.unpin)
    return msgspec.to_builtins(result)
