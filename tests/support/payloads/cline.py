"""One Cline task as its hooks document it (docs.cline.bot "Hook Reference", as the VS Code extension sends
them); the real Cline CLI's own shapes are recorded in tests/data/cline."""

from __future__ import annotations

import json
from typing import Any

PROJECT = "/tmp/nmem-cline-project"


def hook(task: str, name: str, own: dict[str, Any]) -> dict[str, Any]:
    """The base fields every Cline hook receives, and the hook's own object under its camelCase name."""
    return {"clineVersion": "3.38.0", "hookName": name, "timestamp": "1764000000000", "taskId": task,
            "workspaceRoots": [PROJECT], "userId": "user-1", name[0].lower() + name[1:]: own}  # fmt: skip


def tool(task: str, name: str, params: dict[str, Any], result: str, success: bool = True) -> dict[str, Any]:
    return hook(task, "PostToolUse", {"toolName": name, "parameters": params, "result": result, "success": success,
                                      "executionTimeMs": 120})  # fmt: skip


def task_events(task: str) -> list[dict[str, Any]]:
    meta = {"taskId": task, "ulid": "01JABCDEF", "initialTask": "add a gnu mode to the yak shaver"}
    return [
        hook(task, "TaskStart", {"taskMetadata": meta}),
        hook(task, "UserPromptSubmit", {"prompt": "also cover the yak shaver's dry run", "attachments": []}),
        tool(task, "execute_command", {"command": "npm test -- yak", "requires_approval": "false"}, "4 passing"),
        tool(task, "execute_command", {"command": "npm run lint"}, "error  Unexpected var  no-var", success=False),
        tool(task, "read_file", {"path": "src/yak.ts"}, "export function shave() {}"),
        tool(task, "write_to_file", {"path": "src/gnu.ts", "content": "export const gnu = 1\n"}, "written"),
        tool(task, "replace_in_file", {"path": "src/yak.ts",
                                       "diff": "------- SEARCH\nvar a\n=======\nconst a\n+++++++ REPLACE"}, "ok"),
        tool(task, "search_files", {"path": "src", "regex": "shave\\(", "file_pattern": "*.ts"}, "Found 2 results."),
        tool(task, "use_mcp_tool", {"server_name": "nmem", "tool_name": "search",
                                    "arguments": json.dumps({"query": "yak"})}, "no results"),
        tool(task, "attempt_completion", {"result": "The yak shaver has a gnu mode and a dry run."}, ""),
        hook(task, "PreCompact", {}),
        hook(task, "TaskComplete", {"taskMetadata": {"taskId": task, "ulid": "01JABCDEF"}}),
    ]  # fmt: skip
