"""The daemon's team sync: push and pull in the background, never on the hook path.

One `link` per (server, team) the shared projects name. Each runs three connections while the
server answers: a pusher (woken by every local commit; drains the outbox in batches), a puller
(woken by the server's NOTIFY, and every `team_pull_interval_s` anyway: a missed notification costs
latency, never data) and the listener. Any failure closes them all and the link tries again after
a backoff with jitter (0.5 s doubling to 30 s), for as long as the daemon runs: capture goes on
locally meanwhile and the outbox keeps what waits. psycopg is imported by the first link only.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import random
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel

from nmemd import gc_tuning
from nmemd.config import tunable
from nmemd.errors import StorageError, TeamError, TeamTimeout
from nmemd.store import fts, readers, repair
from nmemd.store.database import Store
from nmemd.team import local, membership, pg, transport
from nmemd.team.local import Link, LinkStatus
from nmemd.team.threaded import ThreadedConnection, give_way, short_gil_turns

if TYPE_CHECKING:
    import psycopg

    from nmemd.capture.host import Host

LOG = logging.getLogger("nmemd.team")
OP_TIMEOUT_S: Final = 20.0  # one server statement or batch at most: a stalled network is given up on
BACKOFF_MIN_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
PUSH_POLL_S: Final = 5.0  # the outbox is looked at this often even without a commit (a missed wake-up)
LISTEN_CHECK_S: Final = 10.0  # the listening connection is checked alive this often
# Pulled rows are stored (and indexed) this many at a time, each a transaction of a few ms: a hook's
# commit waits for one at most (bench_team_sync.py: hooks during a pull).
APPLY_ROWS: Final = 25
APPLY_BYTES: Final = 32 * 1024
# FTS5 merges a pull's many small segments as it stores them: PULL_MERGE_PAGES pages in each of its short
# transactions, with FTS5's own automerge off meanwhile. Automerge works in bursts (64 x levels pages once
# per 64 pages written): one transaction in ~13 took 11-27 ms of CPU, 60-98 ms on a busy machine, and a
# hook's commit waited for it (bench_team_pull.py, issue #40); 8 pages a time keep up (as many segments
# at the end of 20,000 rows), at most ~2 ms a transaction. A crash meanwhile: `open_store` sets it back.
PULL_MERGE_PAGES: Final = 8
ACK_CHUNK: Final = 500  # pushed rows removed from the outbox per transaction
# The outbox is read (and redacted: ~17 ms of CPU per 1,000 rows) this many rows per worker-thread call,
# with a pause between: the GIL is free for the hooks' event loop between two of them.
READ_ROWS: Final = 200
YIELD_MAX_S: Final = 0.01
PUSH_BATCH = tunable("TEAM_PUSH_BATCH", 1000, 1)  # the most outbox rows one push transaction carries
# While hooks arrive, a push goes in slices, one in each pause between two hooks (capture.quiet), taking
# PACE_SHARE of what is likely left of it (PACE_MIN_S at least), PACE_AFTER_ACK_S after the last ack
# went out (its client reads it meanwhile); the outbox is read PACE_READ_ROWS at a time, in a pause of
# its own. A local server's backend held a core for a whole 1,000-row batch (~70 ms), and a hook
# that came meanwhile waited for the cores (bench_team_pull.py, issue #40). Only a server on this machine
# (`transport.is_local`) is paced: one elsewhere uses none of our cores.
PACE_SHARE = tunable("TEAM_PACE_SHARE", 0.7, 0.05)
PACE_MIN_S: Final = 0.002
PACE_AFTER_ACK_S: Final = 0.001
PACE_WAIT_MAX_S: Final = 0.02
PACE_FIRST_ROWS: Final = 20
PACE_MIN_ROWS: Final = 5
PACE_READ_ROWS: Final = 100
# After a wake-up, wait this long before reading the outbox (or the feed): the commits and notifications
# of a busy moment are taken in one batch instead of one round trip each, and the hooks' commits share
# the event loop and the store's lock with fewer of them (bench_team_sync.py: hooks).
PUSH_LINGER_S: Final = 0.25
PULL_LINGER_S: Final = 0.05
# While hooks arrive (`Ingestor.busy`), a pull goes between them as a paced push does: each chunk of pulled
# rows is stored in a pause between two hooks likely to last as long as a chunk takes still (else in the
# next pause, PACE_AFTER_ACK_S into it; after PACE_WAIT_MAX_S without one, anyway), and from a server on
# this machine each page, of PACED_PAGE_ROWS, is fetched in a pause of its own (1,000 rows held the
# server's backend 5-9 ms; the daemon's fetch of 200 rows, 3-6 ms, met 10-13 % of the acks; 50 rows fit
# a pause, for ~0.7x of the pull's rate while hooks come). A hook that arrived during a chunk waited for
# it, and one that arrived while the backend and another process held both cores waited for the
# scheduler's next tick (4 ms): the slow acks left while pulling (bench_team_pull.py, issue #40).
PACED_PAGE_ROWS: Final = 50
# While hooks keep committing to a shared project (a busy session), its pushed rows leave the outbox in
# one write this often at most, not after every round: each ack takes the store's lock a hooks' batch may
# be waiting for (bench_team_sync.py: hooks). A round that no commit interrupted acks at once.
ACK_EVERY_S: Final = 2.0
LAG_EVERY_S: Final = 10.0  # the server's newest seq is asked this often at most (`nmem team status`'s lag)
# A member's day (issue #36, finding 21): a SessionStart of a shared project whose last pull is older than
# this (a daemon just started, a laptop back from sleep) waits for one pull, within a budget of the
# context's time (nmemd.recall.replies), so its context shows what teammates did meanwhile.
CATCH_UP_AFTER_S = tunable("TEAM_CATCH_UP_AFTER_S", 60.0, 0.0)
T = TypeVar("T")


@dataclass
class _Wake:
    push: anyio.Event = field(default_factory=anyio.Event)
    pull: anyio.Event = field(default_factory=anyio.Event)
    own_commit: bool = False  # the store's next commit is this link's ack: it brings nothing to push


@dataclass
class _Took:
    """How long a step of a paced push or pull takes lately (a slice's row, a chunk stored, a page
    fetched): a slower one believed at once, a faster one a quarter at a time (an overrun makes the next
    hook wait; an underfilled pause only slows the sync)."""

    seconds: float = 0.0

    def took(self, seconds: float) -> None:
        self.seconds = seconds if seconds > self.seconds else 0.75 * self.seconds + 0.25 * seconds


@dataclass
class _Pace:
    """How many rows of a paced push fit a pause's budget, at the pace of the last slices (the server's
    work, the round trip and ours), per row (`_Took`). The fixed part of a slice's time makes a small
    one look slow per row: budgets are underfilled, never overrun by it."""

    per_row: _Took = field(default_factory=_Took)

    def rows_for(self, budget_s: float) -> int:
        if self.per_row.seconds <= 0:
            return PACE_FIRST_ROWS
        return max(PACE_MIN_ROWS, min(PUSH_BATCH, int(budget_s / self.per_row.seconds)))

    def took(self, rows: int, seconds: float) -> None:
        if rows:
            self.per_row.took(seconds / rows)


@dataclass
class _Pushed:
    """Outbox ids whose push the server committed, not removed from the outbox yet."""

    ids: list[int] = field(default_factory=list)
    rows: int = 0  # of which the server took: added to the link's count by the next ack


class TeamSync:
    """The daemon's sync service: one task (`run`), started with the daemon's services."""

    def __init__(self, daemon: Host, delete_rows: Callable[[list[int]], Awaitable[object]]) -> None:
        self.daemon = daemon
        # What a pulled tombstone's delete runs: purge's, without queueing tombstones (the daemon's).
        self.delete_rows = delete_rows
        self.changed = anyio.Event()
        self.status: dict[str, LinkStatus] = {}
        self.links: dict[str, Link] = {}
        self._wake: dict[str, _Wake] = {}
        self._links_read = anyio.Event()  # the shared projects were read once (links stand)
        self._catching_up: dict[str, list[anyio.Event]] = {}  # link key -> set by the next whole pull
        self._stop_listening: Callable[[], None] | None = None
        self._search_pools: dict[str, Any] = {}  # link key -> psycopg_pool.AsyncConnectionPool
        self._search_lock = anyio.Lock()
        self.machine = local.machine_name()  # config.toml's team_machine, read again at each rebuild (run)
        # Worker threads of the sync nap between rows while a hook's event waits (team.threaded).
        self._give_way = give_way(lambda: daemon.ingestor.queued > 0)
        self._chunk = _Took()  # how long a paced pull's chunk takes to store lately

    # --- wiring ---------------------------------------------------------------------------------

    def committed(self) -> None:
        """Called after every local commit: the pushers look at the outbox."""
        for wake in self._wake.values():
            if wake.own_commit:
                wake.own_commit = False
            else:
                wake.push.set()

    @property
    def store(self) -> Store:
        return self.daemon.ingestor.store

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        """A write of the sync's (a few pulled rows, an ack) in a transaction of its own, taken by the
        writer between the hooks' batches: a hook's commit waits for one such write at most, on the
        writer thread itself (`Ingestor.write_between_batches`)."""
        return await self.daemon.ingestor.write_between_batches(fn, *args)

    def _listen_to_commits(self) -> None:
        if self._stop_listening is None:
            self._stop_listening = self.store.add_commit_listener(self.committed)

    def reload(self) -> None:
        """The shared projects changed (join, leave): links are rebuilt."""
        self.changed.set()

    async def run(self) -> None:
        """Until the daemon stops: the links of the shared projects, rebuilt when they change."""
        try:
            await self._run()
        finally:
            if self._stop_listening is not None:
                self._stop_listening()
                self._stop_listening = None
            await self._close_search_pools()

    async def _run(self) -> None:
        db = self.daemon.settings.db
        while True:
            self.changed = anyio.Event()
            self.machine = membership.machine_name(self.daemon.settings)  # a join may have just named it
            try:
                projects = await readers.run(db, local.shared_projects)
            except (StorageError, sqlite3.Error) as exc:
                LOG.warning("cannot read the shared projects: %s", exc)
                projects = []
            self.links = {link.key: link for link in local.links(projects)}
            self._links_read.set()
            self.status = {k: v for k, v in self.status.items() if k in self.links}
            await self._close_search_pools(keep=set(self.links))
            if not self.links:
                await self.changed.wait()
                continue
            await _import_psycopg()
            self._listen_to_commits()
            async with anyio.create_task_group() as tg:
                for link in self.links.values():
                    tg.start_soon(self._link_forever, link)
                await self.changed.wait()
                tg.cancel_scope.cancel()

    # --- one link ---------------------------------------------------------------------------------

    def _status_of(self, link: Link) -> LinkStatus:
        st = self.status.get(link.key)
        if st is None:
            st = self.status[link.key] = LinkStatus(
                team=link.team,
                server=pg.server_label(link.dsn),
                member=link.member,
                projects=[p.project_id for p in link.projects],
                roots=[p.root for p in link.projects],
                transport=transport.describe(link.dsn),
            )
        st.projects = [p.project_id for p in link.projects]  # a join of another project on this link
        st.roots = [p.root for p in link.projects]
        return st

    async def _link_forever(self, link: Link) -> None:
        st = self._status_of(link)
        attempt = 0
        while True:
            began = time.monotonic()
            try:
                await self._session(link, st)
            except Exception as exc:  # every failure: note it, back off, try again
                leaf = _first_leaf(exc)
                st.error = pg.describe(leaf, link.dsn)
                st.state = "retrying"
                if isinstance(leaf, StorageError):
                    LOG.warning("team %s: local store: %s", link.team, leaf)
                else:
                    LOG.warning("team %s: %s", link.team, st.error)
            if time.monotonic() - began > BACKOFF_MAX_S:
                attempt = 0  # it ran a while: a new outage starts from a short wait
            delay = min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2**attempt) * random.uniform(0.5, 1.0)
            attempt = min(attempt + 1, 16)
            st.retry_in_s = round(delay, 1)
            await anyio.sleep(delay)

    async def _session(self, link: Link, st: LinkStatus) -> None:
        """The link's three connections: the listener's on the event loop (a LISTEN and a check, small
        and rare); the pusher's and the puller's driven from worker threads (team.threaded), so a
        batch's send or a page's decode never holds the loop a hook's ack waits for."""
        wake = self._wake.setdefault(link.key, _Wake())
        with anyio.fail_after(OP_TIMEOUT_S):
            listen_conn = await pg.connect(link.dsn)
        try:
            with anyio.fail_after(OP_TIMEOUT_S):
                facts = await pg.check(listen_conn, link.team)
                push_conn = await ThreadedConnection.open(link.dsn)
            try:
                with anyio.fail_after(OP_TIMEOUT_S):
                    pull_conn = await ThreadedConnection.open(link.dsn)
                    await pg.listen(listen_conn, link.team, facts.schema_version)
                try:
                    st.schema_version = facts.schema_version
                    await self.store.transaction(local.note_admin, link.key, link.team in facts.admin_of)
                    st.state, st.error, st.retry_in_s = "ok", None, None
                    LOG.info("team %s: connected to %s as %s", link.team, st.server, facts.member)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._pusher, push_conn, link, st, wake)
                        tg.start_soon(self._puller, pull_conn, link, st, wake)
                        tg.start_soon(
                            self._listener, listen_conn, link, wake, push_conn.backend_pid, facts.schema_version
                        )
                finally:
                    await pull_conn.close()
            finally:
                await push_conn.close()
        finally:
            await _close(listen_conn)

    async def _pusher(self, conn: ThreadedConnection, link: Link, st: LinkStatus, wake: _Wake) -> None:
        """Drain the outbox: each batch pushed while the next is read (the server's work and ours overlap),
        unless hooks are arriving (`Ingestor.busy`) and the server runs on this machine: then in slices
        (`_paced_slice`), each pushed in a pause between two hooks and sized to it, the outbox read in a
        pause of its own. A server elsewhere takes none of our cores, and a slice there would wait a network
        round trip each: its push goes in whole batches.

        Pushed rows leave the outbox only after the server's COMMIT returned: while a backlog is pushed,
        those of the batches before (ACK_CHUNK or more) during the next batch's push (in a pause of the
        hooks, when paced), ACK_CHUNK per short transaction (a hook's commit waits for one at most); the
        rest once the outbox is drained: at once when no local commit came meanwhile (the push has nothing
        more to send), else every ACK_EVERY_S. Until then `after` keeps them from being read again. A crash
        before the ack pushes them again: the server ignores the repeat."""
        after = 0  # the highest outbox id read by this connection (pushed, skipped, or held)
        held: list[local.OutRow] = []  # read, not pushed yet (paced: a read's rows go in several slices)
        pending = _Pushed()
        pace = _Pace()
        shares_cores = transport.is_local(link.dsn)  # its backend runs beside the hooks (`_paced_slice`)
        acked_at = time.monotonic()
        linger = 0.0  # none before the first read: a link that just connected has no busy moment to gather
        try:
            while True:
                await anyio.sleep(linger)
                linger = PUSH_LINGER_S
                wake.push = anyio.Event()  # before reading: a commit from now on wakes the next round
                skipped: list[int] = []
                with short_gil_turns():
                    while True:
                        paced = shares_cores and self.daemon.ingestor.busy()
                        size = await self._paced_slice(pace) if paced else PUSH_BATCH
                        if not held and not skipped:
                            held, skipped = await self._read_outbox(link, PACE_READ_ROWS if paced else size, after)
                            if not held and not skipped:
                                break
                            after = _last_read(after, held, skipped)
                            if paced and held:
                                continue  # the read took this pause: the slices take the next ones
                        rows, held = held[:size], held[size:]
                        ids = [r.outbox_id for r in rows] + skipped
                        overlap = not paced and not held
                        committed: list[bool] = []  # set by _push_batch once the server's COMMIT returned
                        following: tuple[list[local.OutRow], list[int]] = ([], [])
                        async with anyio.create_task_group() as tg:
                            if rows:
                                paced_by = pace if paced else None
                                tg.start_soon(self._push_batch, conn, link, st, rows, committed, paced_by)
                            if len(pending.ids) >= ACK_CHUNK:  # earlier batches: their COMMITs returned
                                tg.start_soon(self._ack, link, wake, pending, len(pending.ids))
                            if overlap:
                                following = await self._read_outbox(link, PUSH_BATCH, after)
                        if rows and not committed:
                            # Cancelled mid-push (the link is going down): a task group may end quietly then,
                            # so the COMMIT is known only by the flag. Not acknowledged: pushed again later.
                            await anyio.lowlevel.checkpoint()
                            raise TeamError("a push was interrupted before the server's COMMIT returned")
                        pending.ids += ids
                        pending.rows += len(rows)
                        LOG.debug(
                            "team %s: pushed %d rows, outbox ids %d..%d", link.team, len(rows), min(ids), max(ids)
                        )
                        held, skipped = following if overlap else (held, [])
                        if held or skipped:
                            after = _last_read(after, held, skipped)
                # The outbox is drained: what the server holds leaves it now, unless hooks are busy.
                if pending.ids and (not wake.push.is_set() or time.monotonic() - acked_at >= ACK_EVERY_S):
                    await self._ack(link, wake, pending, len(pending.ids))
                    acked_at = time.monotonic()
                with anyio.move_on_after(ACK_EVERY_S if pending.ids else PUSH_POLL_S):
                    await wake.push.wait()
        finally:
            if pending.ids:  # the link is going away (an error, a rebuild, shutdown): ack what the server has
                with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
                    await self._ack(link, wake, pending, len(pending.ids))

    async def _paced_slice(self, pace: _Pace) -> int:
        """While hooks arrive: wait for the next pause between two (PACE_AFTER_ACK_S into it: its client
        reads its ack meanwhile), and return how many rows to push in PACE_SHARE of what is likely left
        of it (PACE_MIN_S at least). One slice a pause; without a pause in PACE_WAIT_MAX_S (hooks without
        pauses, a long reply, a pause outlasting the slice before) a slice goes anyway: hooks slow a push,
        never stop it."""
        await self._next_pause()
        return pace.rows_for(max(PACE_MIN_S, PACE_SHARE * self.daemon.quiet.left()))

    async def _next_pause(self) -> None:
        """PACE_AFTER_ACK_S into the next pause between two hooks (its client reads its ack meanwhile), or
        after PACE_WAIT_MAX_S without one: hooks slow a sync, never stop it."""
        if await self.daemon.quiet.next(PACE_WAIT_MAX_S):
            await anyio.sleep(PACE_AFTER_ACK_S)

    async def _read_outbox(self, link: Link, limit: int, after: int) -> tuple[list[local.OutRow], list[int]]:
        """`local.read_outbox` of `limit` rows, READ_ROWS per worker-thread call with a pause between."""
        db = self.daemon.settings.db
        rows: list[local.OutRow] = []
        skipped: list[int] = []
        while (wanted := limit - len(rows) - len(skipped)) > 0:
            began = time.monotonic()
            part, gone = await readers.run(db, local.read_outbox, link, min(wanted, READ_ROWS), after, self._give_way)
            rows += part
            skipped += gone
            if len(part) + len(gone) < min(wanted, READ_ROWS):
                break  # the outbox's end
            if len(rows) + len(skipped) >= limit:
                break
            after = _last_read(after, part, gone)
            await _yield_after(time.monotonic() - began)
        return rows, skipped

    async def _push_batch(
        self, conn: ThreadedConnection, link: Link, st: LinkStatus, rows: Any, committed: list[bool], pace: _Pace | None
    ) -> None:
        """One batch (or a paced slice: `pace` learns how long it took)."""
        began = time.monotonic()
        refused = await conn.run(pg.push, OP_TIMEOUT_S, link.team, self.machine, rows, st.schema_version or 1)
        if pace is not None:
            pace.took(len(rows), time.monotonic() - began)
        committed.append(True)
        st.pushed += len(rows)
        st.last_push_at = time.time()
        if refused:
            LOG.warning("team %s: the server refused %d tombstones (not our rows)", link.team, len(refused))

    async def _ack(self, link: Link, wake: _Wake, pending: _Pushed, upto: int) -> None:
        """The first `upto` pushed rows leave the outbox ACK_CHUNK at a time, each a short transaction (a
        hook's commit waits for one at most), and leave `pending` as each commits: an ack cut short
        (the link going down) leaves the rest to the next, or to a push again, which the server ignores."""
        first, last = pending.ids[0], pending.ids[upto - 1]
        while upto > 0:
            part = pending.ids[: min(upto, ACK_CHUNK)]
            try:
                await self._write(_ack_marked, wake, link.key, part, pending.rows, time.time())
            finally:
                wake.own_commit = False  # the commit's listeners ran (or it failed): the next is not ours
            del pending.ids[: len(part)]
            pending.rows = 0
            upto -= len(part)
        LOG.debug("team %s: acked outbox rows %d..%d", link.team, first, last)

    async def _puller(self, conn: ThreadedConnection, link: Link, st: LinkStatus, wake: _Wake) -> None:
        db = self.daemon.settings.db
        settings = self.daemon.settings
        projects = [p.project_id for p in link.projects]
        lag_at = 0.0
        await conn.run(pg.for_pulls, OP_TIMEOUT_S)
        while True:
            if not self._catching_up.get(link.key):  # a SessionStart waiting: no linger
                await anyio.sleep(PULL_LINGER_S)
            wake.pull = anyio.Event()
            waiting = self._catching_up.pop(link.key, [])  # a pull that starts now: what they wait for
            with short_gil_turns():  # a SessionStart waits for it: not paced (its own hook is in flight)
                await self._pull_all(conn, link, st, pace=not waiting)
            for done in waiting:
                done.set()
            if time.monotonic() - lag_at >= LAG_EVERY_S:
                lag_at = time.monotonic()
                after = await readers.run(db, local.cursors, link.key)
                behind = local.behind(after, projects)
                st.lag = await conn.run(pg.waiting, OP_TIMEOUT_S, link.team, projects, self.machine, after, behind)
            with anyio.move_on_after(settings.team_pull_interval_s):
                await wake.pull.wait()

    async def _pull_all(self, conn: ThreadedConnection, link: Link, st: LinkStatus, pace: bool) -> None:
        """Pages until the feeds have no more: each fetched and decoded on a worker thread, stored in steps,
        FTS5's automerge off from the first page that brings rows to the end (PULL_MERGE_PAGES)."""
        merging: list[bool] = []  # one element once automerge is off
        try:
            await self._pull_pages(conn, link, st, merging, pace)
        finally:
            if merging:
                with anyio.CancelScope(shield=True):
                    try:
                        await self._write(repair.set_fts_merges_on_thread, repair.FTS_MERGES)
                    except StorageError as exc:  # the next pull's end, or the next start, sets it back
                        LOG.warning("team %s: FTS5's automerge not set back on: %s", link.team, exc)

    async def _pull_pages(
        self, conn: ThreadedConnection, link: Link, st: LinkStatus, merging: list[bool], pace: bool
    ) -> None:
        """`_pull_all`'s pages; `merging` gets an element once automerge is off (the caller turns it on).
        While hooks arrive (and `pace`: no SessionStart waits for this pull, its own hook in flight, so
        no pause would come), from a server on this machine: pages of PACED_PAGE_ROWS, each fetched in a
        pause between two hooks (`_pull_turn`)."""
        db = self.daemon.settings.db
        projects = [p.project_id for p in link.projects]
        shares_cores = transport.is_local(link.dsn)  # its backend's work takes this machine's cores
        fetch = _Took()
        while True:
            after = await readers.run(db, local.cursors, link.key)
            if "observations" not in after:  # a join: only the window it keeps, not the project's history
                start = await conn.run(pg.window_start, OP_TIMEOUT_S, link.team, projects, self._window_since())
                await self._write(local.move_cursors, link.key, {"observations": start}, 0, time.time())
                continue
            behind = local.behind(after, projects)
            if any(seq < 0 for seq in behind.values()):  # a project joined to a link that pulls: its window
                since = self._window_since()
                starts = {
                    local.BEHIND + p: await conn.run(pg.window_start, OP_TIMEOUT_S, link.team, [p], since)
                    for p, seq in behind.items()
                    if seq < 0
                }
                await self._write(local.move_cursors, link.key, starts, 0, time.time())
                continue
            paced = pace and shares_cores and self.daemon.ingestor.busy()
            if paced:
                await self._pull_turn(fetch)
            began = time.monotonic()
            page, more = await conn.run(
                pg.pull, OP_TIMEOUT_S, link.team, projects, self.machine, after,
                limit=PACED_PAGE_ROWS if paced else pg.PAGE_ROWS, version=st.schema_version or 1, behind=behind,
            )  # fmt: skip
            if behind:  # the joined projects' own cursors reach the page's end (the link's, at the feed's end)
                reached = max(page.cursors.get("observations", -1), -1 if more else after["observations"])
                if reached >= 0:
                    page.cursors |= {local.BEHIND + p: reached for p in behind}
            if paced:
                fetch.took(time.monotonic() - began)
            if page.observations and not merging:
                merging.append(True)  # first: a write given up on may still commit
                await self._write(repair.set_fts_merges_on_thread, {"automerge": 0})
            if page.cursors:
                st.pulled += await self._store_page(conn, link, page, pace)
            st.last_pull_at = time.time()
            if not more:
                return

    async def _pull_turn(self, step: _Took) -> None:
        """While hooks arrive, before a step of a pull: return at once when this pause between two hooks
        is likely to last the step's time still (capture.quiet); else at the next pause (`_next_pause`)."""
        if step.seconds and self.daemon.quiet.left() >= step.seconds:
            return
        await self._next_pause()

    def _window_since(self) -> float:
        days = self.daemon.settings.team_window_days
        return time.time() - days * local.DAY_S if days > 0 else 0.0

    async def _store_page(self, conn: ThreadedConnection, link: Link, page: local.Page, pace: bool) -> int:
        """One pulled page into the store in short transactions, each with its rows' full-text
        entries and its cursor: a hook's commit waits for one of them at most, never for the page
        (nor indexes the pulled rows itself). While hooks arrive, each is written in a pause between
        two (`_pull_turn`), and the writer does not rest after it: the pause is the rest. A crash
        between them pulls the rest again."""
        for skipped in page.skipped:
            LOG.warning(
                "team %s: skipped row seq %d by %s: %d bytes, over the %d a row may have",
                link.team, skipped.seq, skipped.author, skipped.size, pg.ROW_MAX_BYTES,
            )  # fmt: skip
        now = time.time()
        ingestor = self.daemon.ingestor
        for chunk in _chunks(page.observations):
            if not (pace and ingestor.busy()):
                await self._write(self._store_rows, link, chunk, now)
                continue
            await self._pull_turn(self._chunk)
            began = time.monotonic()
            await ingestor.write_between_batches(self._store_rows, link, chunk, now, rest=False)
            self._chunk.took(time.monotonic() - began)
        admins: list[str] = []
        if page.tombstones:
            admins = await conn.run(pg.admins, OP_TIMEOUT_S, link.team)
            ids = await readers.run(self.daemon.settings.db, local.tombstoned, link, page.tombstones, admins)
            if ids:  # deleted as a purge deletes: full-text entries, prompts, every copy of their text
                await self.delete_rows(ids)
        window = self.daemon.settings.team_window_days
        await self._write(self._store_rest, link, page, admins, window, now)
        return len(page.observations) + len(page.sessions) + len(page.tombstones)

    def _store_rows(self, db: sqlite3.Connection, link: Link, rows: list[local.InObservation], now: float) -> None:
        """On the writer thread, inside a transaction: a few pulled rows, indexed, and their cursor."""
        store = self.store
        window = self.daemon.settings.team_window_days
        end = local.store_observations(db, link, rows, store.next_observation_id, window, now)
        local.move_cursors(db, link.key, {"observations": rows[-1].seq}, len(rows), now)
        if end > store.next_observation_id:
            store.next_observation_id = end  # an id taken by a rolled-back transaction is a harmless gap
            store.index_on_thread(db, end)
            db.execute(fts.COMMAND, ("merge", PULL_MERGE_PAGES))

    def _store_rest(
        self, db: sqlite3.Connection, link: Link, page: local.Page, admins: list[str], window: float, now: float
    ) -> None:
        local.store_sessions(db, link, page.sessions, window, now)
        local.drop_sessions(db, link, page.tombstones, admins)
        local.move_cursors(db, link.key, page.cursors, len(page.sessions) + len(page.tombstones), now)

    async def _listener(
        self, conn: psycopg.AsyncConnection[Any], link: Link, wake: _Wake, own_pid: int, version: int
    ) -> None:
        v2 = version >= pg.DELETES_SINCE
        while True:
            async for note in conn.notifies(timeout=LISTEN_CHECK_S):
                if v2 and note.payload == "rotated":  # a member was removed: the team's channel has a new name
                    raise TeamError("the team's wake-up channel changed: reconnecting")
                if (v2 or note.payload == link.team) and note.pid != own_pid:  # not our own push's
                    wake.pull.set()
            with anyio.fail_after(OP_TIMEOUT_S):  # alive? (a stalled network would keep notifies() quiet)
                await conn.execute("SELECT 1")

    # --- asked by the CLI and recall ---------------------------------------------------------------

    async def catch_up(self, root: str, budget_s: float) -> bool:
        """Before a SessionStart's context in `root`: when its link last pulled more than CATCH_UP_AFTER_S
        ago (or never, since the daemon started), wake its puller and wait, at most `budget_s`, for a
        whole pull that began after this call. True when one ended in time. Nothing is waited for in
        a project not shared, or when the link knows its server to be away (it is retrying)."""
        with anyio.move_on_after(budget_s):
            return await self._catch_up(root)
        return False

    async def _catch_up(self, root: str) -> bool:
        await self._links_read.wait()  # a daemon just started reads its shared projects first (a few ms)
        link = next((k for k in self.links.values() if root in k.roots), None)
        if link is None:
            return False
        st = self.status.get(link.key)
        if st is not None and st.state == "retrying":
            return False
        if st is not None and st.last_pull_at is not None and time.time() - st.last_pull_at < CATCH_UP_AFTER_S:
            return False
        done = anyio.Event()
        self._catching_up.setdefault(link.key, []).append(done)
        self._wake.setdefault(link.key, _Wake()).pull.set()
        try:
            await done.wait()
        finally:
            waiting = self._catching_up.get(link.key, [])
            if done in waiting:  # given up on: the next pull owes it nothing
                waiting.remove(done)
        return True

    async def statuses(self) -> list[LinkStatus]:
        db = self.daemon.settings.db
        for link in self.links.values():
            st = self._status_of(link)
            st.outbox = await readers.run(db, local.outbox_depth, [p.root for p in link.projects])
        return list(self.status.values())

    async def search(self, root: str | None, query: str, limit: int, author: str | None, timeout_s: float) -> Any:
        """Hits from the server's full text (team-server's `search_team`), or a one-line note of why
        none: bounded by `timeout_s` whatever the network does. Searches at once each take their own
        connection of the link's pool; a connection a search gave up on mid-query is closed by it."""
        from nmemd.team import server_search

        targets = [(link, p) for link in self.links.values() for p in link.projects if root is None or p.root == root]
        hits: list[tuple[local.SharedProject, Any]] = []
        notes: list[str] = []
        deadline = time.monotonic() + timeout_s
        with anyio.move_on_after(timeout_s) as scope:
            for link, project in targets:
                st = self.status.get(link.key)
                if st is not None and st.state != "ok":  # known to be away: no search waits for it
                    notes.append(f"team server not asked: {st.error or st.state}")
                    continue
                try:
                    pool = await self._search_pool(link)
                    async with pool.connection(timeout=max(0.001, deadline - time.monotonic())) as conn:
                        found = await server_search.search_team(
                            conn,
                            team=link.team,
                            project=project.project_id,
                            query=query,
                            limit=limit,
                            author=author,
                            timeout_ms=max(1, int((deadline - time.monotonic()) * 1000)),
                        )
                except TeamTimeout as exc:  # the server gave up in time: its connection is fine
                    notes.append(f"{exc}: local hits only")
                    continue
                except Exception as exc:
                    notes.append(f"team server not asked: {pg.describe(_first_leaf(exc), link.dsn)}")
                    continue
                hits.extend((project, h) for h in found)
        if scope.cancelled_caught:
            notes.append("team server not asked: it did not answer within the search's time")
        if hits:  # what this user forgot stays forgotten, whatever the server still holds
            hidden = await readers.run(self.daemon.settings.db, local.hidden_among, [h.event_id for _, h in hits])
            hits = [(p, h) for p, h in hits if h.event_id not in hidden]
        return hits, notes

    async def _search_pool(self, link: Link) -> Any:
        async with self._search_lock:
            pool = self._search_pools.get(link.key)
            if pool is None:
                pool = self._search_pools[link.key] = await pg.search_pool(link.dsn)
            return pool

    async def _close_search_pools(self, keep: set[str] | None = None) -> None:
        """Close the pools of links that went (all of them at stop): their connections end."""
        for key in [k for k in self._search_pools if keep is None or k not in keep]:
            pool = self._search_pools.pop(key)
            with anyio.CancelScope(shield=True), anyio.move_on_after(5.0):
                try:
                    await pool.close(timeout=2.0)
                except Exception:
                    LOG.debug("closing a team search pool failed", exc_info=True)


