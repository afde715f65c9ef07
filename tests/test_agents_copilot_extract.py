"""GitHub Copilot CLI payloads into nmem's observation types (nmemd.capture.copilot), from a real session's
hooks (Copilot CLI 1.0.102, PascalCase hooks, offline against a scripted API; tests/data/copilot)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from nmemd.capture.copilot import call_id, result_text, shell_exit_code
from nmemd.capture.extract import extract

DATA = Path(__file__).parent / "data" / "copilot"
SESSION = "0b7f87d9-3144-486c-8ad7-7f4747ab62c0"
EVENTS = DATA / f"events-{SESSION}.jsonl"


def real_payloads() -> list[dict[str, Any]]:
    lines = (DATA / "hooks-1.0.102.jsonl").read_text().splitlines()
    return [{"nmem_agent": "copilot", **json.loads(line)} for line in lines if line.strip()]


@pytest.fixture
def copilot_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "copilot"
    (home / "session-state" / SESSION).mkdir(parents=True)
    shutil.copy(EVENTS, home / "session-state" / SESSION / "events.jsonl")
    monkeypatch.setenv("COPILOT_HOME", str(home))
    return home


def test_a_real_copilot_session_becomes_nmems_observation_types(copilot_home: Path) -> None:
    got = [(e.hook_event, e.agent, e.tool_use_id, [(o.type, o.title) for o in e.observations])
           for e in map(extract, real_payloads())]  # fmt: skip
    assert [g[1] for g in got] == ["copilot"] * len(got)
    by_event = {g[0]: g for g in got}
    assert by_event["UserPromptSubmit"][3] == [("prompt", "Do it E2E-one")]
    tools = [g for g in got if g[0].startswith("PostToolUse")]
    assert [g[2] for g in tools] == ["call_e2e00047", "call_e2e00050", "call_e2e00053", "call_e2e00056"]
    (ok,), (failed,), (patch,), (read,) = (g[3] for g in tools)
    assert ok[0] == "command" and ok[1].startswith("$ echo hello-e2e")
    assert failed == ("error", "Bash failed (exit 1): false")
    assert patch[0] == "error" and "b.txt" in patch[1]
    assert read[0] == "read" and "notes.txt" in read[1]


def test_without_the_session_file_a_tool_call_has_no_id_and_is_still_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "none"))
    tools = [extract(p) for p in real_payloads() if p["hook_event_name"] == "PostToolUse"]
    assert [e.tool_use_id for e in tools] == [None, None, None]
    assert all(e.observations for e in tools)


def test_call_id_reads_only_a_regular_file_and_a_plain_session_id(copilot_home: Path, tmp_path: Path) -> None:
    args = {"command": "false", "description": "fail"}
    assert call_id(SESSION, args) == "call_e2e00050"
    assert call_id("../" + SESSION, args) is None
    assert call_id(SESSION, {"command": "never ran"}) is None
    fifo = tmp_path / "fifo"
    import os

    os.mkfifo(fifo)
    assert call_id(SESSION, args, fifo) is None


def test_shell_exit_code_and_result_text() -> None:
    assert shell_exit_code("x\n<shellId: 1 completed with exit code 2>") == 2
    assert shell_exit_code("<shellId: 0 completed with exit code 0>\n") == 0
    assert shell_exit_code("exit code 3") is None and shell_exit_code(None) is None
    assert result_text({"result_type": "success", "text_result_for_llm": "hi"}) == "hi"
    assert result_text({"content": "c"}) == "c" and result_text(7) == ""
