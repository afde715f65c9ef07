"""OpenCode: what nmem's plugin sends from it and its session database holds, as nmem reads them.

OpenCode's events, as nmem's plugin sends them, read into observations: its tools read here, the rest as
Claude Code's. Its hooks, payloads, replies, config and history, as verified: README.md beside this file.
"""

from __future__ import annotations

import os
from typing import Any, Final

from nmemd.agents.codex import capture as codex
from nmemd.agents.opencode import HOME, SPEC
from nmemd.capture.fields import dict_or_empty, int_or_none, str_or_none
from nmemd.capture.tools import ToolCall, tool_observation
from nmemd.model import Extracted, Observation

AGENT: Final = SPEC.name
# OpenCode's tools under Claude Code's names, with their arguments under Claude Code's keys.
TOOL_NAMES: Final = {
    "bash": "Bash", "read": "Read", "write": "Write", "edit": "Edit", "grep": "Grep", "glob": "Glob",
    "webfetch": "WebFetch", "task": "Task", "todowrite": "TodoWrite", "list": "LS",
}  # fmt: skip
_KEYS: Final = {
    "filePath": "file_path", "oldString": "old_string", "newString": "new_string", "replaceAll": "replace_all",
    "include": "glob", "subagent_type": "subagent_type",
}  # fmt: skip


def config_dir() -> str:
    """OpenCode's user configuration folder: `$XDG_CONFIG_HOME/opencode` (default `~/.config/opencode`)."""
    return str(HOME.path())


def data_dir() -> str:
    """OpenCode's data folder: `$XDG_DATA_HOME/opencode` (default `~/.local/share/opencode`)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "opencode")


def database() -> str:
    """Where OpenCode 1.2+ keeps its sessions."""
    return os.path.join(data_dir(), "opencode.db")


def as_claude(name: str, inp: object, cwd: str | None) -> tuple[str, dict[str, Any]]:
    """An OpenCode tool call under Claude Code's tool name and argument keys, a relative path made absolute
    against the session's directory."""
    args = dict_or_empty(inp)
    out = {_KEYS.get(k, k): v for k, v in args.items()}
    path = out.get("file_path")
    if isinstance(path, str) and path and not path.startswith("/") and cwd:
        out["file_path"] = os.path.join(cwd, path)
    return TOOL_NAMES.get(name, name), out


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """What nmem keeps of an OpenCode event, where it differs from Claude Code's; None: as Claude Code's
    (after `p` is given Claude Code's tool names and argument keys)."""
    event = ex.hook_event
    if event not in ("PostToolUse", "PostToolUseFailure"):
        return None
    raw = str_or_none(p.get("tool_name")) or "unknown"
    name, inp = as_claude(raw, p.get("tool_input"), ex.cwd)
    p["tool_name"], p["tool_input"] = name, inp
    if event == "PostToolUseFailure":
        return None
    resp = dict_or_empty(p.get("tool_response"))
    output = resp.get("output") if isinstance(resp.get("output"), str) else ""
    meta = dict_or_empty(resp.get("metadata"))
    if name == "Bash":
        code = int_or_none(meta.get("exit"))
        return codex.shell_observations(ToolCall("Bash", inp, output, root), known=code if code else None)
    if name in ("Write", "Edit"):
        patch = dict_or_empty(meta.get("filediff")).get("patch") or meta.get("diff")
        response: object = {"structuredPatch": None, "filePath": inp.get("file_path"), "diff": patch}
        if name == "Write":
            response = {"type": "update" if meta.get("exists") is True else "create", "filePath": inp.get("file_path")}
        obs = tool_observation(ToolCall(name, inp, response, root))
        obs.tool_name = raw
        return [obs]
    if name == "Read":
        display = dict_or_empty(meta.get("display"))
        start, total, end = (
            int_or_none(display.get("lineStart")),
            int_or_none(display.get("totalLines")),
            int_or_none(display.get("lineEnd")),
        )
        file: dict[str, Any] = {}
        if start is not None and end is not None:
            file = {"numLines": end - start + 1, "startLine": start, "totalLines": total}
        obs = tool_observation(ToolCall(name, inp, {"type": "text", "file": file}, root))
        obs.tool_name = raw
        return [obs]
    obs = tool_observation(ToolCall(name, inp, output or resp.get("title"), root))
    obs.tool_name = raw if name == raw else obs.tool_name
    return [obs]
