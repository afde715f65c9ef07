"""extract(): the hook payloads of tests/data, per-tool formatting, privacy and never-raise properties."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fixtures import HOOKS, LEGACY, hook_payloads
from support.helpers import wait_until

from nmemd.capture import project
from nmemd.capture.extract import extract
from nmemd.capture.project import project_root, short_name
from nmemd.model import CONTENT_MAX, OBSERVATION_TYPES, TITLE_MAX, Extracted, Observation, reply_key

P = "/Users/dev/work/lighthouse"
Q = "/private/var/folders/q7/zx_81mpr4kd9b2h6w0t3y5n_0000gn/T/kanban/vk-3c9d-bump-deps"
GIT_LOG = "git log --oneline 4c1e9a7b2d..9f3b6e0c8a 2>/dev/null | head -20"
LEGACY_CMD = (
    "python -c \"import ledgerkit as lk; print('ledgerkit imported'); import numpy as np;"
    " print('NumPy version:', np.__version__)\""
)
STAT_CMD = "stat -L /Users/dev/.claude/hooks/notes-sync.sh && ls -l /Users/dev/.claude/hooks/notes-sync.sh"
MEMORY_MD = "/Users/dev/.claude/projects/-Users-dev-work-lighthouse/memory/MEMORY.md"
GATEWAY = (
    "Request to 'https://api.example.net/v2/session' from origin 'http://localhost:8080' was refused by the"
    " gateway: the header 'X-Lighthouse-Token' sent with the request is not on the list of allowed headers"
    " configured for this route."
)

# name -> (hook_event, type, title, file_path, command); titles are exact.
EXPECTED: dict[str, tuple[str, str, str, str | None, str | None]] = {
    f"{HOOKS}:0": ("SessionStart", "session", "Session started (startup)", None, None),
    f"{HOOKS}:1": ("SessionStart", "session", "Session started (compact)", None, None),
    f"{HOOKS}:2": (
        "UserPromptSubmit",
        "prompt",
        "1. the lint hooks fire on every edit and slow things down, maybe drop them?",
        None,
        None,
    ),
    f"{HOOKS}:3": (
        "PreToolUse",
        "event",
        f'PreToolUse Bash: for f in {P}/skills/*/SKILL.md; do echo "$f"; wc -l "$f"; done',
        None,
        None,
    ),
    f"{HOOKS}:4": ("PreToolUse", "event", "PreToolUse Read: skills/changelog/SKILL.md", None, None),
    f"{HOOKS}:5": ("PreToolUse", "event", "PreToolUse Write: templates/hooks.json.template", None, None),
    f"{HOOKS}:6": ("PreToolUse", "event", "PreToolUse Edit: NOTES.md", None, None),
    f"{HOOKS}:7": ("PreToolUse", "event", "PreToolUse Grep: (linter|formatter|reviewer|planner|scout)", None, None),
    f"{HOOKS}:8": ("PreToolUse", "event", "PreToolUse TodoWrite", None, None),
    f"{HOOKS}:9": (
        "PermissionRequest",
        "event",
        "PermissionRequest WebFetch: https://docs.example.com/guides/hook-timeouts",
        None,
        None,
    ),
    f"{HOOKS}:10": ("PermissionRequest", "event", "PermissionRequest Edit: templates/hooks.json.template", None, None),
    f"{HOOKS}:11": ("PostToolUse", "read", "Read data/cost_tiers.yaml (33 lines)", f"{P}/data/cost_tiers.yaml", None),
    f"{HOOKS}:12": ("PostToolUse", "command", f"$ wc -c {P}/NOTES.md", None, f"wc -c {P}/NOTES.md"),
    f"{HOOKS}:13": (
        "PostToolUse",
        "edit",
        "Edit templates/hooks.json.template (-5 +0 lines)",
        f"{P}/templates/hooks.json.template",
        None,
    ),
    f"{HOOKS}:14": ("PostToolUse", "write", "Write NOTES.md (updated, 36 lines, -3 +2)", f"{P}/NOTES.md", None),
    f"{HOOKS}:15": ("PostToolUse", "search", "Grep '^tier:' in agents [**/*.md] (6 lines)", None, None),
    f"{HOOKS}:16": ("PostToolUse", "search", "Glob 'agents/*.md' (5 files)", None, None),
    f"{HOOKS}:17": (
        "PostToolUse",
        "task",
        "Todos 0/2 done; now: Review the lint hooks - drop them if they do not pay off",
        None,
        None,
    ),
    f"{HOOKS}:18": ("PostToolUse", "agent", "Agent researcher: Measure hook overhead (completed)", None, None),
    f"{HOOKS}:19": ("PostToolUseFailure", "error", f"Bash failed (exit 1): {STAT_CMD}", None, STAT_CMD),
    f"{HOOKS}:20": ("PostToolUseFailure", "error", f"Read failed: File does not exist. — {MEMORY_MD}", MEMORY_MD, None),
    f"{HOOKS}:21": (
        "Notification",
        "notification",
        "Notification (permission_prompt): Claude needs your permission to use Bash",
        None,
        None,
    ),
    f"{HOOKS}:22": (
        "Notification",
        "notification",
        "Notification (idle_prompt): Claude is waiting for your input",
        None,
        None,
    ),
    f"{HOOKS}:23": ("SubagentStart", "agent", "Subagent researcher started (f3a9d60)", None, None),
    f"{HOOKS}:24": ("SubagentStop", "agent", "Subagent researcher stopped (b7e24c9)", None, None),
    f"{HOOKS}:25": ("Stop", "stop", "Stop (stop hook active)", None, None),
    f"{HOOKS}:26": ("PreCompact", "compact", "Compacting (auto)", None, None),
    f"{HOOKS}:27": ("SessionEnd", "session", "Session ended (clear)", None, None),
    f"{HOOKS}:28": ("SessionEnd", "session", "Session ended (prompt_input_exit)", None, None),
    f"{HOOKS}:29": ("PostToolUse", "edit", "Edit install.sh (2 edits, -1 +2 lines)", f"{P}/install.sh", None),
    f"{HOOKS}:30": (
        "PostToolUse",
        "fetch",
        "Fetch https://docs.example.com/guides/hook-timeouts (200 OK, 18342 bytes)",
        None,
        None,
    ),
    f"{HOOKS}:31": ("PostToolUse", "mcp", "MCP tracker/get_issue: project: lighthouse number: 48", None, None),
    f"{HOOKS}:32": ("PostCompact", "compact", "Compacted (auto)", None, None),
    f"{HOOKS}:33": ("PostToolUse", "command", f"$ {GIT_LOG}", None, GIT_LOG),
    f"{HOOKS}:34": (
        "PostToolUseFailure",
        "error",
        "Bash failed (exit 1): echo \"Request to 'https://api.example.net/v2/session' from origin"
        " 'http://localhost:8080' was refused by the gateway: the header 'X-Lighthouse-Token'…",
        None,
        f'echo "{GATEWAY}" >&2 && exit 1',
    ),
    f"{LEGACY}:0": ("PreToolUse", "event", "PreToolUse Glob: requirements*.txt", None, None),
    f"{LEGACY}:1": (
        "PostToolUse",
        "task",
        "Todos 0/4 done; now: Check the numpy pin in setup.py or requirements.txt",
        None,
        None,
    ),
    f"{LEGACY}:2": ("PostToolUse", "read", "Read setup.py (61 lines)", f"{Q}/setup.py", None),
    f"{LEGACY}:3": ("PostToolUse", "edit", "Edit requirements.txt (-1 +1 lines)", f"{Q}/requirements.txt", None),
    f"{LEGACY}:4": ("PostToolUse", "command", f"$ {LEGACY_CMD}", None, LEGACY_CMD),
}

PAYLOADS = dict(hook_payloads())


def _one(payload: object, **kw: Any) -> tuple[Extracted, Observation]:
    ex = extract(payload, **kw)
    assert len(ex.observations) == 1
    return ex, ex.observations[0]


def _check_bounds(ex: Extracted) -> None:
    for o in ex.observations:
        assert o.type in OBSERVATION_TYPES
        assert o.title and len(o.title) <= TITLE_MAX and len(o.title.splitlines()) == 1, o.title
        assert len(o.content) <= CONTENT_MAX
        assert "extraction failed" not in o.title  # the never-raise fallback was not needed


def test_every_fixture_has_an_expectation() -> None:
    assert len(PAYLOADS) == 40
    assert sorted(PAYLOADS) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture(name: str) -> None:
    payload = PAYLOADS[name]
    event, type_, title, file_path, command = EXPECTED[name]
    ex, obs = _one(payload)
    assert (ex.hook_event, obs.type, obs.title, obs.file_path, obs.command) == (
        event,
        type_,
        title,
        file_path,
        command,
    )
    assert ex.session_id == payload["session_id"]
    assert ex.cwd == payload["cwd"]
    assert ex.project == payload["cwd"]  # the /Users/... paths do not exist here
    assert ex.tool_use_id == payload.get("tool_use_id")
    assert ex.transcript_path == payload["transcript_path"]
    if "tool_name" in payload:
        assert obs.tool_name == payload["tool_name"]
    _check_bounds(ex)


def test_fixture_session_fields() -> None:
    ex = extract(PAYLOADS[f"{HOOKS}:0"])
    assert (ex.source, ex.model) == ("startup", "claude-sonnet-4-5-20250929")
    assert extract(PAYLOADS[f"{HOOKS}:28"]).end_reason == "prompt_input_exit"
    assert extract(PAYLOADS[f"{HOOKS}:23"]).agent_id == "f3a9d60"
    assert extract(PAYLOADS[f"{HOOKS}:25"]).last_assistant_message is None  # before 2.1.47


def test_fixture_dedup_keys() -> None:
    assert _one(PAYLOADS[f"{HOOKS}:11"])[1].dedup_key == f"read:{P}/data/cost_tiers.yaml::"
    assert _one(PAYLOADS[f"{HOOKS}:12"])[1].dedup_key == f"cmd:wc -c {P}/NOTES.md"
    assert _one(PAYLOADS[f"{HOOKS}:15"])[1].dedup_key == f"grep:^tier::{P}/agents:**/*.md:content"
    assert _one(PAYLOADS[f"{HOOKS}:16"])[1].dedup_key == "glob:agents/*.md:"
    for never in (13, 14, 19, 20, 2):  # edit, write, errors, prompt
        assert _one(PAYLOADS[f"{HOOKS}:{never}"])[1].dedup_key is None


def test_fixture_contents() -> None:
    assert _one(PAYLOADS[f"{HOOKS}:11"])[1].content == "33 lines"  # never the file itself
    bash = _one(PAYLOADS[f"{HOOKS}:12"])[1].content
    assert bash == f"Count the bytes of NOTES.md\nstdout:\n    8412 {P}/NOTES.md"
    edit = _one(PAYLOADS[f"{LEGACY}:3"])[1].content
    assert edit == "-1 +1 lines\n--- old\nnumpy>=1.22.0,<2.0.0\n+++ new\nnumpy>=1.22.0"
    glob = _one(PAYLOADS[f"{HOOKS}:16"])[1].content.splitlines()
    assert glob[:2] == ["5 files", "agents/researcher.md"]
    agent = _one(PAYLOADS[f"{HOOKS}:18"])[1].content
    assert agent.startswith("agent e52b7c1, completed, 17 tool uses, 41230 tokens, 87.5 s\n")
    assert "result:\nNow I have enough numbers" in agent
    error = _one(PAYLOADS[f"{HOOKS}:19"])[1].content
    assert error.startswith(f"command: {STAT_CMD}\nExit code 1\nstat: cannot stat")
    assert _one(PAYLOADS[f"{HOOKS}:20"])[1].content == f"file: {MEMORY_MD}\nFile does not exist."


def test_prompt_drops_ide_wrapper() -> None:
    _, obs = _one(PAYLOADS[f"{HOOKS}:2"])
    assert "ide_opened_file" not in obs.content and "SKILL.md" not in obs.content
    assert obs.content.startswith("1. the lint hooks") and obs.content.endswith("fine as it is.")


def test_legacy_payloads() -> None:
    """July-2025 payloads: no tool_use_id, no permission_mode, TodoWrite items with priority/id."""
    ex, obs = _one(PAYLOADS[f"{LEGACY}:1"])
    assert ex.tool_use_id is None
    assert obs.content.splitlines() == [
        "1 in progress, 3 pending",
        "[~] Check the numpy pin in setup.py or requirements.txt (high, 1)",
        "[ ] Allow numpy 2.x in the requirements (high, 2)",
        "[ ] Run the test suite against numpy 2.1 (medium, 3)",
        "[ ] Note the change in CHANGES.md (low, 4)",
    ]
    new = _one(PAYLOADS[f"{HOOKS}:17"])[1].content.splitlines()
    assert new[1:] == [
        "[~] Review the lint hooks - drop them if they do not pay off",
        "[ ] Shorten NOTES.md where it repeats itself",
    ]


# --- synthetic payloads ----------------------------------------------------------------


def ev(event: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": "s1", "cwd": "/nonexistent/proj", "hook_event_name": event, **fields}


def post(tool: str, tool_input: object, tool_response: object = None, **fields: Any) -> dict[str, Any]:
    return ev("PostToolUse", tool_name=tool, tool_input=tool_input, tool_response=tool_response, **fields)


def test_mcp_tool_with_list_response() -> None:
    payload = post(
        "mcp__my-custom-tools__get_weather",
        {"city": "Paris", "units": "metric"},
        [{"type": "text", "text": "Temperature: 25°C\nSunny"}, {"type": "image", "data": "..."}],
    )
    _, obs = _one(payload)
    assert obs.type == "mcp" and obs.tool_name == "mcp__my-custom-tools__get_weather"
    assert obs.title == "MCP my-custom-tools/get_weather: city: Paris units: metric"
    assert obs.content == "args: city: Paris\nunits: metric\nresult:\nTemperature: 25°C\nSunny\n[image]"


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("plain text result", "plain text result"),
        ({"content": [{"type": "text", "text": "from object"}]}, "from object"),
        ({"ok": True, "count": 3}, "ok: true\ncount: 3"),
    ],
)
def test_mcp_response_shapes(response: object, expected: str) -> None:
    _, obs = _one(post("mcp__plugin_x_srv__do_it", {}, response))
    assert obs.title == "MCP plugin_x_srv/do_it"
    assert obs.content == f"result:\n{expected}"


def test_unknown_tool_is_stored_generically() -> None:
    _, obs = _one(post("FancyNewTool", {"target": "x.py", "depth": 3}, {"answer": 42}))
    assert (obs.type, obs.tool_name, obs.dedup_key) == ("tool", "FancyNewTool", None)
    assert obs.title == "Tool FancyNewTool: target: x.py depth: 3"
    assert obs.content == "input: target: x.py\ndepth: 3\nresponse: answer: 42"


def test_unknown_event_is_stored_generically() -> None:
    ex, obs = _one(ev("TeammateIdle", teammate="bob", details={"a": [1, 2]}))
    assert ex.hook_event == "TeammateIdle"
    assert (obs.type, obs.title) == ("event", "TeammateIdle")
    assert obs.content == "teammate: bob\ndetails: {a: [1, 2]}"


def test_missing_event_and_session() -> None:
    ex, obs = _one({"tool_name": "Bash"})
    assert (ex.hook_event, ex.session_id, ex.cwd, ex.project) == ("unknown", "unknown", None, None)
    assert (obs.type, obs.title) == ("event", "unknown Bash")


@pytest.mark.parametrize("payload", [None, [], [1, {"a": 2}], "text", 5, 1.5, True, {1: 2}])
def test_non_dict_payloads(payload: object) -> None:
    ex = extract(payload)
    assert (ex.hook_event, ex.session_id) == ("unknown", "unknown")
    assert len(ex.observations) == 1 and ex.observations[0].type == "event"
    if not isinstance(payload, dict):
        assert ex.observations[0].title == f"Non-object hook payload ({type(payload).__name__})"
    _check_bounds(ex)


def test_skip_tools() -> None:
    ex = extract(post("Bash", {"command": "ls"}, {"stdout": "a"}), skip_tools=frozenset({"Bash"}))
    assert ex.observations == [] and ex.session_id == "s1" and ex.hook_event == "PostToolUse"
    skip = frozenset({"mcp__secret_server"})
    assert extract(post("mcp__secret_server__read", {}), skip_tools=skip).observations == []
    assert len(extract(post("mcp__secret_server_two__read", {}), skip_tools=skip).observations) == 1
    assert len(extract(post("Read", {"file_path": "/a"}), skip_tools=frozenset({"Bash"})).observations) == 1


def test_read_range_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "src").mkdir()
    root = str(tmp_path)
    payload = post(
        "Read",
        {"file_path": f"{root}/src/app.py", "offset": 10, "limit": 20},
        {
            "type": "text",
            "file": {"filePath": f"{root}/src/app.py", "numLines": 20, "startLine": 10, "totalLines": 120},
        },
        cwd=f"{root}/src",
    )
    ex, obs = _one(payload)
    assert ex.project == root and ex.cwd == f"{root}/src"
    assert obs.title == "Read src/app.py (lines 10-29 of 120)"
    assert obs.file_path == f"{root}/src/app.py"
    assert obs.dedup_key == f"read:{root}/src/app.py:10:20"
    _, outside = _one(post("Read", {"file_path": "/etc/hosts"}, {"type": "image", "file": {}}, cwd=root))
    assert outside.title == "Read /etc/hosts (image)"


def test_a_whole_read_counts_the_lines_of_the_file_not_the_empty_one_after_its_final_newline() -> None:
    """Claude Code 2.1.330 reports numLines 4 for a 3-line file ending in a newline."""
    file = {"filePath": "/p/a.txt", "content": "a\nb\nc\n", "numLines": 4, "startLine": 1, "totalLines": 4}
    _, obs = _one(post("Read", {"file_path": "/p/a.txt"}, {"type": "text", "file": file}, cwd="/p"))
    assert obs.title == "Read a.txt (3 lines)"
    unterminated = {**file, "content": "a\nb\nc", "numLines": 3, "totalLines": 3}
    _, obs = _one(post("Read", {"file_path": "/p/a.txt"}, {"type": "text", "file": unterminated}, cwd="/p"))
    assert obs.title == "Read a.txt (3 lines)"


def test_claude_codes_own_subagents_are_not_the_sessions_work() -> None:
    """`/compact` fires SubagentStop with `agent_type: ""`: an event, not an agent the summary counts."""
    base = {"session_id": "s", "cwd": "/p", "hook_event_name": "SubagentStop", "agent_id": "a1"}
    internal = extract({**base, "agent_type": ""})
    task = extract({**base, "agent_type": "general-purpose"})
    old = extract(base)  # versions without agent_type
    assert [e.observations[0].type for e in (internal, task, old)] == ["event", "agent", "agent"]


def test_the_sessions_model_comes_from_any_main_session_event() -> None:
    """The startup SessionStart may name no model; a later event of the session does."""
    base = {"session_id": "s", "cwd": "/p"}
    assert extract({**base, "hook_event_name": "UserPromptSubmit", "prompt": "hi", "model": "m-1"}).model == "m-1"
    sub = {**base, "hook_event_name": "SubagentStop", "agent_id": "a1", "model": "m-small"}
    assert extract(sub).model is None  # a subagent's model is not the session's


def test_write_created_and_updated() -> None:
    created = post("Write", {"file_path": "/nonexistent/proj/new.py", "content": "a\nb\nc\n"}, {"type": "create"})
    _, obs = _one(created)
    assert (obs.type, obs.title, obs.dedup_key) == ("write", "Write new.py (created, 3 lines)", None)
    assert obs.content == "created, 3 lines\na\nb\nc"
    patch = [{"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 1, "lines": [" a", "-b", "-c", "+d"]}]
    updated = post("Write", {"file_path": "/x/y.py", "content": "a\nd"}, {"type": "update", "structuredPatch": patch})
    assert _one(updated)[1].title == "Write /x/y.py (updated, 2 lines, -2 +1)"


def test_edit_variants() -> None:
    _, obs = _one(post("Edit", {"file_path": "/p/a.py", "old_string": "x\ny\nz", "new_string": "w"}, {}))
    assert obs.title == "Edit /p/a.py (-3 +1 lines)"
    edits = [{"old_string": "a", "new_string": "b\nc"}, {"old_string": "d", "new_string": "e"}]
    _, multi = _one(post("MultiEdit", {"file_path": "/p/b.py", "edits": edits}, None))
    assert multi.title == "Edit /p/b.py (2 edits, -2 +3 lines)"
    _, nb = _one(post("NotebookEdit", {"notebook_path": "/p/n.ipynb", "new_source": "print(1)", "cell_id": "c1"}))
    assert (nb.type, nb.title, nb.file_path) == ("edit", "Edit /p/n.ipynb (cell c1, replace)", "/p/n.ipynb")


def test_bash_details_and_bounds() -> None:
    out = "\n".join(f"line {i}" for i in range(500))
    resp = {"stdout": out, "stderr": "warning: one\nwarning: two", "interrupted": True, "isImage": False}
    _, obs = _one(post("Bash", {"command": "make test", "description": "Run tests"}, resp))
    assert obs.title == "$ make test (interrupted)"
    lines = obs.content.splitlines()
    assert lines[:5] == ["Run tests", "interrupted", "stderr:", "warning: one", "warning: two"]
    assert lines[5:7] == ["stdout:", "line 0"] and lines[-14:-12] == ["line 9", "… (478 lines cut) …"]
    assert lines[-1] == "line 499"
    _, text_resp = _one(post("Bash", {"command": "echo hi"}, "hi"))
    assert text_resp.content == "stdout:\nhi"


def test_search_and_fetch_tools() -> None:
    grep = post("Grep", {"pattern": "TODO", "output_mode": "count"}, {"mode": "count", "numMatches": 7})
    assert _one(grep)[1].title == "Grep 'TODO' (7 matches)"
    files = post("Grep", {"pattern": "x", "path": "/nonexistent/proj/src"}, {"numFiles": 2, "filenames": ["/a", "/b"]})
    assert _one(files)[1].title == "Grep 'x' in src (2 files)"
    results = [
        {"tool_use_id": "s", "content": [{"title": "T1", "url": "https://a"}, {"title": "T2", "url": "https://b"}]}
    ]
    _, ws = _one(post("WebSearch", {"query": "xterm scroll"}, {"query": "xterm scroll", "results": [*results, "text"]}))
    assert (ws.type, ws.title, ws.dedup_key) == (
        "search",
        "Web search 'xterm scroll' (2 results)",
        "websearch:xterm scroll",
    )
    assert ws.content == "T1 — https://a\nT2 — https://b"
    resp = {"bytes": 274387, "code": 200, "codeText": "OK", "result": "# Summary", "url": "https://x.org/a"}
    _, wf = _one(post("WebFetch", {"url": "https://x.org/a", "prompt": "Summarize"}, resp))
    assert (wf.type, wf.title, wf.dedup_key) == (
        "fetch",
        "Fetch https://x.org/a (200 OK, 274387 bytes)",
        "fetch:https://x.org/a",
    )
    assert wf.content == "200 OK, 274387 bytes\nSummarize\n# Summary"


def test_agent_and_task_tools() -> None:
    launched = {"status": "async_launched", "agentId": "a1", "description": "Scan", "outputFile": "/tmp/o"}
    _, agent = _one(post("Agent", {"description": "Scan", "prompt": "Look", "subagent_type": "Explore"}, launched))
    assert agent.title == "Agent Explore: Scan (async_launched)"
    _, created = _one(post("TaskCreate", {"subject": "Fix bug", "description": "in x"}, {"task": {"id": "3"}}))
    assert (created.type, created.title) == ("task", "Task created: Fix bug (#3)")
    _, updated = _one(post("TaskUpdate", {"taskId": "3", "status": "completed"}, {"success": True}))
    assert updated.title == "Task #3 updated: completed"


def test_failure_interrupt_and_compaction_and_stop() -> None:
    fail = ev("PostToolUseFailure", tool_name="Bash", tool_input={"command": "sleep 99"}, error="", is_interrupt=True)
    assert _one(fail)[1].title == "Bash interrupted: sleep 99"
    post_compact = _one(ev("PostCompact", trigger="manual", compact_summary="We fixed the parser."))[1]
    assert (post_compact.type, post_compact.title, post_compact.content) == (
        "compact",
        "Compacted (manual)",
        "We fixed the parser.",
    )
    ex, stop = _one(ev("Stop", stop_hook_active=False, last_assistant_message="Done.\nAll tests pass."))
    assert (stop.title, stop.content, ex.last_assistant_message) == (
        "Stop: Done.",
        "Done.\nAll tests pass.",
        "Done.\nAll tests pass.",
    )
    ex, sub = _one(ev("SubagentStop", agent_id="a9", agent_type="Explore", last_assistant_message="Found it"))
    assert (sub.type, sub.title, ex.agent_id) == ("agent", "Subagent Explore stopped (a9): Found it", "a9")
    ex, err = _one(ev("StopFailure", error="rate_limit", error_details="429", last_assistant_message="partial"))
    assert (err.type, err.title, err.content, ex.last_assistant_message) == (
        "error",
        "Stop failed: rate_limit",
        "429\npartial",
        "partial",
    )


def test_session_start_empty_model() -> None:
    ex, obs = _one(ev("SessionStart", source="resume", model=""))
    assert (ex.source, ex.model, obs.title) == ("resume", None, "Session started (resume)")


def test_privacy_in_every_field() -> None:
    key = "AKIAIOSFODNN7EXAMPLE"
    token = "ghp_" + "a1B2c3D4e5" * 3 + "abcdef"
    ex, obs = _one(post("Bash", {"command": f"deploy --token {token} <private>hidden</private>"}, {"stdout": key}))
    assert obs.command == "deploy --token [REDACTED:github-token]"
    assert token not in obs.title and "hidden" not in obs.title and key not in obs.content
    _, prompt = _one(
        ev("UserPromptSubmit", prompt=f"use {key}\n<private>\nmy diary\n</private>\n<nmem-context>old</nmem-context>ok")
    )
    assert prompt.content == "use [REDACTED:aws-access-key]\n\nok" and prompt.title == "use [REDACTED:aws-access-key]"
    _, read = _one(post("Read", {"file_path": f"/srv/{token}/x"}, {}))
    assert read.file_path == "/srv/[REDACTED:github-token]/x" and token not in (read.dedup_key or "")
    ex, _ = _one(ev("Stop", last_assistant_message=f"export API_KEY={token}"))
    assert ex.last_assistant_message == "export API_KEY=[REDACTED:github-token]"
    _, gen = _one(post("Strange", {"password": "hunter2", "nested": {"client_secret": "x1"}, "note": f"t {token}"}))
    assert "hunter2" not in gen.content and "x1" not in gen.content and token not in gen.content
    assert "password: [REDACTED:password]" in gen.content


def test_huge_payload_is_bounded() -> None:
    big = "x = 1\n" * 3_500_000  # ~20 MB
    ex, obs = _one(post("Bash", {"command": "cat big"}, {"stdout": big, "stderr": "AKIA" * 1_000_000}))
    # hidden lines are counted in a bounded window, hence the "+"
    assert len(obs.content) <= CONTENT_MAX and "\n… (666666+ lines cut) …\nx = 1\n" in obs.content
    assert obs.content.startswith("stderr:\n… (4000000 chars cut) …\nstdout:\nx = 1\n")
    ex, obs = _one(post("Write", {"file_path": "/p/big.py", "content": big}, {"type": "create"}))
    assert obs.title == "Write /p/big.py (created, 3500000 lines)"
    ex, obs = _one(
        ev("PreToolUse", tool_name="Write", tool_input={"file_path": "/p/b", "content": big, "l": list(range(10**5))})
    )
    assert len(obs.content) <= CONTENT_MAX
    _check_bounds(ex)


def test_long_titles_are_one_bounded_line() -> None:
    _, obs = _one(post("Bash", {"command": "echo " + "word " * 200 + "\nsecond line"}, {}))
    assert len(obs.title) == TITLE_MAX and obs.title.endswith("…") and "second" not in obs.title


def test_project_root(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "a" / "b").mkdir(parents=True)
    (repo / ".git").mkdir()
    assert project_root(str(repo / "a" / "b")) == str(repo)
    worktree = tmp_path / "wt"
    (worktree / "pkg").mkdir(parents=True)
    (worktree / ".git").write_text("gitdir: /elsewhere\n")
    assert project_root(f"{worktree}/pkg/") == str(worktree)
    plain = tmp_path / "plain"
    plain.mkdir()
    assert project_root(str(plain)) in (str(plain), str(tmp_path.parent))  # tmp_path is not inside a repo
    assert project_root("/Users/nobody/not/here") == "/Users/nobody/not/here"
    assert project_root("relative/dir") == "relative/dir"
    assert project_root(None) is None and project_root("") is None
    assert short_name("/a/b/nmem/") == "nmem" and short_name("/") == "/" and short_name("C:\\x\\proj") == "proj"
    assert os.path.isabs(project_root(str(repo)) or "")


def test_an_old_answer_is_given_at_once_and_refreshed_off_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #40: a known cwd never waits for a walk (the daemon's loop asks); a later `git init`
    above it is seen once the background walk ends."""
    cwd = tmp_path / "proj" / "sub"
    cwd.mkdir(parents=True)
    first = project_root(str(cwd))
    assert first in (str(cwd), str(tmp_path.parent))  # tmp_path is not inside a repo
    (tmp_path / "proj" / ".git").mkdir()
    assert project_root(str(cwd)) == first  # within the TTL: the cached answer
    monkeypatch.setattr(project, "_TTL_SECONDS", 0.0)  # every answer is old from now on
    assert project_root(str(cwd)) == first  # old: given at once, the walk runs behind it
    wait_until(lambda: project_root(str(cwd)) == str(tmp_path / "proj"), 10, "the refreshed answer")


