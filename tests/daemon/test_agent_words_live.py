"""The agent's own words with a real daemon and the real hook client (issue #39): what Claude Code says
between its tool calls is read by the daemon from the transcript the hooks name, as the file grows, and
stored once whether it is seen live, imported, or both in either order; the hook client sends only what
it always sent. A file cut short, rewritten or missing is read from its start or left alone."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.fixtures import DATA, SUBAGENT, WORDS
from support.helpers import count, wait_until
from support.payloads import copilot, gemini
from support.transcript_import import nmem_import

SID = "5b1e0c7a-2f44-4d8e-9a61-0c3d7e9f4a12"
CWD = "/home/dev/projects/ledger"
SAID = "type IN ('assistant', 'thinking')"


def _lines() -> list[bytes]:
    return WORDS.read_bytes().splitlines(keepends=True)


def _hook(transcript: Path, event: str, **fields: Any) -> None:
    payload = {"session_id": SID, "transcript_path": str(transcript), "cwd": CWD, "hook_event_name": event, **fields}
    done = run_send(json.dumps(payload).encode())
    assert done.returncode == 0 and done.stderr == b""


def _live(transcript: Path) -> None:
    """The turn as Claude Code runs it: lines written, then the hook of what they finished; a line's first half
    is on disk when a hook fires (the daemon must wait for the rest)."""
    lines = _lines()
    edit = json.loads(lines[6])["message"]["content"][0]

    def write(*parts: bytes) -> None:
        with transcript.open("ab") as f:
            f.write(b"".join(parts))

    write(lines[0])
    _hook(transcript, "UserPromptSubmit", prompt=json.loads(lines[0])["message"]["content"], prompt_id="p-export-1")
    half = len(lines[5]) // 2
    write(*lines[1:5], lines[5][:half])
    _hook(transcript, "PostToolUseFailure", tool_name="Bash", tool_use_id="toolu_w1",
          tool_input={"command": "mix test test/orders/export_test.exs"}, error="1 test, 1 failure")  # fmt: skip
    write(lines[5][half:], *lines[6:8])
    _hook(transcript, "PostToolUse", tool_name="Edit", tool_use_id="toolu_w2", tool_input=edit["input"],
          tool_response={"filePath": edit["input"]["file_path"]})  # fmt: skip
    write(lines[8])
    final = json.loads(lines[8])["message"]["content"][0]["text"]
    _hook(transcript, "Stop", stop_hook_active=False, last_assistant_message=final)
    write(*lines[9:])


def _said(db: Path) -> list[tuple[Any, ...]]:
    return db_rows(db, f"SELECT type, title, session_id, hook_event FROM observations WHERE {SAID} ORDER BY ts")


@pytest.mark.parametrize("order", ["live", "live-then-import", "import-then-live"])
def test_the_agents_words_between_tool_calls_are_stored_once(daemon: Daemon, tmp_path: Path, order: str) -> None:
    transcript = tmp_path / f"{SID}.jsonl"
    daemon.start()
    if order == "import-then-live":
        shutil.copy(WORDS, transcript)
        code, summary, _ = nmem_import(str(transcript))
        assert code == 0 and summary["said"] == 3 and summary["events_new"] == 8
        transcript.unlink()
    _live(transcript)
    if order == "import-then-live":
        _hook(transcript, "SessionEnd", reason="other")  # one more read, past every line
    wait_until(lambda: count(daemon.db, "observations", SAID) >= 3, message="the agent's words were not read")
    if order == "live-then-import":
        code, summary, _ = nmem_import(str(transcript))
        assert code == 0 and summary["said"] == 3
        assert summary["events_new"] == 1  # only `/compact <args>`: no hook sends it
        compact = "/compact keep the orders export fix and the SQLite table rebuild"
        assert db_rows(daemon.db, "SELECT type FROM observations WHERE title = ?", (compact,)) == [("prompt",)]
    assert count(daemon.db, "inbox") == 0
    said = _said(daemon.db)
    assert [(t, s, e) for t, _, s, e in said] == [
        ("thinking", SID, "AssistantThinking"),
        ("assistant", SID, "AssistantText"),
        ("assistant", SID, "AssistantText"),
    ]
    assert said[1][1].startswith("It fails because `export/2` returns the bare list")
    assert count(daemon.db, "events", "natural_key LIKE ?", (f"said:{SID}:%",)) == 3
    # At their lines' own times, so among the tool calls they sit between (live calls: at their hook's time).
    times = [dt.datetime.fromisoformat(json.loads(_lines()[n])["timestamp"]).timestamp() for n in (1, 2, 5)]
    assert [r[0] for r in db_rows(daemon.db, f"SELECT ts FROM observations WHERE {SAID} ORDER BY ts")] == times
    if order == "import-then-live":
        assert [r[0] for r in db_rows(daemon.db, "SELECT type FROM observations WHERE session_id = ?"
                                                 " AND type != 'session' ORDER BY ts, id", (SID,))] == [
            "prompt", "thinking", "assistant", "error", "assistant", "edit", "stop", "prompt",
        ]  # fmt: skip
    assert count(daemon.db, "observations", "type = 'stop'") == 1
    daemon.stop()
    integrity_ok(daemon.db)


def test_a_transcript_cut_short_or_rewritten_is_read_from_its_start_and_a_missing_one_is_left(
    daemon: Daemon, tmp_path: Path
) -> None:
    transcript = tmp_path / f"{SID}.jsonl"
    daemon.start()
    _hook(tmp_path / "missing.jsonl", "PostToolUse", tool_name="Bash", tool_use_id="toolu_m",
          tool_input={"command": "true"}, tool_response={"stdout": ""})  # fmt: skip
    _live(transcript)
    wait_until(lambda: count(daemon.db, "observations", SAID) == 3)
    # Rewritten shorter, with one new passage: read again from its start, each passage still once.
    lines = _lines()
    moved = json.loads(lines[5])
    moved["uuid"], moved["message"]["content"][0]["text"] = "9c0d9999-aaaa", "The default port is 1100, not 1010."
    transcript.write_bytes(b"".join(lines[:5]) + json.dumps(moved).encode() + b"\n" + lines[6])
    _hook(transcript, "PostToolUse", tool_name="Bash", tool_use_id="toolu_r", tool_input={"command": "true"},
          tool_response={"stdout": ""})  # fmt: skip
    wait_until(lambda: count(daemon.db, "observations", SAID) == 4)
    assert count(daemon.db, "observations", "title = ?", ("The default port is 1100, not 1010.",)) == 1
    assert count(daemon.db, "events", "natural_key LIKE ?", (f"said:{SID}:%",)) == 4
    assert daemon.proc is not None and daemon.proc.poll() is None
    daemon.stop()
    integrity_ok(daemon.db)


# --- Codex: its rollout file, named by its hooks --------------------------------------------------------------

CODEX_ROLLOUT = next((DATA / "codex").glob("rollout-2026-11-26T09-00-00-*.jsonl"))


def _codex_live(rollout: Path) -> None:
    """The Codex turn of tests/data/codex/rollout-2026-11-26*: its lines written as Codex writes them, each
    hook sent by the real hook client as `nmem install --agent codex` runs it."""
    lines = CODEX_ROLLOUT.read_bytes().splitlines(keepends=True)
    items = [json.loads(raw) for raw in lines]
    sid, turn = items[0]["payload"]["id"], items[1]["payload"]["turn_id"]
    base = {"session_id": sid, "transcript_path": str(rollout), "cwd": items[0]["payload"]["cwd"], "turn_id": turn}

    written = [0]

    def hook(upto: int, event: str, **fields: Any) -> None:
        with rollout.open("ab") as f:
            f.write(b"".join(lines[written[0] : upto]))
        written[0] = upto
        done = run_send(json.dumps({**base, "hook_event_name": event, **fields}).encode(), args=("--agent", "codex"))
        assert done.returncode == 0 and done.stderr == b""

    hook(3, "UserPromptSubmit", prompt=items[2]["payload"]["content"][0]["text"])
    hook(7, "PostToolUse", tool_name="apply_patch", tool_use_id="call_p1",
         tool_input={"command": items[5]["payload"]["input"]}, tool_response=items[6]["payload"]["output"])  # fmt: skip
    hook(10, "PostToolUse", tool_name="exec", tool_use_id="call_e1", tool_input={"input": items[8]["payload"]["input"]},
         tool_response=items[9]["payload"]["output"])  # fmt: skip
    hook(12, "Stop", stop_hook_active=False, last_assistant_message=items[11]["payload"]["last_agent_message"])


@pytest.mark.parametrize("order", ["live-then-import", "import-then-live"])
def test_codex_words_and_faults_are_stored_once_live_and_imported(daemon: Daemon, tmp_path: Path, order: str) -> None:
    rollout = tmp_path / CODEX_ROLLOUT.name
    daemon.start()
    if order == "import-then-live":
        shutil.copy(CODEX_ROLLOUT, rollout)
        code, summary, _ = nmem_import(str(rollout))
        assert code == 0 and summary["said"] == 3 and summary["events_new"] == 7, summary
        rollout.unlink()
    _codex_live(rollout)
    wait_until(lambda: count(daemon.db, "observations", SAID) >= 3, message="Codex's words were not read")
    if order == "live-then-import":
        code, summary, _ = nmem_import(str(rollout))
        assert code == 0 and summary["said"] == 3 and summary["events_new"] == 0, summary
    assert [t for t, *_ in _said(daemon.db)] == ["thinking", "assistant", "assistant"]
    assert count(daemon.db, "events", "natural_key LIKE 'said:%'") == 3
    failed = db_rows(daemon.db, "SELECT type, title FROM observations WHERE tool_name = 'apply_patch'")
    assert len(failed) == 1 and failed[0][0] == "error"
    assert str(failed[0][1]).startswith("apply_patch failed: verification failed: Failed to find expected lines")
    (command,) = db_rows(daemon.db, "SELECT command FROM observations WHERE tool_name = 'exec'")
    assert str(command[0]).endswith("two rows per refund id")
    assert count(daemon.db, "observations", "type = 'stop'") == 1 and count(daemon.db, "inbox") == 0
    daemon.stop()
    integrity_ok(daemon.db)


# --- Cline's VS Code extension: its tasks imported ------------------------------------------------------------


def test_a_cline_extension_task_is_imported_once(daemon: Daemon, tmp_path: Path) -> None:
    storage = tmp_path / "globalStorage" / "saoudrizwan.claude-dev"
    shutil.copytree(DATA / "cline" / "extension" / "tasks", storage / "tasks")
    daemon.start()
    code, summary, _ = nmem_import(str(storage))
    assert code == 0 and summary["files"] == 2 and summary["bad_files"] == [], summary
    assert (summary["prompts"], summary["said"], summary["replies"]) == (2, 5, 2), summary
    again = nmem_import(str(storage))[1]
    assert again["events_new"] == 0
    rows = db_rows(daemon.db, "SELECT type, title, agent, session_id FROM observations WHERE session_id = ?"
                              " ORDER BY ts, id", ("1773478931000",))  # fmt: skip
    assert [r[0] for r in rows] == ["prompt", "thinking", "assistant", "read", "assistant", "edit", "command", "stop"]
    assert {r[2] for r in rows} == {"cline"}
    assert db_rows(daemon.db, "SELECT cwd FROM sessions WHERE session_id = '1773478931000'") == [
        ("/home/dev/projects/basket",)
    ]
    daemon.stop()
    integrity_ok(daemon.db)


# --- the Gemini CLI: its session file, named by its hooks ------------------------------------------------------


def test_gemini_words_are_read_live_and_the_import_adds_nothing(daemon: Daemon, tmp_path: Path) -> None:
    (tmp_path / "work" / "chats").mkdir(parents=True)
    (tmp_path / "work" / ".project_root").write_text("/tmp/gm/work")
    path = gemini.with_words(tmp_path / "work" / "chats" / gemini.SESSION_FILE.name)
    daemon.start()
    for payload in gemini.real_payloads():
        if payload["hook_event_name"] != "BeforeTool":  # not installed
            payload["transcript_path"] = str(path)
            done = run_send(json.dumps(payload).encode(), timeout=30, args=("--agent", "gemini"))
            assert done.returncode == 0 and done.stderr == b""
    wait_until(lambda: count(daemon.db, "observations", SAID) == 2, message="Gemini's words were not read")
    code, summary, _ = nmem_import(str(path))
    assert code == 0 and summary["said"] == 2 and summary["events_new"] == 0, summary
    said = db_rows(daemon.db, f"SELECT type, title, agent FROM observations WHERE {SAID} ORDER BY ts")
    thought = f"{gemini.THOUGHT}: a French page is served to English readers."
    assert sorted(said) == [("assistant", gemini.SAID, "gemini"), ("thinking", thought, "gemini")]
    daemon.stop()
    integrity_ok(daemon.db)


# --- a Claude Code subagent: its own transcript, named by SubagentStop ------------------------------------------


def test_a_subagents_words_are_read_from_its_own_file_at_its_end_and_imported_once(
    daemon: Daemon, tmp_path: Path
) -> None:
    parent = "7f277e19-066f-49a5-bf54-4aaa084bb6c5"  # the subagent's session (its lines' sessionId)
    own = tmp_path / parent / "subagents" / SUBAGENT.name
    own.parent.mkdir(parents=True)
    shutil.copy(SUBAGENT, own)
    daemon.start()
    stop = {"session_id": parent, "transcript_path": str(tmp_path / f"{parent}.jsonl"), "cwd": "/tmp/sub",
            "hook_event_name": "SubagentStop", "stop_hook_active": False, "agent_id": "c93e1a4",
            "agent_transcript_path": str(own), "agent_type": "general-purpose"}  # fmt: skip
    done = run_send(json.dumps(stop).encode())
    assert done.returncode == 0 and done.stderr == b""
    wait_until(lambda: count(daemon.db, "observations", SAID) == 2, message="the subagent's words were not read")
    rows = db_rows(daemon.db, f"SELECT session_id, agent_id FROM observations WHERE {SAID}")
    assert rows == [(parent, "c93e1a4")] * 2
    code, summary, _ = nmem_import(str(own))
    assert code == 0 and summary["said"] == 2, summary
    assert count(daemon.db, "observations", SAID) == 2
    daemon.stop()
    integrity_ok(daemon.db)


# --- Copilot: its events.jsonl, found by the session's id ------------------------------------------------------


def test_copilot_words_are_read_live_from_its_session_file_and_imported_once(daemon: Daemon, tmp_path: Path) -> None:
    state = tmp_path / "copilot" / "session-state" / copilot.SESSION
    state.mkdir(parents=True)
    path = copilot.with_words(state / "events.jsonl")
    daemon.env["COPILOT_HOME"] = str(tmp_path / "copilot")  # where its hooks' session is found
    daemon.start()
    for payload in copilot.real_payloads():
        done = run_send(json.dumps(payload).encode(), timeout=30, args=("--agent", "copilot"))
        assert done.returncode == 0 and done.stderr == b""
    wait_until(lambda: count(daemon.db, "observations", SAID) == 2, message="Copilot's words were not read")
    code, summary, _ = nmem_import(str(path))
    assert code == 0 and summary["said"] == 2, summary
    said = db_rows(daemon.db, f"SELECT type, title, agent FROM observations WHERE {SAID} ORDER BY type")
    assert said == [("assistant", copilot.SAID, "copilot"), ("thinking", copilot.REASONING, "copilot")]
    daemon.stop()
    integrity_ok(daemon.db)
