"""One Cursor session as its hooks document it (cursor.com/docs/hooks, read November 2026): Cursor's agent
cannot run offline (tests/daemon/test_agents_cursor.py says why), so every field name and value shape here
is the documented one."""

from __future__ import annotations

import json
from typing import Any

from support.helpers import new_id

PROJECT = "/tmp/nmem-cursor-project"


def common(conversation: str, generation: str, event: str) -> dict[str, Any]:
    """The fields Cursor documents for every agent hook ("Common schema")."""
    return {"conversation_id": conversation, "generation_id": generation, "model": "claude-4.5-sonnet",
            "hook_event_name": event, "cursor_version": "2.0.77", "workspace_roots": [PROJECT],
            "user_email": None, "transcript_path": None}  # fmt: skip


def session(conversation: str) -> list[dict[str, Any]]:
    """One documented turn: start, prompt, a shell command, an edit, an MCP call, a failed tool, the
    reply, the turn's end, a compaction, the session's end."""
    gen = "gen-" + new_id()[:8]
    return [
        {**common(conversation, gen, "sessionStart"), "session_id": conversation, "is_background_agent": False,
         "composer_mode": "agent"},
        {**common(conversation, gen, "beforeSubmitPrompt"), "prompt": "make the walrus parser accept tabs",
         "attachments": [{"type": "file", "file_path": f"{PROJECT}/walrus.py"}]},
        {**common(conversation, gen, "afterShellExecution"), "command": "pytest -q tests/test_walrus.py",
         "output": "1 failed, 3 passed", "duration": 812, "sandbox": False},
        {**common(conversation, gen, "afterFileEdit"), "file_path": f"{PROJECT}/walrus.py",
         "edits": [{"old_string": "line.split(' ')", "new_string": "line.split()"}]},
        {**common(conversation, gen, "afterMCPExecution"), "tool_name": "search", "mcp_server_name": "nmem",
         "tool_input": json.dumps({"query": "walrus"}), "result_json": json.dumps({"content": []}), "duration": 40},
        {**common(conversation, gen, "postToolUseFailure"), "tool_name": "Shell", "tool_use_id": "tu-1",
         "tool_input": {"command": "make lint"}, "cwd": PROJECT, "error_message": "Command timed out after 30s",
         "failure_type": "timeout", "duration": 30000, "is_interrupt": False},
        {**common(conversation, gen, "afterAgentResponse"), "text": "The walrus parser now splits on any whitespace."},
        {**common(conversation, gen, "stop"), "status": "completed", "loop_count": 0},
        {**common(conversation, gen, "preCompact"), "trigger": "auto", "context_usage_percent": 85,
         "context_tokens": 120000, "context_window_size": 128000, "message_count": 45, "messages_to_compact": 30,
         "is_first_compaction": True},
        {**common(conversation, gen, "sessionEnd"), "session_id": conversation, "reason": "user_close",
         "duration_ms": 45000, "is_background_agent": False, "final_status": "completed"},
    ]  # fmt: skip
