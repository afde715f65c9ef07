"""Run the real Gemini CLI against the fake Gemini API, with nmem installed as a user does.

A `GeminiWorld` is a fresh HOME whose `~/.gemini/settings.json` holds only what a user of the Gemini API
sets (`security.auth.selectedType = "gemini-api-key"`), a project folder, and nmem's data in its default
place under that HOME. The CLI reaches the fake API through `GOOGLE_GEMINI_BASE_URL` with a fake
`GEMINI_API_KEY`; `GEMINI_CLI_TRUST_WORKSPACE=true` trusts the project folder (without it the CLI refuses
`--yolo` there). The binary is `NMEM_GEMINI_BIN` (.ci/run installs the pinned version from npm and sets it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from agent_case import EDIT_PROMPT, AgentCase, Row, Scenario
from agent_world import AgentWorld
from gemini_api import FakeGemini, call, function_responses, shell, text, tool_names, user_texts
from support.agent_clis import CLIS

MODEL = "gemini-2.5-pro"
RUN_TIMEOUT_S = 300.0
CONTEXT_OPEN = "&lt;nmem-context&gt;"  # the Gemini CLI escapes < and > in a hook's additionalContext
MCP_SEARCH = "mcp_nmem_search"  # the Gemini CLI names an MCP server's tools mcp_<server>_<tool>


CLI = CLIS["gemini"]
SKIP_REASON = CLI.skip_reason() + "; it needs Node >= 20 on PATH"


def gemini_bin() -> str | None:
    """The Gemini CLI to test with, or None (the tests are then skipped, with the reason)."""
    return CLI.binary() if shutil.which("node") else None


class GeminiWorld(AgentWorld):
    NAME = "gemini"

    def __init__(self, gemini: str, api_url: str) -> None:
        super().__init__("gm")
        self.gemini = gemini
        self.gemini_dir = self.home / ".gemini"
        self.gemini_dir.mkdir()
        settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
        (self.gemini_dir / "settings.json").write_text(json.dumps(settings, indent=2))
        self.env.update(TMPDIR=str(self.root), GOOGLE_GEMINI_BASE_URL=api_url,
                        GEMINI_API_KEY="e2e-fake-key", GEMINI_CLI_TRUST_WORKSPACE="true")  # fmt: skip
        self.runs: list[subprocess.CompletedProcess[str]] = []

    def run(self, prompt: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        argv = [self.gemini, "-p", prompt, "--yolo", "-m", MODEL]
        proc = subprocess.run(
            argv, cwd=self.project, env=self.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
        self.runs.append(proc)
        assert proc.returncode == 0, f"gemini exited {proc.returncode}: {proc.stderr[-3000:]}"
        return proc

    def sessions_files(self) -> list[Path]:
        return sorted((self.gemini_dir / "tmp").glob("*/chats/session-*.jsonl"))


class GeminiCase(AgentCase):
    """The shared scenario (agent_case.py) under `gemini -p ... --yolo`: it writes a file with `write_file` and
    edits notes.txt with `replace`; it offers nmem's MCP tools as `mcp_nmem_*`."""

    cli = CLI
    agent = "gemini"
    # The first session's prompt, 4 tool calls and reply; the second's prompt and reply; the third's prompt,
    # MCP call and reply.
    events_sent = 11

    def binary(self) -> str | None:
        return gemini_bin()

    def skip_reason(self) -> str:
        return SKIP_REASON

    def api(self) -> FakeGemini:
        return FakeGemini()

    def world(self, binary: str, api_url: str) -> GeminiWorld:
        return GeminiWorld(binary, api_url)

    def session(self, world: GeminiWorld, prompt: str) -> subprocess.CompletedProcess[str]:
        return world.run(prompt)

    def edit_script(self, world: GeminiWorld) -> list[Any]:
        notes = str(world.project / "notes.txt")
        return [
            [shell("printf 'hello\\n' > notes.txt && cat notes.txt")],
            [call("write_file", file_path=str(world.project / "todo.txt"), content="ship it\n")],
            [call("replace", file_path=notes, old_string="hello", new_string="hello world", instruction="greet")],
            [shell("ls missing-file")],
            [text("Edited notes.txt: it now says hello world.")],
        ]

    def mcp_script(self) -> list[Any]:
        return [[call(MCP_SEARCH, query="release_deploy")], [text("It is scripts/release_deploy.sh.")]]

    def first_rows(self, world: GeminiWorld) -> list[Row]:
        notes, todo = str(world.project / "notes.txt"), str(world.project / "todo.txt")
        return [
            ("SessionStart", "session", "Session started (startup)", None, "gemini"),
            ("UserPromptSubmit", "prompt", EDIT_PROMPT, None, "gemini"),
            ("PostToolUse", "command", "$ printf 'hello\\n' > notes.txt && cat notes.txt", None, "gemini"),
            ("PostToolUse", "write", "Write todo.txt (created, 1 lines)", todo, "gemini"),
            ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", notes, "gemini"),  # the CLI ran the tools
            ("PostToolUse", "error", "Shell failed (exit 2): ls missing-file", None, "gemini"),
            ("Stop", "stop", "Stop: Edited notes.txt: it now says hello world.", None, "gemini"),
            ("SessionEnd", "session", "Session ended (exit)", None, "gemini"),
        ]

    def contexts(self, request: dict[str, Any]) -> list[str]:
        # `gemini -p` puts SessionStart's additionalContext before the prompt, in <hook_context>, and
        # escapes its < and >.
        return "\n".join(user_texts(request)).split(CONTEXT_OPEN)[1:]

    def check_install(self, s: Scenario) -> None:
        assert "Gemini CLI hooks and MCP server 'nmem'" in s.install_out
        settings = json.loads((s.world.gemini_dir / "settings.json").read_text())
        assert set(settings["hooks"]) == {"SessionStart", "BeforeAgent", "AfterTool", "AfterAgent", "SessionEnd"}
        assert "nmem" in settings["mcpServers"]
        assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}  # the user's settings kept

    def check_context(self, s: Scenario) -> None:
        assert "<hook_context>" in "\n".join(user_texts(s.first[0]))

    def check_mcp(self, s: Scenario) -> None:
        offered = tool_names(s.mcp[0])
        assert MCP_SEARCH in offered and "mcp_nmem_timeline" in offered, offered  # nmem-mcp started and listed
        answer = function_responses(s.mcp[1])[-1]
        assert "release_deploy" in json.dumps(answer), answer  # Claude Code's work, found by the Gemini CLI


CASE = GeminiCase()
