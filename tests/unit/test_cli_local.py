"""The `nmem` commands that need no daemon, in process through typer's runner: with none running, the read
commands run the same queries on a read-only connection to the store's file (`control.read`). The
store is filled in process; the commands as subprocesses, with and without a daemon: tests/daemon/test_cli.py
and tests/daemon/test_search.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import Result
from support.helpers import claude_edit, claude_event, claude_failure
from support.store import stored
from typer.testing import CliRunner

from nmemd import __version__
from nmemd.cli import app
from nmemd.recall.context import build_context

SID = "sess-cli-0001-aaaa"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A git project holding a short session, the current directory (the commands' default project)."""
    web = tmp_path / "web"
    (web / ".git").mkdir(parents=True)
    monkeypatch.chdir(web)
    return str(web)


@pytest.fixture
def db(project: str) -> str:
    return stored([
        claude_event("SessionStart", SID, project, source="startup"),
        claude_event("UserPromptSubmit", SID, project, prompt="fix the zebra parser"),
        claude_edit(SID, project, "src/parser.py", "return line", "return zebra(line)"),
        claude_failure(SID, project, "make deploy", "Exit code 2\nerror: deploy key missing for zebra-prod"),
    ])  # fmt: skip


def nmem(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def ok(*args: str) -> str:
    done = nmem(*args)
    assert done.exit_code == 0 and done.stderr == "", (args, done.stderr, done.exception)
    return done.stdout


def fails(*args: str, code: int = 1) -> str:
    """What a refused command says: one line on stderr (click's usage errors: its own few), no traceback."""
    done = nmem(*args)
    assert done.exit_code == code and done.stdout == "", (args, done.stdout)
    assert "Traceback" not in done.stderr and done.stderr.endswith("\n")
    if code == 1:
        assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_the_version_and_the_commands(db: str) -> None:
    assert ok("--version") == f"nmem {__version__}\n"
    listed = ok("--help")
    for command in ("search", "show", "timeline", "sessions", "context", "install", "doctor", "import-transcripts"):
        assert f" {command} " in listed, command


def test_status_without_a_daemon_says_so_and_what_the_file_holds(db: str) -> None:
    shown = ok("status")
    assert "not running" in shown.splitlines()[0] and db in shown
    assert "4 observations from 4 events in 1 session" in shown


def test_search_reads_the_file_best_first_in_a_table_or_json_lines(db: str, project: str) -> None:
    table = ok("search", "zebra").splitlines()
    assert table[0].split() == ["id", "when", "type", "title", "path"]
    assert [line.split(" ago ")[1].split()[0] for line in table[1:]] == ["prompt", "edit", "error"]  # `59 min ago`
    assert "zebra" in table[2] and "⟦" not in table[2]  # plain text for a pipe (issue #37, 4)
    assert "⟦zebra⟧" in ok("search", "zebra", "--marks").splitlines()[2]  # marked when asked
    rows = [json.loads(line) for line in ok("search", "zebra", "--json").splitlines()]
    assert [r["type"] for r in rows] == ["prompt", "edit", "error"] and {r["project"] for r in rows} == {project}
    assert ok("search", "zebra", "--type", "error", "--json").count("\n") == 1


def test_show_timeline_and_sessions_name_the_session(db: str) -> None:
    shown = ok("show", "4")
    assert shown.startswith("#4 error ") and "deploy key missing" in shown and f"session  {SID}" in shown
    assert [line.split()[0] for line in ok("timeline", "2").splitlines()[1:]] == ["1", "2", "3", "4"]
    (session,) = [json.loads(line) for line in ok("sessions", "--json").splitlines()]
    assert session["session_id"] == SID and session["first_prompt"] == "fix the zebra parser"
    assert ok("show", "s:" + SID[:8]).startswith(f"session {SID} claude-code")


def test_context_is_what_session_start_would_inject(db: str, project: str) -> None:
    given = json.loads(ok("context", "--json"))
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        expected = build_context(conn, project, source="startup")
    finally:
        conn.close()
    assert given["project"] == project and "zebra" in given["context"] and given["context"] == expected


def test_bad_input_is_one_line_and_a_nonzero_exit(db: str) -> None:
    assert fails("show", "s:zz") == "error: no session 'zz' (a prefix needs at least 4 characters)\n"
    assert "no observation" in fails("show", "999")
    assert "Missing argument 'QUERY'" in fails("search", code=2)
    assert "is neither a span (30m, 2h, 7d) nor a date" in fails("search", "zebra", "--since", "the day", code=2)


def test_a_home_with_nothing_recorded_says_so(project: str) -> None:
    assert "nothing has been recorded" in fails("search", "zebra")
