"""Recall end to end: the transcripts and hook payloads of tests/data replayed as hooks through `nmem-send`
into a real daemon, then a SessionStart through the same client (the rules of `build_context` itself:
tests/unit/test_context.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.fixtures import HEAVY, hook_payloads
from support.helpers import claude_event, send_frame, wait_until
from support.replay import transcript_payloads

from nmem_client import protocol
from nmemd.recall.context import CLOSE, HARD_CAP, OPEN
from nmemd.store import fts

ORCHARD = "/home/dev/projects/orchard"  # the project of the transcripts
LIGHTHOUSE = "/Users/dev/work/lighthouse"  # the project of the hook payloads


def _hook_fixtures() -> list[dict[str, Any]]:
    return [payload for _, payload in hook_payloads()]


def _send(payload: dict[str, Any]) -> bytes:
    done = run_send(json.dumps(payload).encode())
    assert done.returncode == 0 and done.stderr == b""
    return done.stdout


def _context_of(stdout: bytes, event: str = "SessionStart") -> str:
    reply = json.loads(stdout)
    assert reply["hookSpecificOutput"]["hookEventName"] == event
    text: str = reply["hookSpecificOutput"]["additionalContext"]
    assert text.startswith(OPEN) and text.endswith(CLOSE) and len(text) <= HARD_CAP
    return text


def _start(cwd: str, session_id: str, source: str = "startup") -> bytes:
    return _send(claude_event("SessionStart", session_id, cwd, source=source, model="claude-opus-4-6"))


@pytest.mark.timeout(90)
def test_replayed_work_comes_back_at_the_next_session_start(daemon: Daemon) -> None:
    daemon.start()
    for payload in transcript_payloads(HEAVY) + _hook_fixtures():
        _send(payload)

    orchard = _context_of(_start(ORCHARD, "new-orchard-session"))
    for fact in ("start the dev server in background", "npm run dev", "web/src/panel.ts"):
        assert fact in orchard, fact
    lighthouse = _context_of(_start(LIGHTHOUSE, "new-lighthouse-session"))
    for fact in ("NOTES.md", "templates/hooks.json.template", "stat -L", "Review the lint hooks",
                 "Shorten NOTES.md"):  # fmt: skip
        assert fact in lighthouse, fact
    assert "[x]" not in lighthouse  # completed todo items are not "open tasks"
    # Another project's data never leaks in.
    for fact in ("dev server", "panel.ts", "orchard"):
        assert fact not in lighthouse.lower(), fact
    for fact in ("NOTES.md", "lighthouse", "hooks.json"):
        assert fact not in orchard, fact
    # A project with no history: nothing on stdout at all.
    assert _start("/tmp/nmem-no-such-project", "new-empty-session") == b""


@pytest.mark.timeout(60)
def test_session_end_summary_is_shown_to_the_next_session(daemon: Daemon) -> None:
    daemon.start()
    payloads = transcript_payloads(HEAVY)
    sid = payloads[0]["session_id"]
    for payload in payloads:
        _send(payload)
    _send(claude_event("Stop", sid, ORCHARD, stop_hook_active=False,
                        last_assistant_message="The dev server is up on 5173; the fix is in panel.ts."))  # fmt: skip
    _send(claude_event("SessionEnd", sid, ORCHARD, reason="clear"))
    summary = wait_until(
        lambda: (db_rows(daemon.db, "SELECT summary FROM sessions WHERE session_id = ?", (sid,)) or [(None,)])[0][0],
        10, "the session summary to be stored",
    )  # fmt: skip
    assert summary.startswith('Asked: "start the dev server in background" (#')
    assert "\nLast run: `npm run dev` passed (#" in summary and "\nConcluded: The dev server is up" in summary

    text = _context_of(_start(ORCHARD, "after-clear", source="clear"))
    assert f"## Latest session: just now, session {sid[:8]} (ended: clear" in text
    for line in summary.splitlines():
        if line.startswith(("Asked:", "Concluded:", "Last run:")):
            assert "- " + line in text.splitlines(), line


def test_injected_context_sent_back_in_a_prompt_is_not_stored(daemon: Daemon) -> None:
    daemon.start()
    for payload in transcript_payloads(HEAVY):
        _send(payload)
    text = _context_of(_start(ORCHARD, "echo-session"))
    prompt = f"{text}\nplease restart the server"
    assert _send({**claude_event("UserPromptSubmit", "echo-session", ORCHARD), "prompt": prompt}) == b""
    stored = wait_until(
        lambda: db_rows(daemon.db, "SELECT title, content FROM observations WHERE session_id = 'echo-session'"
                        " AND type = 'prompt'"), 10, "the prompt to be stored")  # fmt: skip
    assert stored == [("please restart the server", "please restart the server")]
    for marker in ("nmem-context", "Latest session", "npm run dev"):
        relaxed = fts.relax(f'"{marker}"')  # the index holds no positions (m008): none of the rows holds the words
        assert db_rows(daemon.db, "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH ?"
                       " AND rowid IN (SELECT id FROM observations WHERE session_id = 'echo-session')",
                       (relaxed.match if relaxed else f'"{marker}"',)) == [(0,)], marker  # fmt: skip


def test_context_rpc_and_prompt_recall(daemon: Daemon) -> None:
    daemon.env["NMEM_PROMPT_RECALL"] = "true"
    daemon.start()
    for payload in transcript_payloads(HEAVY):
        _send(payload)
    body = json.dumps({"method": "context", "params": {"project": ORCHARD}}).encode()
    status, reply = send_frame(daemon.socket, protocol.KIND_RPC, protocol.NO_EVENT_ID, body)
    assert status == b"OK"
    result = json.loads(reply)
    assert result["project"] == ORCHARD and "npm run dev" in result["context"]
    status, reply = send_frame(daemon.socket, protocol.KIND_RPC, protocol.NO_EVENT_ID,
                               json.dumps({"method": "context", "params": {}}).encode())  # fmt: skip
    assert status == b"ERR" and reply.startswith(b"QueryError "), reply  # the daemon's error, by its kind

    ask = {**claude_event("UserPromptSubmit", "later", ORCHARD), "prompt": "is the scrollkit.js scroll fixed yet?"}
    recall = _context_of(_send(ask), "UserPromptSubmit")
    assert "scrollkit.js" in recall and len(recall) <= 1500
    unrelated = {**claude_event("UserPromptSubmit", "later", ORCHARD), "prompt": "what is the weather today"}
    assert _send(unrelated) == b""
