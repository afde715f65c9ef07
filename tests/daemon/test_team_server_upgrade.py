"""A live upgrade of a team server from v1 to this nmem's schema, members pushing and pulling the
whole time with v1's statements (support/team_v1.py): nothing lost, nothing doubled, and the older
clients go on working (issue #36: migrations that do not lock teams out)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import psycopg
import pytest
from support import team_v1 as v1
from support.helpers import wait_until
from support.pg_cluster import Database

from nmemd.team import admin, schema

pytestmark = pytest.mark.postgres

BATCH = 20


@dataclass
class Pusher:
    """A v1 member pushing batches of new events, and in each batch a tombstone of the first event
    of its previous batch (a forget); a failed push is retried whole, as the daemon does."""

    who: str
    dsn: str
    stop: threading.Event
    committed: set[str] = field(default_factory=set)
    forgotten: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    batches: int = 0

    def run(self) -> None:
        conn = psycopg.connect(self.dsn, autocommit=True)
        previous: str | None = None
        try:
            while not self.stop.is_set():
                ids = [f"{self.who}-{self.batches}-{i}" for i in range(BATCH)]
                ops = [v1.obs(i) for i in ids] + ([v1.tomb(previous)] if previous else [])
                for _attempt in range(20):
                    try:
                        refused = v1.push(conn, "acme", ops, machine=self.who)
                        break
                    except psycopg.Error as exc:
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                        conn.close()
                        conn = psycopg.connect(self.dsn, autocommit=True)
                else:
                    raise AssertionError(f"{self.who}: 20 failed pushes in a row: {self.errors[-3:]}")
                assert refused == [], refused
                self.committed.update(ids)
                if previous:
                    self.forgotten.add(previous)
                previous = ids[0]
                self.batches += 1
        finally:
            conn.close()


@dataclass
class Puller:
    """A v1 member's pull loop: `seq > cursor` pages until told to stop, then until drained."""

    dsn: str
    stop: threading.Event
    seen: list[str] = field(default_factory=list)
    cursor: int = 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while True:
                stopping = self.stop.is_set()
                page = v1.pull(conn, "acme", self.cursor, 200)
                self.seen += [str(r[2]) for r in page]
                if page:
                    self.cursor = int(page[-1][0])
                elif stopping:
                    return
                else:
                    self.stop.wait(0.02)  # the poll of a feed reader, not a wait for an event


def test_a_v1_server_upgraded_live_loses_and_doubles_nothing_and_v1_clients_go_on(pg_db: Database) -> None:
    with psycopg.connect(pg_db.admin_dsn) as conn:
        v1.create_v1_server(conn)
        conn.execute("INSERT INTO nmem.teams (name) VALUES ('acme')")
        conn.commit()
    dsn = {who: admin.add_member(pg_db.admin_dsn, "acme", who).dsn for who in ("alice", "bob", "carol")}
    stop_pushing, stop_pulling = threading.Event(), threading.Event()
    pushers = [Pusher(who, dsn[who], stop_pushing) for who in ("alice", "bob")]
    puller = Puller(dsn["carol"], stop_pulling)
    threads = [threading.Thread(target=p.run) for p in [*pushers, puller]]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: all(p.batches >= 5 for p in pushers), 60, "v1 pushes before the upgrade")
        before = [p.batches for p in pushers]
        assert admin.init(pg_db.admin_dsn, "acme") == admin.Initialized(1, schema.SCHEMA_VERSION, False)
        wait_until(lambda: all(p.batches >= b + 5 for p, b in zip(pushers, before, strict=True)), 60, "pushes after it")
    finally:
        stop_pushing.set()
        for t in threads[:-1]:
            t.join(60)
        stop_pulling.set()
        threads[-1].join(60)
    assert not any(t.is_alive() for t in threads)

    committed = set().union(*(p.committed for p in pushers))
    forgotten = set().union(*(p.forgotten for p in pushers))
    on_server = [str(r[0]) for r in pg_db.execute("SELECT event_id FROM nmem.observations")]
    assert len(on_server) == len(set(on_server))  # 0 duplicated
    assert set(on_server) == committed - forgotten  # 0 lost, 0 resurrected
    assert len(puller.seen) == len(set(puller.seen))  # the feed: each row once...
    assert set(on_server) <= set(puller.seen) <= committed  # ...and every row that stayed
    assert [e for p in pushers for e in p.errors] == []  # the upgrade only made pushes wait
    # the older clients' own check still passes, and v2's ledger says why
    with psycopg.connect(dsn["bob"]) as conn:
        assert conn.execute(v1.VERSION).fetchone() == ("bob", 1)
    assert pg_db.execute("SELECT version, compatible_since FROM nmem.migrations ORDER BY version") == [
        (m.version, m.compatible_since) for m in schema.MIGRATIONS
    ]


