"""What a new user meets in the CLI (issue #31, finding 5): errors alone where nothing happened, plural
forms, destructive commands that ask on a terminal and say what they removed, help that tells the truth.

The terminal is a real pseudo-terminal (`os.openpty`): the command's stdin, stdout and stderr, as in a
shell; the test answers the question the command asks on it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.env import BIN
from support.helpers import nmem

NMEM = str(BIN / "nmem")
TIMEOUT_S = 60.0
CWD = "/tmp/nmem-first-use"


def on_terminal(args: list[str], answer: str | None, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `nmem ARGS` on a pseudo-terminal; type `answer` when it asks [y/N]. Exit code and all it printed."""
    master, slave = os.openpty()
    proc = subprocess.Popen([NMEM, *args], stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            env={**os.environ, "NMEM_AUTOSTART": "0", "COLUMNS": "200", **(env or {})})  # fmt: skip
    os.close(slave)
    seen, asked = b"", False
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no end within {TIMEOUT_S} s: {seen!r}"
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the command closed the terminal (it exited)
                break
            if not chunk:
                break
            seen += chunk
            if not asked and b"[y/N]" in seen:
                assert answer is not None, f"asked, but no answer was expected: {seen!r}"
                os.write(master, answer.encode() + b"\n")
                asked = True
        code = proc.wait(timeout=TIMEOUT_S)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert asked == (answer is not None), seen
    return code, seen.decode(errors="replace").replace("\r\n", "\n")


def send(session: str, hook: str, **fields: object) -> None:
    body = {"session_id": session, "cwd": CWD, "transcript_path": f"/tmp/{session}.jsonl", "hook_event_name": hook}
    done = run_send(json.dumps({**body, **fields}).encode())
    assert done.returncode == 0, done.stderr


def ids(daemon: Daemon) -> list[int]:
    return [int(r[0]) for r in db_rows(daemon.db, "SELECT id FROM observations ORDER BY id")]


def test_pin_of_an_unknown_id_is_an_error_only_and_one_is_singular(daemon: Daemon) -> None:
    daemon.start()
    send("s-pin", "UserPromptSubmit", prompt="remember the walrus")
    done = nmem("pin", "9999")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "error: no observation with id 9999; nothing changed\n"
    [one] = ids(daemon)
    done = nmem("pin", str(one))
    assert (done.returncode, done.stdout) == (0, "pinned 1 observation\n")
    done = nmem("pin", str(one), "9999")
    assert done.stdout == "pinned 1 observation\n" and done.stderr == "error: no observation with id 9999\n"


def test_status_and_import_say_one_observation(daemon: Daemon, tmp_path: Path) -> None:
    daemon.start()
    send("s-one", "UserPromptSubmit", prompt="remember the okapi")
    status = nmem("status")
    assert "1 observation from 1 event in 1 session" in status.stdout, status.stdout
    export = nmem("export", "--project", CWD)
    assert export.returncode == 0, export.stderr
    assert nmem("forget", str(ids(daemon)[0])).returncode == 0
    (tmp_path / "one.jsonl").write_text(export.stdout)
    again = nmem("import", str(tmp_path / "one.jsonl"))
    assert again.stdout.startswith("imported 1 observation and 1 session;"), again.stdout


def test_forget_asks_on_a_terminal_and_says_what_it_removed(daemon: Daemon) -> None:
    daemon.start()
    send("s-forget", "UserPromptSubmit", prompt="the capybara migration goes first")
    send("s-forget", "UserPromptSubmit", prompt="then the tapir backfill")
    first, second = ids(daemon)
    code, shown = on_terminal(["forget", str(first)], "n")
    assert code == 1 and "will forget 1 observation:" in shown and "the capybara migration goes first" in shown
    assert "not confirmed; nothing changed" in shown and ids(daemon) == [first, second]
    code, shown = on_terminal(["forget", str(first)], "y")
    assert (
        code == 0 and "forgot 1 observation\n" in shown and f"#{first}  nmem-first-use  prompt  the capybara" in shown
    )
    assert ids(daemon) == [second]
    code, shown = on_terminal(["forget", "--yes", str(second)], None)  # --yes: no question
    assert code == 0 and "forgot 1 observation" in shown and ids(daemon) == []
    done = nmem("forget", "4242")
    assert (done.returncode, done.stdout) == (1, "") and "no observation with id 4242; nothing changed" in done.stderr


