"""A real Codex CLI 0.169.0 session's hook payloads and rollout file (tests/data/codex)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.fixtures import DATA

CODEX_DATA = DATA / "codex"
SESSION = "01a2134e-5db3-7631-a0a4-3c81ac8df7e7"
ROLLOUT = CODEX_DATA / f"rollout-2026-11-25T15-23-52-{SESSION}.jsonl"


def real_payloads(transcript: Path | None = None) -> list[dict[str, Any]]:
    """The session's hook payloads; `transcript_path` names `transcript` (default: a file that is not there)."""
    lines = (CODEX_DATA / "hooks-0.169.0.jsonl").read_text().splitlines()
    path = str(transcript or Path("/nonexistent") / ROLLOUT.name)
    return [{"nmem_agent": "codex", **json.loads(line), "transcript_path": path} for line in lines if line.strip()]
