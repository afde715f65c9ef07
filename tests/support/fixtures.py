"""The test data: our own invented payloads in tests/data, and the real captures in ../shared when present.

tests/data holds hook payloads and transcripts written for these tests in the shapes Claude
Code writes (tests/data/README.md): every test can run in a clone with nothing beside it.
The real captures (../shared/fixtures) may not be redistributed; tests that are worth running
only over them carry the `shared` marker and are skipped where the folder is absent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data"
HOOKS = "hooks.jsonl"  # current payloads: every event and tool
LEGACY = "hooks-legacy.jsonl"  # July-2025 (1.0.x) payloads: no permission_mode, no tool_use_id
TRANSCRIPTS = DATA / "transcripts"
SHORT = TRANSCRIPTS / "short.jsonl"  # a prompt, two rejected calls, a local slash command
HEAVY = TRANSCRIPTS / "tool-heavy.jsonl"  # a background command, /mcp, search, read, fetch
COMPACT = TRANSCRIPTS / "compaction.jsonl"  # Task, Write, Edit, Grep, TaskOutput, then a compaction
SUBAGENT = TRANSCRIPTS / "agent-c93e1a4.jsonl"  # a subagent's sidechain: six searches, a fetch never answered
WORDS = TRANSCRIPTS / "words.jsonl"  # the agent's text and thinking between tool calls, `/compact <args>`

SHARED = Path(__file__).resolve().parents[3] / "shared" / "fixtures"  # real captures, beside the repository


def _payloads(paths: list[Path]) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in paths:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for i, line in enumerate(ln for ln in lines if ln.strip()):
            yield f"{path.name}:{i}", json.loads(line)


def hook_payloads() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every hook stdin payload of tests/data as (`file:index`, payload)."""
    return _payloads([DATA / HOOKS, DATA / LEGACY])


def hook_bodies() -> list[bytes]:
    """The same payloads as the bytes a hook writes on stdin."""
    return [line.encode() for path in (DATA / HOOKS, DATA / LEGACY) for line in path.read_text().splitlines() if line]


def shared_hook_payloads() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every real hook stdin payload of ../shared/fixtures (tests marked `shared` only)."""
    return _payloads(sorted(SHARED.glob("hook-stdin-*")))


def shared_transcripts() -> list[Path]:
    """The real transcripts of ../shared/fixtures, main and subagent (tests marked `shared` only)."""
    return sorted(SHARED.glob("*transcript*.jsonl"))
