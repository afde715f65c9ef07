"""Purge, forget, pin: through the real hook client, daemon and CLI, checked on the raw database bytes.

The planted token is one the redactor leaves alone, so it really is stored
before the purge; afterwards neither it nor its FTS terms may appear in the
database file, its WAL or its shared-memory file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.helpers import nmem, wait_until

# Its parts are letters and digits no id, hex digest or number on disk holds by chance ("7731" did,
# once in a fresh clone's run).
TOKEN = "zebra-quartz-q7731x-nebula"
TERMS = (TOKEN.encode(), b"quartz", b"nebula", b"q7731x")  # the FTS index stores the parts, not the token
SECRET_SESSION = "sess-secret"
OTHER_SESSION = "sess-other"
CWD = "/tmp/nmem-test-project"
TABLES = ("observations", "events", "sessions", "prompts", "inbox")


def event(hook: str, session: str, **fields: Any) -> bytes:
    base = {"session_id": session, "transcript_path": f"{CWD}/.claude/{session}.jsonl", "cwd": CWD}
    return json.dumps({**base, "hook_event_name": hook, **fields}).encode()


def send(body: bytes) -> None:
    done = run_send(body)
    assert done.returncode == 0, done.stderr


def plant(daemon: Daemon) -> None:
    """A secret in a prompt, a tool output and the last assistant message; unrelated work beside it."""
    send(event("UserPromptSubmit", SECRET_SESSION, prompt="the deploy key is " + TOKEN))
    send(event("UserPromptSubmit", SECRET_SESSION, prompt="now tidy the flamingo module"))
    send(
        event(
            "PostToolUse",
            SECRET_SESSION,
            tool_name="Bash",
            tool_use_id="tu-1",
            tool_input={"command": "cat .env.local"},
            tool_response={"stdout": f"DEPLOY={TOKEN}\n", "stderr": "", "interrupted": False},
        )
    )
    send(event("Stop", SECRET_SESSION, last_assistant_message=f"I used {TOKEN} to deploy", stop_hook_active=False))
    send(event("UserPromptSubmit", OTHER_SESSION, prompt="explain the harmless giraffe parser"))
    # the Stop summary is written after the reply: wait for it so it cannot land after the purge
    wait_until(
        lambda: db_rows(daemon.db, "SELECT summary FROM sessions WHERE session_id = ?", (SECRET_SESSION,))[0][0],
        message="the Stop summary",
    )


def raw_bytes(db: Path) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-shm"):
        path = Path(str(db) + suffix)
        if path.exists():
            data += path.read_bytes()
    return data


def row_counts(db: Path) -> dict[str, int]:
    return {t: int(db_rows(db, f"SELECT count(*) FROM {t}")[0][0]) for t in TABLES}  # type: ignore[call-overload]


def ids_matching(db: Path, text: str) -> list[int]:
    rows = db_rows(db, "SELECT id FROM observations WHERE content LIKE ? OR title LIKE ?", (f"%{text}%", f"%{text}%"))
    return [int(r[0]) for r in rows]  # type: ignore[call-overload]


def assert_purged(db: Path) -> None:
    data = raw_bytes(db)
    leaked = [term for term in TERMS if term in data]
    assert not leaked, f"{leaked} still on disk"
    assert ids_matching(db, "flamingo")  # the secret session's other prompt stays
    assert ids_matching(db, "giraffe")


def test_purge_by_query_leaves_no_bytes_and_keeps_the_rest(daemon: Daemon) -> None:
    daemon.start()
    plant(daemon)
    assert TOKEN.encode() in raw_bytes(daemon.db), "the token must really be stored before the purge"

    before = row_counts(daemon.db)
    dry = nmem("purge", "--query", TOKEN, "--all-projects", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    counts = json.loads(dry.stdout)
    assert counts["observations"] == 3 and counts["dry_run"] is True  # prompt, Bash output, Stop
    assert counts["sessions"] == 0  # the secret session keeps its other prompt
    assert row_counts(daemon.db) == before

    unconfirmed = nmem("purge", "--query", TOKEN, "--all-projects", stdin="")
    assert unconfirmed.returncode == 1 and row_counts(daemon.db) == before

    done = nmem("purge", "--query", TOKEN, "--all-projects", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["observations"] == 3

    assert_purged(daemon.db)
    session = db_rows(
        daemon.db, "SELECT last_assistant_message, summary FROM sessions WHERE session_id = ?", (SECRET_SESSION,)
    )[0]
    assert session[0] is None and TOKEN not in str(session[1])
    assert row_counts(daemon.db)["events"] == before["events"]  # the ledger keeps its content-free rows
    found = nmem("search", "giraffe", "--all", "--json")
    assert found.returncode == 0 and "giraffe" in found.stdout
    gone = nmem("search", TOKEN, "--all", "--json")
    assert gone.returncode == 0 and gone.stdout.strip() == ""
    integrity_ok(daemon.db)

    # a replayed event is recognised by the ledger, not stored again
    send(event("UserPromptSubmit", OTHER_SESSION, prompt="explain the harmless giraffe parser"))
    assert TOKEN.encode() not in raw_bytes(daemon.db)


def test_forget_pin_and_bad_filters(daemon: Daemon) -> None:
    daemon.start()
    plant(daemon)
    giraffe, flamingo = ids_matching(daemon.db, "giraffe")[0], ids_matching(daemon.db, "flamingo")[0]

    assert nmem("pin", str(giraffe)).returncode == 0
    assert db_rows(daemon.db, "SELECT pinned FROM observations WHERE id = ?", (giraffe,)) == [(1,)]
    assert nmem("pin", str(giraffe), "--unpin").returncode == 0
    assert db_rows(daemon.db, "SELECT pinned FROM observations WHERE id = ?", (giraffe,)) == [(0,)]

    before = row_counts(daemon.db)
    for args, code in (
        ((), 2),
        (("--all-projects",), 2),
        (("--type", "bogus", "--all-projects"), 2),
        (("--since", "not-a-date", "--all-projects"), 2),
        (("--id", "0"), 2),
        (("--query", "***"), 2),
    ):
        bad = nmem("purge", "--yes", *args)
        assert bad.returncode == code, (args, bad.returncode, bad.stderr)
        lines = bad.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in bad.stderr, (args, lines)
    assert nmem("pin", "0").returncode == 2
    assert nmem("pin", "999999").returncode == 1
    assert row_counts(daemon.db) == before

    pinned = nmem("pin", str(flamingo))
    assert pinned.returncode == 0
    forgot = nmem("forget", str(flamingo), "--json")  # forget removes pinned observations too
    assert forgot.returncode == 0, forgot.stderr
    assert json.loads(forgot.stdout)["pinned"] == 1
    assert ids_matching(daemon.db, "flamingo") == [] and ids_matching(daemon.db, "giraffe") == [giraffe]
    assert b"flamingo" not in raw_bytes(daemon.db)
    assert nmem("forget", str(flamingo)).returncode == 1  # already gone: said, not silent


def test_purge_without_a_daemon(daemon: Daemon) -> None:
    daemon.start()
    plant(daemon)
    assert daemon.stop() == 0
    giraffe = ids_matching(daemon.db, "giraffe")[0]

    done = nmem("purge", "--query", TOKEN, "--all-projects", "--yes")
    assert done.returncode == 0, done.stderr
    assert "3 observations" in done.stdout
    assert_purged(daemon.db)
    assert nmem("pin", str(giraffe)).returncode == 0
    assert db_rows(daemon.db, "SELECT pinned FROM observations WHERE id = ?", (giraffe,)) == [(1,)]
    emptied = nmem("purge", "--session", OTHER_SESSION, "--yes", "--json")
    assert emptied.returncode == 0, emptied.stderr
    assert json.loads(emptied.stdout)["sessions"] == 1
    assert db_rows(daemon.db, "SELECT count(*) FROM sessions WHERE session_id = ?", (OTHER_SESSION,)) == [(0,)]
    assert b"giraffe" not in raw_bytes(daemon.db)
    integrity_ok(daemon.db)
