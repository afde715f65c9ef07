"""GitHub Copilot CLI: what its hooks send and its session files hold, as nmem reads them.

Copilot's hooks read into observations: its shell calls (the exit code from the output), `apply_patch` edits,
reads and MCP calls read here, the rest as Claude Code's (the PascalCase hooks send its names). Its hooks,
payloads, replies, config and history, as verified: README.md beside this file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from nmemd.agents.claude_code.capture import stop_observations
from nmemd.agents.codex import capture as codex
from nmemd.agents.copilot import HOME, SPEC
from nmemd.capture.fields import dict_or_empty, str_or_none
from nmemd.capture.tools import ToolCall
from nmemd.model import Extracted, Observation

AGENT: Final = SPEC.name
_SHELL_EXIT: Final = re.compile(r"<shellId: [^>]*? completed with exit code (-?\d+)>\s*\Z")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


copilot_home: Final = HOME.path


def session_state() -> Path:
    return copilot_home() / "session-state"


def shell_exit_code(text: object) -> int | None:
    """The exit code Copilot's bash tool ends its result with (`<shellId: 1 completed with exit code 2>`)."""
    m = _SHELL_EXIT.search(text[-300:]) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


def result_text(result: object) -> str:
    """What a tool result said: `text_result_for_llm` (hooks), `textResultForLlm`, or `content` (session file)."""
    r = dict_or_empty(result)
    for key in ("text_result_for_llm", "textResultForLlm", "content"):
        if isinstance(r.get(key), str):
            return str(r[key])
    return result if isinstance(result, str) else ""


def iso_of(ms: int) -> str:
    """The ISO-8601 UTC time (as hooks send `timestamp`) of milliseconds since the epoch; ms_of's inverse."""
    return (_EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ms_of(iso: object) -> int | None:
    """Milliseconds since the epoch of a hook's ISO-8601 `timestamp` (what events.jsonl records)."""
    if not isinstance(iso, str) or len(iso) > 40:
        return None
    try:
        stamp = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None
    return (stamp - _EPOCH) // timedelta(milliseconds=1)


def hook_call_id(ms: int, tool_input: object) -> str:
    """A tool call's id as its PostToolUse hook and the session file both know it: the hook's time (ms)
    and a digest of the call's arguments (two calls in one millisecond stay apart)."""
    args = json.dumps(tool_input, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.blake2b(args.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()
    return f"hook-{ms}-{digest}"


def stop_key(session_id: str, ms: int) -> str:
    """The natural key of a turn's end as its Stop hook and the session file (`agentStop`'s hook.start) know it."""
    return f"stop:{session_id}:{ms}"


def _read_config(path: str, limit: int = 1 << 20) -> bytes:
    """A config file of Copilot's, through a link too, if it is a regular file: opened non-blocking, so
    a FIFO there answers at once instead of hanging capture (issue #28, finding 4); `limit` bytes at most."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return os.read(fd, limit)
    finally:
        os.close(fd)


def mcp_servers() -> list[str]:
    """The MCP servers Copilot names tools after (`<server>-<tool>`): mcp-config.json's and the built-in one."""
    try:
        servers = dict_or_empty(
            dict_or_empty(json.loads(_read_config(str(copilot_home() / "mcp-config.json")))).get("mcpServers")
        )
    except (OSError, ValueError, RecursionError):
        servers = {}
    names = [n for n in servers if isinstance(n, str) and n] + ["github-mcp-server"]
    return sorted(names, key=len, reverse=True)


def mcp_name(tool: str) -> str | None:
    """`mcp__<server>__<tool>` for an MCP tool as Copilot names it (`nmem-search`); None for its own tools."""
    for server in mcp_servers() if "-" in tool else ():
        if tool.startswith(server + "-") and len(tool) > len(server) + 1:
            return f"mcp__{server}__{tool[len(server) + 1 :]}"
    return None


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """What nmem keeps of a Copilot event, where it differs from Claude Code's; None: as Claude Code's
    (after `p` is given Claude Code's field names where Copilot's differ)."""
    event = ex.hook_event
    ms = ms_of(p.get("timestamp")) if ex.session_id != "unknown" else None
    if event == "UserPromptSubmit" and ms is not None:
        ex.prompt_id = str(ms)  # the prompt's key, as the import finds it in events.jsonl (agents.copilot.history)
    if event == "SessionStart" and p.get("source") == "new":
        p["source"] = "startup"
    if event == "Stop" and ms is not None:
        # Copilot's Stop carries no reply, and its events.jsonl is written behind the hooks: the turn's end is
        # keyed by the hook's time, which the session file records too (the import sends it, with the reply).
        stop = stop_observations(p, ex, root)
        ex.natural_key = stop_key(ex.session_id, ms)
        return stop
    if event not in ("PostToolUse", "PostToolUseFailure"):
        return None
    if ex.tool_use_id is None and ms is not None:
        # Not the call id in events.jsonl: Copilot writes that file behind its hooks (1.0.102 had written
        # only `session.start` when a PostToolUse hook ran), so the hook's time keys the call.
        ex.tool_use_id = hook_call_id(ms, p.get("tool_input"))
    if "tool_response" not in p and "tool_result" in p:
        p["tool_response"] = result_text(p["tool_result"])
    name = str_or_none(p.get("tool_name")) or "unknown"
    if (mcp := mcp_name(name)) is not None:
        p["tool_name"] = mcp  # stored as Claude Code's, Codex's and Gemini's MCP calls are
        return None
    inp = p.get("tool_input")
    if isinstance(inp, str) and name in ("Edit", "apply_patch"):  # the patch itself
        tool = ToolCall("apply_patch", {"command": inp}, p.get("tool_response") or p.get("error"), root)
        if event == "PostToolUseFailure":
            tool.resp = f"Exit code: 1\n{str_or_none(p.get('error')) or ''}"
        return codex.apply_patch_observations(tool, ex.cwd)
    if name in ("Bash", "bash") and event == "PostToolUse":
        tool = ToolCall("Bash", dict_or_empty(inp), p.get("tool_response"), root)
        code = shell_exit_code(tool.resp)
        return codex.shell_observations(tool, known=code if code else None)
    if name == "Read" and isinstance(inp, dict) and "file_path" not in inp and "path" in inp:
        p["tool_input"] = {**inp, "file_path": inp["path"]}
    return None
