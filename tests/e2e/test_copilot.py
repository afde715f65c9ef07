"""nmem under the real GitHub Copilot CLI (issue #19): installed by `nmem install --agent copilot` into a
fresh HOME/COPILOT_HOME, driven by `copilot -p ... --allow-all-tools` offline against a scripted fake
Responses API on 127.0.0.1.

The scenario runs once per module and the tests check its parts:
1. Claude Code's hook client stores a prompt and a file write in the project (another agent, same memory);
2. a Copilot session, started with no daemon running, runs a shell command, an `apply_patch` edit, a
   failing command, and answers;
3. a second Copilot session, whose first request must hold the context of both agents' work;
4. a third that calls nmem's MCP `search` tool, which Copilot offers the model from mcp-config.json;
5. `nmem import-transcripts` over Copilot's session files: nothing new.
Checked from nmem's side (what was stored, with which agent, once) and from the API's side (what the model
was sent). Skipped, with the reason, without the binary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from copilot_api import FakeCopilotAPI, call, message, output_texts, patch, shell, tool_names, user_texts
from copilot_cli import SKIP_REASON, CopilotWorld, copilot_bin
from support.helpers import wait_until

pytestmark = [
    pytest.mark.copilot,
    pytest.mark.skipif(copilot_bin() is None, reason=SKIP_REASON),
    pytest.mark.timeout(900),
]
CONTEXT_OPEN = "<nmem-context>"
STORE_WAIT_S = 30.0
MCP_SEARCH = "nmem-search"  # Copilot names an MCP server's tools <server>-<tool>
PATCH = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-hello\n+hello world\n*** End Patch\n"
SEEDED = "the deploy script lives in scripts/release_deploy.sh"


@dataclass
class Scenario:
    world: CopilotWorld
    api: FakeCopilotAPI
    install_out: str = ""
    first: list[dict[str, Any]] = field(default_factory=list)  # the requests of the first Copilot session
    second: list[dict[str, Any]] = field(default_factory=list)
    mcp: list[dict[str, Any]] = field(default_factory=list)
    session: str = ""
    before_import: int = 0
    import_report: dict[str, Any] = field(default_factory=dict)


def _requests_since(api: FakeCopilotAPI, start: int) -> list[dict[str, Any]]:
    with api.lock:
        return list(api.requests[start:])


@pytest.fixture(scope="module")
def scenario() -> Iterator[Scenario]:
    binary = copilot_bin()
    assert binary is not None
    with FakeCopilotAPI() as api:
        world = CopilotWorld(binary, api.url)
        s = Scenario(world, api)
        try:
            _play(s)
            yield s
        finally:
            world.cleanup()


def _session_ended(world: CopilotWorld, count: int) -> bool:
    rows = world.rows("SELECT count(*) FROM observations WHERE hook_event = 'SessionEnd' AND agent = 'copilot'")
    return bool(rows) and int(rows[0][0]) >= count


def _play(s: Scenario) -> None:
    world, api = s.world, s.api
    done = world.nmem("install", "--agent", "copilot")
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
        sent = world.send(payload)  # Claude Code's hooks pass no --agent
        assert (sent.returncode, sent.stderr) == (0, b""), sent
    world.nmem("daemon", "stop")  # the Copilot session starts with no daemon: its SessionStart hook starts it

    api.scripts["edit"] = [
        [shell("printf 'hello\\n' > notes.txt && cat notes.txt")],
        [patch(PATCH)],
        [shell("ls missing-file")],
        [message("Edited notes.txt: it now says hello world.")],
    ]
    start = len(api.requests)
    world.run("E2E-edit: write hello to notes.txt, then make it say hello world")
    s.first = _requests_since(api, start)
    wait_until(lambda: _session_ended(world, 1), STORE_WAIT_S, "the first Copilot session's SessionEnd")
    s.session = str(world.rows("SELECT session_id FROM sessions WHERE agent = 'copilot'")[0][0])

    start = len(api.requests)
    world.run("E2E-none: what did we change in notes.txt?")
    s.second = _requests_since(api, start)
    wait_until(lambda: _session_ended(world, 2), STORE_WAIT_S, "the second Copilot session's SessionEnd")

    api.scripts["mcp"] = [[call(MCP_SEARCH, query="release_deploy")], [message("It is scripts/release_deploy.sh.")]]
    start = len(api.requests)
    world.run("E2E-mcp: where is the deploy script? ask your memory")
    s.mcp = _requests_since(api, start)
    wait_until(lambda: _session_ended(world, 3), STORE_WAIT_S, "the third Copilot session's SessionEnd")

    s.before_import = int(world.rows("SELECT count(*) FROM events")[0][0])
    done = world.nmem("import-transcripts", "--json")
    assert done.returncode == 0, done.stderr
    s.import_report = json.loads(done.stdout.splitlines()[-1])


def test_install_wrote_the_hooks_and_the_mcp_server(scenario: Scenario) -> None:
    assert "Copilot hooks" in scenario.install_out and "Copilot MCP server 'nmem'" in scenario.install_out
    settings = json.loads((scenario.world.copilot_home / "settings.json").read_text())
    assert settings["banner"] == "never"  # the user's settings kept
    assert {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"} <= set(settings["hooks"])
    mcp = json.loads((scenario.world.copilot_home / "mcp-config.json").read_text())
    assert mcp["mcpServers"]["nmem"]["command"].endswith("nmem-mcp")


def test_the_tool_calls_are_stored_once_with_agent_copilot(scenario: Scenario) -> None:
    world = scenario.world
    rows = world.rows(
        "SELECT hook_event, type, title, file_path, agent FROM observations WHERE session_id = ? ORDER BY id",
        (scenario.session,),
    )
    notes = str(world.project / "notes.txt")
    # Copilot runs the prompt's hook beside SessionStart's, so either may be stored first.
    assert sorted(rows[:2]) == [
        ("SessionStart", "session", "Session started (startup)", None, "copilot"),
        ("UserPromptSubmit", "prompt", "E2E-edit: write hello to notes.txt, then make it say hello world", None,
         "copilot"),
    ]  # fmt: skip
    assert rows[2:] == [
        ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", None, "copilot"),
        ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", notes, "copilot"),
        ("PostToolUse", "error", "Bash failed (exit 2): ls missing-file", None, "copilot"),  # from the shell's exit
        ("Stop", "stop", "Stop", None, "copilot"),  # Copilot's Stop carries no reply
        ("SessionEnd", "session", "Session ended (complete)", None, "copilot"),
    ]  # fmt: skip
    assert (world.project / "notes.txt").read_text() == "hello world\n"  # Copilot applied the patch itself
    ids = world.rows("SELECT tool_use_id FROM observations WHERE session_id = ? AND hook_event = 'PostToolUse'",
                     (scenario.session,))  # fmt: skip
    assert len({i for (i,) in ids if i and i.startswith("hook-")}) == 3  # each call keyed, by its hook's time
    assert world.rows("SELECT agent FROM sessions WHERE session_id = ?", (scenario.session,)) == [("copilot",)]
    assert world.rows("SELECT agent FROM sessions WHERE session_id = 'claude-e2e-0001'") == [(None,)]
    found = world.nmem("search", "hello world", "--agent", "copilot", "--json")
    sessions = {json.loads(x)["session_id"] for x in found.stdout.splitlines()}
    assert found.returncode == 0 and scenario.session in sessions and "claude-e2e-0001" not in sessions


def test_the_session_start_context_reached_the_model(scenario: Scenario) -> None:
    # Copilot puts SessionStart's additionalContext in a user message before the prompt.
    first = user_texts(scenario.first[0])
    context = [t for t in first if CONTEXT_OPEN in t]
    assert len(context) == 1 and first.index(context[0]) < len(first) - 1, first
    assert "release_deploy.sh" in context[0]  # what Claude Code did in this project, given to Copilot
    assert scenario.session[:8] not in context[0]  # the starting session itself is not listed as history
    second = [t for t in user_texts(scenario.second[0]) if CONTEXT_OPEN in t]
    assert len(second) == 1 and "notes.txt" in second[0] and "by Copilot CLI" in second[0]  # the first session


def test_nmems_mcp_search_answers_through_copilot(scenario: Scenario) -> None:
    offered = tool_names(scenario.mcp[0])
    assert MCP_SEARCH in offered and "nmem-timeline" in offered, offered  # nmem-mcp started and listed
    answer = output_texts(scenario.mcp[1])[-1]
    assert "matches for 'release_deploy'" in answer and "s:claude-e" in answer  # Claude Code's work, found
    rows = scenario.world.rows("SELECT type, tool_name, agent FROM observations WHERE type = 'mcp'")
    assert rows == [("mcp", "mcp__nmem__search", "copilot")]


def test_import_transcripts_afterwards_adds_nothing(scenario: Scenario) -> None:
    report = scenario.import_report
    assert report["files"] == 3 and report["bad_files"] == []
    # The first session's prompt, 3 tool calls and reply; the second's prompt and reply; the third's prompt,
    # MCP call and reply: all seen live.
    assert report["events_sent"] == 10 and report["events_new"] == 0, report
    assert int(scenario.world.rows("SELECT count(*) FROM events")[0][0]) == scenario.before_import
