"""Turn a Claude Code transcript (JSONL) into the hook payloads Claude Code would have sent.

Real transcripts are the richest fixtures we have, but nmem is fed by hooks.
This converter rebuilds the hook side: a user line whose content is a string
prompt -> UserPromptSubmit; an assistant `tool_use` joined with the later
`tool_result` of the same id -> PostToolUse (or PostToolUseFailure when
`is_error`), in the order the results arrived. Meta lines and local slash
command echoes are skipped (they fire no hook). `session_id`/`cwd` come from
each line's envelope.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

_LOCAL_COMMAND = ("<command-name>", "<local-command-", "<command-message>")


def _base(line: dict[str, Any], event: str) -> dict[str, Any]:
    sid = line.get("sessionId") or "unknown"
    cwd = line.get("cwd") or ""
    return {
        "session_id": sid,
        "transcript_path": f"{cwd}/.claude/{sid}.jsonl" if cwd else "",
        "cwd": cwd,
        "permission_mode": line.get("permissionMode") or "default",
        "hook_event_name": event,
    }


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""


def hook_payloads(lines: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Hook payloads for transcript lines, in the order Claude Code fires them."""
    pending: dict[str, dict[str, Any]] = {}  # tool_use_id -> tool_use block
    for line in lines:
        kind, message = line.get("type"), line.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            continue
        if line.get("isMeta") or line.get("isCompactSummary"):  # caveats, the post-compaction summary
            continue
        content = message.get("content")
        if kind == "user" and isinstance(content, str):
            if not content.lstrip().startswith(_LOCAL_COMMAND):
                yield {**_base(line, "UserPromptSubmit"), "prompt": content}
            continue
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                pending[block["id"]] = block
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in pending:
                use = pending.pop(block["tool_use_id"])
                common = {"tool_name": use.get("name"), "tool_input": use.get("input") or {},
                          "tool_use_id": use["id"]}  # fmt: skip
                if block.get("is_error"):
                    yield {**_base(line, "PostToolUseFailure"), **common, "error": _result_text(block)}
                else:
                    response = line["toolUseResult"] if "toolUseResult" in line else _result_text(block)
                    yield {**_base(line, "PostToolUse"), **common, "tool_response": response}


def transcript_payloads(path: str | Path) -> list[dict[str, Any]]:
    """`hook_payloads` of a JSONL transcript file."""
    with open(path, encoding="utf-8") as f:
        return list(hook_payloads(json.loads(raw) for raw in f if raw.strip()))
