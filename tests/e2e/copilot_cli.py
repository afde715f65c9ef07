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

from agent_world import AgentWorld
from support.agent_clis import CLIS

MODEL = "gpt-5.4"  # a model Copilot knows: it offers `bash` and the freeform `apply_patch` to it
RUN_TIMEOUT_S = 300.0


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
