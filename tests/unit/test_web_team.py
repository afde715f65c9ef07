"""The viewer's team parts (issue #36, finding 21): a teammate's row with its author and machine and
no Forget that cannot do what it says; team memory's links on the Status page."""

from __future__ import annotations

from nmemd.web import pages

ROW = {"id": 7, "type": "command", "title": "$ make", "project": "/w/api", "session_id": "k1", "ts": 0.0,
       "last_ts": 0.0, "content": "ok", "hook_event": "Team", "agent": "codex", "count": 1,
       "pinned": False}  # fmt: skip


def test_a_teammates_row_shows_who_and_where_and_hides_here_only() -> None:
    theirs = pages.detail({**ROW, "author": "kim", "machine": "kim-laptop"}, [], "tok")
    assert "<th>author</th><td class=k>kim</td>" in theirs and "<th>machine</th><td class=k>kim-laptop</td>" in theirs
    assert ">Hide on this machine</a>" in theirs and ">Forget</a>" not in theirs
    assert "hook_event" not in theirs  # "Team" is no hook event of theirs
    mine = pages.detail(ROW, [], "tok")
    assert ">Forget</a>" in mine and "<th>author</th>" not in mine


def test_status_has_a_team_section_and_says_a_broken_link_first() -> None:
    links = [
        {"team": "acme", "server": "kim@db:5432/nmem", "member": "kim", "projects": ["github.com/acme/api"],
         "transport": "TLS verify-full, channel binding", "state": "ok", "outbox": 3, "last_push_at": None,
         "last_pull_at": None},
        {"team": "beta", "server": "kim@db2:5432/nmem", "member": "kim", "projects": [], "transport": "?",
         "error": "wrong password or unknown member"},
    ]  # fmt: skip
    page = pages.status({"daemon": {"running": True}, "database": {}}, "", 0.0, 0.0, links)
    assert '<h3>Team memory</h3><table class="l" id="team">' in page
    assert "TLS verify-full, channel binding" in page and "github.com/acme/api" in page
    assert page.index("Team beta on kim@db2:5432/nmem: wrong password") < page.index("<h3>The daemon</h3>")
    assert "Team memory" not in pages.status({"daemon": {"running": True}, "database": {}}, "", 0.0, 0.0)