def test_purge_dry_run_lists_the_rows_and_how_many_more(daemon: Daemon) -> None:
    daemon.start()
    for i in range(55):
        send("s-purge", "UserPromptSubmit", prompt=f"flamingo step {i}")
    done = nmem("purge", "--session", "s-purge", "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "would delete in every project: 55 observations, 1 session left empty"
    assert lines[1].endswith("  nmem-first-use  prompt  flamingo step 0") and lines[1].startswith("  #")
    assert len(lines) == 52 and lines[-1] == "  … and 5 more observations"
    assert "ledger" not in done.stdout
    assert len(ids(daemon)) == 55  # a dry run changes nothing
    code, shown = on_terminal(["purge", "--session", "s-purge"], "n")
    assert code == 1 and "will delete in every project: 55 observations" in shown and "flamingo step 49" in shown
    assert len(ids(daemon)) == 55
    done = nmem("purge", "--session", "s-purge", "--yes")  # says what it removed
    assert done.stdout.startswith("deleted in every project: 55 observations, 1 session left empty\n  #")
    assert "flamingo step 0\n" in done.stdout and done.stdout.endswith("… and 5 more observations\n")
    assert ids(daemon) == []


def test_search_help_says_what_search_does() -> None:
    done = nmem("search", "--help")
    assert "all must match" not in done.stdout
    assert "a row needs one of them, rows holding more of them come first" in " ".join(done.stdout.split())


def test_show_names_a_bad_id_and_takes_several(daemon: Daemon) -> None:
    daemon.start()
    send("s-show", "UserPromptSubmit", prompt="remember the ibis")
    done = nmem("show", "abc")  # not a number: a session id's prefix, which is too short to name one
    assert done.returncode == 1 and done.stdout == "" and "'abc'" in done.stderr, done.stderr
    assert "not a valid int" not in done.stderr and "Traceback" not in done.stderr
    assert "Usage: nmem show [OPTIONS] {ID...}" in nmem("show", "--help").stdout


def test_a_session_that_only_started_is_said_to_be_so(daemon: Daemon) -> None:
    daemon.start()
    send("s-quiet", "SessionStart", source="startup")
    send("s-busy", "UserPromptSubmit", prompt="tune the heron cache")
    done = nmem("sessions", "--all")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert rows["s-quiet"].endswith("(started, no activity)") and rows["s-busy"].endswith("tune the heron cache")


@pytest.fixture
def fresh_home(tmp_path: Path) -> dict[str, str]:
    """A HOME without any agent, and a PATH without their commands."""
    home = tmp_path / "fresh"
    home.mkdir()
    return {"HOME": str(home), "PATH": f"{BIN}:/usr/bin:/bin", "CLAUDE_CONFIG_DIR": ""}


def test_install_skips_an_agent_that_is_not_installed_and_says_what_comes_next(fresh_home: dict[str, str]) -> None:
    home = Path(fresh_home["HOME"])
    done = nmem("install", "--no-import", env=fresh_home)
    assert done.returncode == 1 and "skipped Claude Code: not installed here (no ~/.claude, no claude on PATH)" in (
        done.stdout
    )
    assert "nothing installed" in done.stderr and sorted(os.listdir(home)) == []  # no ~/.claude, no ~/.claude.json
    (home / ".claude").mkdir()
    done = nmem("install", "--no-import", env=fresh_home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2].startswith("next: start a new Claude Code session in a project")


def test_uninstall_asks_on_a_terminal(fresh_home: dict[str, str]) -> None:
    home = Path(fresh_home["HOME"])
    (home / ".claude").mkdir()
    assert nmem("install", "--no-import", env=fresh_home).returncode == 0
    settings = (home / ".claude" / "settings.json").read_text()
    code, shown = on_terminal(["uninstall"], "n", env=fresh_home)
    assert code == 1 and "Remove nmem's hooks and MCP server from Claude Code? (your memory stays)" in shown
    assert (home / ".claude" / "settings.json").read_text() == settings
    code, shown = on_terminal(["uninstall"], "y", env=fresh_home)
    assert code == 0 and "removed" in shown and "nmem" not in (home / ".claude" / "settings.json").read_text()


def test_what_retention_removed_is_said_in_the_right_number() -> None:
    from nmemd.jobs.retention import Swept

    assert Swept(removed={"read": 1}, steps=1).line().startswith("removed 1 observation (read 1) in 1 step,")
    assert Swept(removed={"read": 2, "fetch": 1}, steps=2).line().startswith("removed 3 observations (read 2")
