"""Team memory: `search_team` on a real server, as a member (row-level security on)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from support.pg_cluster import Database

from nmemd.errors import QueryError, TeamTimeout
from nmemd.team import admin, server_search
from nmemd.team.server_search import search_team

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

ROWS = [
    # (member, team, project, event_id, kind, title, body, files)
    ("kim", "acme", "github.com/acme/api", "e1", "edit", "Fixed the flaky websocket test",
     "the websocket reconnect raced the ping; waited on the open event", ["tests/ws_test.py"]),
    ("kim", "acme", "github.com/acme/api", "e2", "command", "Ran `pytest -k ws`: exit 0",
     "$ pytest -k ws\n12 passed", []),
    ("lee", "acme", "github.com/acme/api", "e3", "edit", "Edited src/api/routes.py",
     "moved parse_config out of the request handler", ["src/api/routes.py"]),
    ("lee", "acme", "github.com/acme/web", "e4", "error", "Error in useEffect",
     "TypeError: Cannot read properties of undefined (reading 'map') in a websocket hook", ["web/src/hooks/ws.ts"]),
    ("kim", "vault", "github.com/acme/keys", "v1", "edit", "Rotated the websocket signing key",
     "vault-only websocket text", ["keys/ws.pem"]),
]  # fmt: skip


@pytest.fixture
def server(pg_db: Database) -> Iterator[dict[str, str]]:
    for team in ("acme", "vault"):
        admin.init(pg_db.admin_dsn, team)
    dsn = {name: admin.add_member(pg_db.admin_dsn, "acme", name).dsn for name in ("kim", "lee", "bob")}
    admin.add_member(pg_db.admin_dsn, "vault", "kim")
    when = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for member, team, project, event_id, kind, title, body, files in ROWS:
        with psycopg.connect(dsn[member], autocommit=True) as conn:
            conn.execute(
                "INSERT INTO nmem.observations (team, project, event_id, machine, agent, session_id, kind, title,"
                " body, files, created_at) VALUES (%s, %s, %s, 'laptop', 'codex', 's1', %s, %s, %s, %s, %s)",
                (team, project, event_id, kind, title, body, files, when),
            )
    yield dsn


async def search(dsn: str, query: str, **kw: Any) -> list[server_search.TeamHit]:
    args: dict[str, Any] = {"team": "acme", "project": None, "limit": 10, "author": None, "timeout_ms": 5000, **kw}
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        return await search_team(conn, query=query, **args)


async def test_words_rank_title_hits_first_with_author_and_agent(server: dict[str, str]) -> None:
    hits = await search(server["bob"], "websocket")
    assert [h.event_id for h in hits] == ["e1", "e4"]  # the title's word weighs more than the body's
    first = hits[0]
    assert (first.author, first.agent, first.machine, first.kind, first.project) == (
        "kim",
        "codex",
        "laptop",
        "edit",
        "github.com/acme/api",
    )
    assert first.files == ["tests/ws_test.py"] and "websocket reconnect" in first.snippet
    assert first.created_at == dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp()
    assert [h.event_id for h in await search(server["bob"], '"flaky websocket test"')] == ["e1"]


async def test_identifiers_paths_and_commands(server: dict[str, str]) -> None:
    assert [h.event_id for h in await search(server["bob"], "parse_config")] == ["e3"]
    assert [h.event_id for h in await search(server["bob"], "useEffect")] == ["e4"]
    assert [h.event_id for h in await search(server["bob"], "src/api/routes.py")] == ["e3"]
    # a part of a path: the word index holds the whole path, the trigram index finds the part
    assert [h.event_id for h in await search(server["bob"], "routes.py")] == ["e3"]
    assert [h.event_id for h in await search(server["bob"], "ws_test")] == ["e1"]
    # `-k` is a flag, not a negation
    assert [h.event_id for h in await search(server["bob"], "pytest -k ws")] == ["e2"]
    assert [h.event_id for h in await search(server["bob"], "TypeError: Cannot read properties")] == ["e4"]
    assert await search(server["bob"], "kubernetes") == []


async def test_project_and_author_filters(server: dict[str, str]) -> None:
    assert [h.event_id for h in await search(server["kim"], "websocket", project="github.com/acme/web")] == ["e4"]
    assert [h.event_id for h in await search(server["kim"], "websocket", author="kim")] == ["e1"]
    assert await search(server["kim"], "websocket", author="nobody") == []


async def test_a_member_never_finds_a_team_they_are_not_in(server: dict[str, str]) -> None:
    assert await search(server["bob"], "websocket", team="vault") == []
    assert await search(server["bob"], "keys/ws.pem", team="vault") == []
    assert [h.event_id for h in await search(server["kim"], "websocket", team="vault")] == ["v1"]
    assert all(h.event_id != "v1" for h in await search(server["kim"], "websocket"))
    # nor by calling the server's function directly with another team
    with psycopg.connect(server["bob"]) as conn:
        rows = conn.execute("SELECT * FROM nmem.search('vault', NULL, 'websocket', NULL, NULL, 500, 10)").fetchall()
        assert rows == []


async def test_a_common_word_hands_at_most_the_candidates_to_ranking(server: dict[str, str], pg_db: Database) -> None:
    many = server_search.CANDIDATES * 3
    pg_db.execute(
        "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind, title,"
        " body, created_at) SELECT 'acme', 'github.com/acme/api', 'bulk' || i, 'lee', 'm', 'codex', 's2', 'edit',"
        " 'common word number ' || i, 'common', now() FROM generate_series(1, %s) AS i",
        (many,),
    )
    hits = await search(server["bob"], "common", limit=50)
    assert len(hits) == 50
    # a common query's candidates are the newest rows (equal ranks: the newest first)
    newest = pg_db.execute("SELECT seq FROM nmem.observations WHERE event_id LIKE 'bulk%%' ORDER BY seq DESC LIMIT 50")
    assert [h.seq for h in hits] == [seq for (seq,) in newest]
    # a rare word among them still goes through the index
    assert [h.event_id for h in await search(server["bob"], "reconnect")] == ["e1"]
    with psycopg.connect(pg_db.superuser_dsn) as conn:  # the candidates, counted on the function's own plan
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_analyze = on")
        conn.execute("SET client_min_messages = log")
        conn.execute("SET auto_explain.log_level = notice")
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("GRANT nmem_admin TO postgres")
        conn.execute("INSERT INTO nmem.members (team, member) VALUES ('acme', 'postgres')")
        assert (
            len(conn.execute("SELECT * FROM nmem.search('acme', NULL, 'common', NULL, NULL, 500, 50)").fetchall()) == 50
        )
    plan = "\n".join(notices)
    # the newest 200 rows of the scope held enough matches (ranked as they were read): no more was read
    assert "rows=200 loops=1" in plan and f"rows={many} loops" not in plan


async def test_a_search_over_its_budget_is_a_one_line_error(server: dict[str, str], pg_db: Database) -> None:
    with psycopg.connect(pg_db.superuser_dsn) as locker:  # holds the table: the search waits, then its budget ends
        locker.execute("LOCK TABLE nmem.observations IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(TeamTimeout, match="timed out after 150 ms"):
            await search(server["bob"], "websocket", timeout_ms=200)
    assert [h.event_id for h in await search(server["bob"], "websocket")] == ["e1", "e4"]  # the connection recovers


async def test_bad_queries(server: dict[str, str]) -> None:
    with pytest.raises(QueryError):
        await search(server["bob"], "   ")
    assert await search(server["bob"], "!!! ???") == []
    assert await search(server["bob"], "'; DROP TABLE nmem.observations; --") == []
    assert server_search.substring_term("fix src/api/routes.py and parse_config") == "src/api/routes.py"
    assert server_search.substring_term("plain words only") is None
    assert server_search.like_pattern("a_b%c") == "%a\\_b\\%c%"


async def test_a_common_substring_is_found_among_the_newest_rows(server: dict[str, str], pg_db: Database) -> None:
    pg_db.execute(
        "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind, title,"
        " body, files, created_at) SELECT 'acme', 'github.com/acme/api', 'path' || i, 'lee', 'm', 'codex', 's3',"
        " 'read', 'Read a file', 'nothing to see', ARRAY['lib/http/server_config.py'], now()"
        " FROM generate_series(1, 40) AS i"
    )
    hits = await search(server["bob"], "server_config.py", limit=5)
    newest = pg_db.execute("SELECT event_id FROM nmem.observations ORDER BY seq DESC LIMIT 5")
    assert [h.event_id for h in hits] == [e for (e,) in newest]
    assert all(h.files == ["lib/http/server_config.py"] for h in hits)


# --- the bounded search (migration 2) answers as the first one did --------------------------------

SCOPED = [  # (query, project, author): words common and rare, pairs, phrases, names; every scope
    (query, project, author)
    for query in ("alpha", "gamma", "zeta7", "alpha beta", '"alpha beta"', '"gamma delta"', "omega9", "parse_config")
    for project, author in ((None, None), ("github.com/acme/api", None), (None, "rae"), ("github.com/acme/api", "lee"))
]


def _fill(dsn: str, rows: int) -> None:
    """`rows` observations of twelve words at fixed rates (one more only in old rows), three
    projects, three authors (one rare): every branch of the search has something to find."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "kappa", "lambda", "sigma", "tau", "rho", "psi", "chi"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind, title,"
            " body, files, created_at)"
            " SELECT 'acme', (ARRAY['github.com/acme/api', 'github.com/acme/web', 'github.com/acme/ops'])[1 + i %% 3],"
            " 'f' || i, CASE WHEN i %% 97 = 0 THEN 'rae' WHEN i %% 2 = 0 THEN 'lee' ELSE 'kim' END, 'm', 'codex', 's',"
            " 'edit', 'note ' || i || ' ' || w[1 + (i * 7) %% 12],"
            " w[1 + i %% 12] || ' ' || w[1 + (i + 1) %% 12] || ' ' || w[1 + (i * 5) %% 12]"
            "  || CASE WHEN i < %(old)s AND i %% 13 = 0 THEN ' zeta7' ELSE '' END"
            "  || CASE WHEN i %% 211 = 0 THEN ' omega9 parse_config()' ELSE '' END,"
            " CASE WHEN i %% 17 = 0 THEN ARRAY['src/config/parse_config.py'] ELSE '{}' END,"
            " timestamptz '2026-01-01' + i * interval '1 minute'"
            " FROM generate_series(1, %(rows)s) AS i, (SELECT %(w)s::text[] AS w) AS words",
            {"w": words, "rows": rows, "old": rows // 3},
        )
        conn.execute("ANALYZE nmem.observations")


