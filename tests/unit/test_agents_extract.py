"""Every agent's payloads into observations, in process: each agent's recorded (or documented) session,
as its hook runs `send.py --agent NAME` (`with_agent`), through the daemon's own decoding and extraction
(`extract_event`), then into a real store. The per-agent details: test_agents_<agent>_extract.py and
tests/daemon/test_agents_*.py."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import DATA, hook_payloads
from support.payloads import cline, codex, copilot, cursor, gemini, opencode
from support.store import stored

from nmem_client.hook import agent_arg, with_agent
from nmemd import registry
from nmemd.capture.extract import extract, extract_event
from nmemd.model import CLAUDE_CODE, CONTENT_MAX, OBSERVATION_TYPES, TITLE_MAX, Extracted, stored_agent


def _claude_code(tmp: Path) -> list[dict[str, Any]]:
    return [payload for _, payload in hook_payloads()]


def _codex(tmp: Path) -> list[dict[str, Any]]:
    return codex.real_payloads(Path(shutil.copy(codex.ROLLOUT, tmp / codex.ROLLOUT.name)))  # exit codes from it


def _cline(tmp: Path) -> list[dict[str, Any]]:
    real = (DATA / "cline" / "hooks-3.0.65.jsonl").read_text().splitlines()
    return cline.task_events("task-unit-1") + [json.loads(line) for line in real if line.strip()]


SESSIONS: dict[str, Callable[[Path], list[dict[str, Any]]]] = {
    CLAUDE_CODE: _claude_code,
    "codex": _codex,
    "gemini": lambda tmp: gemini.real_payloads(),
    "copilot": lambda tmp: copilot.real_payloads(),
    "cursor": lambda tmp: cursor.session("conv-unit-1"),
    "cline": _cline,
    "opencode": opencode.plugin_payloads,
}
# What each agent's session gives: the kinds of observation its hooks can tell apart.
KINDS = {
    CLAUDE_CODE: {"session", "prompt", "event", "read", "command", "edit", "write", "search", "task", "agent",
                  "error", "notification", "stop", "compact", "fetch", "mcp"},
    "codex": {"session", "prompt", "event", "command", "edit", "error", "stop"},
    "gemini": {"session", "prompt", "event", "command", "write", "edit", "read", "error", "search", "stop"},
    "copilot": {"session", "prompt", "command", "error", "read", "stop"},
    "cursor": {"session", "prompt", "command", "edit", "mcp", "error", "stop", "compact"},
    "cline": {"session", "prompt", "command", "error", "read", "write", "edit", "search", "mcp", "stop", "compact"},
    "opencode": {"session", "prompt", "command", "write", "read", "edit", "error", "tool", "stop"},
}  # fmt: skip


def extracted(agent: str, tmp: Path) -> list[Extracted]:
    """The agent's session as the daemon reads it: Claude Code's hooks name no agent, the others' do."""
    out = []
    for payload in SESSIONS[agent](tmp):
        body = json.dumps(payload).encode()
        if agent != CLAUDE_CODE:
            body = with_agent(body, agent.encode())
        out.append(extract_event(body, frozenset()))
    return out


def test_every_agent_has_a_session_here() -> None:
    assert set(SESSIONS) == set(KINDS) == set(registry.names())


@pytest.mark.parametrize("agent", registry.names())
def test_an_agents_session_becomes_bounded_observations_of_its_kinds(agent: str, tmp_path: Path) -> None:
    events = extracted(agent, tmp_path)
    assert events and {e.agent for e in events} == {None if agent == CLAUDE_CODE else agent}
    kinds = set()
    for e in events:
        assert e.session_id != "unknown" and e.hook_event != "unknown", e
        for obs in e.observations:
            assert obs.type in OBSERVATION_TYPES and "extraction failed" not in obs.title, (e.hook_event, obs)
            assert obs.title and len(obs.title) <= TITLE_MAX and "\n" not in obs.title, obs.title
            assert len(obs.content) <= CONTENT_MAX, (obs.type, len(obs.content))
            kinds.add(obs.type)
    assert kinds == KINDS[agent]


def test_every_agents_session_is_stored_under_its_name(tmp_path: Path) -> None:
    payloads = []
    for agent in registry.names():
        for payload in SESSIONS[agent](tmp_path):
            payloads.append(payload if agent == CLAUDE_CODE else {"nmem_agent": agent, **payload})
    conn = sqlite3.connect(f"file:{stored(payloads)}?mode=ro", uri=True)
    try:
        by_agent = dict(conn.execute("SELECT coalesce(agent, ''), count(*) FROM observations GROUP BY agent"))
    finally:
        conn.close()
    assert set(by_agent) == {stored_agent(agent) or "" for agent in registry.names()}
    assert all(by_agent.values())


# --- how the hook client names the agent, and extraction reads it ---------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"a":1}', b'{"nmem_agent":"codex","a":1}'),
        (b'  \n{ "a": 1 }', b'  \n{"nmem_agent":"codex", "a": 1 }'),
        (b"{}", b'{"nmem_agent":"codex"}'),
        (b"{ }", b'{"nmem_agent":"codex" }'),
        (b"[1, 2]", b"[1, 2]"),  # not an object: the daemon refuses it as it is
        (b"not json", b"not json"),
        (b'{"nmem_agent":"other","a":1}', b'{"nmem_agent":"other","a":1}'),  # named already: left alone
    ],
)
def test_the_client_puts_the_agent_first_in_the_payload(body: bytes, expected: bytes) -> None:
    out = with_agent(body, b"codex")
    assert out == expected
    if expected.startswith(b"{") or expected.lstrip().startswith(b"{"):
        assert json.loads(out)["nmem_agent"] in ("codex", "other")


@pytest.mark.parametrize(
    ("argv", "agent"),
    [
        (["--agent", "codex"], b"codex"),
        (["--agent=codex"], b"codex"),
        ([], b""),
        (["--agent"], b""),
        (["--agent", "Codex"], b""),  # only lowercase names
        (["--agent", "a" * 33], b""),
        (["--agent", 'x","y'], b""),  # nothing that could break the JSON it goes into
    ],
)
def test_the_agent_argument_is_a_plain_name_or_nothing(argv: list[str], agent: bytes) -> None:
    assert agent_arg(argv) == agent


def test_extraction_reads_the_agent_and_ignores_anything_else() -> None:
    base = {"session_id": "s1", "hook_event_name": "UserPromptSubmit", "prompt": "hello", "cwd": "/tmp/p"}
    assert extract({**base, "nmem_agent": "codex"}).agent == "codex"
    assert extract({**base, "nmem_agent": "claude-code"}).agent is None  # Claude Code stores no name
    assert extract({**base, "nmem_agent": "claude"}).agent is None
    assert extract(base).agent is None
    for odd in (None, 3, "", "Codex", "x" * 40, ["codex"]):
        assert extract({**base, "nmem_agent": odd}).agent is None
    # The name is not part of what is stored about the event.
    generic = extract({**base, "hook_event_name": "Notification2", "nmem_agent": "codex"})
    assert "nmem_agent" not in generic.observations[0].content