async def _import_psycopg() -> None:
    """psycopg imported on a worker thread before the first link needs it: imported on the event loop
    (by the first DSN parsed), it held every hook's ack for the whole import, 0.7 s on a loaded
    machine (bench_team_pull.py, push phase). A missing psycopg is each link's error, as before."""
    if "psycopg" not in sys.modules:
        with contextlib.suppress(ImportError), short_gil_turns():
            await anyio.to_thread.run_sync(importlib.import_module, "psycopg")
            gc_tuning.freeze_long_lived()  # its modules, out of later full collections, as start-up's


def _last_read(after: int, rows: list[local.OutRow], skipped: list[int]) -> int:
    """The highest outbox id read so far: `after`, or a newer one among `rows` and `skipped`."""
    return max(after, *(r.outbox_id for r in rows), *skipped)


async def _yield_after(took: float = 0.0) -> None:
    """Between two short transactions of a pull or an ack: as long again, at most a few ms, so the hooks'
    commits (same store lock, same process) are taken at once; a pull keeps going at about half speed."""
    await anyio.sleep(min(max(took, 0.001), YIELD_MAX_S))


def _ack_marked(db: sqlite3.Connection, wake: _Wake, *args: Any) -> None:
    """`local.ack`, and the store's commit that follows marked as the link's own: it wakes no pusher."""
    local.ack(db, *args)
    wake.own_commit = True


def _chunks(rows: list[local.InObservation]) -> Iterator[list[local.InObservation]]:
    """Pulled rows in the few a short transaction stores (APPLY_ROWS, or APPLY_BYTES of text)."""
    chunk: list[local.InObservation] = []
    size = 0
    for row in rows:
        chunk.append(row)
        size += len(row.title) + len(row.body)
        if len(chunk) >= APPLY_ROWS or size >= APPLY_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


async def _close(conn: Any) -> None:
    with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
        try:
            await conn.close()
        except Exception:
            LOG.debug("closing a team connection failed", exc_info=True)
