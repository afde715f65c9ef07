"""Run the real GitHub Copilot CLI against the fake Responses API, with nmem installed as a user does.

A `CopilotWorld` is a fresh HOME whose COPILOT_HOME (`~/.copilot`) holds only what a user sets
(`settings.json` with `"banner": "never"`), a project folder, and nmem's data in its default place
under that HOME. Copilot runs offline in its documented "bring your own key" mode
(`COPILOT_PROVIDER_BASE_URL`, `COPILOT_PROVIDER_WIRE_API=responses`, `COPILOT_MODEL`,
`COPILOT_OFFLINE=true`: no GitHub login, telemetry or update check) with `copilot -p PROMPT
--allow-all-tools`. The binary is `NMEM_COPILOT_BIN` (.ci/run installs the pinned version from npm
and sets it); it unpacks its runtime under `~/.cache/copilot` on its first run in a HOME.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from agent_case import EDIT_PROMPT, PATCH, AgentCase, Row, Scenario
from agent_world import AgentWorld
from copilot_api import FakeCopilotAPI, call, message, output_texts, patch, shell, tool_names, user_texts
from support.agent_clis import CLIS

MODEL = "gpt-5.4"  # a model Copilot knows: it offers `bash` and the freeform `apply_patch` to it
RUN_TIMEOUT_S = 300.0
CONTEXT_OPEN = "<nmem-context>"
MCP_SEARCH = "nmem-search"  # Copilot names an MCP server's tools <server>-<tool>


CLI = CLIS["copilot"]
copilot_bin = CLI.binary  # the binary to test with, or None (the tests are then skipped, with the reason)
SKIP_REASON = CLI.skip_reason()


class CopilotWorld(AgentWorld):
    NAME = "copilot"

    def __init__(self, copilot: str, api_url: str) -> None:
        super().__init__("cp")
        self.copilot = copilot
        self.copilot_home = self.home / ".copilot"
        self.copilot_home.mkdir()
        (self.copilot_home / "settings.json").write_text(json.dumps({"banner": "never"}, indent=2))
        self.env.update(
            COPILOT_HOME=str(self.copilot_home),
            TMPDIR=str(self.root),
            COPILOT_PROVIDER_BASE_URL=api_url,
            COPILOT_PROVIDER_WIRE_API="responses",
            COPILOT_MODEL=MODEL,
            COPILOT_OFFLINE="true",
        )
        self.runs: list[subprocess.CompletedProcess[str]] = []

    def run(self, prompt: str, *args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        argv = [self.copilot, "-p", prompt, "--allow-all-tools", "--no-color", *args]
        proc = subprocess.run(
            argv, cwd=self.project, env=self.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        self.runs.append(proc)
        assert proc.returncode == 0, f"copilot exited {proc.returncode}: {proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        return proc

    def sessions(self) -> list[Path]:
        """Copilot's session files, oldest first."""
        found = (self.copilot_home / "session-state").glob("*/events.jsonl")
        return sorted(found, key=lambda p: p.stat().st_mtime_ns)


class CopilotCase(AgentCase):
    """The shared scenario (agent_case.py) under `copilot -p ... --allow-all-tools`: it edits notes.txt with
    its freeform `apply_patch`; it runs the prompt's hook beside SessionStart's, so either may be stored
    first; it offers nmem's MCP tools as `nmem-*`."""

    cli = CLI
    agent = "copilot"
    # The first session's prompt, 3 tool calls and reply; the second's prompt and reply; the third's prompt,
    # MCP call and reply.
    events_sent = 10
    wait_every_session = True
    # SessionStart's and the prompt's hooks run side by side; on a loaded machine either may be acked by
    # the inbox (the daemon still starting), whose rows are stored after the first tool call's.
    unordered_head = 3

    def api(self) -> FakeCopilotAPI:
        return FakeCopilotAPI()

    def world(self, binary: str, api_url: str) -> CopilotWorld:
        return CopilotWorld(binary, api_url)

    def session(self, world: CopilotWorld, prompt: str) -> subprocess.CompletedProcess[str]:
        return world.run(prompt)

    def edit_script(self, world: CopilotWorld) -> list[Any]:
        return [
            [shell("printf 'hello\\n' > notes.txt && cat notes.txt")],
            [patch(PATCH)],
            [shell("ls missing-file")],
            [message("Edited notes.txt: it now says hello world.")],
        ]

    def mcp_script(self) -> list[Any]:
        return [[call(MCP_SEARCH, query="release_deploy")], [message("It is scripts/release_deploy.sh.")]]

    def first_rows(self, world: CopilotWorld) -> list[Row]:
        notes = str(world.project / "notes.txt")
        return [
            ("SessionStart", "session", "Session started (startup)", None, "copilot"),
            ("UserPromptSubmit", "prompt", EDIT_PROMPT, None, "copilot"),
            ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", None, "copilot"),
            ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", notes, "copilot"),  # Copilot applied the patch
            ("PostToolUse", "error", "Bash failed (exit 2): ls missing-file", None, "copilot"),  # the shell's exit
            ("Stop", "stop", "Stop", None, "copilot"),  # Copilot's Stop carries no reply
            ("SessionEnd", "session", "Session ended (complete)", None, "copilot"),
        ]

    def contexts(self, request: dict[str, Any]) -> list[str]:
        # Copilot puts SessionStart's additionalContext in a user message before the prompt.
        return [t for t in user_texts(request) if CONTEXT_OPEN in t]

    def check_install(self, s: Scenario) -> None:
        assert "Copilot hooks" in s.install_out and "Copilot MCP server 'nmem'" in s.install_out
        settings = json.loads((s.world.copilot_home / "settings.json").read_text())
        assert settings["banner"] == "never"  # the user's settings kept
        assert {"SessionStart", "UserPromptSubmit", "PostToolUse", "Stop", "SessionEnd"} <= set(settings["hooks"])
        mcp = json.loads((s.world.copilot_home / "mcp-config.json").read_text())
        assert mcp["mcpServers"]["nmem"]["command"].endswith("nmem-mcp")

    def check_rows(self, s: Scenario) -> None:
        ids = s.world.rows("SELECT tool_use_id FROM observations WHERE session_id = ? AND hook_event = 'PostToolUse'",
                           (s.session,))  # fmt: skip
        assert len({i for (i,) in ids if i and i.startswith("hook-")}) == 3  # each call keyed, by its hook's time

    def check_context(self, s: Scenario) -> None:
        first = user_texts(s.first[0])
        (context,) = self.contexts(s.first[0])
        assert first.index(context) < len(first) - 1, first  # before the prompt
        assert s.session[:8] not in context  # the starting session itself is not listed as history
        (second,) = self.contexts(s.second[0])
        assert "by Copilot CLI" in second  # the first session, by its agent's label

    def check_mcp(self, s: Scenario) -> None:
        offered = tool_names(s.mcp[0])
        assert MCP_SEARCH in offered and "nmem-timeline" in offered, offered  # nmem-mcp started and listed
        answer = output_texts(s.mcp[1])[-1]
        assert "matches for 'release_deploy'" in answer and "s:claude-e" in answer  # Claude Code's work, found


CASE = CopilotCase()