def test_times_a_v1_server_took_unclamped_are_clamped_by_the_upgrade(pg_db: Database) -> None:
    """Finding 11 on a server that stored rows before v2: `infinity`, `-infinity` and 2099 become
    the time the row arrived (or 1970); a time already right is left as it was."""
    with psycopg.connect(pg_db.admin_dsn) as conn:
        v1.create_v1_server(conn)
        conn.execute("INSERT INTO nmem.teams (name) VALUES ('acme')")
        conn.commit()
    bob = admin.add_member(pg_db.admin_dsn, "acme", "bob").dsn
    with psycopg.connect(bob, autocommit=True) as conn:
        for event_id, project, when in (
            ("inf", v1.PROJECT, "infinity"),
            ("neg", v1.PROJECT, "-infinity"),
            ("far", "github.com/acme/other", "2099-01-01"),
            ("ok", v1.PROJECT, "2026-01-02 03:04:05+00"),
        ):
            conn.execute(
                "INSERT INTO nmem.observations (team, project, event_id, machine, agent, session_id, kind, title,"
                " body, created_at) VALUES ('acme', %s, %s, 'm', 'codex', 's', 'edit', 't', 'b', %s)",
                (project, event_id, when),
            )
        conn.execute(
            "INSERT INTO nmem.sessions (team, project, session_id, machine, agent, started_at, ended_at, summary)"
            " VALUES ('acme', %s, 's', 'm', 'codex', 'infinity', '2099-01-01', 'x')",
            (v1.PROJECT,),
        )
    (seq_before,) = pg_db.execute("SELECT seq FROM nmem.sessions")[0]
    admin.init(pg_db.admin_dsn, "acme")
    rows = pg_db.execute(
        "SELECT event_id, created_at = pushed_at, created_at = '1970-01-01 00:00:00+00',"
        " created_at = '2026-01-02 03:04:05+00' FROM nmem.observations ORDER BY event_id"
    )
    assert rows == [
        ("far", True, False, False),
        ("inf", True, False, False),
        ("neg", False, True, False),
        ("ok", False, False, True),
    ]
    (started, ended, seq_after) = pg_db.execute("SELECT started_at, ended_at, seq FROM nmem.sessions")[0]
    assert started.year < 2099 and ended.year < 2099 and seq_after > seq_before


