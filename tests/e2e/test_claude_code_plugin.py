"""nmem as a Claude Code plugin (issue #15), installed with the real CLI's own plugin commands.

A fresh HOME adds this repository as a marketplace (`claude plugin marketplace add`, a local
folder: offline) and installs `nmem@nmem`; `nmem install` is never run. nmem's commands are on
PATH, as `pipx install nmem` leaves them. One session runs a Bash tool; a second must start with
the first one's context, and the plugin's MCP tools must be offered and answer.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from agent_world import BIN
from claude_code import REPO, SKIP_REASON, Run, World, claude_bin
from fakeapi import FakeAPI, all_text, text, tool
from support.helpers import wait_until

pytestmark = [
    pytest.mark.claude_code,
    pytest.mark.skipif(claude_bin() is None, reason=SKIP_REASON),
    pytest.mark.timeout(900),
    pytest.mark.xdist_group("claude_code_plugin"),  # its module fixture plays the agent once: one worker runs the file
]
CONTEXT_OPEN = "<nmem-context>"


@dataclass
class Played:
    world: World
    installed: list[str] = field(default_factory=list)  # the plugin commands' output
    first: Run | None = None
    requests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _claude(world: World, *args: str) -> str:
    import subprocess

    done = subprocess.run([world.claude, *args], env=world.env, cwd=world.project, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, f"claude {' '.join(args)}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def played() -> Iterator[Played]:
    binary = claude_bin()
    assert binary is not None
    with FakeAPI() as api:
        world = World(binary, api.url)
        world.env["PATH"] = f"{BIN}:{world.env.get('PATH', '')}"  # nmem-send and nmem-mcp, as pipx leaves them
        p = Played(world)
        try:
            p.installed.append(_claude(world, "plugin", "validate", str(REPO)))
            p.installed.append(_claude(world, "plugin", "marketplace", "add", str(REPO)))
            p.installed.append(_claude(world, "plugin", "install", "nmem@nmem"))
            api.scripts["plug"] = [
                [tool("Bash", command="echo plugin-e2e-okapi", description="Say okapi")],
                [text("Done with okapi.")],
            ]
            api.scripts["again"] = [[text("Hello again.")]]
            start = len(api.requests)
            p.first = world.claude_run("E2E-plug run the okapi command")
            p.requests["first"] = list(api.requests[start:])
            wait_until(lambda: _stored(world, "okapi") >= 2, 45.0, "the first session stored")
            start = len(api.requests)
            world.claude_run("E2E-again a new session")
            p.requests["again"] = list(api.requests[start:])
            yield p
        finally:
            world.cleanup()


def _stored(world: World, word: str) -> int:
    return int(world.rows("SELECT count(*) FROM observations WHERE content LIKE ? OR title LIKE ?",
                          (f"%{word}%", f"%{word}%"))[0][0]) if world.db.exists() else 0  # fmt: skip


def test_the_plugin_installs_with_claude_codes_own_commands(played: Played) -> None:
    assert "Validation passed" in played.installed[0], played.installed[0]
    assert "nmem@nmem" in played.installed[2]
    settings = json.loads((played.world.home / ".claude" / "settings.json").read_text())
    assert settings["enabledPlugins"] == {"nmem@nmem": True}
    assert "hooks" not in settings  # the plugin's hooks, not ones written into settings


def test_the_plugins_hooks_store_the_session(played: Played) -> None:
    stored = {str(e): int(n) for e, n in played.world.rows("SELECT hook_event, count(*) FROM events GROUP BY 1")}
    for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"):
        assert stored.get(event, 0) >= 1, stored
    commands = played.world.rows("SELECT command FROM observations WHERE type = 'command'")
    assert ("echo plugin-e2e-okapi",) in commands, commands


def test_a_new_session_starts_with_the_plugins_context(played: Played) -> None:
    first = played.requests["again"][0]
    assert CONTEXT_OPEN in all_text(first), json.dumps(first)[:3000]
    assert "okapi" in all_text(first)


def test_the_plugins_mcp_tools_are_offered(played: Played) -> None:
    last = played.requests["first"][-1]
    names = [t.get("name", "") for t in last.get("tools", [])]
    ours = [n for n in names if "nmem" in n and n.endswith("__search")]
    assert ours, f"no nmem search tool among {names}"
    doctor = played.world.nmem("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["hooks"]["status"] == "ok" and "plugin nmem@nmem" in checks["hooks"]["detail"], checks["hooks"]
    assert checks["mcp"]["status"] == "ok" and "plugin" in checks["mcp"]["detail"], checks["mcp"]
    assert os.path.exists(played.world.db)


def test_the_doctor_says_the_plugin_cannot_wait_for_prompt_recall(played: Played) -> None:
    """The plugin's hooks are fixed, its UserPromptSubmit in the background: with prompt recall on, what
    the daemon recalls would never reach the model, and the doctor says so."""
    world = played.world
    world.env["NMEM_PROMPT_RECALL"] = "true"
    try:
        doctor = world.nmem("doctor", "--json")
    finally:
        del world.env["NMEM_PROMPT_RECALL"]
    hooks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}["hooks"]
    assert hooks["status"] == "warn" and "prompt recall is on" in hooks["detail"], hooks
    assert "nmem@nmem" in hooks["detail"] and "nmem install" in hooks["fix"], hooks
