"""Team memory's threat model (docs/team.md), each line against a real PostgreSQL cluster: a hostile
teammate with their own valid DSN and raw SQL, a removed member, a hostile network, a server that
must see only what members chose to share. Issue #36's findings 10, 12-17, 19 and 21."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support.db import db_rows
from support.helpers import claude_bash, claude_edit, claude_event, claude_tool, nmem, wait_until
from support.mcp_client import bridge_params, call, mcp_session
from support.pg_cluster import Cluster, Database
from support.team_hostile import AT_CAPTURE, BARE_TOKENS, CONTROL, HOSTILE, on_terminal, raw_sql, stored_text
from support.team_world import Member, Proxy

from nmemd.errors import TeamError
from nmemd.team import admin

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]
SYNC_S = 60.0
PROJECT = "github.com/acme/api"


@pytest.fixture
def team(pg_db: Database, tmp_path: Path) -> Iterator[tuple[Database, Member, Member]]:
    """al (the hostile teammate) and bo, both in team acme; bo's daemon runs."""
    admin.init(pg_db.admin_dsn, "acme")
    al = Member("al", tmp_path / "al")
    bo = Member("bo", tmp_path / "bo")
    al.dsn = admin.add_member(pg_db.admin_dsn, "acme", "al").dsn
    bo.dsn = admin.add_member(pg_db.admin_dsn, "acme", "bo").dsn
    try:
        yield pg_db, al, bo
    finally:
        for m in (al, bo):
            m.cleanup()


def join(m: Member, project: Path, *extra: str) -> dict:
    done = m.nmem("team", "join", "--project", str(project), "--json", *extra, stdin=m.dsn)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def teammate_rows(m: Member, marker: str) -> list[tuple]:
    import sqlite3

    conn = sqlite3.connect(f"file:{m.db}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT id, title FROM observations WHERE author IS NOT NULL AND title LIKE ?",
                            (f"%{marker}%",)).fetchall()  # fmt: skip
    finally:
        conn.close()


# --- finding 10: a teammate's escape sequences never reach my terminal, context, MCP client or viewer


def test_a_teammates_escape_sequences_reach_no_output(team: tuple[Database, Member, Member]) -> None:
    db, al, bo = team
    repo = bo.checkout("api", "git@github.com:acme/api.git")
    bo.start()
    join(bo, repo)
    now = time.time()
    for n, kind in enumerate(("command", "error")):
        raw_sql(
            al.dsn,
            "INSERT INTO nmem.observations (team, project, event_id, machine, agent, session_id, kind, title, body,"
            " files, created_at) VALUES ('acme', %s, %s, %s, %s, 'al-s1', %s, %s, %s, %s, to_timestamp(%s))",
            (PROJECT, f"evil-{n}", "box" + HOSTILE, "codex" + HOSTILE, kind, f"zqesc title {HOSTILE}",
             f"$ make zqesc{HOSTILE}\nzqesc body {HOSTILE}", [f"src/{HOSTILE}.py"], now - 60 + n),
        )  # fmt: skip
    wait_until(lambda: len(teammate_rows(bo, "zqesc")) == 2, SYNC_S, "al's rows in bo's store")

    def clean(text: str) -> None:
        assert not CONTROL.search(text), repr(text)
        assert "evil.example" not in text, text

    # the CLI on a terminal (rich's own colours aside) and in a pipe
    code, seen = on_terminal(["search", "zqesc", "--all"], bo.env)
    assert code == 0 and "zqesc" in seen, seen
    clean(stored_text(seen.replace("\r\n", "\n")))
    hits = [json.loads(line) for line in bo.nmem("search", "zqesc", "--all", "--json").stdout.splitlines()]
    assert len(hits) == 2
    for value in (v for h in hits for v in h.values()):
        clean(str(value))  # the strings JSON carries, decoded
    context = bo.nmem("context", "--project", str(repo))
    assert context.returncode == 0 and "zqesc" in context.stdout, context
    clean(context.stdout)
    hit = hits[0]
    shown = bo.nmem("show", str(hit["id"]))
    assert shown.returncode == 0 and "zqesc" in shown.stdout
    clean(shown.stdout)

    # the SessionStart context, as the hook client prints it for the agent
    started = bo.hook({"session_id": "bo-s1", "cwd": str(repo), "hook_event_name": "SessionStart", "source": "startup",
                       "transcript_path": str(repo / "t.jsonl")})  # fmt: skip
    context = json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "What teammates did here lately" in context and "al" in context, context
    clean(context)

    # the MCP tools' results
    async def tools() -> list[str]:
        async with mcp_session(bridge_params(bo.env, str(repo)), bo.root / "mcp.err") as session:
            texts = []
            for name, args in (("search", {"query": "zqesc"}), ("get_observations", {"ids": [hit["id"]]}),
                               ("recent_context", {})):  # fmt: skip
                result = await call(session, name, args)
                texts.append("".join(c.text for c in result.content if hasattr(c, "text")))
            return texts

    for text in anyio.run(tools):
        assert "zqesc" in text, text
        clean(text)


