"""Run the real Gemini CLI against the fake Gemini API, with nmem installed as a user does.

A `GeminiWorld` is a fresh HOME whose `~/.gemini/settings.json` holds only what a user of the Gemini API
sets (`security.auth.selectedType = "gemini-api-key"`), a project folder, and nmem's data in its default
place under that HOME. The CLI reaches the fake API through `GOOGLE_GEMINI_BASE_URL` with a fake
`GEMINI_API_KEY`; `GEMINI_CLI_TRUST_WORKSPACE=true` trusts the project folder (without it the CLI refuses
`--yolo` there). The binary is `NMEM_GEMINI_BIN` (.ci/run installs the pinned version from npm and sets it).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
PINNED = "0.61.0"
MODEL = "gemini-2.5-pro"
RUN_TIMEOUT_S = 300.0


def gemini_bin() -> str | None:
    """The Gemini CLI to test with, or None (the tests are then skipped, with the reason)."""
    path = os.environ.get("NMEM_GEMINI_BIN", "")
    return path if path and os.access(path, os.X_OK) and shutil.which("node") else None


SKIP_REASON = (
    "the real Gemini CLI is not here: set NMEM_GEMINI_BIN to a Gemini CLI "
    f"{PINNED} `gemini` (with Node >= 20 on PATH; .ci/run installs it with npm when npm is available)"
)


class GeminiWorld:
    def __init__(self, gemini: str, api_url: str) -> None:
        self.gemini = gemini
        self.root = Path(tempfile.mkdtemp(prefix="gm", dir="/tmp"))
        self.home = self.root / "h"
        self.gemini_dir = self.home / ".gemini"
        self.project = self.root / "proj"
        self.gemini_dir.mkdir(parents=True)
        self.project.mkdir()
        settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
        (self.gemini_dir / "settings.json").write_text(json.dumps(settings, indent=2))
        keep = ("PATH", "LANG", "LC_ALL", "TZ", "TERM")
        self.env = {k: v for k, v in os.environ.items() if k in keep}
        self.env.update(HOME=str(self.home), TMPDIR=str(self.root), GOOGLE_GEMINI_BASE_URL=api_url,
                        GEMINI_API_KEY="e2e-fake-key", GEMINI_CLI_TRUST_WORKSPACE="true")  # fmt: skip
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
            print(f"\ngemini e2e: kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
