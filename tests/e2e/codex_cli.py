"""Run the real Codex CLI against the fake Responses API, with nmem installed as a user does.

A `CodexWorld` is a fresh HOME with its CODEX_HOME (`~/.codex`) holding only a config.toml that
points the model at the fake API (`model_providers.e2e`: `base_url`, `wire_api = "responses"`,
`env_key`), a project folder, and nmem's data in its default place under that HOME. The binary is
`NMEM_CODEX_BIN` (.ci/run installs the pinned version from npm and sets it). Hooks run only
because `nmem install --agent codex` recorded their trust: no `--dangerously-bypass-hook-trust`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
PINNED = "0.169.0"
MODEL = "gpt-5.5"  # a model Codex knows: it offers `exec_command` and the freeform `apply_patch` to it
RUN_TIMEOUT_S = 300.0
KEY_VAR = "NMEM_E2E_CODEX_KEY"
HOOK_RAN = re.compile(r"^hook: (?P<event>[A-Za-z]+) Completed$", re.MULTILINE)  # `codex exec`'s stderr


def codex_bin() -> str | None:
    """The Codex binary to test with, or None (the tests are then skipped, with the reason)."""
    path = os.environ.get("NMEM_CODEX_BIN", "")
    return path if path and os.access(path, os.X_OK) else None


SKIP_REASON = (
    "the real Codex CLI is not here: set NMEM_CODEX_BIN to a Codex CLI "
    f"{PINNED} binary (.ci/run installs it with npm when npm is available)"
)


def provider_config(api_url: str) -> str:
    return (
        f'model = "{MODEL}"\nmodel_provider = "e2e"\n\n[model_providers.e2e]\nname = "nmem e2e"\n'
        f'base_url = "{api_url}"\nwire_api = "responses"\nenv_key = "{KEY_VAR}"\n'
    )


class CodexWorld:
    def __init__(self, codex: str, api_url: str) -> None:
        self.codex = codex
        self.root = Path(tempfile.mkdtemp(prefix="cx", dir="/tmp"))
        self.home = self.root / "h"
        self.codex_home = self.home / ".codex"
        self.project = self.root / "proj"
        self.codex_home.mkdir(parents=True)
        self.project.mkdir()
        (self.codex_home / "config.toml").write_text(provider_config(api_url))
        keep = ("PATH", "LANG", "LC_ALL", "TZ", "TERM")
        self.env = {k: v for k, v in os.environ.items() if k in keep}
        self.env.update(HOME=str(self.home), CODEX_HOME=str(self.codex_home), TMPDIR=str(self.root))
        self.env[KEY_VAR] = "sk-e2e-fake"
        self.runs: list[subprocess.CompletedProcess[str]] = []

    @property
    def nmem_home(self) -> Path:
        return self.home / ".local" / "share" / "nmem"

    @property
    def db(self) -> Path:
        return self.nmem_home / "nmem.db"

    def nmem(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "nmem"), *args], env=self.env, cwd=self.project, capture_output=True, text=True, timeout=timeout
        )

    def send(self, payload: dict[str, Any], *args: str) -> subprocess.CompletedProcess[bytes]:
        """The hook client as a hook runs it (for events of another agent in the same project)."""
        client = Path(__file__).resolve().parents[2] / "nmem_client" / "send.py"
        return subprocess.run(
            [sys.executable, "-I", "-S", str(client), *args],
            input=json.dumps(payload).encode(),
            env=self.env,
            capture_output=True,
            timeout=60,
        )

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

    def rows(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        if not self.db.exists():
            return []
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10.0)
        try:
            return list(conn.execute(sql, params))
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        finally:
            conn.close()

    def cleanup(self) -> None:
        """Stop the daemon; remove everything unless NMEM_E2E_KEEP=1 (then say where it is)."""
        self.nmem("daemon", "stop")
        if os.environ.get("NMEM_E2E_KEEP") == "1":
            print(f"\ncodex e2e: kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
