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

from agent_world import AgentWorld
from support.agent_clis import CLIS

MODEL = "gemini-2.5-pro"
RUN_TIMEOUT_S = 300.0


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
