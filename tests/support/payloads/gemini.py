"""A real Gemini CLI 0.61.0 session's hook payloads and session file (tests/data/gemini)."""

from __future__ import annotations

import json
from typing import Any

from support.fixtures import DATA

GEMINI_DATA = DATA / "gemini"
SESSION = "a2b0235b-2958-4d25-ab97-3c285de1bc32"
SESSION_FILE = GEMINI_DATA / "session-2026-11-25T16-14-a2b0235b.jsonl"


def real_payloads() -> list[dict[str, Any]]:
    lines = (GEMINI_DATA / "hooks-0.61.0.jsonl").read_text().splitlines()
    return [{"nmem_agent": "gemini", **json.loads(line)} for line in lines if line.strip()]
