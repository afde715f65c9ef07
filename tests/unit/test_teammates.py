"""The SessionStart context's teammates section (issue #36, finding 21): one line per teammate's
session that has something to say, open failures said, no empty line, marked and attributed."""

from __future__ import annotations

import sqlite3
import time

from support.store import stored

from nmemd.recall import context, teammates
from nmemd.team import local

PROJECT = "github.com/acme/api"


def _row(seq: int, author: str, session: str, kind: str, title: str, body: str, age_s: float) -> local.InObservation:
    return local.InObservation(seq, PROJECT, f"{author}-{seq}", 0, author, f"{author}-box", "codex", session, kind,
                               title, body, [], time.time() - age_s)  # fmt: skip


def test_the_section_says_open_failures_and_has_no_empty_lines() -> None:
    db = sqlite3.connect(stored([]), isolation_level=None)
    shared = local.SharedProject(root="/w/api", project_id=PROJECT, team="t", dsn="host=x", member="al")
    local.join(db, shared, 30.0)
    link = local.links(local.shared_projects(db))[0]
    rows = [
        _row(1, "kim", "k1", "read", "Read README.md", "", 300),  # nothing worth a line
        _row(2, "lee", "l1", "command", "$ make deploy", "$ make deploy\nok", 200),
        _row(3, "lee", "l1", "error", "$ ./migrate.sh --prod", "$ ./migrate.sh --prod\nERROR: lock\n\n\nretry", 100),
        _row(4, "lee", "l1", "command", "$ pytest -q", "$ pytest -q\n3 passed", 90),
        _row(5, "max", "m1", "error", "$ pytest -q", "$ pytest -q\n1 failed", 80),
        _row(6, "max", "m1", "command", "$ pytest -q", "$ pytest -q\n4 passed", 70),  # fixed since: not open
    ]
    local.apply_page(db, link, local.Page(rows, [], [], {"observations": 6}), 100, 30.0, time.time())
    lines = teammates.lines(db, "/w/api", time.time())
    assert all(line.strip() and "\n" not in line for line in lines), lines
    assert not any(line.startswith("- kim") for line in lines), lines  # said nothing: no line
    (lee,) = [line for line in lines if line.startswith("- lee")]
    assert "`./migrate.sh --prod` failed (open)" in lee and "`pytest -q` ok" in lee, lee
    (maxs,) = [line for line in lines if line.startswith("- max")]
    assert "failed" not in maxs and "`pytest -q` ok" in maxs, maxs
    text = context.build_context(db, "/w/api", now=time.time())
    assert teammates.HEADING in text and "failed (open)" in text
    db.close()
