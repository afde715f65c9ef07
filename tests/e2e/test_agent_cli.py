"""nmem under each real agent CLI with command hooks (issue #19): installed by `nmem install --agent NAME`
into a fresh HOME, driven in print mode offline against a scripted fake API on 127.0.0.1. One scenario
(agent_case.py says it), played once per agent; what differs by agent is its case (codex_cli.CASE,
gemini_cli.CASE, copilot_cli.CASE). An agent whose binary is not here is skipped, with the reason."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import codex_cli
import copilot_cli
import gemini_cli
import pytest
from agent_case import SEEDED, AgentCase, Scenario
from support.helpers import wait_until

CASES: tuple[AgentCase, ...] = (codex_cli.CASE, gemini_cli.CASE, copilot_cli.CASE)
STORE_WAIT_S = 30.0
CLAUDE_SESSION = "claude-e2e-0001"
pytestmark = [pytest.mark.timeout(900)]


def _marks(case: AgentCase) -> list[Any]:
    """Its agent's marker, its skip, and its xdist group: one worker plays each agent's scenario once."""
    return [
        getattr(pytest.mark, case.cli.marker),
        pytest.mark.skipif(case.binary() is None, reason=case.skip_reason()),
        pytest.mark.xdist_group(f"agent_cli_{case.agent}"),
    ]


@pytest.fixture(scope="module", params=[pytest.param(case, id=case.agent, marks=_marks(case)) for case in CASES])
def scenario(request: pytest.FixtureRequest) -> Iterator[Scenario]:
    case: AgentCase = request.param
    binary = case.binary()
    assert binary is not None
    with case.api() as api:
        world = case.world(binary, api.url)
        s = Scenario(case, world, api)
        try:
            _play(s)
            yield s
        finally:
            world.cleanup()


def _requests_since(api: Any, start: int) -> list[dict[str, Any]]:
    with api.lock:
        return list(api.requests[start:])


def _sessions_ended(s: Scenario, count: int) -> bool:
    rows = s.world.rows(
        "SELECT count(*) FROM observations WHERE hook_event = 'SessionEnd' AND agent = ?", (s.case.agent,)
    )
    return bool(rows) and int(rows[0][0]) >= count


def _session(s: Scenario, prompt: str, number: int) -> list[dict[str, Any]]:
    """Run one session of the agent; the requests its model was sent."""
    start = len(s.api.requests)
    s.runs.append(s.case.session(s.world, prompt))
    sent = _requests_since(s.api, start)
    if number == 1 or s.case.wait_every_session:
        wait_until(lambda: _sessions_ended(s, number), STORE_WAIT_S,
                   f"session {number} of {s.case.cli.label}: its SessionEnd was not stored")  # fmt: skip
    return sent


def _play(s: Scenario) -> None:
    case, world, api = s.case, s.world, s.api
    done = world.nmem("install", "--agent", case.agent)
    assert done.returncode == 0, done.stderr
    s.install_out = done.stdout
    claude = {"session_id": CLAUDE_SESSION, "cwd": str(world.project), "transcript_path": "/tmp/none.jsonl"}
    for payload in (
        {**claude, "hook_event_name": "UserPromptSubmit", "prompt": f"remember that {SEEDED}"},
        {**claude, "hook_event_name": "PostToolUse", "tool_name": "Write", "tool_use_id": "toolu_seed",
         "tool_input": {"file_path": str(world.project / "scripts/release_deploy.sh"), "content": "#!/bin/sh\n"},
         "tool_response": {"type": "create"}},
        {**claude, "hook_event_name": "Stop", "last_assistant_message": f"Noted: {SEEDED}."},
    ):  # fmt: skip
        sent = world.send(payload)  # Claude Code's hooks pass no --agent
        assert (sent.returncode, sent.stderr) == (0, b""), sent
    world.nmem("daemon", "stop")  # the agent's session starts with no daemon: its SessionStart hook starts it

    api.scripts["edit"] = case.edit_script(world)
    s.first = _session(s, "E2E-edit: write hello to notes.txt, then make it say hello world", 1)
    s.session = str(world.rows("SELECT session_id FROM sessions WHERE agent = ?", (case.agent,))[0][0])
    s.second = _session(s, "E2E-none: what did we change in notes.txt?", 2)
    api.scripts["mcp"] = case.mcp_script()
    s.mcp = _session(s, "E2E-mcp: where is the deploy script? ask your memory", 3)

    s.before_import = int(world.rows("SELECT count(*) FROM events")[0][0])
    done = world.nmem("import-transcripts", "--json")
    assert done.returncode == 0, done.stderr
    s.import_report = json.loads(done.stdout.splitlines()[-1])


def test_install_wrote_the_hooks_and_the_mcp_server(scenario: Scenario) -> None:
    scenario.case.check_install(scenario)


def test_the_tool_calls_are_stored_once_with_the_agents_name(scenario: Scenario) -> None:
    case, world = scenario.case, scenario.world
    rows = world.rows(
        "SELECT hook_event, type, title, file_path, agent FROM observations WHERE session_id = ? ORDER BY id",
        (scenario.session,),
    )
    expected, head = case.first_rows(world), case.unordered_head
    assert sorted(rows[:head]) == sorted(expected[:head]) and rows[head:] == expected[head:], rows
    assert (world.project / "notes.txt").read_text() == "hello world\n"  # the agent ran the tools itself
    assert world.rows("SELECT agent FROM sessions WHERE session_id = ?", (scenario.session,)) == [(case.agent,)]
    assert world.rows("SELECT agent FROM sessions WHERE session_id = ?", (CLAUDE_SESSION,)) == [(None,)]
    found = world.nmem("search", "hello world", "--agent", case.agent, "--json")
    sessions = {json.loads(x)["session_id"] for x in found.stdout.splitlines()}
    assert found.returncode == 0 and scenario.session in sessions and CLAUDE_SESSION not in sessions
    claude = world.nmem("search", "release_deploy", "--agent", "claude-code", "--json")
    assert {json.loads(x)["session_id"] for x in claude.stdout.splitlines()} == {CLAUDE_SESSION}
    case.check_rows(scenario)


def test_the_session_start_context_reached_the_model(scenario: Scenario) -> None:
    case = scenario.case
    first = case.contexts(scenario.first[0])
    assert len(first) == 1 and "release_deploy.sh" in first[0], first  # Claude Code's work, given to the agent
    second = case.contexts(scenario.second[0])
    assert len(second) == 1 and "notes.txt" in second[0], second  # the first session's work, in the next one
    case.check_context(scenario)


def test_nmems_mcp_search_answers_through_the_agent(scenario: Scenario) -> None:
    scenario.case.check_mcp(scenario)
    rows = scenario.world.rows("SELECT type, tool_name, agent FROM observations WHERE type = 'mcp'")
    assert rows == [("mcp", "mcp__nmem__search", scenario.case.agent)]


def test_import_transcripts_afterwards_adds_nothing(scenario: Scenario) -> None:
    report = scenario.import_report
    assert report["files"] == 3 and report["bad_files"] == []
    assert report["events_sent"] == scenario.case.events_sent and report["events_new"] == 0, report
    assert int(scenario.world.rows("SELECT count(*) FROM events")[0][0]) == scenario.before_import


@pytest.mark.parametrize(
    ("scenario", "check"),
    [
        pytest.param(case, check, id=f"{case.agent}-{check.__name__}", marks=_marks(case))
        for case in CASES
        for check in case.own_checks()
    ],
    indirect=["scenario"],
)
def test_what_only_this_agent_does(scenario: Scenario, check: Callable[[Scenario], None]) -> None:
    check(scenario)