# --- finding 14: the DSN (its password) never only on the command line


def test_join_takes_the_dsn_from_a_file_stdin_or_the_prompt_never_a_password_in_argv(
    team: tuple[Database, Member, Member],
) -> None:
    db, al, bo = team
    repos = [bo.checkout(name, f"git@github.com:acme/{name}.git") for name in ("api", "web", "cli", "docs")]
    bo.start()
    password = conninfo_to_dict(bo.dsn)["password"]
    assert isinstance(password, str)

    refused = bo.nmem("team", "join", bo.dsn, "--project", str(repos[0]))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "--dsn-file" in refused.stderr, refused.stderr
    assert password not in refused.stderr + refused.stdout
    assert "no project is shared" in bo.nmem("team", "status").stdout  # nothing recorded

    dsn_file = bo.root / "bo.dsn"
    dsn_file.write_text(f"\n{bo.dsn}\n")
    dsn_file.chmod(0o600)
    by_file = bo.nmem("team", "join", "--dsn-file", str(dsn_file), "--project", str(repos[0]))
    assert by_file.returncode == 0, by_file.stderr
    assert "transport: this machine (loopback)" in by_file.stdout
    by_stdin = bo.nmem("team", "join", "--project", str(repos[1]), stdin=bo.dsn + "\n")
    assert by_stdin.returncode == 0, by_stdin.stderr
    by_dash = bo.nmem("team", "join", "-", "--project", str(repos[2]), stdin=bo.dsn)
    assert by_dash.returncode == 0, by_dash.stderr
    code, seen = on_terminal(["team", "join", "--project", str(repos[3])], bo.env, answer=bo.dsn, asked=b"(not shown)")
    assert code == 0 and "sharing" in seen, seen
    assert password not in seen  # the prompt does not echo it
    # a DSN without a password may stay on the command line: libpq finds the password elsewhere
    without = make_conninfo(bo.dsn, password="")
    assert "password" not in conninfo_to_dict(without) or not conninfo_to_dict(without)["password"]
    shared = db_rows(bo.db, "SELECT project_id FROM team_projects ORDER BY 1")
    assert shared == [(f"github.com/acme/{n}",) for n in ("api", "cli", "docs", "web")]
    (link,) = json.loads(bo.nmem("team", "status", "--json").stdout)
    assert sorted(link["projects"]) == [p for (p,) in shared]  # every project joined on the link, not the first
    for st in json.loads(bo.nmem("team", "status", "--json").stdout):
        assert st["transport"] == "this machine (loopback)"
    for path in bo.home.glob("nmem.db*"):
        assert password.encode() not in path.read_bytes()


# --- finding 15: a server on another machine only over verified TLS, unless the user says --insecure


