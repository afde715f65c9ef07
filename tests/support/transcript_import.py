"""`nmem import-transcripts` as the tests run it, and what it stored: the session a transcript file holds,
the command's exit code and report, the observations in import order."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from support.db import db_rows
from support.env import BIN


def session_of(path: Path) -> str:
    return str(json.loads(next(ln for ln in path.read_text().splitlines() if '"sessionId"' in ln))["sessionId"])


def nmem_import(*args: str, timeout: float = 60) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [str(BIN / "nmem"), "import-transcripts", "--json", *args], capture_output=True, text=True, timeout=timeout
    )
    assert "Traceback" not in done.stderr, done.stderr
    summary = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, summary, done.stderr


def observations(db: Path) -> list[tuple[Any, ...]]:
    return db_rows(
        db,
        "SELECT type, title, file_path, command, tool_name, agent_id, tool_use_id, session_id, hook_event"
        " FROM observations ORDER BY id",
    )