def test_a_linked_worktree_belongs_to_its_repository(tmp_path: Path) -> None:
    """`git worktree add` checkouts share their repository's memory (a real git, as users make them)."""
    main, linked = tmp_path / "app", tmp_path / "app-feature"
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(main)], check=True, timeout=30)
    subprocess.run([*git, "-C", str(main), "commit", "-q", "--allow-empty", "-m", "x"], check=True, timeout=30)
    subprocess.run([*git, "-C", str(main), "worktree", "add", "-q", str(linked)], check=True, timeout=30)
    (linked / "src").mkdir()
    assert project_root(str(linked / "src")) == project_root(str(linked)) == project_root(str(main)) == str(main)
    submodule = tmp_path / "sub"  # a submodule's .git file: its gitdir has no commondir, it stays its own project
    submodule.mkdir()
    (submodule / ".git").write_text(f"gitdir: {main}/.git/modules/sub\n")
    assert project_root(str(submodule)) == str(submodule)


# --- properties ------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
EVENTS = st.sampled_from(
    [
        "SessionStart", "SessionEnd", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure",
        "PermissionRequest", "PreCompact", "PostCompact", "Stop", "SubagentStop", "SubagentStart",
        "Notification", "StopFailure", "Mystery",
    ]
)  # fmt: skip
TOOLS = st.sampled_from(
    [
        "Read", "Write", "Edit", "MultiEdit", "NotebookEdit", "Bash", "Grep", "Glob", "WebSearch", "WebFetch",
        "Task", "Agent", "TodoWrite", "TaskCreate", "TaskUpdate", "TaskList", "TaskGet", "ToolSearch",
        "mcp__srv__tool", "mcp__", "mcp__x", "Other", "",
    ]
)  # fmt: skip
INPUT_KEYS = st.sampled_from(
    [
        "file_path", "notebook_path", "command", "description", "offset", "limit", "content", "old_string",
        "new_string", "edits", "pattern", "path", "glob", "output_mode", "query", "url", "prompt", "todos",
        "subagent_type", "subject", "taskId", "status", "replace_all", "edit_mode", "cell_id", "new_source",
    ]
)  # fmt: skip
RESPONSE_KEYS = st.sampled_from(
    [
        "type", "file", "filePath", "structuredPatch", "stdout", "stderr", "interrupted", "mode", "numFiles",
        "filenames", "numLines", "numMatches", "results", "code", "bytes", "codeText", "result", "status",
        "agentId", "content", "newTodos", "task", "truncated", "backgroundTaskId", "returnCodeInterpretation",
    ]
)  # fmt: skip
PAYLOAD = st.fixed_dictionaries(
    {},
    optional={
        "hook_event_name": EVENTS | JSON,
        "session_id": st.text(max_size=40) | JSON,
        "cwd": st.sampled_from(["/tmp", "/work/main/nmemd", "rel", "", "/"]) | JSON,
        "tool_name": TOOLS | JSON,
        "tool_input": st.dictionaries(INPUT_KEYS, JSON, max_size=6) | JSON,
        "tool_response": st.dictionaries(RESPONSE_KEYS, JSON, max_size=6) | JSON,
        "error": JSON,
        "prompt": st.text(max_size=200) | JSON,
        "last_assistant_message": JSON,
        "source": JSON,
        "reason": JSON,
        "agent_id": JSON,
        "tool_use_id": JSON,
        "transcript_path": JSON,
        "compact_summary": JSON,
        "message": JSON,
    },
)