async def test_scoped_and_phrase_searches_find_what_the_first_search_found(pg_db: Database) -> None:
    from nmemd.team import schema

    with psycopg.connect(pg_db.admin_dsn, autocommit=True) as conn:
        assert schema.migrate(conn, upto=1) == (0, 1)
        conn.execute("INSERT INTO nmem.teams (name) VALUES ('acme')")
        conn.execute("CREATE ROLE bob LOGIN PASSWORD 'bob-secret' IN ROLE nmem_member")  # add-member needs the newest
        conn.execute("INSERT INTO nmem.members (team, member) VALUES ('acme', 'bob')")
    dsn = pg_db.dsn("bob", "bob-secret")
    _fill(pg_db.superuser_dsn, 1600)
    # fewer matches than candidates in every scope: each search must find them all and rank them alike
    (most,) = pg_db.execute(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM nmem.observations,"
        " unnest(%s::text[]) AS q WHERE tsv @@ websearch_to_tsquery('simple', q) GROUP BY q) c",
        (sorted({q for q, _, _ in SCOPED}),),
    )[0]
    assert 100 < most < server_search.CANDIDATES
    before = [[h.event_id for h in await search(dsn, q, project=p, author=a)] for q, p, a in SCOPED]
    with psycopg.connect(pg_db.admin_dsn) as conn:
        assert schema.migrate(conn)[1] == schema.SCHEMA_VERSION
    after = [[h.event_id for h in await search(dsn, q, project=p, author=a)] for q, p, a in SCOPED]
    assert sum(bool(hits) for hits in before) > len(SCOPED) * 3 // 4  # they find things
    assert after == before


