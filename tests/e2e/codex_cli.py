"""Run the real Codex CLI against the fake Responses API, with nmem installed as a user does.

A `CodexWorld` is a fresh HOME with its CODEX_HOME (`~/.codex`) holding only a config.toml that
points the model at the fake API (`model_providers.e2e`: `base_url`, `wire_api = "responses"`,
`env_key`), a project folder, and nmem's data in its default place under that HOME. The binary is
`NMEM_CODEX_BIN` (.ci/run installs the pinned version from npm and sets it). Hooks run only
because `nmem install --agent codex` recorded their trust: no `--dangerously-bypass-hook-trust`.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from typing import Any

from agent_case import EDIT_PROMPT, PATCH, AgentCase, Row, Scenario
from agent_world import AgentWorld
from codex_api import FakeResponses, developer_texts, mcp_call, message, outputs, patch, shell, tool_search
from support.agent_clis import CLIS

MODEL = "gpt-5.5"  # a model Codex knows: it offers `exec_command` and the freeform `apply_patch` to it
RUN_TIMEOUT_S = 300.0
KEY_VAR = "NMEM_E2E_CODEX_KEY"
HOOK_RAN = re.compile(r"^hook: (?P<event>[A-Za-z]+) Completed$", re.MULTILINE)  # `codex exec`'s stderr


CLI = CLIS["codex"]
codex_bin = CLI.binary  # the binary to test with, or None (the tests are then skipped, with the reason)
SKIP_REASON = CLI.skip_reason()


def provider_config(api_url: str) -> str:
    return (
        f'model = "{MODEL}"\nmodel_provider = "e2e"\n\n[model_providers.e2e]\nname = "nmem e2e"\n'
        f'base_url = "{api_url}"\nwire_api = "responses"\nenv_key = "{KEY_VAR}"\n'
    )


class CodexWorld(AgentWorld):
    NAME = "codex"

    def __init__(self, codex: str, api_url: str) -> None:
        super().__init__("cx")
        self.codex = codex
        self.codex_home = self.home / ".codex"
        self.codex_home.mkdir()
        (self.codex_home / "config.toml").write_text(provider_config(api_url))
        self.env.update(CODEX_HOME=str(self.codex_home), TMPDIR=str(self.root))
        self.env[KEY_VAR] = "sk-e2e-fake"
        self.runs: list[subprocess.CompletedProcess[str]] = []

    def exec(self, prompt: str, *args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        argv = [self.codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                "--color", "never", *args, prompt]  # fmt: skip
        proc = subprocess.run(
            argv, cwd=self.project, env=self.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        self.runs.append(proc)
        assert proc.returncode == 0, f"codex exited {proc.returncode}: {proc.stderr[-3000:]}"
        return proc

    @staticmethod
    def hooks_ran(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in HOOK_RAN.finditer(proc.stderr):
            counts[m["event"]] = counts.get(m["event"], 0) + 1
        return counts


class CodexCase(AgentCase):
    """The shared scenario (agent_case.py) under `codex exec`: its hooks run because nmem recorded their
    trust (no bypass flag); the model finds nmem's MCP tools with Codex's `tool_search`."""

    cli = CLI
    agent = "codex"
    # The first session's prompt, 3 tool calls and reply; the second's prompt and reply; the third's
    # prompt, MCP call and reply.
    events_sent = 10

    def api(self) -> FakeResponses:
        return FakeResponses()

    def world(self, binary: str, api_url: str) -> CodexWorld:
        return CodexWorld(binary, api_url)

    def session(self, world: CodexWorld, prompt: str) -> subprocess.CompletedProcess[str]:
        return world.exec(prompt)

    def edit_script(self, world: CodexWorld) -> list[Any]:
        return [
            [shell("printf 'hello\\n' > notes.txt && cat notes.txt")],
            [patch(PATCH)],
            [shell("ls missing-file")],
            [message("Edited notes.txt: it now says hello world.")],
        ]

    def mcp_script(self) -> list[Any]:
        return [
            [tool_search("nmem memory search")],
            [mcp_call("mcp__nmem", "search", query="release_deploy")],
            [message("The deploy script is scripts/release_deploy.sh.")],
        ]

    def first_rows(self, world: CodexWorld) -> list[Row]:
        notes = str(world.project / "notes.txt")
        return [
            ("SessionStart", "session", "Session started (startup)", None, "codex"),
            ("UserPromptSubmit", "prompt", EDIT_PROMPT, None, "codex"),
            ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", None, "codex"),
            ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", notes, "codex"),  # Codex applied the patch
            ("PostToolUse", "error", "Bash failed (exit 2): ls missing-file", None, "codex"),  # the rollout's exit
            ("Stop", "stop", "Stop: Edited notes.txt: it now says hello world.", None, "codex"),
            ("SessionEnd", "session", "Session ended (other)", None, "codex"),
        ]

    def contexts(self, request: dict[str, Any]) -> list[str]:
        return [t for t in developer_texts(request) if "<nmem-context>" in t]

    def check_install(self, s: Scenario) -> None:
        assert "Codex hooks" in s.install_out
        config = (s.world.codex_home / "config.toml").read_text()
        assert "[mcp_servers.nmem]" in config and config.count("trusted_hash") == 7
        assert 'wire_api = "responses"' in config  # the user's settings kept

    def check_mcp(self, s: Scenario) -> None:
        found, answer = outputs(s.mcp[1])[-1], outputs(s.mcp[2])[-1]
        assert any(t.get("name") == "mcp__nmem" for t in found.get("tools", [])), found  # tool_search found nmem
        text = json.dumps(answer.get("output"))
        assert "matches for 'release_deploy'" in text and "s:claude-e" in text  # Claude Code's prompt, found

    def own_checks(self) -> list[Callable[[Scenario], None]]:
        return [every_hook_ran_without_a_trust_bypass, nmems_mcp_server_is_offered_to_the_model]


def every_hook_ran_without_a_trust_bypass(s: Scenario) -> None:
    # `codex exec` prints `hook: <Event> Completed` for each hook it ran (SessionEnd's, at exit, it does not
    # print: the store shows it ran); untrusted ones it skips silently.
    assert CodexWorld.hooks_ran(s.runs[0]) == {"SessionStart": 1, "UserPromptSubmit": 1, "PostToolUse": 3, "Stop": 1}
    assert all("bypass-hook-trust" not in " ".join(map(str, r.args)) for r in s.world.runs)


def nmems_mcp_server_is_offered_to_the_model(s: Scenario) -> None:
    # Codex 0.169 defers MCP tools behind its `tool_search` tool: the model is told each server's
    # namespace and instructions (what nmem's MCP server answered to `initialize`) and searches for
    # the tools it wants. That nmem's namespace is listed means Codex started nmem-mcp and it answered.
    tools = [t.get("type") for t in s.first[0].get("tools", [])]
    assert "tool_search" in tools
    listed = [t for t in developer_texts(s.first[0]) if "Deferred tool namespaces" in t]
    assert listed and "- mcp__nmem: nmem remembers" in listed[0]


CASE = CodexCase()
