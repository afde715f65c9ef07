"""Team memory, the server side: the test cluster, the schema and its migrations, the admin commands."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.helpers import nmem
from support.pg_cluster import Database

from nmemd.errors import TeamError, TeamSchemaError
from nmemd.team import admin, schema

pytestmark = pytest.mark.postgres


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_each_test_gets_a_fresh_database_owned_by_a_createrole_admin(pg_db: Database) -> None:
    with psycopg.connect(pg_db.admin_dsn) as conn:
        user, db = conn.execute("SELECT current_user, current_database()").fetchone()  # type: ignore[misc]
        assert (user, db) == (pg_db.admin, pg_db.name)
        flags = conn.execute("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = current_user").fetchone()
        assert flags == (False, True)
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'nmem'").fetchone() == (0,)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(pg_db.dsn(pg_db.admin, "not-the-password"))


def test_init_creates_the_schema_and_the_team_and_a_second_run_changes_nothing(pg_db: Database) -> None:
    first = nmem("team", "init", pg_db.admin_dsn, "--team", "acme")
    assert first.returncode == 0, first.stderr
    v = schema.SCHEMA_VERSION
    assert first.stdout.splitlines() == [f"schema nmem v{v} created", "team acme created"]
    again = nmem("team", "init", pg_db.admin_dsn, "--team", "acme")
    assert again.stdout.splitlines() == [f"schema nmem v{v} already there", "team acme already exists"]
    assert admin.init(pg_db.admin_dsn, "beta") == admin.Initialized(v, v, True)
    tables = pg_db.execute(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'nmem' AND c.relkind = 'r' ORDER BY 1"
    )
    names = ["feeds", "members", "migrations", "observations", "schema_version", "sessions", "teams", "tombstones"]
    assert tables == [(name, True, True) for name in names]
    assert pg_db.execute("SELECT version FROM nmem.migrations ORDER BY 1") == [(m.version,) for m in schema.MIGRATIONS]
    assert pg_db.execute("SELECT version FROM nmem.schema_version") == [(schema.MIGRATIONS[-1].compatible_since,)]
    assert pg_db.execute("SELECT name FROM nmem.teams ORDER BY 1") == [("acme",), ("beta",)]
    # every SECURITY DEFINER function pins its search_path
    loose = pg_db.execute(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'nmem' AND p.prosecdef"
        " AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')"
    )
    assert loose == []


def test_a_server_with_a_newer_schema_is_refused_with_a_clear_message(pg_db: Database) -> None:
    admin.init(pg_db.admin_dsn, "acme")
    pg_db.execute("UPDATE nmem.schema_version SET version = 99")
    expected = f"server schema v99 is newer than this nmem (v{schema.SCHEMA_VERSION}): upgrade nmem"
    for argv in (("init", pg_db.admin_dsn, "--team", "acme"), ("add-member", pg_db.admin_dsn, "-t", "acme", "kim")):
        assert one_error_line(nmem("team", *argv)) == f"error: {expected}"
    with pytest.raises(TeamSchemaError, match="newer than this nmem"):
        admin.remove_member(pg_db.admin_dsn, "acme", "kim")
    assert pg_db.execute("SELECT version FROM nmem.schema_version") == [(99,)]


def test_a_newer_server_that_says_this_nmem_is_compatible_keeps_working(pg_db: Database) -> None:
    """An admin upgrades the server past what a member's nmem knows: the member syncs on, as long as
    the newest migration's `compatible_since` is at most their version; then it says so plainly."""
    import anyio

    from nmemd.team import membership

    admin.init(pg_db.admin_dsn, "acme")
    kim = admin.add_member(pg_db.admin_dsn, "acme", "kim").dsn
    newer = schema.SCHEMA_VERSION + 1
    pg_db.execute(
        "INSERT INTO nmem.migrations (version, name, compatible_since) VALUES (%s, 'm_future', %s)",
        (newer, schema.SCHEMA_VERSION),
    )
    assert anyio.run(membership.probe, kim, "acme").schema_version == newer
    assert admin.add_member(pg_db.admin_dsn, "acme", "lee").role_created
    assert admin.init(pg_db.admin_dsn, "acme") == admin.Initialized(newer, newer, False)
    pg_db.execute(
        "INSERT INTO nmem.migrations (version, name, compatible_since) VALUES (%s, 'm_breaking', %s)",
        (newer + 1, newer + 1),
    )
    expected = f"server schema v{newer + 1} is newer than this nmem (v{schema.SCHEMA_VERSION}): upgrade nmem"
    with pytest.raises(TeamError) as refused:
        anyio.run(membership.probe, kim, "acme")
    assert str(refused.value) == expected
    assert one_error_line(nmem("team", "init", pg_db.admin_dsn, "--team", "acme")) == f"error: {expected}"


