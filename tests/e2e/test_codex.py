"""nmem under the real OpenAI Codex CLI (issue #19): installed by `nmem install --agent codex` into a
fresh HOME, driven by `codex exec` against a scripted fake Responses API on 127.0.0.1.

The scenario runs once per module and the tests check its parts:
1. Claude Code's hook client stores a prompt and an edit in the project (another agent, same memory);
2. a Codex session, started with no daemon running, runs a shell command, an `apply_patch` edit, a
   failing command, and answers; its hooks run because nmem recorded their trust (no bypass flag);
3. a second Codex session, whose first request must hold the context of both agents' work;
4. a third that finds nmem's MCP tools with Codex's `tool_search` and calls `search` through them;
5. `nmem import-transcripts` over Codex's rollout files: nothing new.
Checked from nmem's side (what was stored, with which agent, once) and from the API's side (what
the model was sent). Skipped, with the reason, without the binary.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from codex_api import FakeResponses, developer_texts, mcp_call, message, outputs, patch, shell, tool_search
from codex_cli import SKIP_REASON, CodexWorld, codex_bin
from support.helpers import wait_until

pytestmark = [
    pytest.mark.codex,
    pytest.mark.skipif(codex_bin() is None, reason=SKIP_REASON),
    pytest.mark.timeout(900),
]
CONTEXT_OPEN = "<nmem-context>"
STORE_WAIT_S = 30.0
PATCH = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-hello\n+hello world\n*** End Patch\n"
SEEDED = "the deploy script lives in scripts/release_deploy.sh"


@dataclass
class Scenario:
    world: CodexWorld
    api: FakeResponses
    install_out: str = ""
    first: list[dict[str, Any]] = field(default_factory=list)  # the requests of the first Codex session
    second: list[dict[str, Any]] = field(default_factory=list)
    mcp: list[dict[str, Any]] = field(default_factory=list)
    hooks: dict[str, int] = field(default_factory=dict)
    session: str = ""
    before_import: int = 0
    import_report: dict[str, Any] = field(default_factory=dict)


def _requests_since(api: FakeResponses, start: int) -> list[dict[str, Any]]:
    with api.lock:
        return list(api.requests[start:])


@pytest.fixture(scope="module")
def scenario() -> Iterator[Scenario]:
    binary = codex_bin()
    assert binary is not None
    with FakeResponses() as api:
        world = CodexWorld(binary, api.url)
        s = Scenario(world, api)
        try:
            _play(s)
            yield s
        finally:
            world.cleanup()


def _play(s: Scenario) -> None:
    world, api = s.world, s.api
    done = world.nmem("install", "--agent", "codex")
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
    world.nmem("daemon", "stop")  # the Codex session starts with no daemon: its SessionStart hook starts it

    api.scripts["edit"] = [
        [shell("printf 'hello\\n' > notes.txt && cat notes.txt")],
        [patch(PATCH)],
        [shell("ls missing-file")],
        [message("Edited notes.txt: it now says hello world.")],
    ]
    start = len(api.requests)
    proc = world.exec("E2E-edit: write hello to notes.txt, then make it say hello world")
    s.first = _requests_since(api, start)
    s.hooks = world.hooks_ran(proc)
    wait_until(lambda: world.rows("SELECT 1 FROM observations WHERE hook_event = 'SessionEnd'"), STORE_WAIT_S,
               "the first Codex session's SessionEnd was not stored")  # fmt: skip
    s.session = str(world.rows("SELECT session_id FROM sessions WHERE agent = 'codex'")[0][0])

    start = len(api.requests)
    world.exec("E2E-none: what did we change in notes.txt?")
    s.second = _requests_since(api, start)

    api.scripts["mcp"] = [
        [tool_search("nmem memory search")],
        [mcp_call("mcp__nmem", "search", query="release_deploy")],
        [message("The deploy script is scripts/release_deploy.sh.")],
    ]
    start = len(api.requests)
    world.exec("E2E-mcp: where is the deploy script? ask your memory")
    s.mcp = _requests_since(api, start)

    s.before_import = int(world.rows("SELECT count(*) FROM events")[0][0])
    done = world.nmem("import-transcripts", "--json")
    assert done.returncode == 0, done.stderr
    s.import_report = json.loads(done.stdout.splitlines()[-1])


def test_install_wrote_trusted_hooks_and_the_mcp_server(scenario: Scenario) -> None:
    assert "Codex hooks" in scenario.install_out
    config = (scenario.world.codex_home / "config.toml").read_text()
    assert "[mcp_servers.nmem]" in config and config.count("trusted_hash") == 7
    assert 'wire_api = "responses"' in config  # the user's settings kept


def test_every_hook_ran_without_a_trust_bypass(scenario: Scenario) -> None:
    # `codex exec` prints `hook: <Event> Completed` for each hook it ran (SessionEnd's, at exit, it does not
    # print: the store shows it ran); untrusted ones it skips silently.
    assert scenario.hooks == {"SessionStart": 1, "UserPromptSubmit": 1, "PostToolUse": 3, "Stop": 1}
    assert all("bypass-hook-trust" not in " ".join(map(str, r.args)) for r in scenario.world.runs)


def test_the_tool_calls_are_stored_with_agent_codex(scenario: Scenario) -> None:
    world = scenario.world
    rows = world.rows(
        "SELECT hook_event, type, title, file_path, agent FROM observations WHERE session_id = ? ORDER BY id",
        (scenario.session,),
    )
    notes = str(world.project / "notes.txt")
    assert rows == [
        ("SessionStart", "session", "Session started (startup)", None, "codex"),
        ("UserPromptSubmit", "prompt", "E2E-edit: write hello to notes.txt, then make it say hello world", None,
         "codex"),
        ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", None, "codex"),
        ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", notes, "codex"),
        ("PostToolUse", "error", "Bash failed (exit 2): ls missing-file", None, "codex"),  # the rollout's exit code
        ("Stop", "stop", "Stop: Edited notes.txt: it now says hello world.", None, "codex"),
        ("SessionEnd", "session", "Session ended (other)", None, "codex"),
    ]  # fmt: skip
    assert (world.project / "notes.txt").read_text() == "hello world\n"  # Codex applied the patch itself
    assert world.rows("SELECT agent FROM sessions WHERE session_id = ?", (scenario.session,)) == [("codex",)]
    assert world.rows("SELECT agent FROM sessions WHERE session_id = 'claude-e2e-0001'") == [(None,)]
    found = world.nmem("search", "hello world", "--agent", "codex", "--json")
    sessions = {json.loads(x)["session_id"] for x in found.stdout.splitlines()}
    assert found.returncode == 0 and scenario.session in sessions and "claude-e2e-0001" not in sessions
    claude = world.nmem("search", "release_deploy", "--agent", "claude-code", "--json")
    assert {json.loads(x)["session_id"] for x in claude.stdout.splitlines()} == {"claude-e2e-0001"}


def test_the_session_start_context_reached_the_model(scenario: Scenario) -> None:
    first = scenario.first[0]
    context = [t for t in developer_texts(first) if CONTEXT_OPEN in t]
    assert len(context) == 1, developer_texts(first)
    assert "release_deploy.sh" in context[0]  # what Claude Code did in this project, given to Codex
    second = [t for t in developer_texts(scenario.second[0]) if CONTEXT_OPEN in t]
    assert len(second) == 1 and "notes.txt" in second[0]  # the first Codex session's work, in the next one


def test_nmems_mcp_search_answers_through_codex(scenario: Scenario) -> None:
    found, answer = outputs(scenario.mcp[1])[-1], outputs(scenario.mcp[2])[-1]
    assert any(t.get("name") == "mcp__nmem" for t in found.get("tools", [])), found  # tool_search found nmem
    text = json.dumps(answer.get("output"))
    assert "matches for 'release_deploy'" in text and "s:claude-e" in text  # Claude Code's prompt, found by Codex
    rows = scenario.world.rows("SELECT type, tool_name, agent FROM observations WHERE tool_name LIKE 'mcp__%'")
    assert rows == [("mcp", "mcp__nmem__search", "codex")]


def test_nmems_mcp_server_is_offered_to_the_model(scenario: Scenario) -> None:
    # Codex 0.169 defers MCP tools behind its `tool_search` tool: the model is told each server's
    # namespace and instructions (what nmem's MCP server answered to `initialize`) and searches for
    # the tools it wants. That nmem's namespace is listed means Codex started nmem-mcp and it answered.
    tools = [t.get("type") for t in scenario.first[0].get("tools", [])]
    assert "tool_search" in tools
    listed = [t for t in developer_texts(scenario.first[0]) if "Deferred tool namespaces" in t]
    assert listed and "- mcp__nmem: nmem remembers" in listed[0]


def test_import_transcripts_afterwards_adds_no_duplicates(scenario: Scenario) -> None:
    report = scenario.import_report
    assert report["files"] == 3 and report["bad_files"] == []
    # The first session's prompt, 3 tool calls and reply; the second's prompt and reply; the third's
    # prompt, MCP call and reply: all seen live.
    assert report["events_sent"] == 10 and report["events_new"] == 0, report
    assert int(scenario.world.rows("SELECT count(*) FROM events")[0][0]) == scenario.before_import
