"""nmem under the real Google Gemini CLI (issue #19): installed by `nmem install --agent gemini` into a fresh
HOME, driven by `gemini -p ... --yolo` against a scripted fake Gemini API on 127.0.0.1.

The scenario runs once per module and the tests check its parts:
1. Claude Code's hook client stores a prompt and a file write in the project (another agent, same memory);
2. a Gemini session, started with no daemon running, runs a shell command, writes a file, edits it, runs
   a failing command, and answers;
3. a second Gemini session, whose first request must hold the context of both agents' work;
4. a third that calls nmem's MCP `search` tool, which the CLI offers the model from `mcpServers.nmem`;
5. `nmem import-transcripts` over the Gemini CLI's session files: nothing new.
Checked from nmem's side (what was stored, with which agent, once) and from the API's side (what the model
was sent). Skipped, with the reason, without the binary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from gemini_api import FakeGemini, call, function_responses, shell, text, tool_names, user_texts
from gemini_cli import SKIP_REASON, GeminiWorld, gemini_bin
from support.helpers import wait_until

pytestmark = [
    pytest.mark.gemini,
    pytest.mark.skipif(gemini_bin() is None, reason=SKIP_REASON),
    pytest.mark.timeout(900),
]
CONTEXT_OPEN = "&lt;nmem-context&gt;"  # Gemini escapes < and > in a hook's additionalContext
STORE_WAIT_S = 30.0
MCP_SEARCH = "mcp_nmem_search"  # the Gemini CLI names an MCP server's tools mcp_<server>_<tool>
SEEDED = "the deploy script lives in scripts/release_deploy.sh"


@dataclass
class Scenario:
    world: GeminiWorld
    api: FakeGemini
    install_out: str = ""
    first: list[dict[str, Any]] = field(default_factory=list)  # the requests of the first Gemini session
    second: list[dict[str, Any]] = field(default_factory=list)
    mcp: list[dict[str, Any]] = field(default_factory=list)
    session: str = ""
    before_import: int = 0
    import_report: dict[str, Any] = field(default_factory=dict)


def _requests_since(api: FakeGemini, start: int) -> list[dict[str, Any]]:
    with api.lock:
        return list(api.requests[start:])


@pytest.fixture(scope="module")
def scenario() -> Iterator[Scenario]:
    binary = gemini_bin()
    assert binary is not None
    with FakeGemini() as api:
        world = GeminiWorld(binary, api.url)
        s = Scenario(world, api)
        try:
            _play(s)
            yield s
        finally:
            world.cleanup()


def _play(s: Scenario) -> None:
    world, api = s.world, s.api
    done = world.nmem("install", "--agent", "gemini")
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
    world.nmem("daemon", "stop")  # the Gemini session starts with no daemon: its SessionStart hook starts it

    notes = str(world.project / "notes.txt")
    api.scripts["edit"] = [
        [shell("printf 'hello\\n' > notes.txt && cat notes.txt")],
        [call("write_file", file_path=str(world.project / "todo.txt"), content="ship it\n")],
        [call("replace", file_path=notes, old_string="hello", new_string="hello world", instruction="greet")],
        [shell("ls missing-file")],
        [text("Edited notes.txt: it now says hello world.")],
    ]
    start = len(api.requests)
    world.run("E2E-edit: write hello to notes.txt, then make it say hello world")
    s.first = _requests_since(api, start)
    wait_until(lambda: world.rows("SELECT 1 FROM observations WHERE hook_event = 'SessionEnd' AND agent = 'gemini'"),
               STORE_WAIT_S, "the first Gemini session's SessionEnd was not stored")  # fmt: skip
    s.session = str(world.rows("SELECT session_id FROM sessions WHERE agent = 'gemini'")[0][0])

    start = len(api.requests)
    world.run("E2E-none: what did we change in notes.txt?")
    s.second = _requests_since(api, start)

    start = len(api.requests)
    api.scripts["mcp"] = [[call(MCP_SEARCH, query="release_deploy")], [text("It is scripts/release_deploy.sh.")]]
    world.run("E2E-mcp: where is the deploy script? ask your memory")
    s.mcp = _requests_since(api, start)

    s.before_import = int(world.rows("SELECT count(*) FROM events")[0][0])
    done = world.nmem("import-transcripts", "--json")
    assert done.returncode == 0, done.stderr
    s.import_report = json.loads(done.stdout.splitlines()[-1])


def test_install_wrote_the_hooks_and_the_mcp_server(scenario: Scenario) -> None:
    assert "Gemini CLI hooks and MCP server 'nmem'" in scenario.install_out
    settings = json.loads((scenario.world.gemini_dir / "settings.json").read_text())
    assert set(settings["hooks"]) == {"SessionStart", "BeforeAgent", "AfterTool", "AfterAgent", "SessionEnd"}
    assert "nmem" in settings["mcpServers"]
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}  # the user's settings kept


def test_the_tool_calls_are_stored_with_agent_gemini(scenario: Scenario) -> None:
    world = scenario.world
    rows = world.rows(
        "SELECT hook_event, type, title, file_path, agent FROM observations WHERE session_id = ? ORDER BY id",
        (scenario.session,),
    )
    notes, todo = str(world.project / "notes.txt"), str(world.project / "todo.txt")
    assert rows == [
        ("SessionStart", "session", "Session started (startup)", None, "gemini"),
        ("UserPromptSubmit", "prompt", "E2E-edit: write hello to notes.txt, then make it say hello world", None,
         "gemini"),
        ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", None, "gemini"),
        ("PostToolUse", "write", "Write todo.txt (created, 1 lines)", todo, "gemini"),
        ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", notes, "gemini"),
        ("PostToolUse", "error", "Shell failed (exit 2): ls missing-file", None, "gemini"),
        ("Stop", "stop", "Stop: Edited notes.txt: it now says hello world.", None, "gemini"),
        ("SessionEnd", "session", "Session ended (exit)", None, "gemini"),
    ]  # fmt: skip
    assert (world.project / "notes.txt").read_text() == "hello world\n"  # the Gemini CLI ran the tools itself
    assert world.rows("SELECT agent FROM sessions WHERE session_id = ?", (scenario.session,)) == [("gemini",)]
    assert world.rows("SELECT agent FROM sessions WHERE session_id = 'claude-e2e-0001'") == [(None,)]
    found = world.nmem("search", "hello world", "--agent", "gemini", "--json")
    sessions = {json.loads(x)["session_id"] for x in found.stdout.splitlines()}
    assert found.returncode == 0 and scenario.session in sessions and "claude-e2e-0001" not in sessions


def test_the_session_start_context_reached_the_model(scenario: Scenario) -> None:
    # `gemini -p` puts SessionStart's additionalContext before the prompt, in <hook_context>.
    first = "\n".join(user_texts(scenario.first[0]))
    assert first.count(CONTEXT_OPEN) == 1 and "<hook_context>" in first
    assert "release_deploy.sh" in first  # what Claude Code did in this project, given to the Gemini CLI
    second = "\n".join(user_texts(scenario.second[0]))
    assert second.count(CONTEXT_OPEN) == 1 and "notes.txt" in second  # the first Gemini session's work


def test_nmems_mcp_search_answers_through_the_gemini_cli(scenario: Scenario) -> None:
    offered = tool_names(scenario.mcp[0])
    assert MCP_SEARCH in offered and "mcp_nmem_timeline" in offered, offered  # nmem-mcp started and listed
    answer = function_responses(scenario.mcp[1])[-1]
    assert "release_deploy" in json.dumps(answer), answer  # Claude Code's work, found by the Gemini CLI
    rows = scenario.world.rows("SELECT type, tool_name, agent FROM observations WHERE type = 'mcp'")
    assert rows == [("mcp", "mcp__nmem__search", "gemini")]


def test_import_transcripts_afterwards_adds_no_duplicates(scenario: Scenario) -> None:
    report = scenario.import_report
    assert report["files"] == 3 and report["bad_files"] == []
    # The first session's prompt, 4 tool calls and reply; the second's prompt and reply; the third's prompt,
    # MCP call and reply: all seen live.
    assert report["events_sent"] == 11 and report["events_new"] == 0, report
    assert int(scenario.world.rows("SELECT count(*) FROM events")[0][0]) == scenario.before_import
