"""GitHub Copilot CLI: what its hooks send and its session files hold, as nmem reads them.

Verified against the real CLI, GitHub Copilot CLI 1.0.102 (`npm install @github/copilot@1.0.102`: the
native binary is in the optional package `@github/copilot-linux-x64`, `copilot`; it unpacks its
runtime into `~/.cache/copilot/pkg/<platform>/<version>/` on first run), run offline against a
scripted Responses API on 127.0.0.1 (tests/e2e/test_copilot.py), and read from `copilot help
config`, `copilot help environment`, `copilot help providers` and GitHub's "Copilot CLI hooks
reference".

The model, offline
    Documented "bring your own key" mode: `COPILOT_PROVIDER_BASE_URL=http://127.0.0.1:<port>/v1`,
    `COPILOT_PROVIDER_WIRE_API=responses`, `COPILOT_MODEL=<name>`, `COPILOT_OFFLINE=true` (no GitHub
    authentication, telemetry or update check; no token needed). Copilot then calls only `POST
    <base>/responses`, streamed; a turn needs `response.output_item.added` / `.done` per item and
    `response.completed` carrying the whole `output` (without them: "No response was returned").
    `copilot -p PROMPT --allow-all-tools` runs one prompt non-interactively. Tools offered to
    `gpt-5.4`: `bash` (`{"command", "description"}`), `apply_patch` (freeform: the patch text),
    `view` (`{"path"}`), `rg`, `glob`, `task`, ... `COPILOT_HOME` (default `~/.copilot`) holds
    everything below.

Hooks configuration
    Repository hooks: `.github/hooks/*.json`, `{"version": 1, "hooks": {"<event>": [{"type":
    "command", "bash": "...", "powershell": "...", "cwd": "...", "env": {...}, "timeoutSec": 30}]}}`.
    User hooks: the same `hooks` object in `$COPILOT_HOME/settings.json` (which also holds the
    user's other settings, e.g. `"banner"`); `disableAllHooks: true` turns every hook off. Command
    hooks run through the shell with the payload on stdin. A hook named in camelCase
    (`sessionStart`, `sessionEnd`, `userPromptSubmitted`, `preToolUse`, `postToolUse`,
    `postToolUseFailure`, `agentStop`, `subagentStart`, `subagentStop`, `preCompact`,
    `errorOccurred`, `notification`, ...) gets a camelCase payload without its own event name
    (`sessionId`, `timestamp` in ms, `cwd`, `toolName`, `toolArgs`, `toolResult`); the same hook
    named in PascalCase, the "VS Code compatible" form (`SessionStart`, `UserPromptSubmit`,
    `PreToolUse`, `PostToolUse`, `PostToolUseFailure`, `Stop`, `SubagentStop`, `PreCompact`,
    `SessionEnd`), gets a snake_case payload that names its event, as Claude Code's do. nmem installs
    the PascalCase form (nmemd.setup.copilot): `hook_event_name`, `session_id` (a UUID, also the
    session folder's name), `timestamp` (ISO-8601), `cwd` on every event.
    SessionStart: `source` ("new", "resume", "startup"), `initial_prompt` with `-p`.
    UserPromptSubmit: `prompt`. PreToolUse: `tool_name`, `tool_input`. PostToolUse: `tool_name`,
    `tool_input`, `tool_result` `{"result_type": "success", "text_result_for_llm": "..."}`.
    PostToolUseFailure (a tool that failed, e.g. a patch that does not apply): `tool_name`,
    `tool_input`, `error`. Stop: `transcript_path` (the session's events.jsonl), `stop_reason`
    ("end_turn"), `stop_hook_active`. SessionEnd: `reason` ("complete").
    Tool names in this form are Claude Code's: `Bash` (the `bash` tool; its result ends
    `<shellId: N completed with exit code K>`, and a non-zero K is not a failure event), `Read`
    (`view`, `tool_input.path`), `Edit` (`apply_patch`; `tool_input` is then the patch itself, a
    string, in Codex's `*** Begin Patch` format). No payload carries the tool call's id: nmem reads
    it from the session's events.jsonl (below), where Copilot has written the call's
    `tool.execution_start` before the PostToolUse hook runs.

Replies
    SessionStart's and UserPromptSubmit's stdout `{"additionalContext": "..."}` reaches the model as
    a user message before the prompt (SessionStart) or a `<system_reminder>` after it
    (UserPromptSubmit), in both naming forms. Claude Code's `{"hookSpecificOutput": {...}}` is
    ignored: nmem's daemon answers Copilot in the plain form (nmemd.recall.replies).

Session files (`nmem import-transcripts`)
    `$COPILOT_HOME/session-state/<session id>/events.jsonl`, one `{"type": ..., "data": {...}, "id",
    "timestamp": ISO-8601 UTC, "parentId"}` per line: `session.start` (`sessionId`,
    `copilotVersion`, `context.cwd`, `context.gitRoot`, `context.branch`), `user.message`
    (`content`, `messageId`, `turnId`), `assistant.message` (`content`, `toolRequests`),
    `tool.execution_start` (`toolCallId`, `toolName`, `arguments`: an object, or the patch string for
    `apply_patch`), `tool.execution_complete` (`toolCallId`, `success`, `result.content`,
    `shellExecution.exitCode`, `error`), `hook.start` / `hook.end` (each hook's input and output,
    verbatim), `assistant.turn_start` / `turn_end`, `session.usage_record`, `session.shutdown`.
    Live capture and the import name a tool call alike, `tool:<session>:<toolCallId>`, so a session
    seen by both is stored once.

MCP
    `$COPILOT_HOME/mcp-config.json`, `{"mcpServers": {"<name>": {"type": "local", "command": "...",
    "args": [...], "tools": ["*"]}}}` (what `copilot mcp add <name> -- <command>` writes);
    `nmem install --agent copilot` registers `nmem` running `nmem-mcp`.
"""

