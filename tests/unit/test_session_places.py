"""A session is one piece of work (issue #39, `nmemd.store.places`), in process: a Claude Code transcript
whose agent `cd`s into a subfolder and into a sibling checkout, read by the importer's own reader
(`TranscriptReader`), stored by the real extractor and store, then searched on a read-only connection.
The folders are not on this machine, as for imported history and a teammate's paths. The same through
hooks, the real hook client and a daemon: tests/daemon/test_session_places_hooks.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.store import stored

from nmemd.agents.claude_code.history import TranscriptReader
from nmemd.recall.context import build_context
from nmemd.recall.queries import Filters
from nmemd.recall.search import search
from nmemd.store import places

LAUNCH = "/nonexistent-nmem/orchard"  # where the session started: its transcript's folder is named after it
SUB = LAUNCH + "/api"
SIBLING = "/nonexistent-nmem/pear"  # another checkout beside it
SID = "5e55a0c1-0000-4000-8000-00000000c0de"
NOW = 1772359200.0  # 2026-03-01, the transcript's day


def _line(n: int, cwd: str, kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    message = {"role": kind, "content": content}
    return {"type": kind, "uuid": f"u{n}", "sessionId": SID, "cwd": cwd, "isSidechain": False,
            "timestamp": f"2026-03-01T10:00:{n:02d}Z", "message": message, **extra}  # fmt: skip


def _bash(n: int, cwd: str, command: str, output: str) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": command}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": output}
    call = _line(n, cwd, "assistant", [use]) | {"message": {"id": f"m{n}", "role": "assistant", "content": [use]}}
    return [call, _line(n + 1, cwd, "user", [result], toolUseResult={"stdout": output, "stderr": ""})]


def _transcript(tmp: Path) -> Path:
    """The session starts in LAUNCH, its first prompt comes from SUB (it `cd`ed before), then it works in
    SUB and in SIBLING."""
    folder = tmp / "projects" / LAUNCH.replace("/", "-").replace(".", "-")
    folder.mkdir(parents=True)
    lines = [
        {
            "type": "system",
            "subtype": "init",
            "uuid": "u0",
            "sessionId": SID,
            "cwd": LAUNCH,
            "timestamp": "2026-03-01T10:00:00Z",
            "content": "session started",
        },  # fmt: skip
        _line(1, SUB, "user", "build the fruit stand and run its checks"),
        *_bash(2, SUB, "make wombat", "wombat target built"),
        *_bash(4, SIBLING, "make quokka", "quokka target built in the pear checkout"),
    ]
    path = folder / f"{SID}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _payloads(path: Path) -> list[dict[str, Any]]:
    reader = TranscriptReader.for_file(str(path))
    records = []
    offset = 0
    for raw in path.read_bytes().splitlines(keepends=True):
        records += reader.feed(json.loads(raw), offset, len(raw))
        offset += len(raw)
    return [r.payload for r in records + reader.finish()]


@pytest.fixture
def db(tmp_path: Path) -> str:
    other = {"hook_event_name": "UserPromptSubmit", "session_id": "sess-pear-own", "cwd": SIBLING,
             "prompt": "a quokka of the pear checkout's own session"}  # fmt: skip
    filler = [{"hook_event_name": "UserPromptSubmit", "session_id": "sess-filler", "cwd": "/nonexistent-nmem/x",
               "prompt": f"unrelated chore {n}"} for n in range(3)]  # fmt: skip
    return stored(filler + [other, *_payloads(_transcript(tmp_path))])


def _search(db: str, text: str, project: str) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [f"{h.session_id} {h.project} {h.title}" for h in search(conn, text, Filters(project=project))]
    finally:
        conn.close()


def test_an_imported_session_belongs_to_the_folder_it_started_in(db: str) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT project FROM sessions WHERE session_id = ?", (SID,)).fetchone() == (LAUNCH,)
        sql = "SELECT command, project FROM observations WHERE session_id = ? AND command IS NOT NULL"
        rows = dict(conn.execute(sql, (SID,)).fetchall())
    finally:
        conn.close()
    assert rows == {"make wombat": SUB, "make quokka": SIBLING}  # each row keeps its own folder


def test_what_it_did_in_a_subfolder_and_a_sibling_checkout_is_found_from_where_it_started(db: str) -> None:
    assert any(SUB in hit and "wombat" in hit for hit in _search(db, "wombat", LAUNCH))
    from_launch = _search(db, "quokka", LAUNCH)
    assert [hit for hit in from_launch if SID in hit and "make quokka" in hit]
    assert not [hit for hit in from_launch if "sess-pear-own" in hit]  # not the sibling's own sessions


def test_the_sibling_checkout_finds_what_was_done_there(db: str) -> None:
    from_sibling = _search(db, "quokka", SIBLING)
    assert {hit.split()[0] for hit in from_sibling} == {SID, "sess-pear-own"}
    assert not _search(db, "wombat", SIBLING)


@pytest.mark.parametrize(
    ("launch", "project"),
    [
        (LAUNCH, LAUNCH),
        (LAUNCH, SUB),
        (LAUNCH, SIBLING),
        (LAUNCH, LAUNCH + "-old"),
        (LAUNCH, LAUNCH + "0"),
        (LAUNCH + "/", SUB),
        (LAUNCH + "/", LAUNCH),
        (LAUNCH, "/nonexistent-nmem"),
        ("/", "/etc"),
        (LAUNCH, LAUNCH + "/é/ü"),
        (LAUNCH + "/é", LAUNCH + "/éa"),
        (LAUNCH, LAUNCH + "\u00ff"),
    ],
)
def test_a_batch_tells_a_place_as_the_migration_does(launch: str, project: str) -> None:
    """A batch lists its rows' places in Python (`places.note`, the session's project from its upsert):
    the same test as the SQL every row stored before it went through (`places.FILL`, migration m013)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE sessions (session_id TEXT, project TEXT)")
        conn.execute("CREATE TABLE observations (session_id TEXT, project TEXT, author TEXT)")
        conn.execute("CREATE TABLE session_places (launch TEXT, project TEXT, session_id TEXT)")
        conn.execute("INSERT INTO sessions VALUES ('s', ?)", (launch,))
        conn.execute("INSERT INTO observations VALUES ('s', ?, NULL)", (project,))
        conn.execute(places.FILL.format(rows="1"))
        by_sql = conn.execute("SELECT count(*) FROM session_places").fetchone()[0] == 1
    finally:
        conn.close()
    assert places.outside(launch, project) == by_sql


def test_the_context_of_where_it_started_holds_what_it_did_in_the_sibling(db: str) -> None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        launch = build_context(conn, LAUNCH, now=NOW)
        sibling = build_context(conn, SIBLING, now=NOW)
    finally:
        conn.close()
    assert "make quokka" in launch and "make wombat" in launch  # the sibling's command and the subfolder's
    assert "make quokka" not in sibling  # not a session of the sibling's