def test_concurrent_admins_migrate_once_each_step_recorded(pg_db: Database) -> None:
    import threading

    results: list[object] = []

    def run() -> None:
        try:
            results.append(admin.init(pg_db.admin_dsn, "acme").version_before)
        except Exception as exc:  # noqa: BLE001 - recorded and asserted below
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results, key=str) == [0] + [schema.SCHEMA_VERSION] * 2  # type: ignore[comparison-overlap]
    ledger = pg_db.execute("SELECT version, name, compatible_since FROM nmem.migrations ORDER BY version")
    assert ledger == [(m.version, m.name, m.compatible_since) for m in schema.MIGRATIONS]


def test_add_member_prints_once_the_dsn_the_member_connects_with(pg_db: Database, tmp_path: Path) -> None:
    pg_db.execute(f"ALTER DATABASE {pg_db.name} SET log_statement = 'all'")  # the password must not be logged
    admin.init(pg_db.admin_dsn, "acme")
    admin.init(pg_db.admin_dsn, "beta")
    done = nmem("team", "add-member", pg_db.admin_dsn, "--team", "acme", "kim")
    assert done.returncode == 0, done.stderr
    dsn = done.stdout.strip()
    assert len(done.stdout.splitlines()) == 1 and dsn.startswith("postgresql://kim:")
    password = psycopg.conninfo.conninfo_to_dict(dsn)["password"]
    assert isinstance(password, str) and len(password) >= 24
    assert password not in done.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT session_user, nmem.my_teams()").fetchone() == ("kim", ["acme"])
        assert conn.execute("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = 'kim'").fetchone() == (
            False,
            False,
        )
    # a second team: the role exists, its password stands and is not printed
    again = nmem("team", "add-member", pg_db.admin_dsn, "--team", "beta", "kim", "--admin")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().startswith("postgresql://kim@") and "existing password stands" in again.stderr
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT nmem.my_teams(), nmem.my_admin_teams()").fetchone() == (["acme", "beta"], ["beta"])
    # --password-file: that password, no other
    secret = tmp_path / "pw"
    secret.write_text("correct horse battery staple\n")
    chosen = nmem("team", "add-member", pg_db.admin_dsn, "-t", "acme", "lee", "--password-file", str(secret))
    assert chosen.returncode == 0, chosen.stderr
    assert "correct horse" not in chosen.stderr
    with psycopg.connect(pg_db.dsn("lee", "correct horse battery staple")) as conn:
        assert conn.execute("SELECT session_user").fetchone() == ("lee",)
    log = pg_db.cluster.logfile.read_text(errors="replace")
    assert "CREATE ROLE" in log and password not in log and "correct horse" not in log


def test_member_dsn_keeps_where_and_how_to_connect() -> None:
    dsn = "host=db.example.com port=6432 dbname=team user=ops password=x sslmode=verify-full sslrootcert=/etc/ca.pem"
    assert admin.member_dsn(dsn, "kim", "p/w") == (
        "postgresql://kim:p%2Fw@db.example.com:6432/team?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
        "&channel_binding=require"
    )
    assert admin.member_dsn("postgresql:///team?host=/run/pg", "kim", None, host="pg.lan") == (
        "postgresql://kim@pg.lan/team?sslmode=verify-full&channel_binding=require"  # another machine: verified TLS
    )
    assert admin.member_dsn("dbname=team host=/run/pg", "kim", None) == "postgresql://kim@/team?host=%2Frun%2Fpg"


def test_remove_member_ends_access_and_drops_a_role_in_no_other_team(pg_db: Database) -> None:
    admin.init(pg_db.admin_dsn, "acme")
    admin.init(pg_db.admin_dsn, "beta")
    kim = admin.add_member(pg_db.admin_dsn, "acme", "kim")
    admin.add_member(pg_db.admin_dsn, "beta", "kim")
    done = nmem("team", "remove-member", pg_db.admin_dsn, "--team", "acme", "kim")
    assert done.returncode == 0 and done.stdout.splitlines() == ["kim removed from team acme"], done
    with psycopg.connect(kim.dsn) as conn:
        assert conn.execute("SELECT nmem.my_teams()").fetchone() == (["beta"],)
    assert admin.remove_member(pg_db.admin_dsn, "beta", "kim") == admin.Removed("kim", True, True)
    assert pg_db.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'kim'") == [(0,)]
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(kim.dsn)
    assert admin.remove_member(pg_db.admin_dsn, "beta", "kim") == admin.Removed("kim", False, False)


def test_a_role_that_is_not_an_nmem_member_is_never_adopted(pg_db: Database) -> None:
    admin.init(pg_db.admin_dsn, "acme")
    pg_db.execute("CREATE ROLE app LOGIN")
    with pytest.raises(TeamError, match="already exists and is not an nmem member"):
        admin.add_member(pg_db.admin_dsn, "acme", "app")
    assert admin.remove_member(pg_db.admin_dsn, "acme", "app").role_dropped is False
    assert pg_db.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'app'") == [(1,)]