from __future__ import annotations

import json
import os
import re
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from nmemd.capture import codex
from nmemd.capture.extract import _d, _line, _s, _Tool
from nmemd.model import Extracted, Observation

AGENT: Final = "copilot"
EVENTS_TAIL: Final = 256 * 1024  # bytes of a session's events.jsonl searched for a tool call's id
_SHELL_EXIT: Final = re.compile(r"<shellId: [^>]*? completed with exit code (-?\d+)>\s*\Z")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_SESSION_SAFE: Final = re.compile(r"[A-Za-z0-9_-]{1,100}")


def copilot_home() -> Path:
    return Path(os.environ.get("COPILOT_HOME") or Path.home() / ".copilot").absolute()


def session_state() -> Path:
    return copilot_home() / "session-state"


def shell_exit_code(text: object) -> int | None:
    """The exit code Copilot's bash tool ends its result with (`<shellId: 1 completed with exit code 2>`)."""
    m = _SHELL_EXIT.search(text[-300:]) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


def result_text(result: object) -> str:
    """What a tool result said: `text_result_for_llm` (hooks), `textResultForLlm`, or `content` (session file)."""
    r = _d(result)
    for key in ("text_result_for_llm", "textResultForLlm", "content"):
        if isinstance(r.get(key), str):
            return str(r[key])
    return result if isinstance(result, str) else ""


def call_id(session_id: str, tool_input: object, path: Path | None = None) -> str | None:
    """The id of the last call in the session's events.jsonl whose arguments are `tool_input`
    (`tool.execution_start`, written before the PostToolUse hook runs), from its last EVENTS_TAIL
    bytes; None when it is not there or anything is odd. Only a regular file is read. Never raises."""
    if not _SESSION_SAFE.fullmatch(session_id):
        return None
    file = path or session_state() / session_id / "events.jsonl"
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        start = max(st.st_size - EVENTS_TAIL, 0)
        data = os.pread(fd, st.st_size - start, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    end = len(data)
    while (at := data.rfind(b'"tool.execution_start"', 0, end)) >= 0:
        first = data.rfind(b"\n", 0, at) + 1
        last = data.find(b"\n", at)
        end = first
        try:
            record = json.loads(data[first : last if last >= 0 else len(data)])
        except ValueError:
            continue
        d = _d(_d(record).get("data"))
        if d.get("arguments") == tool_input and isinstance(d.get("toolCallId"), str):
            return _line(d["toolCallId"], 200) or None
    return None


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


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """What nmem keeps of a Copilot event, where it differs from Claude Code's; None: as Claude Code's
    (after `p` is given Claude Code's field names where Copilot's differ)."""
    event = ex.hook_event
    if event == "UserPromptSubmit" and ex.session_id != "unknown" and (ms := ms_of(p.get("timestamp"))) is not None:
        ex.prompt_id = str(ms)  # the prompt's key, as the import finds it in events.jsonl (nmemd.history.copilot)
    if event == "SessionStart" and p.get("source") == "new":
        p["source"] = "startup"
    if event not in ("PostToolUse", "PostToolUseFailure"):
        return None
    if ex.tool_use_id is None and ex.session_id != "unknown":
        ex.tool_use_id = call_id(ex.session_id, p.get("tool_input"))
    if "tool_response" not in p and "tool_result" in p:
        p["tool_response"] = result_text(p["tool_result"])
    name = _s(p.get("tool_name")) or "unknown"
    inp = p.get("tool_input")
    if isinstance(inp, str) and name in ("Edit", "apply_patch"):  # the patch itself
        tool = _Tool("apply_patch", {"command": inp}, p.get("tool_response") or p.get("error"), root)
        if event == "PostToolUseFailure":
            tool.resp = f"Exit code: 1\n{_s(p.get('error')) or ''}"
        return codex._apply_patch(tool, ex.cwd)
    if name in ("Bash", "bash") and event == "PostToolUse":
        tool = _Tool("Bash", _d(inp), p.get("tool_response"), root)
        code = shell_exit_code(tool.resp)
        return codex._bash(tool, known=code if code else None)
    if name == "Read" and isinstance(inp, dict) and "file_path" not in inp and "path" in inp:
        p["tool_input"] = {**inp, "file_path": inp["path"]}
    return None
