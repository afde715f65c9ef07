"""A real GitHub Copilot CLI 1.0.102 session's hook payloads and events.jsonl (tests/data/copilot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nmemd.agents.copilot.capture import hook_call_id, ms_of
from support.fixtures import DATA as ALL_DATA

DATA = ALL_DATA / "copilot"
SESSION = "0b7f87d9-3144-486c-8ad7-7f4747ab62c0"
EVENTS = DATA / f"events-{SESSION}.jsonl"


def real_payloads() -> list[dict[str, Any]]:
    lines = (DATA / "hooks-1.0.102.jsonl").read_text().splitlines()
    return [{"nmem_agent": "copilot", **json.loads(line)} for line in lines if line.strip()]


def hook_ids() -> list[str]:
    """What the live hooks key the session's tool calls by: each hook's time and a digest of its input."""
    tools = [p for p in real_payloads() if p["hook_event_name"].startswith("PostToolUse")]
    return [hook_call_id(ms_of(p["timestamp"]) or 0, p["tool_input"]) for p in tools]


SAID = "It fails because the cache key leaves out the locale."
REASONING = "The cache is keyed by path only: a French page is served to English readers."


def with_words(path: Path) -> Path:
    """The session's events.jsonl at `path`, its first message that requests tools given a text and its
    reasoning (the scripted API of the recording said nothing between calls), and an opaque reasoning blob."""
    lines = [json.loads(raw) for raw in EVENTS.read_text().splitlines()]
    first = next(ln for ln in lines if ln["type"] == "assistant.message" and ln["data"].get("toolRequests"))
    first["data"].update(content=SAID, reasoningText=REASONING, reasoningOpaque="gAAAAABopaque-signature")
    path.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
    return path