async def test_a_word_rare_in_a_wide_project_but_common_elsewhere_is_found(pg_db: Database) -> None:
    """The index read without the scope (a wide project's rows filtered as they are read) stops
    after a bounded number of rows; when they were other projects' matches, the index is read
    again with the project in it, and the project's few matches are all found."""
    admin.init(pg_db.admin_dsn, "acme")
    dsn = admin.add_member(pg_db.admin_dsn, "acme", "bob").dsn

    def rows(project: str, prefix: str, count: int, body: str) -> None:
        pg_db.execute(
            "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind,"
            " title, body, created_at) SELECT 'acme', %s, %s || i, 'lee', 'm', 'codex', 's', 'edit', 'note', %s,"
            " now() FROM generate_series(1, %s) AS i",
            (project, prefix, body, count),
        )

    rows("github.com/acme/other", "o", 1500, "needle in the other project")
    rows("github.com/acme/wide", "w", 3, "a needle in the wide project, a rusty haystack")
    rows("github.com/acme/wide", "f", 1200, "filler without it")
    pg_db.execute("ANALYZE nmem.observations")
    hits = await search(dsn, "needle", project="github.com/acme/wide")
    assert sorted(h.event_id for h in hits) == ["w1", "w2", "w3"]
    assert len(await search(dsn, "needle")) == 10
    # a phrase none of the newest rows hold, in the whole team (a wide scope): the scoped index
    assert sorted(h.event_id for h in await search(dsn, '"rusty haystack"')) == ["w1", "w2", "w3"]


