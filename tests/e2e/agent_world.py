"""What every real-agent end-to-end test shares: a fresh HOME and project under /tmp, and nmem as
that user sees it (its CLI, its hook client, its database, read-only)."""

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
CLIENT = Path(__file__).resolve().parents[2] / "nmem_client" / "send.py"
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "TERM")


class AgentWorld:
    NAME = "agent"  # the suite, in the message of a kept folder

    def __init__(self, prefix: str, keep: tuple[str, ...] = KEEP_ENV) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # short: the daemon's socket is under HOME
        self.home = self.root / "h"
        self.project = self.root / "proj"
        self.home.mkdir()
        self.project.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k in keep}
        self.env["HOME"] = str(self.home)

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
        return subprocess.run(
            [sys.executable, "-I", "-S", str(CLIENT), *args],
            input=json.dumps(payload).encode(),
            env=self.env,
            capture_output=True,
            timeout=60,
        )

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
            print(f"\n{self.NAME} e2e: kept {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
