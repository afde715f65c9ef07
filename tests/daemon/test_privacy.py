"""Acceptance: planted secrets and <private> text never reach the database or WAL bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok

AWS = "AKIAQ3EGTX7PLM4ZWN2K"
GITHUB = "ghp_" + "R8f3kLq0ZpX2mN7vB4cT9wY6uJ1eH5aS0dGi"
PASSWORD = "hunter2-correct-horse-battery"
BEARER = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ.sflKxwRJSMeKKF2QT4fwpM"
PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
PRIVATE = "my-private-diary-entry-7d1c"
SECRETS = (AWS, GITHUB, PASSWORD, BEARER, PEM_BODY, PRIVATE)


def _events(session: str) -> list[bytes]:
    base = {"session_id": session, "cwd": "/tmp/proj", "transcript_path": "/tmp/t.jsonl"}
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"
    return [
        json.dumps(
            {
                **base,
                "hook_event_name": "UserPromptSubmit",
                "prompt": f"deploy with key {AWS} <private>{PRIVATE}</private> please",
            }
        ).encode(),
        json.dumps(
            {
                **base,
                "hook_event_name": "PostToolUse",
                "tool_name": "Bash",
                "tool_use_id": "toolu_1",
                "tool_input": {
                    "command": f"curl -H 'Authorization: Bearer {BEARER}' "
                    f"https://admin:{PASSWORD}@example.com/api --token={GITHUB}"
                },
                "tool_response": {"stdout": f"password={PASSWORD}\n{pem}", "stderr": "", "interrupted": False},
            }
        ).encode(),
        json.dumps(
            {
                **base,
                "hook_event_name": "PostToolUse",
                "tool_name": "Read",
                "tool_use_id": "toolu_2",
                "tool_input": {"file_path": "/tmp/proj/.env"},
                "tool_response": {
                    "type": "text",
                    "file": {
                        "filePath": "/tmp/proj/.env",
                        "content": f"GITHUB_TOKEN={GITHUB}\nAWS_ACCESS_KEY_ID={AWS}\n",
                        "numLines": 2,
                        "startLine": 1,
                        "totalLines": 2,
                    },
                },
            }
        ).encode(),
    ]


def _raw_bytes(home: Path) -> bytes:
    data = b""
    for path in sorted(home.rglob("*")):
        if path.is_file() and not path.name.endswith(".log"):
            data += path.read_bytes()
    return data


def _assert_clean(home: Path) -> None:
    raw = _raw_bytes(home)
    for secret in SECRETS:
        assert secret.encode() not in raw, secret[:12]


@pytest.mark.reliability(scenario=10)
def test_secrets_are_redacted_on_the_socket_path(daemon: Daemon) -> None:
    daemon.start()
    for body in _events("sock"):
        assert run_send(body).returncode == 0
    _assert_clean(daemon.home)  # while running: database and WAL as they are now
    daemon.stop()
    _assert_clean(daemon.home)
    assert db_rows(daemon.db, "SELECT count(*) FROM observations") == [(3,)]
    rows = db_rows(daemon.db, "SELECT title || content || coalesce(command, '') FROM observations")
    text = " ".join(str(r) for r in rows)
    assert "[REDACTED" in text and "deploy with key" in text
    integrity_ok(daemon.db)


@pytest.mark.reliability(scenario=10)
def test_secrets_are_gone_after_the_fallback_path_drains(daemon: Daemon) -> None:
    env = {"NMEM_AUTOSTART": "0"}
    for body in _events("fallback"):
        assert run_send(body, env).returncode == 0
    assert db_rows(daemon.db, "SELECT count(*) FROM inbox") == [(3,)]  # raw, until the daemon drains it
    daemon.start()
    daemon.stop()  # the drain at start runs before the stop is handled
    assert db_rows(daemon.db, "SELECT count(*) FROM inbox") == [(0,)]
    assert db_rows(daemon.db, "SELECT count(*) FROM observations") == [(3,)]
    _assert_clean(daemon.home)


def test_id_like_fields_hold_no_secret_and_a_purge_leaves_no_key(daemon: Daemon, tmp_path: Path) -> None:
    """Issue #28, finding 12: a session's branch and an event's natural key (a transcript line's
    uuid, Copilot's messageId: whatever the sender wrote) were stored as they came, and a purge
    kept the keys of what it removed. Both redacted; a purged row's key kept only as a digest, which
    still keeps a re-import from bringing it back."""
    import subprocess

    from support.env import BIN

    def line(n: int, prompt_id: str, text: str) -> str:
        return json.dumps({
            "type": "user", "sessionId": "sess-branch", "uuid": f"line-{n}", "promptId": prompt_id,
            "gitBranch": f"feature/{GITHUB}", "cwd": "/tmp/proj", "timestamp": f"2026-11-20T10:0{n}:00Z",
            "message": {"role": "user", "content": text},
        })  # fmt: skip

    transcript = tmp_path / "sess-branch.jsonl"
    transcript.write_text(
        "".join(
            line(n, pid, text) + "\n"
            for n, pid, text in (
                (1, f"p-{GITHUB}", "fix the okapi exporter"),
                (2, "p-plain-7731", "warm the wallaby cache"),
            )
        )
    )

    def imported() -> dict[str, int]:
        done = subprocess.run([str(BIN / "nmem"), "import-transcripts", "--json", str(transcript)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]

    daemon.start()
    assert imported()["events_new"] == 2
    assert imported()["events_new"] == 0  # a key kept as its digest is still recognised
    (branch,) = db_rows(daemon.db, "SELECT git_branch FROM sessions WHERE session_id = 'sess-branch'")[0]
    assert str(branch).startswith("feature/") and "[REDACTED" in str(branch)
    keys = [str(r[0]) for r in db_rows(daemon.db, "SELECT natural_key FROM events WHERE natural_key IS NOT NULL")]
    assert len(keys) == 2 and "prompt:sess-branch:p-plain-7731" in keys, keys
    daemon.stop()
    _assert_clean(daemon.home)
    daemon.start()
    done = subprocess.run([str(BIN / "nmem"), "purge", "--all-projects", "--query", "wallaby", "--yes", "--json"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and json.loads(done.stdout)["observations"] == 1, done.stdout + done.stderr
    keys = [str(r[0]) for r in db_rows(daemon.db, "SELECT natural_key FROM events WHERE natural_key IS NOT NULL")]
    assert len(keys) == 2 and not any("p-plain-7731" in k for k in keys), keys
    assert imported()["events_new"] == 0  # the purged prompt does not come back
    assert db_rows(daemon.db, "SELECT count(*) FROM observations WHERE content LIKE '%wallaby%'") == [(0,)]
