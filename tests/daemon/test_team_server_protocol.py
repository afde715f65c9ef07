"""Team memory, the server's side of the sync protocol (issue #36): deletes that stay deleted,
tombstones only where they are due, and a server no login can stall, flood or listen to.

Each test speaks to a real PostgreSQL through the members' own DSNs: the statements a v1 nmem sends
(support/team_v1.py), or the raw SQL a hostile teammate or another team's member would type.
`acme` has alice, bob and carol (its admin); `beta` has dave, who is not in acme.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from support import team_v1 as v1
from support.helpers import wait_until
from support.pg_cluster import Database

from nmemd.team import admin

pytestmark = pytest.mark.postgres


@dataclass
class World:
    db: Database
    dsn: dict[str, str]

    def connect(self, who: str, **kw: Any) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.dsn[who], autocommit=True, **kw)

    def count(self, sql: str, *params: Any) -> int:
        return int(self.db.execute(sql, params or None)[0][0])

    def held(self, event_id: str) -> int:
        return self.count("SELECT count(*) FROM nmem.observations WHERE event_id = %s", event_id)


@pytest.fixture
def world(pg_db: Database) -> Iterator[World]:
    admin.init(pg_db.admin_dsn, "acme")
    admin.init(pg_db.admin_dsn, "beta")
    dsn = {
        "alice": admin.add_member(pg_db.admin_dsn, "acme", "alice").dsn,
        "bob": admin.add_member(pg_db.admin_dsn, "acme", "bob").dsn,
        "carol": admin.add_member(pg_db.admin_dsn, "acme", "carol", is_admin=True).dsn,
        "dave": admin.add_member(pg_db.admin_dsn, "beta", "dave").dsn,
    }
    yield World(pg_db, dsn)


def insert_obs(conn: psycopg.Connection[Any], event_id: str, *, team: str = "acme", **cols: Any) -> None:
    row = {
        "team": team, "project": v1.PROJECT, "event_id": event_id, "machine": "laptop", "agent": "codex",
        "session_id": "s1", "kind": "edit", "title": f"title of {event_id}", "body": "b", "created_at": "now",
        **cols,
    }  # fmt: skip
    names = ", ".join(row)
    marks = ", ".join(["%s"] * len(row))
    conn.execute(f"INSERT INTO nmem.observations ({names}) VALUES ({marks})", list(row.values()))  # type: ignore[arg-type]


# --- finding 1: a tombstoned event is never inserted again -----------------------------------------


def test_a_repush_of_an_event_and_its_tombstone_in_any_order_never_brings_it_back(world: World) -> None:
    with world.connect("alice") as alice:
        assert v1.push(alice, "acme", [v1.obs("a-1"), v1.obs("a-2")]) == []
        assert v1.push(alice, "acme", [v1.tomb("a-1")]) == []
        assert world.held("a-1") == 0
        # a crash inside the ack window: the whole window again, in either order
        v1.push(alice, "acme", [v1.obs("a-1"), v1.tomb("a-1")])
        assert world.held("a-1") == 0
        v1.push(alice, "acme", [v1.tomb("a-1")])
        v1.push(alice, "acme", [v1.obs("a-1")])
        assert world.held("a-1") == 0
        # leave + rejoin re-queues the window (the observation alone)
        v1.push(alice, "acme", [v1.obs("a-1"), v1.obs("a-2")])
        assert world.held("a-1") == 0 and world.held("a-2") == 1
    with world.connect("bob") as bob:
        assert [r[2] for r in v1.pull(bob, "acme")] == ["a-2"]
    assert world.count("SELECT count(*) FROM nmem.tombstones WHERE event_id = 'a-1'") == 1


# --- finding 2: sessions are deleted, and stay deleted ---------------------------------------------


def test_a_session_tombstone_removes_the_summary_for_good_and_an_emptied_summary_travels(world: World) -> None:
    with world.connect("alice") as alice, world.connect("bob") as bob:
        v1.push(alice, "acme", [v1.Op("session", "", session_id="s-a", summary="Ran: deploy --token zq55")])
        v1.push(bob, "acme", [v1.Op("session", "", session_id="s-x", summary="bob's own s-x")])
        # bob may not delete alice's session, nor any row but through a tombstone
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute(
                "INSERT INTO nmem.tombstones (team, kind, event_id, project) VALUES ('acme', 'session', 's-a', %s)",
                (v1.PROJECT,),
            )
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute("DELETE FROM nmem.sessions")
        alice.execute(
            "INSERT INTO nmem.tombstones (team, kind, event_id, project) VALUES ('acme', 'session', 's-a', %s)",
            (v1.PROJECT,),
        )
        assert world.db.execute("SELECT author::text, summary FROM nmem.sessions") == [("bob", "bob's own s-x")]
        (tomb,) = bob.execute("SELECT kind, event_id, project, author::text, target::text FROM nmem.tombstones")
        assert tomb == ("session", "s-a", v1.PROJECT, "alice", "alice")
        # a re-push of the summary (a crash, a rejoin) stores nothing
        v1.push(alice, "acme", [v1.Op("session", "", session_id="s-a", summary="Ran: deploy --token zq55")])
        assert world.count("SELECT count(*) FROM nmem.sessions WHERE summary LIKE '%zq55%'") == 0
        # a summary emptied by purge is pushed as '' and reaches the feed with a new seq
        v1.push(bob, "acme", [v1.Op("session", "", session_id="s-b", summary="Ran: rm -rf zq56")])
        (before,) = world.db.execute("SELECT seq FROM nmem.sessions WHERE session_id = 's-b'")
        v1.push(bob, "acme", [v1.Op("session", "", session_id="s-b", summary="")])
        (after,) = world.db.execute("SELECT seq, summary FROM nmem.sessions WHERE session_id = 's-b'")
        assert after[0] > before[0] and after[1] == ""


# --- finding 7: a tombstone needs the event held, in its project, and its author or an admin --------


def test_a_tombstone_is_accepted_only_for_a_held_event_by_its_author_or_an_admin(world: World) -> None:
    with world.connect("alice") as alice, world.connect("bob") as bob, world.connect("carol") as carol:
        v1.push(alice, "acme", [v1.obs("a-1"), v1.obs("a-2")])
        # bob (no admin) cannot delete alice's row, with his nmem or raw SQL
        assert v1.push(bob, "acme", [v1.tomb("a-1")]) == ["a-1"]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            bob.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'a-1')")
        # an id the server does not hold, or a project it is not in: nothing is recorded
        bob.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'ghost') ON CONFLICT DO NOTHING")
        alice.execute("INSERT INTO nmem.tombstones (team, event_id, project) VALUES ('acme', 'a-1', 'github.com/x/y')")
        assert world.count("SELECT count(*) FROM nmem.tombstones") == 0 and world.held("a-1") == 1
        # bob squats alice's event id under another ordinal: alice still deletes her own row, only hers
        bob.execute(
            "INSERT INTO nmem.observations (team, project, event_id, ordinal, machine, agent, session_id, kind,"
            " title, body, created_at) VALUES ('acme', %s, 'a-1', 1, 'm', 'codex', 's', 'edit', 'squat', 'b', now())",
            (v1.PROJECT,),
        )
        assert v1.push(alice, "acme", [v1.tomb("a-1")]) == []
        assert world.db.execute("SELECT author::text FROM nmem.observations WHERE event_id = 'a-1'") == [("bob",)]
        # carol, the team's admin, removes anyone's row
        assert v1.push(carol, "acme", [v1.tomb("a-2")]) == []
        assert world.held("a-2") == 0
        tombs = carol.execute("SELECT event_id, project, author::text, target::text FROM nmem.tombstones ORDER BY seq")
        assert tombs.fetchall() == [("a-1", v1.PROJECT, "alice", "alice"), ("a-2", v1.PROJECT, "carol", "alice")]
    with world.connect("dave") as dave:  # another team's member: not even a lock on acme
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            dave.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'a-1')")


# --- finding 8: a row's size is bounded by the server ----------------------------------------------


def test_the_server_refuses_a_huge_row_from_raw_sql_and_takes_the_largest_a_client_sends(world: World) -> None:
    with world.connect("bob") as bob:
        with pytest.raises(psycopg.errors.CheckViolation):
            insert_obs(bob, "huge", body="x" * (150 * 1024 * 1024))
        with pytest.raises(psycopg.errors.CheckViolation):
            insert_obs(bob, "long-title", title="t" * 20_000)
        with pytest.raises(psycopg.errors.CheckViolation):
            bob.execute(
                "INSERT INTO nmem.sessions (team, project, session_id, machine, agent, started_at, summary)"
                " VALUES ('acme', %s, 's', 'm', 'codex', now(), %s)",
                (v1.PROJECT, "s" * 300_000),
            )
        # what nmem itself sends at most: 1,000 characters of title, 64 Ki of body, 4 bytes each
        insert_obs(bob, "largest", title="é" * 1000, body="𝄞" * (64 * 1024))
    assert world.held("largest") == 1 and world.held("huge") == 0


# --- finding 9: no login can stall a team's pushes -------------------------------------------------


def test_no_login_can_hold_the_lock_a_teams_pushes_wait_for(world: World) -> None:
    with world.connect("dave") as dave, world.connect("bob") as bob, world.connect("alice") as alice:
        dave.execute("SELECT pg_advisory_lock(hashtext('nmem:acme'))")  # v1's lock: nothing waits on it now
        for attempt in (
            "SELECT * FROM nmem.feeds FOR UPDATE",
            "SELECT * FROM nmem.teams FOR UPDATE",
            "LOCK TABLE nmem.observations IN SHARE MODE",
            "LOCK TABLE nmem.sessions IN SHARE MODE",
            "LOCK TABLE nmem.tombstones IN SHARE MODE",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), dave.transaction():
                dave.execute(attempt)
        # bob, a member of acme, cannot lock the team's row or a table but by writing (and waits his turn)
        for attempt in ("SELECT * FROM nmem.feeds FOR UPDATE", "LOCK TABLE nmem.observations IN SHARE MODE"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), bob.transaction():
                bob.execute(attempt)
        alice.execute("SET statement_timeout = '5s'")
        insert_obs(alice, "a-1")  # the server's own ordering, without a client-side lock
        assert world.held("a-1") == 1


# --- finding 11: timestamps a member chooses are clamped -------------------------------------------


def test_infinity_and_far_future_timestamps_are_never_stored(world: World) -> None:
    with world.connect("bob") as bob:
        for event_id, when in (("inf", "infinity"), ("neg", "-infinity"), ("far", "2099-01-01")):
            insert_obs(bob, event_id, created_at=when)
        bob.execute(
            "INSERT INTO nmem.sessions (team, project, session_id, machine, agent, started_at, ended_at, summary)"
            " VALUES ('acme', %s, 's', 'm', 'codex', 'infinity', '2099-01-01', 'x')",
            (v1.PROJECT,),
        )
        bob.execute("UPDATE nmem.sessions SET started_at = 'infinity'")
    rows = world.db.execute(
        "SELECT bool_and(isfinite(created_at) AND created_at <= now() AND created_at >= '1970-01-01')"
        " FROM nmem.observations"
    )
    assert rows == [(True,)]
    rows = world.db.execute("SELECT isfinite(started_at) AND started_at <= now(), ended_at <= now() FROM nmem.sessions")
    assert rows == [(True, True)]


# --- finding 18: a team's wake-ups and volume are its own ------------------------------------------


def test_wakeups_go_to_the_teams_own_channel_and_seqs_say_nothing_of_other_teams(world: World) -> None:
    with world.connect("bob") as bob, world.connect("dave") as dave, world.connect("alice") as alice:
        (channel,) = bob.execute("SELECT channel FROM nmem.feeds WHERE team = 'acme'").fetchone()  # type: ignore[misc]
        assert dave.execute("SELECT count(*) FROM nmem.feeds").fetchone() == (1,)  # beta's only
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            dave.execute("SELECT last_value FROM nmem.feed_seq")
        bob.execute(f'LISTEN "{channel}"')
        dave.execute("LISTEN nmem_feed")
        dave.execute(f'LISTEN "{dave.execute("SELECT channel FROM nmem.feeds").fetchone()[0]}"')  # type: ignore[index]
        insert_obs(alice, "a-1")
        heard = [n.payload for n in bob.notifies(timeout=5, stop_after=1)]
        assert heard == ["feed"]
        assert list(dave.notifies(timeout=0.5)) == []
        # seq: acme's gaps are acme's own, whatever beta writes meanwhile
        for i in range(50):
            insert_obs(dave, f"d-{i}", team="beta")
        insert_obs(alice, "a-2")
        seqs = [r[0] for r in alice.execute("SELECT seq FROM nmem.observations WHERE team = 'acme' ORDER BY seq")]
        assert seqs[1] - seqs[0] == 65536
    # a member removed: the channel they knew is retired (its listeners hear 'rotated')
    with world.connect("alice") as alice:
        alice.execute(f'LISTEN "{channel}"')
        admin.remove_member(world.db.admin_dsn, "acme", "bob")
        assert [n.payload for n in alice.notifies(timeout=5, stop_after=1)] == ["rotated"]
        (renamed,) = alice.execute("SELECT channel FROM nmem.feeds WHERE team = 'acme'").fetchone()  # type: ignore[misc]
        assert renamed != channel


# --- finding 20: a tombstone waiting on a push of its event in flight -------------------------------


@pytest.mark.parametrize("who", ["alice", "carol", "bob"])
def test_a_tombstone_that_waited_for_the_authors_push_is_judged_on_the_committed_row(world: World, who: str) -> None:
    """Alice's push of a-9 is in flight when `who` tombstones a-9: the tombstone waits for it, then
    sees the row: alice's own or the admin's removes it on the server too; bob's is refused (on v1 it
    was accepted, judged on a snapshot taken before the wait: every member deleted its copy while
    the server kept the row)."""
    with world.connect("alice") as pusher, world.connect(who) as deleter:
        pusher.execute("BEGIN")
        insert_obs(pusher, "a-9")  # uncommitted: the team's lock is held
        done: list[object] = []

        def tombstone() -> None:
            try:
                deleter.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'a-9')")
                done.append("ok")
            except Exception as exc:  # noqa: BLE001 - asserted below
                done.append(exc)

        waiter = threading.Thread(target=tombstone)
        waiter.start()
        wait_until(
            lambda: world.count(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND wait_event_type = 'Lock'", who
            ),
            10,
            "the tombstone to wait on the push",
        )
        pusher.execute("COMMIT")
        waiter.join(30)
    tombstones = world.count("SELECT count(*) FROM nmem.tombstones WHERE event_id = 'a-9'")
    if who == "bob":
        assert len(done) == 1 and isinstance(done[0], psycopg.errors.InsufficientPrivilege)
        assert (world.held("a-9"), tombstones) == (1, 0)
    else:
        assert done == ["ok"]
        assert (world.held("a-9"), tombstones) == (0, 1)


# --- schema v8: a push's rows take their seqs in one statement, under the lock taken once ---------


def push_fn(conn: psycopg.Connection[Any], event_ids: list[str], *, team: str = "acme", **cols: Any) -> int:
    """nmem.push_observations, as this nmem's client calls it (and as raw SQL may)."""
    rows = [
        {
            "project": v1.PROJECT, "event_id": e, "agent": "codex", "session_id": "s1", "kind": "edit",
            "title": f"title of {e}", "body": "b", "file": "src/app.py", "created_at": 1.7e9, **cols,
        }
        for e in event_ids
    ]  # fmt: skip
    row = conn.execute("SELECT nmem.push_observations(%s, 'laptop', %s::json)", (team, json.dumps(rows))).fetchone()
    assert row is not None
    return int(row[0])


