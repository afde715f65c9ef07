"""Cursor: what its agent hooks send, as nmem reads them.

Cursor's hooks read into observations: its events renamed to Claude Code's (`normalized`), its shell, edit and
MCP hooks read here, the rest as Claude Code's. Its hooks, payloads, replies, config and history, as verified:
README.md beside this file.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from nmemd.agents.cursor import SPEC
from nmemd.capture.fields import clean_text, join_lines, list_or_empty, observation, short_field, str_or_none
from nmemd.model import Extracted, Observation

AGENT: Final = SPEC.name
# Cursor's events under the names nmem (and Claude Code) gives the same moments.
EVENTS: Final = {
    "sessionStart": "SessionStart", "sessionEnd": "SessionEnd", "beforeSubmitPrompt": "UserPromptSubmit",
    "afterShellExecution": "PostToolUse", "afterMCPExecution": "PostToolUse", "afterFileEdit": "PostToolUse",
    "beforeReadFile": "PostToolUse", "postToolUse": "PostToolUse", "postToolUseFailure": "PostToolUseFailure",
    "afterAgentResponse": "Stop", "stop": "Stop", "preCompact": "PreCompact", "subagentStart": "SubagentStart",
    "subagentStop": "SubagentStop",
}  # fmt: skip
# Cursor's generic tool names as Claude Code's (postToolUse / postToolUseFailure).
TOOLS: Final = {"Shell": "Bash", "Read": "Read", "Write": "Write", "Grep": "Grep", "Task": "Task"}


def _digest(*parts: str) -> str:
    data = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _json(raw: object) -> object:
    """A JSON string Cursor passes (`tool_input`, `result_json`) as its value; anything else as it is."""
    if isinstance(raw, str) and raw[:1] in ("{", "["):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _tool_name(raw: object) -> str:
    name = str_or_none(raw) or "unknown"
    if name.startswith("MCP:"):
        return f"mcp__cursor__{name[4:]}"
    return TOOLS.get(name, name)


def normalized(p: dict[str, Any]) -> dict[str, Any]:
    """A Cursor hook payload as nmem reads hook payloads (Claude Code's field names); the original
    event stays in `cursor_event`."""
    event = str_or_none(p.get("hook_event_name")) or "unknown"
    out = dict(p)
    out["cursor_event"] = event
    out["hook_event_name"] = EVENTS.get(event, event)
    session = p.get("session_id") if isinstance(p.get("session_id"), str) else p.get("conversation_id")
    if isinstance(session, str):
        out["session_id"] = session
    roots = [r for r in list_or_empty(p.get("workspace_roots")) if isinstance(r, str) and r.startswith("/")]
    if not isinstance(p.get("cwd"), str) and roots:
        out["cwd"] = roots[0]
    turn = str_or_none(p.get("generation_id")) or ""
    if event == "sessionStart":
        out["source"] = "startup"
    elif event == "beforeSubmitPrompt" and turn:
        out["prompt_id"] = turn  # one prompt per generation
    elif event == "afterShellExecution":
        cmd = str_or_none(p.get("command")) or ""
        out["tool_name"], out["tool_input"] = "Bash", {"command": cmd}
        out["tool_response"] = {"stdout": str_or_none(p.get("output")) or ""}
        out.setdefault("tool_use_id", "cursor:" + _digest(turn, "shell", cmd, str_or_none(p.get("output")) or ""))
    elif event == "afterFileEdit":
        edits = [e for e in list_or_empty(p.get("edits")) if isinstance(e, dict)]
        out["tool_name"] = "MultiEdit" if len(edits) > 1 else "Edit"
        first = edits[0] if edits else {}
        out["tool_input"] = {"file_path": p.get("file_path"), "edits": edits, "old_string": first.get("old_string"),
                             "new_string": first.get("new_string")}  # fmt: skip
        canonical = json.dumps(edits, sort_keys=True, ensure_ascii=False)
        out.setdefault("tool_use_id", "cursor:" + _digest(turn, "edit", str(p.get("file_path")), canonical))
    elif event == "afterMCPExecution":
        server = str_or_none(p.get("mcp_server_name")) or "mcp"
        tool = str_or_none(p.get("tool_name")) or "unknown"
        out["tool_name"] = f"mcp__{server}__{tool}"
        inp = _json(p.get("tool_input"))
        out["tool_input"] = inp if isinstance(inp, dict) else {"input": inp} if inp else {}
        out["tool_response"] = _json(p.get("result_json"))
        raw = f"{p.get('tool_input')}\x00{p.get('result_json')}"
        out.setdefault("tool_use_id", "cursor:" + _digest(turn, "mcp", server, tool, raw))
    elif event == "beforeReadFile":
        content = str_or_none(p.get("content")) or ""
        lines = content.count("\n") + (0 if not content or content.endswith("\n") else 1)
        out["tool_name"], out["tool_input"] = "Read", {"file_path": p.get("file_path")}
        out["tool_response"] = {"type": "text", "file": {"numLines": lines, "startLine": 1, "totalLines": lines}}
    elif event in ("postToolUse", "postToolUseFailure"):
        out["tool_name"] = _tool_name(p.get("tool_name"))
        inp = _json(p.get("tool_input"))
        out["tool_input"] = inp if isinstance(inp, dict) else {}
        out["tool_response"] = _json(p.get("tool_output"))
        out["error"] = p.get("error_message")
    elif event == "afterAgentResponse":
        out["last_assistant_message"] = p.get("text")
    elif event == "subagentStop":
        out["last_assistant_message"] = p.get("summary")
        out["agent_type"] = p.get("subagent_type")
    elif event == "subagentStart":
        out["agent_type"] = p.get("subagent_type")
        out["agent_id"] = p.get("subagent_id")
    return out


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """What nmem keeps of a (normalized) Cursor event, where it differs from Claude Code's; None: as Claude
    Code's."""
    event = p.get("cursor_event")
    if event == "stop":  # the turn's end; its text came with afterAgentResponse
        status = short_field(p, "status", 40)
        if status in (None, "completed"):
            return []
        return [observation("event", f"Turn ended ({status})", f"loop count: {p.get('loop_count')}")]
    if event == "sessionEnd":
        ex.end_reason = short_field(p, "reason", 40)
        detail = join_lines(clean_text(p.get("final_status"), 200), clean_text(p.get("error_message"), 1000))
        return [observation("session", "Session ended" + (f" ({ex.end_reason})" if ex.end_reason else ""), detail)]
    if event == "preCompact":
        trigger = short_field(p, "trigger", 40)
        keys = ("context_usage_percent", "context_tokens", "context_window_size", "message_count",
                "messages_to_compact")  # fmt: skip
        detail = ", ".join(f"{k}: {v}" for k in keys if isinstance((v := p.get(k)), int | float))
        return [observation("compact", "Compacting" + (f" ({trigger})" if trigger else ""), detail)]
    if event == "sessionStart":
        mode = short_field(p, "composer_mode", 40)
        background = " (background agent)" if p.get("is_background_agent") is True else ""
        ex.source = "startup"
        ex.model = short_field(p, "model")
        detail = join_lines(f"mode: {mode}" if mode else "", f"model: {ex.model}" if ex.model else "")
        return [observation("session", "Session started" + background, detail)]
    return None