def test_a_non_local_server_needs_verified_tls_or_the_word_insecure(
    team: tuple[Database, Member, Member], tmp_path: Path
) -> None:
    db, al, bo = team
    repo = bo.checkout("api", "git@github.com:acme/api.git")
    bo.start()
    proxy = Proxy((db.cluster.host, db.cluster.port))  # a relay on the path: it would see plaintext
    try:
        # the server by a name that is not this machine's; libpq reaches it through the relay
        remote = make_conninfo(bo.dsn, host="db.example.test", hostaddr="127.0.0.1", port=str(proxy.port))
        weaker = [make_conninfo(remote, **{k: v}) for k, v in (("sslmode", "prefer"), ("sslmode", "require"),
                  ("sslmode", "disable"), ("channel_binding", "prefer"))]  # fmt: skip
        for dsn in (remote, *weaker):
            done = bo.nmem("team", "join", "--project", str(repo), stdin=dsn)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
            assert "--insecure" in done.stderr or "SSL" in done.stderr, done.stderr
            assert conninfo_to_dict(bo.dsn)["password"] not in done.stderr
        assert proxy.accepted == 1  # only the first one (verify-full, added) connected: the server has no TLS
        assert "no project is shared" in bo.nmem("team", "status").stdout

        # the user says it in words: plaintext through the relay, and every report says so
        plain = make_conninfo(remote, sslmode="disable")
        done = bo.nmem("team", "join", "--insecure", "--project", str(repo), stdin=plain)
        assert done.returncode == 0, done.stderr
        assert "transport: plaintext allowed (--insecure)" in done.stdout
        (st,) = json.loads(bo.nmem("team", "status", "--json").stdout)
        assert st["transport"] == "plaintext allowed (--insecure)"
        assert "transport: plaintext allowed (--insecure)" in bo.nmem("team", "status").stdout
        doctor = bo.nmem("doctor")
        assert "plaintext allowed (--insecure)" in doctor.stdout, doctor.stdout
    finally:
        proxy.close()

    # the admin's side: the DSN add-member prints for another host asks for verified TLS whatever the admin's said
    added = admin.add_member(make_conninfo(db.admin_dsn, sslmode="disable"), "acme", "cy", host="db.example.test")
    params = conninfo_to_dict(added.dsn)
    assert (params["host"], params["sslmode"], params["channel_binding"]) == (
        "db.example.test",
        "verify-full",
        "require",
    )
    with pytest.raises(TeamError, match="--insecure"):
        admin.init(make_conninfo(db.admin_dsn, host="db.example.test", hostaddr="127.0.0.1", sslmode="disable"), "acme")


# --- findings 12 and 13: a removed member has nothing; a removal never reaches another database's team


def test_remove_member_ends_a_hostile_members_access_for_good(pg_db: Database) -> None:
    admin.init(pg_db.admin_dsn, "acme")
    kim = admin.add_member(pg_db.admin_dsn, "acme", "kim").dsn
    # kim prepares: large objects (any role may create them) here and in the cluster's own database,
    # which would make DROP ROLE fail, and a connection held open
    raw_sql(kim, "SELECT lo_create(0)")
    raw_sql(make_conninfo(kim, dbname="postgres"), "SELECT lo_create(0)")
    held = psycopg.connect(kim, autocommit=True)
    try:
        done = nmem("team", "remove-member", pg_db.admin_dsn, "--team", "acme", "kim")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1].startswith("role kim dropped"), done.stdout
        assert pg_db.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'kim'") == [(0,)]
        assert pg_db.execute("SELECT count(*) FROM pg_largeobject_metadata") == [(0,)]
        assert pg_db.cluster.execute("SELECT count(*) FROM pg_largeobject_metadata") == [(0,)]
        with pytest.raises(psycopg.Error):
            held.execute("SELECT count(*) FROM nmem.observations")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(kim)
    finally:
        held.close()
    again = nmem("team", "remove-member", pg_db.admin_dsn, "--team", "acme", "kim")
    assert (again.returncode, again.stdout) == (0, "kim was not a member of team acme\n"), again


def test_a_removal_in_one_database_keeps_the_role_another_nmem_database_uses(
    pg_db: Database, pg_cluster: Cluster
) -> None:
    admin.init(pg_db.admin_dsn, "acme")
    kim = admin.add_member(pg_db.admin_dsn, "acme", "kim").dsn
    with pg_cluster.database() as other:  # another nmem database on the same cluster, its own admin
        admin.init(other.admin_dsn, "beta")
        assert admin.add_member(other.admin_dsn, "beta", "kim").role_created is False
        removed = admin.remove_member(pg_db.admin_dsn, "acme", "kim")
        assert removed == admin.Removed("kim", True, False, [other.name])
        there = make_conninfo(kim, dbname=other.name)
        assert raw_sql(there, "SELECT team FROM nmem.members WHERE member = session_user") == [("beta",)]
        assert raw_sql(kim, "SELECT count(*) FROM nmem.members") == [(0,)]  # nothing of acme any more
        assert admin.remove_member(other.admin_dsn, "beta", "kim").role_dropped
        assert pg_db.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'kim'") == [(0,)]


