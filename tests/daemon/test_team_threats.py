"""Team memory's threat model (docs/team.md), each line against a real PostgreSQL cluster: a hostile
teammate with their own valid DSN and raw SQL, a removed member, a hostile network, a server that
must see only what members chose to share. Issue #36's findings 10, 12-17, 19 and 21."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from support.helpers import wait_until
from support.mcp_client import bridge_params, call, mcp_session
from support.pg_cluster import Database
from support.team_hostile import CONTROL, HOSTILE, on_terminal, raw_sql, stored_text
from support.team_world import Member

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
    done = m.nmem("team", "join", m.dsn, "--project", str(project), "--json", *extra)
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