def test_admin_errors_are_one_line_without_the_password(pg_db: Database, pg_cluster_port_closed: int) -> None:
    cluster = pg_db.cluster
    wrong = cluster.dsn(pg_db.name, pg_db.admin, "wrong-secret")
    line = one_error_line(nmem("team", "init", wrong, "--team", "acme"))
    assert "password authentication failed" in line and "wrong-secret" not in line
    down = f"host=127.0.0.1 port={pg_cluster_port_closed} dbname=x user=y password=hunter2 connect_timeout=5"
    line = one_error_line(nmem("team", "init", down, "--team", "acme"))
    assert line.startswith("error: cannot reach the team server:") and "hunter2" not in line
    line = one_error_line(nmem("team", "init", "host=127.0.0.1 bogus=1 password=hunter2", "--team", "acme"))
    assert line.startswith("error: invalid DSN:") and "hunter2" not in line
    line = one_error_line(nmem("team", "init", pg_db.admin_dsn, "--team", "no spaces"))
    assert "invalid team name" in line
    # a server without the schema, a team that does not exist
    line = one_error_line(nmem("team", "add-member", pg_db.admin_dsn, "--team", "acme", "kim"))
    assert line == "error: the server has no nmem schema: an admin runs `nmem team init ADMIN_DSN --team NAME`"
    admin.init(pg_db.admin_dsn, "acme")
    line = one_error_line(nmem("team", "add-member", pg_db.admin_dsn, "--team", "other", "kim"))
    assert "no team 'other' on this server" in line
    # another operator: refused until an admin grants it nmem_admin
    pg_db.execute("CREATE ROLE weak LOGIN PASSWORD 'weak-pw'")
    for argv in (
        ("init", pg_db.dsn("weak", "weak-pw"), "-t", "acme"),
        ("add-member", pg_db.dsn("weak", "weak-pw"), "-t", "acme", "kim"),
    ):
        line = one_error_line(nmem("team", *argv))
        assert line == "error: weak is not an admin of this nmem server: an admin runs `GRANT nmem_admin TO weak` first"
    # a role without CREATEROLE
    pg_db.execute("GRANT nmem_admin TO weak")
    line = one_error_line(nmem("team", "add-member", pg_db.dsn("weak", "weak-pw"), "--team", "acme", "kim"))
    assert "the server refused: permission denied to create role" in line and "CREATEROLE" in line
    # a role that may not create the schema
    pg_db.execute("CREATE ROLE nobody LOGIN PASSWORD 'nobody-pw'")
    pg_db.execute("CREATE DATABASE empty_for_nobody")
    try:
        dsn = cluster.dsn("empty_for_nobody", "nobody", "nobody-pw")
        line = one_error_line(nmem("team", "init", dsn, "--team", "acme"))
        assert "the server refused: permission denied for database empty_for_nobody" in line
    finally:
        pg_db.cluster.execute("DROP DATABASE empty_for_nobody")


@pytest.fixture
def pg_cluster_port_closed() -> int:
    """A local port nothing listens on."""
    from support.pg_cluster import free_port

    return free_port()


def test_one_teams_writers_take_seqs_in_commit_order_and_other_teams_do_not_wait(pg_db: Database) -> None:
    """The server's BEFORE trigger locks the team's row of nmem.feeds before it draws the seq: a
    writer that starts later waits for the earlier one's COMMIT, so its seqs are larger and a
    reader's `seq > cursor` never skips a row that commits late. No client-side lock is taken here."""
    import threading

    admin.init(pg_db.admin_dsn, "acme")
    admin.init(pg_db.admin_dsn, "beta")
    kim = admin.add_member(pg_db.admin_dsn, "acme", "kim").dsn
    lee = admin.add_member(pg_db.admin_dsn, "acme", "lee").dsn
    admin.add_member(pg_db.admin_dsn, "beta", "lee")
    insert = (
        "INSERT INTO nmem.observations (team, project, event_id, machine, agent, session_id, kind, title, body,"
        " created_at) VALUES (%s, 'p', %s, 'm', 'codex', 's', 'edit', 't', 'b', now()) RETURNING seq"
    )
    with psycopg.connect(kim) as first, psycopg.connect(lee, autocommit=True) as other:
        seq_first = first.execute(insert, ("acme", "k1")).fetchone()  # open transaction, lock held
        assert other.execute(insert, ("beta", "l0")).fetchone()  # another team: no wait
        later: list[Any] = []
        second = threading.Thread(target=lambda: later.append(other.execute(insert, ("acme", "l1")).fetchone()))
        second.start()
        waiting = False
        for _ in range(200):  # bounded: the second writer is seen waiting on the team's lock
            rows = pg_db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = 'lee' AND wait_event_type = 'Lock'"
            )
            if rows[0][0] == 1:
                waiting = True
                break
            second.join(0.05)
        assert waiting and not later
        first.commit()
        second.join(30)
        assert later and seq_first and later[0][0] > seq_first[0]
    visible = pg_db.execute("SELECT event_id FROM nmem.observations WHERE team = 'acme' ORDER BY seq")
    assert visible == [("k1",), ("l1",)]
