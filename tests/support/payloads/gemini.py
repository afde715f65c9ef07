"""A real Gemini CLI 0.61.0 session's hook payloads and session file (tests/data/gemini)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.fixtures import DATA

GEMINI_DATA = DATA / "gemini"
SESSION = "a2b0235b-2958-4d25-ab97-3c285de1bc32"
SESSION_FILE = GEMINI_DATA / "session-2026-11-25T16-14-a2b0235b.jsonl"


def real_payloads() -> list[dict[str, Any]]:
    lines = (GEMINI_DATA / "hooks-0.61.0.jsonl").read_text().splitlines()
    return [{"nmem_agent": "gemini", **json.loads(line)} for line in lines if line.strip()]


SAID = "It fails because the cache key leaves out the locale."
THOUGHT = "The cache is keyed by path only"


def with_words(path: Path) -> Path:
    """The session file at `path`, its first message that calls tools given a text and a thought (the
    scripted API of the recording said nothing between calls), written as the CLI writes its lines."""
    lines = [json.loads(raw) for raw in SESSION_FILE.read_text().splitlines()]
    first = next(ln["id"] for ln in lines if ln.get("type") == "gemini" and ln.get("toolCalls"))
    for line in lines:
        if line.get("id") == first:  # written once as it starts, again with its calls
            line["content"] = SAID
            line["thoughts"] = [{"subject": THOUGHT, "description": "a French page is served to English readers.",
                                 "timestamp": line["timestamp"]}]  # fmt: skip
    path.write_text("".join(json.dumps(ln, separators=(",", ":")) + "\n" for ln in lines))
    return path