def test_a_v7_server_upgraded_to_v8_live_keeps_older_inserts_and_orders_them_with_v8_pushes(pg_db: Database) -> None:
    """M008 under a member pushing with a v2-v7 client's INSERT (the per-row trigger's path): the
    upgrade waits for the push in flight, the INSERTs go on, and this nmem's pushes
    (nmem.push_observations) take later seqs from the same team's sequence: one feed, each row once."""
    import json

    from nmemd.team import pg

    with psycopg.connect(pg_db.admin_dsn) as conn:
        schema.migrate(conn, upto=7)
        conn.execute("INSERT INTO nmem.teams (name) VALUES ('acme')")
        conn.commit()
    dsn = {who: admin.add_member(pg_db.admin_dsn, "acme", who).dsn for who in ("alice", "bob")}

    def rows(ids: list[str]) -> str:
        return json.dumps([
            {"project": v1.PROJECT, "event_id": i, "agent": "codex", "session_id": "s1", "kind": "edit",
             "title": f"title of {i}", "body": "b", "file": None, "created_at": 1.7e9}
            for i in ids
        ])  # fmt: skip

    stop = threading.Event()
    older = Pusher("alice", dsn["alice"], stop)

    def push_v7() -> None:
        with psycopg.connect(older.dsn, autocommit=True) as conn:
            while not stop.is_set():
                ids = [f"alice-{older.batches}-{i}" for i in range(BATCH)]
                with conn.transaction():
                    conn.execute(pg._PUSH_OBS, {"team": "acme", "machine": "m", "rows": rows(ids)})  # noqa: SLF001
                older.committed.update(ids)
                older.batches += 1

    thread = threading.Thread(target=push_v7)
    thread.start()
    try:
        wait_until(lambda: older.batches >= 3, 60, "v7 pushes before the upgrade")
        assert admin.init(pg_db.admin_dsn, "acme") == admin.Initialized(7, schema.SCHEMA_VERSION, False)
        at_upgrade = older.batches
        wait_until(lambda: older.batches >= at_upgrade + 3, 60, "v7 pushes after it")
        with psycopg.connect(dsn["bob"], autocommit=True) as bob:
            for b in range(3):
                with bob.transaction():
                    bob.execute("SELECT nmem.push_observations('acme', 'm', %s::json)", (rows([f"bob-{b}"]),))
        wait_until(lambda: older.batches >= at_upgrade + 6, 60, "v7 pushes beside v8's")
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    with psycopg.connect(dsn["bob"], autocommit=True) as conn:
        feed = [str(r[2]) for r in v1.pull(conn, "acme", 0, 100_000)]
    assert len(feed) == len(set(feed))
    assert set(feed) == older.committed | {"bob-0", "bob-1", "bob-2"}
    assert pg_db.execute("SELECT count(*), count(DISTINCT seq % 65536) FROM nmem.observations") == [(len(feed), 1)]


def test_the_push_function_belongs_to_the_feeds_owner_whoever_upgraded(pg_db: Database) -> None:
    """v1 set up by the database's admin, v2-v7 by a superuser (who then owns nmem.open_feed and every
    team's sequence), v8 by the admin: M008's push function, the admin's, could neither check the
    writer nor draw a seq, and refused every push. A later upgrade by the admin is refused with who
    must run it (nothing changes meanwhile); the superuser's gives the function to the feeds' owner,
    and a member's push goes through it."""
    import json

    from nmemd.errors import TeamError

    row = {"project": v1.PROJECT, "event_id": "k-1", "agent": "codex", "session_id": "s1", "kind": "edit",
           "title": "t", "body": "b", "file": None, "created_at": 1.7e9}  # fmt: skip
    push = "SELECT nmem.push_observations('acme', 'm', %s::json)"
    with psycopg.connect(pg_db.admin_dsn) as conn:
        schema.migrate(conn, upto=1)
    with psycopg.connect(pg_db.superuser_dsn) as conn:
        schema.migrate(conn, upto=7)
    with psycopg.connect(pg_db.admin_dsn) as conn:
        schema.migrate(conn, upto=8)
        conn.execute("INSERT INTO nmem.teams (name) VALUES ('acme')")
        conn.commit()
    kim = admin.add_member(pg_db.admin_dsn, "acme", "kim").dsn
    with psycopg.connect(kim) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute(push, (json.dumps([row]),))  # M008 alone, as it shipped
    with pytest.raises(TeamError, match=r"must run as .* \(the owner of the teams' feeds\) or a superuser"):
        admin.init(pg_db.admin_dsn, "acme")
    assert pg_db.execute("SELECT max(version) FROM nmem.migrations") == [(8,)]
    with psycopg.connect(pg_db.superuser_dsn) as conn:
        assert schema.migrate(conn) == (8, schema.SCHEMA_VERSION)
    with psycopg.connect(kim) as conn:
        assert conn.execute(push, (json.dumps([row]),)).fetchone() == (1,)
    assert pg_db.execute("SELECT author::text FROM nmem.observations") == [("kim",)]
