"""The rows' names on a real team server (issue #40): M014's `nmem.name_tokens` (PL/pgSQL, no query
for a row of one name) gives M012's names, so the index M012 built over them stays valid through the
upgrade, which rebuilds nothing while members push."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest
from support import team_names
from support.helpers import wait_until
from support.pg_cluster import Database

from nmemd.team import schema

pytestmark = pytest.mark.postgres

NAMES_BY = 14  # the migration that replaced M012's function


def _at_v13_with_m012s_function_kept(pg_db: Database) -> None:
    with psycopg.connect(pg_db.admin_dsn, autocommit=True) as conn:
        assert schema.migrate(conn, upto=NAMES_BY - 1) == (0, NAMES_BY - 1)
        team_names.keep_function(conn, "name_tokens_m012")


def test_m014s_names_are_m012s_on_titles_and_paths_shaped_like_an_agents(pg_db: Database) -> None:
    _at_v13_with_m012s_function_kept(pg_db)
    with psycopg.connect(pg_db.admin_dsn, autocommit=True) as conn:
        assert schema.migrate(conn) == (NAMES_BY - 1, schema.SCHEMA_VERSION)
        team_names.load(conn, "texts", team_names.texts(20_000))
        assert team_names.differing(conn, "texts", "nmem.name_tokens_m012", "nmem.name_tokens") == []
        icu = [
            c for (c,) in conn.execute("SELECT collname FROM pg_collation WHERE collname IN ('und-x-icu', 'tr-x-icu')")
        ]
        for collation in ["C", *icu]:  # names that sort, or lowercase, unlike the database's
            assert team_names.differing(conn, "texts", "nmem.name_tokens_m012", "nmem.name_tokens", collation) == []
        named, many, most = conn.execute(
            "SELECT count(n), count(*) FILTER (WHERE cardinality(n) >= 10), max(cardinality(n))"
            " FROM (SELECT nmem.name_tokens(title, files) AS n FROM texts) AS t"
        ).fetchone() or (0, 0, 0)
        assert named > 10_000 and many > 1_000 and most > 30  # not a comparison of NULLs
        # M012's answers at the edges: none, a name and its runs, files marked, repeats, no name
        for title, files, names in (
            (None, None, None),
            ("", [], None),
            ("Ran the tests", ["README"], None),
            ("Edited CoderService.ts", None, ["coderservice", "coderservice.ts", "service.ts"]),
            ("grep src/x_y.py-224- import", [None, "web/src/CoderService.ts"],
             ["/coderservice", "/coderservice.ts", "/service.ts", "py-224", "x_y", "x_y.py", "x_y.py-224", "y.py-224"]),
            ("a_b a_b A_B", ["a_b"], ["/a_b", "a_b"]),
            ("x..y a.-b _ __ trailing_ .leading", None, None),
        ):  # fmt: skip
            assert conn.execute("SELECT nmem.name_tokens(%s, %s)", (title, files)).fetchone() == (names,)
        flags = conn.execute(
            "SELECT l.lanname, p.provolatile, p.proparallel, p.proconfig FROM pg_proc p"
            " JOIN pg_language l ON l.oid = p.prolang WHERE p.oid = 'nmem.name_tokens(text, text[])'::regprocedure"
        ).fetchone()
        assert flags == ("plpgsql", "i", "s", None)  # an index expression's: immutable, parallel safe


def test_a_v13_server_upgraded_live_keeps_its_names_index_and_finds_names_from_both_sides(pg_db: Database) -> None:
    """Members push (this nmem's one-statement push) before, during and after the upgrade to v14: the
    names index is the same relation before and after (not rebuilt), every row's names by the new
    function are those by M012's, and a name pushed on either side of the upgrade is found through
    the index."""
    _at_v13_with_m012s_function_kept(pg_db)
    with psycopg.connect(pg_db.admin_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO nmem.teams (name) VALUES ('acme')")
        conn.execute("CREATE ROLE kim LOGIN PASSWORD 'kim-secret' IN ROLE nmem_member")  # add-member needs the newest
        conn.execute("INSERT INTO nmem.members (team, member) VALUES ('acme', 'kim')")
    dsn = pg_db.dsn("kim", "kim-secret")
    texts = iter(team_names.texts(100_000, seed=41))
    stop = threading.Event()
    pushed: list[str] = []
    errors: list[str] = []

    def push() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                rows = []
                for _ in range(20):
                    title, files = next(texts)
                    n = len(pushed) + len(rows)
                    rows.append({
                        "project": "github.com/acme/api", "event_id": f"k-{n}", "agent": "codex", "session_id": "s1",
                        "kind": "edit", "title": f"Edited batch_{n}_of_kim.py {title or ''}", "body": "b",
                        "file": (files or [None])[0], "created_at": 1.7e9,
                    })  # fmt: skip
                try:
                    with conn.transaction():
                        conn.execute("SELECT nmem.push_observations('acme', 'm', %s::json)", (json.dumps(rows),))
                except psycopg.Error as exc:  # the upgrade's lock timed out a push: retried, as the daemon does
                    errors.append(str(exc))
                    continue
                pushed.extend(r["event_id"] for r in rows)

    index = (
        "SELECT 'nmem.observations_scope_names'::regclass::oid, pg_relation_filenode('nmem.observations_scope_names')"
    )
    before = pg_db.execute(index)
    thread = threading.Thread(target=push)
    thread.start()
    try:
        wait_until(lambda: len(pushed) >= 200, 60, "pushes before the upgrade")
        with psycopg.connect(pg_db.admin_dsn) as conn:
            assert schema.migrate(conn) == (NAMES_BY - 1, schema.SCHEMA_VERSION)
        at_upgrade = len(pushed)
        wait_until(lambda: len(pushed) >= at_upgrade + 200, 60, "pushes after it")
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive() and len(errors) < 5, errors
    assert pg_db.execute(index) == before  # the same index, never rebuilt
    assert pg_db.execute("SELECT max(version), min(compatible_since) FROM nmem.migrations WHERE version >= 12") == [
        (schema.SCHEMA_VERSION, 1)
    ]
    assert pg_db.execute(
        "SELECT count(*) FROM nmem.observations"
        " WHERE nmem.name_tokens(title, files) IS DISTINCT FROM nmem.name_tokens_m012(title, files)"
    ) == [(0,)]
    assert pg_db.execute("SELECT count(*) FROM nmem.observations") == [(len(pushed),)]
    pg_db.execute("ANALYZE nmem.observations")
    for n in (5, at_upgrade + 5):  # one from before the upgrade, one from after
        name = f"batch_{n}_of_kim.py"
        plan = "\n".join(
            str(r[0])
            for r in pg_db.execute(
                "EXPLAIN SELECT event_id FROM nmem.observations WHERE team = 'acme'"
                f" AND nmem.name_tokens(title, files) @> ARRAY['{name}']"
            )
        )
        assert "observations_scope_names" in plan, plan
        found = pg_db.execute(
            "SELECT event_id FROM nmem.observations WHERE team = 'acme'"
            f" AND nmem.name_tokens(title, files) @> ARRAY['{name}']"
        )
        assert found == [(f"k-{n}",)]