def test_the_push_function_holds_every_promise_of_a_raw_insert(world: World) -> None:
    """Member, author, clamp, size, tombstones and the team's own sequence: what the per-row trigger
    enforces on a raw INSERT, the function enforces on a push, whatever the rows say."""
    with world.connect("alice") as alice, world.connect("dave") as dave:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            push_fn(dave, ["d-1"])  # another team's member
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            push_fn(dave, ["d-1"], team=None)
        # a row that names its author, seq or push time names nothing: the keys are not columns here
        assert push_fn(alice, ["a-1"], author="bob", seq=1, pushed_at="2099-01-01") == 1
        assert push_fn(alice, ["a-1"]) == 0  # a retry stores nothing twice
        assert push_fn(alice, ["far"], created_at=4.1e9) == 1  # 2099
        assert push_fn(alice, ["old"], created_at=-1e10) == 1
        with pytest.raises(psycopg.errors.CheckViolation):
            push_fn(alice, ["huge"], body="x" * 300_000)
        alice.execute("INSERT INTO nmem.tombstones (team, event_id, kind) VALUES ('acme', 'a-1', 'observation')")
        assert world.held("a-1") == 0
        push_fn(alice, ["a-1", "a-2"])  # a crash in the ack window: the tombstoned event stays deleted
        assert (world.held("a-1"), world.held("a-2")) == (0, 1)
        push_fn(dave, ["d-2"], team="beta")
    rows = world.db.execute(
        "SELECT o.event_id, o.author::text, o.machine, o.seq % 65536 = f.slot,"
        " isfinite(o.created_at) AND o.created_at <= now() AND o.created_at >= '1970-01-01', o.files"
        " FROM nmem.observations o JOIN nmem.feeds f USING (team) ORDER BY o.team, o.seq"
    )
    assert [r[0] for r in rows] == ["far", "old", "a-2", "d-2"]
    assert all(r[1:] == ("alice", "laptop", True, True, ["src/app.py"]) for r in rows[:-1])
    assert rows[-1][1] == "dave"


