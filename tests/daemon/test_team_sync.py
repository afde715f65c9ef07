"""Team memory end to end against a real PostgreSQL: two members, two NMEM_HOMEs, two daemons,
two PostgreSQL roles, the real hook client, the real CLI; faults through a TCP proxy."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.helpers import send_hook, wait_until
from support.pg_cluster import Database, find_bindir
from support.team_world import HooksArriving, Member, Proxy, bash_event, two_members, via

from nmemd.team import admin, schema

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]
SYNC_S = 60.0  # bound of every wait for a row to cross (it takes well under a second when idle)


@pytest.fixture
def team(pg_db: Database, tmp_path: Path) -> Iterator[tuple[Database, Member, Member]]:
    with two_members(pg_db.admin_dsn, tmp_path) as (a, b):
        yield pg_db, a, b


def _join(m: Member, dsn: str, project: Path, *extra: str) -> dict:
    done = m.nmem("team", "join", "--project", str(project), "--json", *extra, stdin=dsn)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _local_rows(m: Member, marker: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{m.db}?mode=ro", uri=True)
    try:
        return conn.execute(
            "SELECT event_id, author FROM observations WHERE content LIKE ? OR title LIKE ?",
            (f"%{marker}%", f"%{marker}%"),
        ).fetchall()
    finally:
        conn.close()


def _fts_merges(m: Member) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{m.db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT k, v FROM observations_fts_config WHERE k IN ('automerge', 'crisismerge')")
        return {str(k): int(v) for k, v in rows}
    finally:
        conn.close()


def test_an_event_of_as_hook_is_found_by_bs_search_with_its_author(team: tuple[Database, Member, Member]) -> None:
    db, a, b = team
    a_repo = a.checkout("api", "git@github.com:acme/api.git")
    b_repo = b.checkout("api-checkout", "https://github.com/acme/api")
    a_other = a.checkout("secret-project", None)
    a.start()
    b.start()
    joined = _join(a, a.dsn, a_repo)
    assert joined["project_id"] == "github.com/acme/api" and joined["member"] == "al"
    _join(b, b.dsn, b_repo)
    secret = conninfo_to_dict(a.dsn)["password"]
    assert isinstance(secret, str) and len(secret) > 8
    for path in a.home.glob("nmem.db*"):
        assert secret.encode() not in path.read_bytes()  # the password lives in the password file only
    passfile = a.home / "team.pgpass"
    assert oct(passfile.stat().st_mode & 0o777) == "0o600"
    assert not (a.home / "config.toml").exists() or "password" not in (a.home / "config.toml").read_text()

    (a_repo / "tests").mkdir()
    aws = "AKIA" + "Q7XJ2MZK4P3WLRTB"
    ghp = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    out = f"websocket flake fixed zq91marker\naws_key={aws}\ntoken {ghp}\n<private>my salary zq91private</private>"
    assert a.hook(bash_event("sess-a", a_repo / "tests", "pytest -k ws", out)).returncode == 0
    assert a.hook(bash_event("sess-x", a_other, "make secret", "zq91unshared output")).returncode == 0

    hits = wait_until(lambda: _local_rows(b, "zq91marker") and b.search("zq91marker", project=b_repo), SYNC_S,
                    "A's event in B's store and search")  # fmt: skip
    assert [h["author"] for h in hits] == ["al"]
    assert hits[0]["project"] == str(b_repo)  # shown under B's own checkout
    assert [h["author"] for h in a.search("zq91marker", project=a_repo)] == [None]  # A's own row
    assert b.search("zq91marker", "--author", "al", project=b_repo) and not b.search(
        "zq91marker", "--mine", project=b_repo
    )

    # what reached the server: the shared project's row, redacted, never the private text nor the other project
    rows = db.execute("SELECT author::text, project, body FROM nmem.observations")
    assert [(r[0], r[1]) for r in rows] == [("al", "github.com/acme/api")]
    body = rows[0][2]
    assert "zq91marker" in body and aws not in body and ghp not in body and "zq91private" not in body
    bindir = find_bindir()
    assert bindir is not None
    dump = subprocess.run(
        [str(bindir / "pg_dump"), "-h", db.cluster.host, "-p", str(db.cluster.port), "-U", "postgres", db.name],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PGPASSWORD": db.cluster.password},
    )
    assert dump.returncode == 0, dump.stderr
    for secret in (aws, ghp, "zq91private", "zq91unshared", "salary"):
        assert secret not in dump.stdout

    # the pull turned FTS5's automerge off while it stored rows (it merges them itself) and on again after
    wait_until(lambda: _fts_merges(b) == {"automerge": 4, "crisismerge": 16}, SYNC_S, "B's automerge back on")

    # B's SessionStart context of the project tells what A did there
    context = b.nmem("context", "--project", str(b_repo))
    assert "al, " in context.stdout and "`pytest -k ws` ok" in context.stdout, context.stdout

    status = b.nmem("team", "status", "--json")
    assert status.returncode == 0, status.stderr
    (link,) = json.loads(status.stdout)
    assert link["team"] == "acme" and link["error"] is None and link["schema_version"] == schema.SCHEMA_VERSION

    # forget on A: the server and B forget it too
    (hit,) = a.search("zq91marker", project=a_repo)
    assert a.nmem("forget", str(hit["id"])).returncode == 0
    wait_until(lambda: not _local_rows(b, "zq91marker"), SYNC_S, "the tombstone to reach B")
    assert db.execute("SELECT count(*) FROM nmem.observations") == [(0,)]

    # B forgets its copy of A's row: gone from B's store; the server refuses B's tombstone (not B's row, B
    # is no admin) and the link goes on
    assert a.hook(bash_event("sess-a", a_repo, "make lint", "zq91second output", 1)).returncode == 0

    def local_hit() -> list[dict]:  # in B's store, not a hit the server answered (id 0)
        return [h for h in b.search("zq91second", project=b_repo) if h["id"]]

    (theirs,) = wait_until(local_hit, SYNC_S, "A's second event in B's store")
    assert b.nmem("forget", str(theirs["id"])).returncode == 0
    assert not _local_rows(b, "zq91second")
    assert a.hook(bash_event("sess-a", a_repo, "make docs", "zq91third output", 2)).returncode == 0
    wait_until(lambda: _local_rows(b, "zq91third"), SYNC_S, "A's third event in B's store (the link goes on)")
    assert db.execute("SELECT count(*) FROM nmem.observations WHERE body LIKE '%zq91second%'") == [(1,)]
    (link,) = json.loads(b.nmem("team", "status", "--json").stdout)
    assert link["error"] is None

    # leave: nothing more is queued for the server
    assert a.nmem("team", "leave", "--project", str(a_repo)).returncode == 0
    assert a.hook(bash_event("sess-a", a_repo, "make after-leave", "zq91after output", 3)).returncode == 0
    assert _local_rows(a, "zq91after")
    conn = sqlite3.connect(f"file:{a.db}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT count(*) FROM team_outbox").fetchone() == (0,)
    finally:
        conn.close()
    assert "no project is shared" in a.nmem("team", "status").stdout


def test_bad_servers_say_what_is_wrong_in_one_line_and_capture_goes_on(
    team: tuple[Database, Member, Member], tmp_path: Path
) -> None:
    db, a, _ = team
    repo = a.checkout("api", "git@github.com:acme/api.git")
    a.start()
    wrong = make_conninfo(a.dsn, password="not-the-password")
    for dsn, says in ((wrong, "wrong password"), ("postgresql:x//al:s3cr3tzz@h/db", "not a PostgreSQL DSN")):
        done = a.nmem("team", "join", "--project", str(repo), stdin=dsn)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr
        assert "not-the-password" not in done.stderr and "s3cr3tzz" not in done.stderr
    _join(a, a.dsn, repo)
    # the member is removed mid-session: status says so, capture goes on, the outbox keeps the rows
    admin.remove_member(db.admin_dsn, "acme", "al")
    for n in range(3):
        assert a.hook(bash_event("s1", repo, f"echo {n}", f"zq77removed {n}", n)).returncode == 0

    removed = ("removed from the team?", "not a member", "wrong password or unknown member")

    def says_removed() -> str | None:
        # the server first ends the member's open connection ("cannot connect: ..."); the reconnect
        # that follows is refused, and that is what status settles on
        done = a.nmem("team", "status")
        return done.stdout if any(words in done.stdout for words in removed) else None

    text = wait_until(says_removed, SYNC_S, "status to report the failure")
    assert len([line for line in text.splitlines() if "ERROR" in line]) == 1
    assert len(_local_rows(a, "zq77removed")) == 3  # captured locally
    doctor = a.nmem("doctor")
    assert "team" in doctor.stdout
    assert a.proc is not None and a.proc.poll() is None  # the daemon never crashed


def test_no_schema_and_a_newer_schema_are_one_line_each(team: tuple[Database, Member, Member]) -> None:
    db, a, _ = team
    repo = a.checkout("api", "git@github.com:acme/api.git")
    a.start()
    elsewhere = make_conninfo(a.dsn, dbname="postgres")  # the cluster's own database: no nmem schema there
    done = a.nmem("team", "join", "--project", str(repo), stdin=elsewhere)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "no nmem schema" in done.stderr and "Traceback" not in done.stderr
    _join(a, a.dsn, repo)
    db.execute("UPDATE nmem.schema_version SET version = 99")
    db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'al'")  # a reconnect

    def newer() -> str | None:
        out = a.nmem("team", "status").stdout
        return out if "newer than this nmem" in out else None

    text = wait_until(newer, SYNC_S, "status to name the newer schema")
    refused = f"server schema v99 is newer than this nmem (v{schema.SCHEMA_VERSION}): upgrade nmem"
    assert [line for line in text.splitlines() if "ERROR" in line] == [
        line for line in text.splitlines() if refused in line
    ]
    assert a.hook(bash_event("s1", repo, "echo hi", "zq44newer")).returncode == 0
    assert _local_rows(a, "zq44newer") and a.proc is not None and a.proc.poll() is None


def test_the_server_answers_what_the_local_window_does_not_hold(team: tuple[Database, Member, Member]) -> None:
    db, a, b = team
    a_repo = a.checkout("api", "git@github.com:acme/api.git")
    b_repo = b.checkout("api", "https://github.com/acme/api")
    a.start()
    _join(a, a.dsn, a_repo)
    assert a.hook(bash_event("s-old", a_repo, "make deploy", "rollout of zq33window done")).returncode == 0
    wait_until(lambda: _count_server(db, "zq33window") == (1, 1), SYNC_S, "A's row on the server")
    # B joins after: its window (0.09 s) is shorter than the row's age by then (a start and a join take longer)
    b.start({"NMEM_TEAM_WINDOW_DAYS": "0.000001"})
    _join(b, b.dsn, b_repo)
    hits = wait_until(lambda: b.search("zq33window", project=b_repo), SYNC_S, "the server's hit in B's search")
    assert [(h["id"], h["author"]) for h in hits] == [(0, "al")] and hits[0]["seq"]
    assert not _local_rows(b, "zq33window")  # from the server, not the local store
    assert "by al" in _mcp_search(b, b_repo, "zq33window")  # the MCP search tool too
    # the server away: local results and a one-line note, within the search's time
    db.cluster.stop("immediate")
    try:
        done = b.nmem("search", "zq33window", "--project", str(b_repo), "--json")
        assert done.returncode == 0 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "team server" in done.stderr, done.stderr
    finally:
        db.cluster.start()


def test_a_team_search_past_the_servers_time_gives_the_local_hits_and_says_so(
    team: tuple[Database, Member, Member],
) -> None:
    db, a, b = team
    a_repo = a.checkout("api", "git@github.com:acme/api.git")
    b_repo = b.checkout("api", "https://github.com/acme/api")
    a.start()
    _join(a, a.dsn, a_repo)
    assert a.hook(bash_event("s-a", a_repo, "make deploy", "rollout zq55slow on the server")).returncode == 0
    wait_until(lambda: _count_server(db, "zq55slow") == (1, 1), SYNC_S, "A's row on the server")
    b.start({"NMEM_TEAM_WINDOW_DAYS": "0.000001"})
    _join(b, b.dsn, b_repo)
    assert b.hook(bash_event("s-b", b_repo, "make test", "zq55slow locally too")).returncode == 0
    wait_until(lambda: len(b.search("zq55slow", project=b_repo)) == 2, SYNC_S, "B's own hit and A's from the server")
    import psycopg

    with psycopg.connect(db.superuser_dsn) as locker:  # the server's search waits for the table, then gives up
        locker.execute("LOCK TABLE nmem.observations IN ACCESS EXCLUSIVE MODE")
        done = b.nmem("search", "zq55slow", "--project", str(b_repo), "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr
    hits = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [h["author"] for h in hits] == [None]  # B's own row, from the local store
    (note,) = done.stderr.strip().splitlines()
    assert "team server's search timed out after" in note and "local hits only" in note, note
    # the connection was kept and works again at once
    assert len(b.search("zq55slow", project=b_repo)) == 2


def _mcp_search(m: Member, project: Path, query: str) -> str:
    from support.mcp_client import bridge_params, mcp_session, ok

    async def go() -> str:
        params = bridge_params(m.env, str(project))
        async with mcp_session(params, m.root / "mcp-err.log") as session:
            return await ok(session, "search", {"query": query})

    return anyio.run(go)


def _count_server(db: Database, marker: str) -> tuple[int, int]:
    (row,) = db.execute(
        "SELECT count(*), count(DISTINCT event_id) FROM nmem.observations WHERE body LIKE %s", (f"%{marker}%",)
    )
    return int(row[0]), int(row[1])


def test_a_join_pushes_its_backlog_while_hooks_arrive_each_row_once(team: tuple[Database, Member, Member]) -> None:
    """A join queues the project's rows; while hooks keep arriving, the push goes in slices, one in each
    pause between two hooks (team.sync: paced), its reads in pauses of their own. Every row reaches the
    server once, every hook is stored and pushed, and the outbox ends empty."""
    db, a, _ = team
    a_repo = a.checkout("api", "git@github.com:acme/api.git")
    bulk = a.checkout("bulk", "git@github.com:acme/bulk.git")
    a.start({"NMEM_TUNE_TEAM_PUSH_BATCH": "50"})
    _join(a, a.dsn, a_repo)
    sock = a.env["NMEM_SOCKET"]

    def hook(eid: str, cwd: Path, text: str, n: int) -> None:
        event = bash_event(f"s{eid[:6]}", cwd, f"make step{n}", f"{text} {n}", n)
        assert send_hook(sock, f"{eid}{n:05d}", json.dumps(event).encode())[0] == b"OK"

    for n in range(400):  # a project of A's, not shared yet
        hook("zq66bulk", bulk, "zq66bulk", n)
    # from before the join until its rows are all on the server: through the push
    with HooksArriving(lambda n: hook("zq66hook", a_repo, "zq66hook", n), join_s=SYNC_S) as hooking:
        _join(a, a.dsn, bulk)
        wait_until(
            lambda: _count_server(db, "zq66bulk") == (400, 400),
            SYNC_S,
            "the joined project's rows on the server, hooks arriving meanwhile",
        )
    sent = hooking.sent
    assert sent > 1  # hooks came during the push
    wait_until(lambda: _count_server(db, "zq66hook") == (sent, sent), SYNC_S, "every hook's row on the server")
    wait_until(lambda: a.nmem("team", "status", "--json").stdout.count('"outbox":0') == 1, SYNC_S, "an empty outbox")
    assert len(_local_rows(a, "zq66hook")) == sent


def test_a_pull_while_hooks_arrive_stores_each_row_once_in_pages_and_chunks_between_them(
    team: tuple[Database, Member, Member],
) -> None:
    """B pulls 1,500 of A's rows while hooks keep arriving on B: the pull goes between them (team.sync:
    paced, pages of PACED_PAGE_ROWS from this machine's server, each chunk in a pause), and every pulled
    row is stored once, indexed and searchable, every hook stored, the cursor at the last row or past
    it (B's own hooks, pushed meanwhile, are walked and never sent back)."""
    from nmemd.team import sync

    db, _, b = team
    b_repo = b.checkout("api", "https://github.com/acme/api")
    b.start()
    _join(b, b.dsn, b_repo)
    sock = b.env["NMEM_SOCKET"]

    def hook(n: int) -> None:
        event = bash_event("szq67", b_repo, f"make step{n}", f"zq67hook {n}", n)
        assert send_hook(sock, f"zq67hook{n:05d}", json.dumps(event).encode())[0] == b"OK"

    rows = 1500
    with HooksArriving(hook, join_s=SYNC_S) as hooking:
        wait_until(lambda: hooking.sent > 20, SYNC_S, "hooks arriving on B")
        db.execute(
            "INSERT INTO nmem.observations (team, project, event_id, author, machine, agent, session_id, kind,"
            " title, body, created_at) SELECT 'acme', 'github.com/acme/api', 'zq67pull' || g, 'al', 'al-box',"
            " 'claude-code', 'szq67al', 'command', '$ make zq67pull' || g, 'zq67pull row ' || g, now()"
            " FROM generate_series(1, %s) AS g",
            (rows,),
        )  # as al's push leaves them, in one transaction (NOTIFY wakes B's puller)
        wait_until(lambda: len(_local_rows(b, "zq67pull")) >= rows, SYNC_S, "the pulled rows on B, hooks arriving")
    sent = hooking.sent
    assert sent > 20
    pulled = _local_rows(b, "zq67pull")
    assert len(pulled) == len({e for e, _ in pulled}) == rows and {who for _, who in pulled} == {"al"}
    assert len(_local_rows(b, "zq67hook")) == sent
    (top,) = db.execute("SELECT max(seq) FROM nmem.observations WHERE event_id LIKE 'zq67pull%%'")[0]
    (newest,) = db.execute("SELECT max(seq) FROM nmem.observations")[0]
    conn = sqlite3.connect(f"file:{b.db}?mode=ro", uri=True)
    try:
        (cursor,) = conn.execute("SELECT max(seq) FROM team_cursors WHERE feed = 'observations'").fetchone()
        (indexed,) = conn.execute(
            "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH 'zq67pull'"
        ).fetchone()
    finally:
        conn.close()
    assert top <= cursor <= newest  # past B's own pushed hooks too, when the pull last walked them
    assert indexed == rows  # indexed by the pull itself
    assert rows > sync.PACED_PAGE_ROWS  # several pages


@pytest.mark.slow
def test_faults_lose_nothing_and_duplicate_nothing(team: tuple[Database, Member, Member]) -> None:
    """PostgreSQL stopped and restarted mid-push; the proxy stalls then drops; A SIGKILLed mid-push;
    B SIGKILLed mid-pull. Afterwards every event is once on the server and once in B's store."""
    db, a, b = team
    cluster = db.cluster
    proxy = Proxy((cluster.host, cluster.port))
    try:
        a_repo = a.checkout("api", "git@github.com:acme/api.git")
        b_repo = b.checkout("api", "https://github.com/acme/api")
        fast = {"NMEM_TEAM_PULL_INTERVAL_S": "1", "NMEM_TUNE_TEAM_PUSH_BATCH": "50"}
        a.start(fast)
        b.start(fast)
        _join(a, via(a.dsn, proxy), a_repo)
        _join(b, via(b.dsn, proxy), b_repo)
        sent = 0

        def burst(n: int) -> None:
            nonlocal sent
            for _ in range(n):
                assert a.hook(bash_event("sf", a_repo, f"echo {sent}", f"zq55fault {sent}", sent)).returncode == 0
                sent += 1

        for _ in range(int(os.environ.get("NMEM_TEAM_FAULT_ROUNDS", "3"))):  # bench_team_sync.py runs 20
            burst(40)
            cluster.stop("immediate")  # mid-push: the server goes away
            burst(40)
            cluster.start()
            burst(20)
            proxy.stall()
            burst(40)
            proxy.drop()
            proxy.resume()
            burst(20)
            a.stop(signal.SIGKILL)  # mid-push
            a.start(fast)
            burst(40)
            b.stop(signal.SIGKILL)  # mid-pull
            b.start(fast)
            burst(20)
        wait_until(lambda: _count_server(db, "zq55fault") == (sent, sent), 120, "every event on the server")
        wait_until(lambda: len(_local_rows(b, "zq55fault")) >= sent, 120, "every event in B's store")
        rows = _local_rows(b, "zq55fault")
        assert len(rows) == sent and len({r[0] for r in rows}) == sent  # once each
        assert _count_server(db, "zq55fault") == (sent, sent)
    finally:
        proxy.close()
