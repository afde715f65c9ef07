"""GitHub Copilot CLI payloads into nmem's observation types (nmemd.agents.copilot.capture), from a real session's
hooks (Copilot CLI 1.0.102, PascalCase hooks, offline against a scripted API; tests/data/copilot)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.payloads.copilot import EVENTS, SESSION, hook_ids, real_payloads

from nmemd.agents.copilot.capture import mcp_name, result_text, shell_exit_code, stop_key
from nmemd.capture.extract import extract


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
    assert [g[2] for g in tools] == hook_ids()
    (ok,), (failed,), (patch,), (read,) = (g[3] for g in tools)
    assert ok[0] == "command" and ok[1].startswith("$ echo hello-e2e")
    assert failed == ("error", "Bash failed (exit 1): false")
    assert patch[0] == "error" and "b.txt" in patch[1]
    assert read[0] == "read" and "notes.txt" in read[1]


def test_tool_calls_and_the_turns_end_are_keyed_by_their_hooks_time_without_the_session_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Copilot writes events.jsonl behind its hooks: a hook finds at most `session.start` there.
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "none"))
    got = [extract(p) for p in real_payloads()]
    tools = [e for e in got if e.hook_event.startswith("PostToolUse")]
    assert [e.tool_use_id for e in tools] == hook_ids()
    assert hook_ids()[0] == "hook-1795624356415-" + hook_ids()[0].rsplit("-", 1)[1] and len(set(hook_ids())) == 4
    assert all(e.observations for e in tools)
    (stop,) = [e for e in got if e.hook_event == "Stop"]
    assert stop.natural_key == stop_key(SESSION, 1795624357106) and [o.type for o in stop.observations] == ["stop"]


def test_an_mcp_tool_is_named_as_the_other_agents_name_it(copilot_home: Path) -> None:
    (copilot_home / "mcp-config.json").write_text(json.dumps({"mcpServers": {"nmem": {}, "my-docs": {}}}))
    assert mcp_name("nmem-search") == "mcp__nmem__search"
    assert mcp_name("my-docs-find_page") == "mcp__my-docs__find_page"
    assert mcp_name("github-mcp-server-list_issues") == "mcp__github-mcp-server__list_issues"
    assert mcp_name("bash") is None and mcp_name("other-tool") is None and mcp_name("nmem-") is None
    payload = {"nmem_agent": "copilot", "hook_event_name": "PostToolUse", "session_id": SESSION,
               "timestamp": "2026-11-25T16:32:36.415Z", "cwd": "/tmp/p", "tool_name": "nmem-search",
               "tool_input": {"query": "x"},
               "tool_result": {"result_type": "success", "text_result_for_llm": "1 match"}}  # fmt: skip
    ex = extract(payload)
    assert [(o.type, o.tool_name) for o in ex.observations] == [("mcp", "mcp__nmem__search")]


def test_shell_exit_code_and_result_text() -> None:
    assert shell_exit_code("x\n<shellId: 1 completed with exit code 2>") == 2
    assert shell_exit_code("<shellId: 0 completed with exit code 0>\n") == 0
    assert shell_exit_code("exit code 3") is None and shell_exit_code(None) is None
    assert result_text({"result_type": "success", "text_result_for_llm": "hi"}) == "hi"
    assert result_text({"content": "c"}) == "c" and result_text(7) == ""