# --- findings 16, 17, 19: what leaves the machine


def _pushed(db: Database, marker: str, count: int) -> list[str]:
    """Every text column of the server's rows holding `marker`, once `count` observations are there
    (read as the superuser: what the server's operator sees)."""

    def rows() -> list[tuple] | None:
        found = db.execute(
            "SELECT title, body, array_to_string(files, ' '), session_id FROM nmem.observations"
            " WHERE title LIKE %s OR body LIKE %s",
            (f"%{marker}%", f"%{marker}%"),
        )
        return found if len(found) >= count else None

    found = wait_until(rows, SYNC_S, f"{count} rows holding {marker} on the server")
    summaries = [s for (s,) in db.execute("SELECT summary FROM nmem.sessions")]
    return [str(v) for r in found for v in r] + summaries


def _shared_session(al: Member, repo: Path, marker: str, prompt: str, output: str) -> None:
    """al's session in the shared project: a prompt, a command and its output, a compaction that
    quotes every user message, a reply that quotes the prompt, its end."""
    cwd = str(repo)
    summary = (f"1. Primary Request and Intent:\n   fix {marker}\n6. All user messages:\n   - \"{prompt}\"\n"
               f"7. Pending Tasks:\n   - {marker} none\n")  # fmt: skip
    for event in (
        claude_event("UserPromptSubmit", "al-s1", cwd, prompt=prompt),
        claude_bash("al-s1", cwd, f"cat {marker}.txt", output),
        claude_event("PostCompact", "al-s1", cwd, trigger="auto", compact_summary=summary),
        claude_event("Stop", "al-s1", cwd, last_assistant_message=f'Done with {marker}: you asked "{prompt}".'),
        claude_event("SessionEnd", "al-s1", cwd, reason="exit"),
    ):
        assert al.hook(event).returncode == 0


def test_prompts_never_leave_through_compaction_summaries_or_replies(team: tuple[Database, Member, Member]) -> None:
    db, al, _ = team
    repo = al.checkout("api", "git@github.com:acme/api.git")
    al.start()
    join(al, repo)
    prompt = "zqprompt deploy the quarterly plan to the mars colony tonight"
    _shared_session(al, repo, "zq16", prompt, "zq16 output")
    pushed = _pushed(db, "zq16", 3)  # the command, the compaction, the reply
    assert any("All user messages" in text for text in pushed), pushed
    for text in pushed:
        assert "zqprompt" not in text and "mars colony" not in text, text


def test_bare_provider_tokens_never_reach_the_server(team: tuple[Database, Member, Member]) -> None:
    db, al, _ = team
    repo = al.checkout("api", "git@github.com:acme/api.git")
    al.start()
    join(al, repo)
    output = "zq17 deploy log\n" + "\n".join(f"- {token}" for token in BARE_TOKENS.values())  # no key names
    _shared_session(al, repo, "zq17", "zq17 show me the deploy log please", output)
    pushed = "\n".join(_pushed(db, "zq17", 3))
    for name, token in BARE_TOKENS.items():
        assert token not in pushed, name
    local = "\n".join(str(r[0]) for r in db_rows(al.db, "SELECT content FROM observations"))
    for name, token in BARE_TOKENS.items():
        assert (token not in local) == (name in AT_CAPTURE), name  # the families of the finding: stored redacted too


