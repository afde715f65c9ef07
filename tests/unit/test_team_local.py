"""Team memory on this machine alone: project identity, the outbox triggers, pulled pages, the window.

Real SQLite files migrated by the real store, real git configs, a real FIFO; no server here (the
sync against a real PostgreSQL is tests/daemon/test_team_sync.py).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import msgspec
import pytest

from nmemd import config
from nmemd.capture.project import project_root
from nmemd.recall import context, methods
from nmemd.store.database import open_store
from nmemd.team import identity, local

SAME = [
    "git@github.com:acme/api.git",
    "https://github.com/acme/api",
    "ssh://git@github.com/acme/api",
    "https://user@GitHub.com/acme/api.git/",
    "ssh://git@github.com:22/acme/api.git",
    "git://github.com/acme/api",
]


@pytest.mark.parametrize("url", SAME)
def test_remote_forms_are_one_project(url: str) -> None:
    assert identity.normalize_remote(url) == "github.com/acme/api"


@pytest.mark.parametrize("url", ["", "/srv/git/api.git", "file:///srv/git/api", "../api", "api"])
def test_local_remotes_name_no_project(url: str) -> None:
    assert identity.normalize_remote(url) is None


def _repo(path: Path, url: str | None) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if url:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", url], check=True)
    return path


def test_project_id_from_config_and_worktree(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "api", "git@github.com:acme/api.git")
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)  # fmt: skip
    tree = tmp_path / "api-wt"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(tree)], check=True)
    assert identity.project_id(str(repo)) == "github.com/acme/api"
    root = project_root(str(tree))
    assert root == str(repo)  # a worktree maps to its repository, and so to its remote
    assert identity.project_id(str(tree)) == "github.com/acme/api"  # read through the .git file too
    assert identity.project_id(str(_repo(tmp_path / "bare-none", None))) is None


def test_config_that_is_a_fifo_is_not_read(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    (repo / ".git").mkdir(parents=True)
    os.mkfifo(repo / ".git" / "config")
    began = time.monotonic()
    assert identity.project_id(str(repo)) is None  # returns at once: a blocking open would hang here
    assert time.monotonic() - began < 5
    big = tmp_path / "big"
    (big / ".git").mkdir(parents=True)
    (big / ".git" / "config").write_text('[remote "origin"]\n url = git@h:a/b\n' + "#" * (identity.CONFIG_MAX_BYTES))
    assert identity.project_id(str(big)) is None


def test_paths_travel_relative_and_land_under_the_local_checkout() -> None:
    assert identity.to_relative("/home/a/api/tests/ws_test.py", "/home/a/api") == "tests/ws_test.py"
    assert identity.to_relative("/etc/passwd", "/home/a/api") is None  # outside the project: not sent
    assert identity.to_local("tests/ws_test.py", "/Users/b/src/api") == "/Users/b/src/api/tests/ws_test.py"


async def _store_do(settings: config.Settings, fn, *args):  # type: ignore[no-untyped-def]
    async with open_store(settings) as store:
        async with store.lock:
            return await anyio.to_thread.run_sync(lambda: fn(store, *args))


def _settings(tmp_path: Path) -> config.Settings:
    return config.load({"home": str(tmp_path / "home"), "db": str(tmp_path / "home" / "nmem.db")})


def _insert(db: sqlite3.Connection, oid: int, project: str, event_id: str, title: str, type_: str = "edit") -> None:
    db.execute(
        "INSERT INTO observations(id, event_id, session_id, project, ts, last_ts, hook_event, type, title, content,"
        " file_path) VALUES (?, ?, 's1', ?, ?, ?, 'PostToolUse', ?, ?, ?, ?)",
        (oid, event_id, project, time.time(), time.time(), type_, title, f"body of {title}", f"{project}/src/x.py"),
    )


def test_outbox_holds_shared_projects_only_and_tombstones_from_purge(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    anyio.run(_store_do, settings, lambda store: None)  # migrate
    db = sqlite3.connect(settings.db, isolation_level=None)
    shared = local.SharedProject(root="/w/api", project_id="github.com/acme/api", team="t", dsn="host=x", member="al")
    local.join(db, shared, 30.0)
    _insert(db, 1, "/w/api", "e1", "edit shared")
    _insert(db, 2, "/w/other", "e2", "edit private project")
    _insert(db, 3, "/w/api", "e3", "prompt typed", "prompt")
    rows = db.execute("SELECT op, ref, project FROM team_outbox ORDER BY id").fetchall()
    assert rows == [("obs", "1", "/w/api"), ("obs", "3", "/w/api")]  # nothing of /w/other
    link = local.links(local.shared_projects(db))[0]
    out, skipped = local.read_outbox(db, link, 100)
    assert [o.event_id for o in out] == ["e1"] and out[0].files == ["src/x.py"]
    assert len(skipped) == 1  # the prompt: prompts are not shared unless asked
    db.close()


def test_reading_the_outbox_gives_way_every_few_rows(tmp_path: Path) -> None:
    """`give_way` (a worker thread's nap while a hook waits, team.threaded) is called between rows."""
    settings = _settings(tmp_path)
    anyio.run(_store_do, settings, lambda store: None)
    db = sqlite3.connect(settings.db, isolation_level=None)
    shared = local.SharedProject(root="/w/api", project_id="github.com/acme/api", team="t", dsn="host=x", member="al")
    local.join(db, shared, 30.0)
    rows = 3 * local.GIVE_WAY_ROWS + 1
    for n in range(1, rows + 1):
        _insert(db, n, "/w/api", f"e{n}", f"edit {n}")
    link = local.links(local.shared_projects(db))[0]
    calls: list[int] = []
    out, _ = local.read_outbox(db, link, 1000, give_way=lambda: calls.append(1))
    assert len(out) == rows and len(calls) == 4  # before rows 0, 16, 32 and 48
    assert local.read_outbox(db, link, 1000) == (out, [])  # the same rows without one
    db.close()


def test_a_worker_gives_way_while_hooks_wait_and_never_for_long() -> None:
    from nmemd.team import threaded

    asked: list[int] = []

    def waiting_for(n: int) -> bool:  # a hook waits during the first `n` looks
        asked.append(1)
        return len(asked) <= n

    threaded.give_way(lambda: waiting_for(0))()
    assert len(asked) == 1  # nothing waits: one look, no nap
    asked.clear()
    threaded.give_way(lambda: waiting_for(3))()
    assert len(asked) == 4  # napped until the hook's event was acked
    asked.clear()
    threaded.give_way(lambda: True)()  # hooks that never stop: it returns anyway (GIVE_WAY_MAX_S)


def test_pulled_page_lands_once_with_its_cursor_and_tombstones_delete(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    anyio.run(_store_do, settings, lambda store: None)
    db = sqlite3.connect(settings.db, isolation_level=None)
    shared = local.SharedProject(root="/w/api", project_id="github.com/acme/api", team="t", dsn="host=x", member="al")
    local.join(db, shared, 30.0)
    link = local.links(local.shared_projects(db))[0]
    now = time.time()
    obs = [
        local.InObservation(7, "github.com/acme/api", "k1", 0, "kim", "box", "codex", "sk", "command",
                            "$ pytest -k ws", "$ pytest -k ws\n3 passed", ["tests/ws_test.py"], now - 60),
        local.InObservation(8, "github.com/acme/api", "k2", 0, "kim", "box", "codex", "sk", "edit",
                            "fixed the flaky websocket test", "diff", ["tests/ws_test.py"], now - 50),
        local.InObservation(9, "github.com/acme/api", "old", 0, "kim", "box", "codex", "sk", "edit",
                            "ancient", "x", [], now - 90 * 86400),
    ]  # fmt: skip
    page = local.Page(obs, [], [], {"observations": 9})
    next_id = local.apply_page(db, link, page, 100, 30.0, now)
    again = local.apply_page(db, link, page, next_id, 30.0, now)  # a page pulled twice (a crash before COMMIT)
    rows = db.execute("SELECT event_id, author, agent, file_path, command FROM observations ORDER BY id").fetchall()
    assert rows == [
        ("k1", "kim", "codex", "/w/api/tests/ws_test.py", "pytest -k ws"),
        ("k2", "kim", "codex", "/w/api/tests/ws_test.py", None),
    ]  # once each; the row older than the window is not stored
    assert again > next_id - 1 and local.cursors(db, link.key) == {"observations": 9}
    lines = context.build_context(db, "/w/api", now=now)
    assert "kim, with Codex, just now" in lines and "`pytest -k ws` ok" in lines and "edited tests/ws_test.py" in lines
    db.close()
    anyio.run(_store_do, settings, lambda store: None)  # the daemon indexes what was pulled before a search
    db = sqlite3.connect(settings.db, isolation_level=None)
    found = methods.run_query(db, "search", {"query": "websocket", "project": "/w/api", "team": True})
    assert [h.author for h in found["hits"]] == ["kim"]
    assert methods.run_query(db, "search", {"query": "websocket", "project": "/w/api", "mine": True}) == []
    assert {h.author for h in methods.run_query(db, "recent", {"project": "/w/api"})} == {"kim"}  # the viewer's feed
    # a tombstone names the rows it may delete: its author's (or, by a team admin, anyone's), never by another
    assert local.tombstoned(db, link, [local.InTombstone(10, "k2", "lee")], admins=[]) == []
    (k2,) = local.tombstoned(db, link, [local.InTombstone(10, "k2", "kim")], admins=[])
    assert local.tombstoned(db, link, [local.InTombstone(10, "k2", "lee")], admins=["lee"]) == [k2]
    db.execute("DELETE FROM observations WHERE id = ?", (k2,))
    assert local.prune_step(db, 30.0, now + 31 * 86400, 100) == 1  # the window: teammates' rows age out
    assert db.execute("SELECT count(*) FROM observations").fetchone()[0] == 0
    db.close()


def test_daemon_without_shared_projects_never_loads_psycopg(tmp_path: Path) -> None:
    code = (
        "import sys, anyio\n"
        "from nmemd import config\n"
        "from nmemd.daemon import server\n"
        "from nmemd.recall import context\n"
        "assert 'psycopg' not in sys.modules, 'psycopg imported'\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_the_viewer_and_the_mcp_search_name_a_teammates_hit() -> None:
    from nmemd.mcp import tools
    from nmemd.recall.queries import Hit
    from nmemd.web import pages

    hit = Hit(id=5, type="edit", project="/w/api", session_id="sk", ts=time.time(), title="fixed <ws>", author="kim",
              agent="codex")  # fmt: skip
    row = pages.hit_row(msgspec.to_builtins(hit))
    assert "by kim with codex" in row and "<ws>" not in row
    assert "by kim with codex" in tools._hit_line(hit, time.time())
    mine = Hit(id=6, type="edit", project="/w/api", session_id="s", ts=time.time(), title="mine")
    assert " by " not in pages.hit_row(msgspec.to_builtins(mine)) and " by " not in tools._hit_line(mine, time.time())


def test_a_summary_leaves_without_the_prompts_it_quotes_unless_they_are_shared() -> None:
    summary = 'Asked: "deploy with my token zq12" (#3)\nChanged: src/app.py (#4 #5 … #9)\nThen asked: "and more" (#11)'
    assert local.shareable_summary(summary, False) == "Changed: src/app.py"
    assert (
        local.shareable_summary(summary, True)
        == 'Asked: "deploy with my token zq12"\nChanged: src/app.py\nThen asked: "and more"'
    )


def test_a_session_tombstone_removes_a_teammates_summary_only_when_its_writer_may(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    anyio.run(_store_do, settings, lambda store: None)
    db = sqlite3.connect(settings.db, isolation_level=None)
    shared = local.SharedProject(root="/w/api", project_id="github.com/acme/api", team="t", dsn="host=x", member="al")
    local.join(db, shared, 30.0)
    link = local.links(local.shared_projects(db))[0]
    now = time.time()
    session = local.InSession(5, "github.com/acme/api", "sk", "kim", "box", "codex", now - 60, now - 30, "Fixed: ws")
    local.store_sessions(db, link, [session], 30.0, now)
    assert db.execute("SELECT session_id FROM team_sessions").fetchall() == [("team/kim/sk",)]  # kim's own space

    def tomb(author: str, project: str = "github.com/acme/api") -> local.InTombstone:
        return local.InTombstone(9, "sk", author, "session", project, "kim")

    local.drop_sessions(db, link, [tomb("lee"), tomb("kim", "github.com/acme/other")], admins=[])
    assert db.execute("SELECT count(*) FROM team_sessions").fetchone() == (1,)  # not kim's, not an admin's
    local.drop_sessions(db, link, [tomb("lee")], admins=["lee"])
    assert db.execute("SELECT count(*) FROM team_sessions").fetchone() == (0,)
    db.close()
