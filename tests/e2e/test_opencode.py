"""nmem under the real OpenCode (issue #19): installed by `nmem install --agent opencode` into a fresh HOME
(nmem's plugin nmem.js and `mcp.nmem`), driven by `opencode run` against a scripted OpenAI-compatible API on
127.0.0.1.

The scenario runs once per module and the tests check its parts:
1. Claude Code's hook client stores a prompt and a file write in the project (another agent, same memory);
2. an OpenCode session, started with no daemon running, runs a shell command, writes a file, edits
   another, runs a failing command, and answers; its first request must hold the context of Claude Code's
   work (nmem's plugin adds it to the system prompt);
3. a second session that calls nmem's MCP `search` tool, which OpenCode offers the model from `mcp.nmem`;
4. `nmem import-transcripts` over OpenCode's database: nothing new.
Checked from nmem's side (what was stored, with which agent, once) and from the API's side (what the model
was sent). Skipped, with the reason, without the binary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opencode_api import SKIP_REASON, FakeChat, OpenCodeWorld, opencode_bin, system_text, tool_names, tool_results
from support.helpers import wait_until

pytestmark = [
    pytest.mark.opencode,
    pytest.mark.skipif(opencode_bin() is None, reason=SKIP_REASON),
    pytest.mark.timeout(900),
    pytest.mark.xdist_group("opencode"),  # its module fixture plays the agent once: one worker runs the file
]
STORE_WAIT_S = 30.0
MCP_SEARCH = "nmem_search"  # OpenCode names an MCP server's tools <server>_<tool>
SEEDED = "the deploy script lives in scripts/release_deploy.sh"


@dataclass
class Scenario:
    world: OpenCodeWorld
    api: FakeChat
    install_out: str = ""
    first: list[dict[str, Any]] = field(default_factory=list)
    mcp: list[dict[str, Any]] = field(default_factory=list)
    session: str = ""
    before_import: int = 0
    import_report: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def scenario() -> Iterator[Scenario]:
    binary = opencode_bin()
    assert binary is not None
    with FakeChat() as api:
        world = OpenCodeWorld(binary, api.url)
        s = Scenario(world, api)
        try:
            _play(s)
            yield s
        finally:
            world.cleanup()


def _play(s: Scenario) -> None:
    world, api = s.world, s.api
    done = world.nmem("install", "--agent", "opencode")
    assert done.returncode == 0, done.stderr
    s.install_out = done.stdout
    claude = {"session_id": "claude-e2e-0001", "cwd": str(world.project), "transcript_path": "/tmp/none.jsonl"}
    for payload in (
        {**claude, "hook_event_name": "UserPromptSubmit", "prompt": f"remember that {SEEDED}"},
        {**claude, "hook_event_name": "PostToolUse", "tool_name": "Write", "tool_use_id": "toolu_seed",
         "tool_input": {"file_path": str(world.project / "scripts/release_deploy.sh"), "content": "#!/bin/sh\n"},
         "tool_response": {"type": "create"}},
        {**claude, "hook_event_name": "Stop", "last_assistant_message": f"Noted: {SEEDED}."},
    ):  # fmt: skip
        sent = world.send(payload)
        assert (sent.returncode, sent.stderr) == (0, b""), sent
    world.nmem("daemon", "stop")  # the OpenCode session starts with no daemon: the plugin's SessionStart starts it

    api.scripts["edit"] = [
        [("bash", {"command": "printf 'hello\\n' > notes.txt && cat notes.txt", "description": "Write hello"})],
        [("write", {"filePath": "todo.txt", "content": "ship it\n"})],
        [("edit", {"filePath": "notes.txt", "oldString": "hello", "newString": "hello world"})],
        [("bash", {"command": "ls missing-file", "description": "List a missing file"})],
        "Edited notes.txt: it now says hello world.",
    ]
    start = len(api.requests)
    world.run("E2E-edit: write hello to notes.txt, then make it say hello world")
    s.first = api.since(start)
    wait_until(lambda: world.rows("SELECT 1 FROM observations WHERE hook_event = 'Stop' AND agent = 'opencode'"),
               STORE_WAIT_S, "the first OpenCode session's Stop was not stored")  # fmt: skip
    s.session = str(world.rows("SELECT session_id FROM sessions WHERE agent = 'opencode'")[0][0])

    api.scripts["mcp"] = [[(MCP_SEARCH, {"query": "release_deploy"})], "It is scripts/release_deploy.sh."]
    start = len(api.requests)
    world.run("E2E-mcp: where is the deploy script? ask your memory")
    s.mcp = api.since(start)
    wait_until(lambda: world.rows("SELECT 1 FROM observations WHERE agent = 'opencode' AND tool_name = ?",
                                  (MCP_SEARCH,)), STORE_WAIT_S, "the MCP call was not stored")  # fmt: skip

    s.before_import = int(world.rows("SELECT count(*) FROM events")[0][0])
    done = world.nmem("import-transcripts", "--json")
    assert done.returncode == 0, done.stderr
    s.import_report = json.loads(done.stdout.splitlines()[-1])


def test_install_wrote_the_plugin_and_the_mcp_server(scenario: Scenario) -> None:
    assert "OpenCode plugin:" in scenario.install_out and "OpenCode MCP server 'nmem'" in scenario.install_out
    config = json.loads((scenario.world.config_dir / "opencode.json").read_text())
    assert config["mcp"]["nmem"]["type"] == "local" and config["model"] == "fake/m1"  # the user's config kept
    assert (scenario.world.config_dir / "plugin" / "nmem.js").is_file()


def test_the_tool_calls_are_stored_with_agent_opencode(scenario: Scenario) -> None:
    world = scenario.world
    rows = world.rows(
        "SELECT hook_event, type, title, file_path, agent FROM observations WHERE session_id = ? ORDER BY id",
        (scenario.session,),
    )
    notes, todo = str(world.project / "notes.txt"), str(world.project / "todo.txt")
    # OpenCode sends `session.created` on its event bus and the prompt through the `chat.message` hook,
    # side by side: either hook may be acked by the inbox while the daemon starts (its rows stored
    # later), so the first two rows may come in either order. Every later row is checked in order.
    rows[:2] = sorted(rows[:2], key=lambda row: row[0] != "SessionStart")
    assert rows == [
        ("SessionStart", "session", "Session started (startup)", None, "opencode"),
        # `opencode run` 1.18.33 quotes an argument with spaces itself: the session holds the prompt so.
        ("UserPromptSubmit", "prompt", '"E2E-edit: write hello to notes.txt, then make it say hello world"', None,
         "opencode"),
        ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", None, "opencode"),
        ("PostToolUse", "write", "Write todo.txt (created, 1 lines)", todo, "opencode"),
        ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", notes, "opencode"),
        ("PostToolUse", "error", "Bash failed (exit 2): ls missing-file", None, "opencode"),
        ("Stop", "stop", "Stop: Edited notes.txt: it now says hello world.", None, "opencode"),
    ]  # fmt: skip
    assert (world.project / "notes.txt").read_text() == "hello world\n"  # OpenCode ran the tools itself
    ids = world.rows("SELECT tool_use_id FROM observations WHERE session_id = ? AND tool_use_id IS NOT NULL",
                     (scenario.session,))  # fmt: skip
    assert sorted(i for (i,) in ids) == ["call_0_0", "call_1_0", "call_2_0", "call_3_0"]
    assert world.rows("SELECT agent FROM sessions WHERE session_id = 'claude-e2e-0001'") == [(None,)]
    found = world.nmem("search", "hello world", "--agent", "opencode", "--json")
    sessions = {json.loads(x)["session_id"] for x in found.stdout.splitlines()}
    assert found.returncode == 0 and scenario.session in sessions and "claude-e2e-0001" not in sessions


def test_the_session_start_context_reached_the_model(scenario: Scenario) -> None:
    system = system_text(scenario.first[0])
    assert system.count("<nmem-context") == 1, system[-2000:]
    assert "release_deploy.sh" in system  # what Claude Code did in this project, given to OpenCode
    mcp_system = system_text(scenario.mcp[0])
    assert "notes.txt" in mcp_system  # the first OpenCode session's work, in the next session's context


def test_nmems_mcp_search_answers_through_opencode(scenario: Scenario) -> None:
    offered = tool_names(scenario.mcp[0])
    assert MCP_SEARCH in offered and "nmem_timeline" in offered, offered  # nmem-mcp started and listed
    answer = tool_results(scenario.mcp[1])[-1]
    assert "release_deploy" in answer, answer  # Claude Code's work, found by OpenCode


def test_import_transcripts_afterwards_adds_no_duplicates(scenario: Scenario) -> None:
    report = scenario.import_report
    assert report["files"] == 1 and report["bad_files"] == [], report
    # The first session's prompt, 4 tool calls and reply; the second's prompt, MCP call and reply.
    assert report["events_sent"] == 9 and report["events_new"] == 0, report
    assert int(scenario.world.rows("SELECT count(*) FROM events")[0][0]) == scenario.before_import