def _nested_statements(pg_db: Database, sql: str) -> tuple[list[tuple[Any, ...]], str]:
    """`sql`'s rows, run as a team member with every statement nmem.search() runs logged (auto_explain)."""
    with psycopg.connect(pg_db.superuser_dsn) as conn:
        conn.execute("LOAD 'auto_explain'")
        for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice"):
            conn.execute(f"SET auto_explain.{setting}")
        conn.execute("SET client_min_messages = log")
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("GRANT nmem_admin TO postgres")
        conn.execute("INSERT INTO nmem.members (team, member) VALUES ('acme', 'postgres') ON CONFLICT DO NOTHING")
        rows = conn.execute(sql).fetchall()
    return rows, "\n".join(notices)


async def test_a_word_the_newest_rows_lack_goes_to_the_index_without_walking_further(pg_db: Database) -> None:
    """A word none of the scope's newest 200 rows hold has short postings: the index answers at
    once, the next 800 newest rows are not read. A word they hold a few times walks on; a common
    one stops at the first 200, the index untouched."""
    admin.init(pg_db.admin_dsn, "acme")
    dsn = admin.add_member(pg_db.admin_dsn, "acme", "bob").dsn

    def rows(prefix: str, count: int, body: str) -> None:
        pg_db.execute(
            "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind,"
            " title, body, created_at) SELECT 'acme', 'github.com/acme/api', %s || i, 'lee', 'm', 'codex', 's',"
            " 'edit', 'note', %s || CASE WHEN i %% 100 = 0 THEN ' marmot' ELSE '' END, now()"
            " FROM generate_series(1, %s) AS i",
            (prefix, body, count),
        )

    rows("z", 3, "a zebrafish in the tank")
    rows("b", 3000, "the build passed again")
    walk = "ORDER BY o.seq DESC LIMIT $6"  # the statement that reads the scope's newest rows
    sql = "SELECT event_id FROM nmem.search('acme', NULL, %s, NULL, NULL, 200, 10)"
    found, plans = _nested_statements(pg_db, sql.replace("%s", "'zebrafish'"))
    assert sorted(found) == [("z1",), ("z2",), ("z3",)] and plans.count(walk) == 1 and "tsv @@" in plans
    found, plans = _nested_statements(pg_db, sql.replace("%s", "'marmot'"))
    assert len(found) == 10 and plans.count(walk) >= 2
    found, plans = _nested_statements(pg_db, sql.replace("%s", "'build'"))
    assert len(found) == 10 and plans.count(walk) == 1 and "tsv @@" not in plans
    assert sorted(h.event_id for h in await search(dsn, "zebrafish")) == ["z1", "z2", "z3"]


