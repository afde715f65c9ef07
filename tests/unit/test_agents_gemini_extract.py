"""Gemini CLI payloads into nmem's observation types (nmemd.agents.gemini.capture), from a real session's hooks."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from support.payloads.gemini import SESSION, SESSION_FILE, real_payloads

from nmemd.agents.gemini.capture import normalized, prompt_text, shell_output, tool_call_id
from nmemd.capture.extract import extract
from nmemd.model import OBSERVATION_TYPES


def _gemini(payload: dict[str, Any]) -> dict[str, Any]:
    return {"nmem_agent": "gemini", **payload}


def test_a_real_gemini_session_becomes_nmems_observation_types() -> None:
    got = []
    for p in real_payloads():
        if p["hook_event_name"] == "BeforeTool":
            continue  # not installed (nmemd.agents.gemini.setup); what it would give is checked below
        ex = extract(p)
        assert ex.agent == "gemini" and ex.session_id == SESSION and ex.project == "/tmp/gm/work"
        got += [(ex.hook_event, o.type, o.title, o.file_path, o.command, o.tool_name) for o in ex.observations]
    b = "/tmp/gm/work/b.txt"
    assert got == [
        ("SessionStart", "session", "Session started (startup)", None, None, None),
        ("UserPromptSubmit", "prompt", "E2E-edit: write hello", None, None, None),  # without <hook_context>
        ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", None,
         "printf 'hello\\n' > notes.txt && cat notes.txt", "run_shell_command"),
        ("PostToolUse", "write", "Write b.txt (created, 2 lines)", b, None, "write_file"),
        ("PostToolUse", "edit", "Edit b.txt (-1 +1 lines)", b, None, "replace"),
        ("PostToolUse", "read", "Read b.txt", b, None, "read_file"),
        ("PostToolUse", "error", "Shell failed (exit 2): ls missing-file", None, "ls missing-file",
         "run_shell_command"),
        ("PostToolUse", "search", "Grep 'three'", None, None, "grep_search"),
        ("PostToolUse", "search", "Glob '*.txt'", None, None, "glob"),
        ("PostToolUse", "error", "replace failed: Could not find an exact match for 'old_string' in"
         " '/tmp/gm/work/b.txt'. If previous edits modified… — b.txt", b, None, "replace"),
        ("Stop", "stop", "Stop: Edited notes.txt.", None, None, None),
        ("SessionEnd", "session", "Session ended (exit)", None, None, None),
    ]  # fmt: skip


def test_the_command_output_is_kept_without_gemini_s_wrapping() -> None:
    shell = next(p for p in real_payloads() if p.get("tool_name") == "run_shell_command"
                 and p["hook_event_name"] == "AfterTool")  # fmt: skip
    obs = extract(shell).observations[0]
    assert "hello" in obs.content and "untrusted_context" not in obs.content and "PGID" not in obs.content
    wrapped = "<untrusted_context>\nOutput: boom\nExit Code: 3\nProcess Group PGID: 9\n</untrusted_context>"
    assert shell_output(wrapped) == ("boom", 3)
    assert shell_output("Output: (empty)\nProcess Group PGID: 9") == ("", None)


def test_tool_calls_prompts_and_replies_get_natural_keys() -> None:
    keyed = {}
    for p in real_payloads():
        ex = extract(p)
        if ex.hook_event == "PostToolUse":
            assert ex.tool_use_id and ex.tool_use_id.startswith("g")
            keyed[ex.tool_use_id] = p["tool_name"]
        elif ex.hook_event == "UserPromptSubmit":
            assert ex.prompt_id and ex.prompt_id.startswith("g")
        elif ex.hook_event == "Stop":
            assert ex.natural_key and ex.natural_key.startswith(f"reply:{SESSION}:")
    assert len(keyed) == 8  # every call its own key
    # The session file's record of a call hashes to the live hook's key: its args and its output (or error).
    lines = [json.loads(x) for x in SESSION_FILE.read_text().splitlines()]
    calls = [c for x in lines for c in x.get("toolCalls") or []]
    from_file = {tool_call_id(c["name"], c["args"], next(iter(c["result"][0]["functionResponse"]["response"].values())))
                 for c in calls}  # fmt: skip
    assert set(keyed) <= from_file


def test_an_mcp_tool_s_parts_hash_as_the_session_file_keeps_them() -> None:
    # Live: llmContent is the MCP result's parts; the session file keeps their texts, joined by newlines.
    live = tool_call_id("mcp_nmem_search", {"query": "x"}, [{"text": "<untrusted_context>\na\n</untrusted_context>"},
                                                              {"text": "b"}])  # fmt: skip
    assert live == tool_call_id("mcp_nmem_search", {"query": "x"}, "<untrusted_context>\na\n</untrusted_context>\nb")
    assert tool_call_id("t", {}, [{"inlineData": {}}]) == tool_call_id("t", {}, "")


def test_before_agent_without_injected_context_and_after_agent_as_stop() -> None:
    assert prompt_text("<hook_context>ctx\nmore</hook_context>\n\nfix the bug") == "fix the bug"
    assert prompt_text("fix <hook_context>x</hook_context>") == "fix <hook_context>x</hook_context>"
    stop = normalized({"hook_event_name": "AfterAgent", "prompt": "p", "prompt_response": "done"})
    assert stop == {"hook_event_name": "Stop", "last_assistant_message": "done"}


def test_pre_compress_auto_stores_nothing_manual_a_compaction() -> None:
    # 0.61 fires PreCompress (trigger auto) before every request, compressed or not.
    base = {"session_id": SESSION, "cwd": "/tmp/gm/work", "hook_event_name": "PreCompress"}
    assert extract(_gemini({**base, "trigger": "auto"})).observations == []
    manual = extract(_gemini({**base, "trigger": "manual"}))
    assert [(o.type, o.title) for o in manual.observations] == [("compact", "Compacting (manual)")]


def test_mcp_tools_are_named_as_claude_code_names_them() -> None:
    p = _gemini({"session_id": SESSION, "cwd": "/tmp/gm/work", "hook_event_name": "AfterTool", "tool_name": "search",
                 "tool_input": {"query": "deploy"}, "mcp_context": {"server_name": "nmem", "tool_name": "search"},
                 "tool_response": {"llmContent": [{"text": "3 matches"}], "returnDisplay": "3 matches"}})  # fmt: skip
    obs = extract(p).observations
    assert [(o.type, o.tool_name, o.title) for o in obs] == [
        ("mcp", "mcp__nmem__search", "MCP nmem/search: query: deploy")
    ]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["hook_event_name", "tool_name", "tool_input", "tool_response", "prompt",
                                        "prompt_response", "mcp_context", "session_id", "cwd", "trigger"]),
                       st.one_of(st.none(), st.text(max_size=20), st.integers(),
                                 st.sampled_from(["AfterTool", "BeforeAgent", "AfterAgent", "PreCompress",
                                                  "run_shell_command", "write_file", "replace", "glob"]),
                                 st.dictionaries(st.sampled_from(["llmContent", "error", "returnDisplay", "command",
                                                                  "file_path", "server_name", "tool_name"]),
                                                 st.one_of(st.none(), st.text(max_size=10), st.integers()))),
                       max_size=10))  # fmt: skip
def test_any_gemini_payload_extracts_without_raising(payload: dict[str, Any]) -> None:
    ex = extract(_gemini(payload))
    assert ex.agent == "gemini"
    assert all(o.type in OBSERVATION_TYPES and "extraction failed" not in o.title for o in ex.observations)
