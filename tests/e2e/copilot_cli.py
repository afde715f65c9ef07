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
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
PINNED = "1.0.102"
MODEL = "gpt-5.4"  # a model Copilot knows: it offers `bash` and the freeform `apply_patch` to it
RUN_TIMEOUT_S = 300.0


def copilot_bin() -> str | None:
    """The Copilot CLI binary to test with, or None (the tests are then skipped, with the reason)."""
    path = os.environ.get("NMEM_COPILOT_BIN", "")
    return path if path and os.access(path, os.X_OK) else None


SKIP_REASON = (
    "the real GitHub Copilot CLI is not here: set NMEM_COPILOT_BIN to a Copilot CLI "
    f"{PINNED} `copilot` binary (.ci/run installs it with npm when npm is available)"
)


class CopilotWorld:
    def __init__(self, copilot: str, api_url: str) -> None:
        self.copilot = copilot
        self.root = Path(tempfile.mkdtemp(prefix="cp", dir="/tmp"))
        self.home = self.root / "h"
        self.copilot_home = self.home / ".copilot"
        self.project = self.root / "proj"
        self.copilot_home.mkdir(parents=True)
        self.project.mkdir()
        (self.copilot_home / "settings.json").write_text(json.dumps({"banner": "never"}, indent=2))
        keep = ("PATH", "LANG", "LC_ALL", "TZ", "TERM")
        self.env = {k: v for k, v in os.environ.items() if k in keep}
        self.env.update(
            HOME=str(self.home),
            COPILOT_HOME=str(self.copilot_home),
            TMPDIR=str(self.root),
            COPILOT_PROVIDER_BASE_URL=api_url,
            COPILOT_PROVIDER_WIRE_API="responses",
            COPILOT_MODEL=MODEL,
            COPILOT_OFFLINE="true",
        )
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
            print(f"\ncopilot e2e: kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