async def test_a_name_is_looked_up_whole_and_a_path_by_its_first_characters(pg_db: Database) -> None:
    """A name that looks like code (`transform_enhanced.py`) is looked up whole in the index of the
    rows' names (M012), never through the trigrams of its words, also where it starts or ends a
    longer name (`old_transform_enhanced.py`, `CoderService.ts`, `x.py-224`); files are read when
    titles held too few; a name sharing its first characters is not found. A path of plain words
    (`pipeline/stage`) has no such token: its trigram scan asks the index for its first characters
    only, the rows they give tested for the whole name. A name only in the middle of a longer one
    (`old_transform_enhanced.py.bak`) is found among the scope's newest rows only: a narrow scope's
    trigrams are not asked either (M013: stepped through the scope's postings, they cost 100-260 ms
    a name at 10M rows)."""
    admin.init(pg_db.admin_dsn, "acme")
    dsn = admin.add_member(pg_db.admin_dsn, "acme", "bob").dsn

    def rows(prefix: str, count: int, title: str, files: list[str], author: str = "lee") -> None:
        pg_db.execute(
            "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind,"
            " title, body, files, created_at) SELECT 'acme', 'github.com/acme/api', %s || i, %s, 'm', 'codex',"
            " 's', 'edit', %s, 'changed it', %s, now() FROM generate_series(1, %s) AS i",
            (prefix, author, title, files, count),
        )

    rows("hit", 3, "Edited a file", ["src/pipeline/transform_enhanced.py"])
    rows("title", 2, "Edited Transform_Enhanced.py: a test", [])
    rows("near", 2, "Edited transform_enhancer.rs", ["src/pipeline/transform_enhancer.rs"])
    rows("path", 2, "Read docs", ["src/pipeline/stage/README"])
    rows("ends", 1, "Edited old_transform_enhanced.py", [])
    rows("starts", 1, "grep: src/transform_enhanced.py-224- import", [])
    rows("camel", 1, "Edited CoderService.ts", ["web/src/CoderService.ts"])
    rows("inside", 1, "Edited old_transform_enhanced.py.bak", [], author="rae")
    rows("filler", 1500, "Ran the tests", [])  # the newest rows hold none: the index answers
    pg_db.execute("ANALYZE nmem.observations")
    hits = await search(dsn, "transform_enhanced.py")
    assert sorted(h.event_id for h in hits[:4]) == ["ends1", "starts1", "title1", "title2"]  # titles first
    assert sorted(h.event_id for h in hits[4:]) == ["hit1", "hit2", "hit3"]
    assert sorted(h.event_id for h in await search(dsn, "transform_enhancer.rs")) == ["near1", "near2"]
    assert [h.event_id for h in await search(dsn, "service.ts")] == ["camel1"]
    assert sorted(h.event_id for h in await search(dsn, "pipeline/stage")) == ["path1", "path2"]
    assert [h.event_id for h in await search(dsn, "transform_enhanced.py", author="rae")] == ["inside1"]  # the newest
    assert "inside1" not in [h.event_id for h in await search(dsn, "transform_enhanced.py")]
    sql = "SELECT event_id FROM nmem.search('acme', NULL, '%s', '%%%s%%', NULL, 200, 10)"
    for author, name in (("NULL", "transform_enhanced.py"), ("'rae'", "transform_enhancer.rs")):  # wide, narrow
        name = sql.replace("NULL, 200", f"{author}, 200") % (name, name.replace("_", "\\_"))
        _, plans = _nested_statements(pg_db, name)
        assert "name_tokens(" in plans and "trgm" not in plans  # (a scope this narrow: its btree)
    _, plans = _nested_statements(pg_db, sql % ("pipeline/stage", "pipeline/stage"))
    assert "observations_scope_names" not in plans and "ILIKE '%pipeline/sta%'" in plans


