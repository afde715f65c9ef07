"""Team memory: what PostgreSQL itself enforces, tried through the members' own credentials.

Two teams, `acme` (alice, bob, carol as its admin) and `vault` (alice alone); each test connects
as the member with the DSN `nmem team add-member` printed and tries raw SQL.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from support.pg_cluster import Database

from nmemd.team import admin

pytestmark = pytest.mark.postgres

SECRET_TITLE = "vault-only: rotate the signing key zq81vk"
# a write into a team one is not in: refused by the feed trigger (before any lock) or by row-level security
NOT_IN_TEAM = "not a member of team|row-level security"


@dataclass
class Team:
    db: Database
    dsn: dict[str, str]

    def connect(self, who: str) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.dsn[who], autocommit=True)


def observe(conn: psycopg.Connection[tuple[Any, ...]], team: str, event_id: str, title: str, **cols: Any) -> None:
    row = {
        "team": team, "project": "github.com/acme/api", "event_id": event_id, "machine": "laptop",
        "agent": "claude-code", "session_id": "s1", "kind": "edit", "title": title, "body": f"body of {title}",
        "files": ["src/app.py"], "created_at": dt.datetime.now(dt.UTC), **cols,
    }  # fmt: skip
    query = sql.SQL("INSERT INTO nmem.observations ({}) VALUES ({})").format(
        sql.SQL(", ").join(map(sql.Identifier, row)), sql.SQL(", ").join(sql.Placeholder() * len(row))
    )
    conn.execute(query, list(row.values()))


def summarize(conn: psycopg.Connection[tuple[Any, ...]], team: str, session_id: str, summary: str) -> None:
    conn.execute(
        "INSERT INTO nmem.sessions (team, project, session_id, machine, agent, started_at, summary)"
        " VALUES (%s, 'github.com/acme/api', %s, 'laptop', 'codex', now(), %s)"
        " ON CONFLICT (team, session_id, author) DO UPDATE SET summary = excluded.summary",
        (team, session_id, summary),
    )


@pytest.fixture
def team(pg_db: Database) -> Iterator[Team]:
    admin.init(pg_db.admin_dsn, "acme")
    admin.init(pg_db.admin_dsn, "vault")
    dsn = {
        "alice": admin.add_member(pg_db.admin_dsn, "acme", "alice").dsn,
        "bob": admin.add_member(pg_db.admin_dsn, "acme", "bob").dsn,
        "carol": admin.add_member(pg_db.admin_dsn, "acme", "carol", is_admin=True).dsn,
    }
    admin.add_member(pg_db.admin_dsn, "vault", "alice")
    t = Team(pg_db, dsn)
    with t.connect("alice") as a:
        observe(a, "acme", "a-1", "alice fixed the flaky websocket test")
        observe(a, "vault", "v-1", SECRET_TITLE, files=["keys/signing.pem"])
        summarize(a, "acme", "s-a", "alice's acme session")
        summarize(a, "vault", "s-v", "vault-only summary zq81vk")
    with t.connect("bob") as b:
        observe(b, "acme", "b-1", "bob edited the parser")
    pg_db.execute("ANALYZE")  # statistics exist: pg_stats must not leak them either
    yield t


def test_b_reads_nothing_of_a_team_b_is_not_in_even_with_raw_sql(team: Team) -> None:
    with team.connect("bob") as b:
        tables = b.execute(
            "SELECT table_schema, table_name, has_table_privilege(format('%I.%I', table_schema, table_name), 'SELECT')"
            " FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
        ).fetchall()
        names = {name for schema_, name, _ in tables if schema_ == "nmem"}
        assert {"observations", "sessions", "tombstones", "teams", "members", "schema_version"} <= names
        seen = []
        for schema_, name, readable in tables:
            query = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema_), sql.Identifier(name))
            if not readable:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    b.execute(query)
                continue
            seen += [repr(row) for row in b.execute(query)]
        dump = "\n".join(seen)
        assert "zq81vk" not in dump and "vault" not in dump
        assert "alice fixed the flaky websocket test" in dump and "bob edited the parser" in dump
        assert b.execute("SELECT nmem.my_teams()").fetchone() == (["acme"],)
        assert b.execute("SELECT count(*) FROM nmem.observations WHERE team = 'vault'").fetchone() == (0,)
        # nor through the planner's statistics
        stats = b.execute("SELECT * FROM pg_stats WHERE schemaname = 'nmem'").fetchall()
        assert "zq81vk" not in repr(stats) and "vault" not in repr(stats)
        # nor by calling nmem's functions for someone else, nor by becoming the operator
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            b.execute("SET ROLE nmem_admin")
    # nor with pg_dump through bob's credentials
    pg_dump = team.db.cluster.bindir / "pg_dump"
    done = subprocess.run(
        [str(pg_dump), "--enable-row-security", "--data-only", "--schema=nmem", "--exclude-table=nmem.feed_*",
         "-d", team.dsn["bob"]],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PGCONNECT_TIMEOUT": "10"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "bob edited the parser" in done.stdout and "zq81vk" not in done.stdout and "vault" not in done.stdout
    # alice, in both teams, sees both
    with team.connect("alice") as a:
        assert a.execute("SELECT count(*) FROM nmem.observations WHERE team = 'vault'").fetchone() == (1,)


def test_b_cannot_write_a_row_as_a_nor_into_a_team_b_is_not_in(team: Team) -> None:
    with team.connect("bob") as b:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            observe(b, "acme", "b-2", "forged", author="alice")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=NOT_IN_TEAM):
            observe(b, "vault", "b-3", "bob writes into the vault")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=NOT_IN_TEAM):
            summarize(b, "vault", "s-b", "bob's summary in the vault")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            observe(b, "acme", "b-4", "a chosen seq", seq=1)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            b.execute("INSERT INTO nmem.members (team, member) VALUES ('vault', 'bob')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            b.execute("INSERT INTO nmem.teams (name) VALUES ('bobs')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            b.execute("UPDATE nmem.observations SET title = 'changed' WHERE event_id = 'a-1'")
        # alice's session summary: invisible to bob's UPDATE; his own row keeps him as author
        assert b.execute("UPDATE nmem.sessions SET summary = 'bob was here' WHERE author = 'alice'").rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            b.execute("UPDATE nmem.sessions SET author = 'alice'")
        # a group role changes current_user, never session_user, so never the author
        b.execute("SET ROLE nmem_member")
        observe(b, "acme", "b-5", "as the group role")
        b.execute("RESET ROLE")
    rows = team.db.execute("SELECT event_id, author FROM nmem.observations ORDER BY team, seq")  # seqs: per team
    assert rows == [("a-1", "alice"), ("b-1", "bob"), ("b-5", "bob"), ("v-1", "alice")]
    assert team.db.execute("SELECT summary FROM nmem.sessions WHERE author = 'alice' ORDER BY team, seq") == [
        ("alice's acme session",),
        ("vault-only summary zq81vk",),
    ]


def test_b_cannot_delete_or_tombstone_a_rows_and_a_team_admin_can(team: Team) -> None:
    with team.connect("bob") as b:
        for table in ("observations", "sessions"):  # deletes go through tombstones only
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
                b.execute(f"DELETE FROM nmem.{table}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="only its author or an admin"):
            b.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'a-1')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=NOT_IN_TEAM):
            b.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('vault', 'v-1')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            b.execute("DELETE FROM nmem.tombstones")
        # his own: a tombstone removes the row, and stays for teammates to pull
        b.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'b-1') ON CONFLICT DO NOTHING")
        b.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'b-1') ON CONFLICT DO NOTHING")
    assert team.db.execute("SELECT event_id FROM nmem.observations ORDER BY team, seq") == [("a-1",), ("v-1",)]
    assert team.db.execute("SELECT team, event_id, author FROM nmem.tombstones") == [("acme", "b-1", "bob")]
    # carol administers acme: she removes alice's acme rows, and nothing of the vault
    with team.connect("carol") as c:
        c.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'a-1')")
        c.execute("INSERT INTO nmem.tombstones (team, kind, event_id) VALUES ('acme', 'session', 's-a')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=NOT_IN_TEAM):
            c.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('vault', 'v-1')")
    assert team.db.execute("SELECT event_id FROM nmem.observations ORDER BY seq") == [("v-1",)]
    assert team.db.execute("SELECT session_id FROM nmem.sessions") == [("s-v",)]


def test_a_removed_member_loses_access_at_once(team: Team) -> None:
    admin.init(team.db.admin_dsn, "side")
    admin.add_member(team.db.admin_dsn, "side", "bob")
    with team.connect("bob") as b:
        assert b.execute("SELECT count(*) FROM nmem.observations").fetchone() == (2,)
        admin.remove_member(team.db.admin_dsn, "acme", "bob")
        # the same open connection, its next statement
        assert b.execute("SELECT count(*) FROM nmem.observations").fetchone() == (0,)
        assert b.execute("SELECT count(*) FROM nmem.sessions").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=NOT_IN_TEAM):
            observe(b, "acme", "b-9", "after removal")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=NOT_IN_TEAM):
            b.execute("INSERT INTO nmem.tombstones (team, event_id) VALUES ('acme', 'b-1')")
    assert admin.remove_member(team.db.admin_dsn, "side", "bob").role_dropped
    with pytest.raises(psycopg.OperationalError, match="password authentication failed|does not exist"):
        team.connect("bob")
    assert team.db.execute("SELECT event_id FROM nmem.observations WHERE author = 'bob'") == [("b-1",)]