@pytest.mark.parametrize("first", ["function", "insert"])
def test_the_push_function_and_a_raw_insert_wait_for_each_other_in_seq_order(world: World, first: str) -> None:
    """The function locks the team's row before it draws a seq, as the trigger does for an older
    client's INSERT: whichever writes second waits for the first one's COMMIT and draws larger seqs,
    so a reader's `seq > cursor` never skips a row that commits late; another team never waits."""
    second = "insert" if first == "function" else "function"

    def write(how: str, conn: psycopg.Connection[Any], event_id: str, team: str = "acme") -> None:
        if how == "function":
            push_fn(conn, [event_id], team=team)
        else:
            insert_obs(conn, event_id, team=team)

    with world.connect("alice") as alice, world.connect("bob") as bob, world.connect("dave") as dave:
        alice.execute("BEGIN")
        write(first, alice, "a-1")  # uncommitted: the team's lock is held
        write(second, dave, "d-1", team="beta")
        done: list[object] = []
        waiter = threading.Thread(target=lambda: done.append(write(second, bob, "b-1")))
        waiter.start()
        wait_until(
            lambda: world.count(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = 'bob' AND wait_event_type = 'Lock'"
            ),
            10,
            "bob's write to wait on alice's",
        )
        assert done == []
        alice.execute("COMMIT")
        waiter.join(30)
        assert len(done) == 1
    assert world.db.execute("SELECT event_id FROM nmem.observations WHERE team = 'acme' ORDER BY seq") == [
        ("a-1",),
        ("b-1",),
    ]