@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_never_raises_on_any_json(value: object) -> None:
    _check_bounds(extract(value))


@pytest.mark.reliability(scenario=6)
@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(PAYLOAD)
def test_never_raises_on_hook_like_dicts(payload: dict[str, Any]) -> None:
    ex = extract(payload)
    assert len(ex.observations) == 1
    assert isinstance(ex.session_id, str) and isinstance(ex.hook_event, str)
    _check_bounds(ex)


def test_answers_at_the_end_of_long_texts_are_kept() -> None:
    """Issue #14: a compaction summary whole, an error's head and tail, a Stop's whole message with its key."""
    summary = "Summary:\n" + "- done a thing\n" * 600 + "Next Step: ship the quokka"
    (obs,) = extract({"hook_event_name": "PostCompact", "session_id": "s", "compact_summary": summary}).observations
    assert obs.content == summary.strip()
    error = "Exit code 1\n" + "".join(f"test_{i} PASSED\n" for i in range(500)) + "FAILED test_quokka - boom"
    (obs,) = extract(
        {"hook_event_name": "PostToolUseFailure", "session_id": "s", "tool_name": "Bash",
         "tool_input": {"command": "pytest"}, "error": error}
    ).observations  # fmt: skip
    head, marker, tail = obs.content.partition("\n… (")
    assert head.startswith("command: pytest\nExit code 1\ntest_0 PASSED") and head.count("\n") == 40
    assert (
        marker and tail.startswith("402 lines cut) …\n") and tail.endswith("test_499 PASSED\nFAILED test_quokka - boom")
    )
    assert tail.count("\n") == 60
    message = "Done.\n" + "more detail\n" * 1000 + "the quokka is fed"
    ex = extract({"hook_event_name": "Stop", "session_id": "s", "last_assistant_message": message})
    assert ex.observations[0].content == message and ex.natural_key == reply_key("s", message)
    assert ex.natural_key == reply_key("s", "  Done. " + message[6:] + "\n")  # whitespace never splits a key
    assert ex.last_assistant_message is not None and len(ex.last_assistant_message) <= CONTENT_MAX


