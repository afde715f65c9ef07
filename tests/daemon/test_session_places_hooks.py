"""A session is one piece of work (issue #39): hooks through the real hook client into a real daemon, from a
session started in a git checkout whose agent `cd`s into a subfolder and into a sibling repository; then
`nmem search` from the folder it started in, and from the sibling (in process: tests/unit/test_session_places.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon, run_send
from support.helpers import claude_bash, claude_event, new_id, nmem


def _send(payload: dict[str, Any]) -> None:
    done = run_send(json.dumps(payload).encode())
    assert done.returncode == 0 and done.stderr == b""


def _found(word: str, project: Path) -> list[dict[str, Any]]:
    done = nmem("search", word, "--project", str(project), "--json")
    assert done.returncode == 0, done.stderr
    return [hit for line in done.stdout.splitlines() if line.strip() for hit in _hits(json.loads(line))]


def _hits(value: Any) -> list[dict[str, Any]]:
    return value if isinstance(value, list) else [value]


@pytest.mark.timeout(60)
def test_a_session_that_cds_into_a_subfolder_and_a_sibling_repository_is_found_from_its_start(
    daemon: Daemon, tmp_path: Path
) -> None:
    orchard, pear = tmp_path / "orchard", tmp_path / "pear"
    for repo in (orchard, pear):
        (repo / ".git").mkdir(parents=True)
    (orchard / "api").mkdir()
    session, other = new_id(), new_id()
    daemon.start()
    _send(claude_event("SessionStart", session, str(orchard), source="startup"))
    _send(claude_event("UserPromptSubmit", session, str(orchard), prompt="build the fruit stand"))
    _send(claude_bash(session, str(orchard / "api"), "make wombat", "wombat target built"))
    _send(claude_bash(session, str(pear), "make quokka", "quokka target built in pear"))
    _send(claude_bash(other, str(pear), "make quokka again", "quokka of pear's own session"))

    wombat = _found("wombat", orchard)
    assert [h for h in wombat if h["session_id"] == session and h["project"] == str(orchard)]  # the git root
    quokka = _found("quokka", orchard)
    assert {h["session_id"] for h in quokka} == {session}  # not the sibling's own session
    assert {h["project"] for h in quokka} == {str(pear)}  # the row keeps where it was done
    assert {h["session_id"] for h in _found("quokka", pear)} == {session, other}