def test_paths_outside_the_shared_project_never_reach_the_server(team: tuple[Database, Member, Member]) -> None:
    db, al, _ = team
    repo = al.checkout("api", "git@github.com:acme/api.git")
    secret = al.checkout("zqunshared-venture", None)
    al.start()
    join(al, repo)
    home = str(al.root)  # the member's HOME
    output = (f"zq19 diff {secret}/plan.md {repo}/src/app.py\n"
              f"  File \"{home}/.local/lib/python3.11/site-packages/requests/api.py\", line 3\n"
              f"  File \"/usr/lib/python3.11/json/__init__.py\", line 9\n"
              f"see ~/notes/zqdiary.txt and https://github.com/acme/api/blob/main/src/app.py")  # fmt: skip
    cwd = str(repo)
    assert al.hook(claude_bash("al-s2", cwd, f"diff {secret}/plan.md {repo}/src/app.py", output)).returncode == 0
    assert al.hook(claude_edit("al-s2", cwd, "src/app.py", "a = 1", "a = 2")).returncode == 0
    assert al.hook(claude_tool("al-s2", cwd, "Read", {"file_path": f"{secret}/plan.md"}, {})).returncode == 0
    assert al.hook(claude_tool("al-s2", cwd, "Read", {"file_path": f"{repo}//{secret}/x.md"}, {})).returncode == 0
    assert al.hook(claude_event("SessionEnd", "al-s2", cwd, reason="exit")).returncode == 0
    pushed = "\n".join(_pushed(db, "zq19", 1))
    assert "src/app.py" in pushed and "…/site-packages/requests/api.py" in pushed, pushed
    assert "/usr/lib/python3.11/json/__init__.py" in pushed
    for leak in (home, "zqunshared-venture", "zqdiary", str(repo)):
        assert leak not in pushed, (leak, pushed)
    everything = "\n".join(
        str(v) for r in db.execute("SELECT title, body, files::text FROM nmem.observations") for v in r
    )
    assert "zqunshared-venture" not in everything and home not in everything, everything


# --- finding 21: a member's day


def test_one_machine_pushes_under_one_name_whatever_starts_its_daemon(team: tuple[Database, Member, Member]) -> None:
    db, al, _ = team
    repo = al.checkout("api", "git@github.com:acme/api.git")
    al.start()  # its environment names the machine al-box
    joined = join(al, repo)
    assert joined["machine"] == "al-box"
    assert 'team_machine = "al-box"' in (al.root / ".config" / "nmem" / "config.toml").read_text()
    al.stop()
    del al.env["NMEM_TEAM_MACHINE"]  # a daemon started another way (a service, a login shell)
    al.start()
    assert al.hook(claude_bash("al-s3", str(repo), "make zq21", "zq21 built")).returncode == 0
    wait_until(lambda: db.execute("SELECT machine FROM nmem.observations WHERE body LIKE '%zq21%'") or None,
               SYNC_S, "the row on the server")  # fmt: skip
    assert db.execute("SELECT DISTINCT machine FROM nmem.observations") == [("al-box",)]
    assert "psycopg" not in al.nmem("team", "status").stderr


def test_membership_follows_the_role_not_its_name(pg_db: Database) -> None:
    admin.init(pg_db.admin_dsn, "acme")
    admin.init(pg_db.admin_dsn, "beta")
    first = admin.add_member(pg_db.admin_dsn, "acme", "kim").dsn
    raw_sql(first, "SELECT nmem.my_teams()")
    # the role goes outside nmem (a DBA, another database's admin): its membership row stays behind
    pg_db.execute("DROP OWNED BY kim; DROP ROLE kim")
    assert pg_db.execute("SELECT team FROM nmem.members WHERE member = 'kim'") == [("acme",)]
    # someone else gets the name, in another team: they are no member of the first one's team
    second = admin.add_member(pg_db.admin_dsn, "beta", "kim")
    assert second.role_created
    assert raw_sql(second.dsn, "SELECT nmem.my_teams()") == [(["beta"],)]
    assert raw_sql(second.dsn, "SELECT team FROM nmem.members ORDER BY 1") == [("beta",)]
    # an admin who adds the new kim to acme on purpose makes the row theirs
    admin.add_member(pg_db.admin_dsn, "acme", "kim")
    assert raw_sql(second.dsn, "SELECT nmem.my_teams()") in ([(["acme", "beta"],)], [(["beta", "acme"],)])