async def test_titles_holding_a_name_are_found_when_many_rows_hold_its_word(pg_db: Database) -> None:
    """An identifier is a word too: when the newest rows hold it often enough to answer the words,
    the older rows whose title holds the name (ranked above every other) are still found."""
    admin.init(pg_db.admin_dsn, "acme")
    dsn = admin.add_member(pg_db.admin_dsn, "acme", "bob").dsn

    def rows(prefix: str, count: int, title: str, body: str) -> None:
        pg_db.execute(
            "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind,"
            " title, body, created_at) SELECT 'acme', 'github.com/acme/api', %s || i, 'lee', 'm', 'codex', 's',"
            " 'edit', %s, %s, now() FROM generate_series(1, %s) AS i",
            (prefix, title, body, count),
        )

    rows("title", 3, "Edited filesToModify in the planner", "renamed it")
    rows("word", 400, "Ran the planner", "the planner printed filesToModify and exited")
    pg_db.execute("ANALYZE nmem.observations")
    hits = await search(dsn, "filesToModify")
    assert sorted(h.event_id for h in hits[:3]) == ["title1", "title2", "title3"]
    assert len(hits) == 10 and all(h.event_id.startswith("word") for h in hits[3:])


async def test_names_stored_before_the_upgrade_to_v12_are_found_through_its_index(pg_db: Database) -> None:
    """M012 builds its index of names over the rows a v11 server already holds: a name none of the
    newest rows hold is found through it, as it was through the trigrams."""
    from nmemd.team import schema

    with psycopg.connect(pg_db.admin_dsn, autocommit=True) as conn:
        assert schema.migrate(conn, upto=11) == (0, 11)
        conn.execute("INSERT INTO nmem.teams (name) VALUES ('acme')")
        conn.execute("CREATE ROLE bob LOGIN PASSWORD 'bob-secret' IN ROLE nmem_member")  # add-member needs the newest
        conn.execute("INSERT INTO nmem.members (team, member) VALUES ('acme', 'bob')")
    for prefix, count, files in (("hit", 3, ["src/pipeline/transform_enhanced.py"]), ("filler", 1500, [])):
        pg_db.execute(
            "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind,"
            " title, body, files, created_at) SELECT 'acme', 'github.com/acme/api', %s || i, 'lee', 'm', 'codex',"
            " 's', 'edit', 'Edited a file', 'changed it', %s, now() FROM generate_series(1, %s) AS i",
            (prefix, files, count),
        )
    dsn = pg_db.dsn("bob", "bob-secret")
    before = sorted(h.event_id for h in await search(dsn, "transform_enhanced.py"))
    with psycopg.connect(pg_db.admin_dsn) as conn:
        assert schema.migrate(conn) == (11, schema.SCHEMA_VERSION)
    pg_db.execute("ANALYZE nmem.observations")
    assert sorted(h.event_id for h in await search(dsn, "transform_enhanced.py")) == before == ["hit1", "hit2", "hit3"]
    _, plans = _nested_statements(
        pg_db, "SELECT event_id FROM nmem.search('acme', NULL, 'x', '%transform\\_enhanced.py%', NULL, 200, 10)"
    )
    assert "observations_scope_names" in plans