def test_a_successful_commands_output_keeps_its_verdict() -> None:
    """Issue #31: a test run that passed says so on its last line, and a 5.4 MB output keeps its end too."""
    run = "".join(f"tests/test_x.py::test_{i} PASSED{' ' * 20}[{i // 2:3d}%]\n" for i in range(200))
    run = "============ test session starts ============\n" + run + "======= 200 passed, 3 skipped in 4.02s ======="
    (obs,) = extract(post("Bash", {"command": "pytest -v"}, {"stdout": run, "stderr": ""})).observations
    lines = obs.content.splitlines()
    assert lines[:3] == ["stdout:", "============ test session starts ============", "tests/test_x.py::test_0 PASSED" +
                         " " * 20 + "[  0%]"]  # fmt: skip
    assert lines[-1] == "======= 200 passed, 3 skipped in 4.02s =======" and "lines cut) …" in obs.content
    big = "".join(f'{{"row": {i}, "name": "item {i}"}}\n' for i in range(170_000)) + "done: 170000 rows"
    assert len(big) > 5_400_000
    stderr = "".join(f"warning {i}\n" for i in range(1000)) + "3 warnings were errors? no: 1000 warnings"
    (obs,) = extract(post("Bash", {"command": "dump"}, {"stdout": big, "stderr": stderr})).observations
    assert obs.content.endswith("done: 170000 rows") and len(obs.content) < 3500
    assert "warning 0\n" in obs.content and "1000 warnings\nstdout:" in obs.content
    mcp = {"content": [{"type": "text", "text": "".join(f"result {i}\n" for i in range(5000)) + "total: 5000"}]}
    (obs,) = extract(post("mcp__db__query", {"sql": "select"}, mcp)).observations
    assert obs.content.endswith("total: 5000") and "result 0\n" in obs.content


