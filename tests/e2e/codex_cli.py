"""Run the real Codex CLI against the fake Responses API, with nmem installed as a user does.

A `CodexWorld` is a fresh HOME with its CODEX_HOME (`~/.codex`) holding only a config.toml that
points the model at the fake API (`model_providers.e2e`: `base_url`, `wire_api = "responses"`,
`env_key`), a project folder, and nmem's data in its default place under that HOME. The binary is
`NMEM_CODEX_BIN` (.ci/run installs the pinned version from npm and sets it). Hooks run only
because `nmem install --agent codex` recorded their trust: no `--dangerously-bypass-hook-trust`.
"""

from __future__ import annotations

import re
import subprocess

from agent_world import AgentWorld
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
