"""Paths to the shared real-capture fixtures (beside the repository)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def hook_payloads() -> Iterator[tuple[str, dict[str, Any]]]:
    """Every hook stdin payload in the fixtures as (`file:index`, payload)."""
    for path in sorted(FIXTURES.glob("hook-stdin-*")):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for i, line in enumerate(ln for ln in lines if ln.strip()):
            yield f"{path.name}:{i}", json.loads(line)