def test_a_private_block_or_a_key_across_the_cut_never_reaches_an_output_tail() -> None:
    body = "\n".join("MIIEowIBAAKCAQEA" + "x" * 48 for _ in range(300))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\nafter the key"
    private = "<private>\n" + "hidden line\n" * 300 + "</private>\nvisible at the end"
    for out, secret in ((("start\n" * 100) + pem, "MIIEow"), (("start\n" * 100) + private, "hidden")):
        (obs,) = extract(post("Bash", {"command": "cat notes"}, {"stdout": out})).observations
        assert secret not in obs.content and obs.content.endswith(("after the key", "visible at the end"))


def test_a_private_block_or_a_key_across_the_cut_never_reaches_an_errors_tail() -> None:
    body = "\n".join("MIIEowIBAAKCAQEA" + "x" * 48 for _ in range(300))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\nafter the key"
    private = "<private>\n" + "hidden line\n" * 300 + "</private>\nvisible at the end"
    for error, secret in ((("start\n" * 100) + pem, "MIIEow"), (("start\n" * 100) + private, "hidden")):
        (obs,) = extract(
            {"hook_event_name": "PostToolUseFailure", "session_id": "s", "tool_name": "Bash", "error": error}
        ).observations
        assert secret not in obs.content and obs.content.endswith(("after the key", "visible at the end"))
