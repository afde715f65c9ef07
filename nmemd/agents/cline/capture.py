"""Cline: what its hooks send, as nmem reads them.

Cline's hooks read into observations: its task events renamed to Claude Code's (`normalized`), its own tools
(the VS Code extension's and the CLI's) read here, the rest as Claude Code's. Its hooks, payloads, replies,
config and history, as verified: README.md beside this file.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from nmemd.agents.cline import SPEC
from nmemd.capture.fields import (
    OUTPUT_HEAD,
    OUTPUT_TAIL,
    PATH_MAX,
    clean_head_tail,
    clean_line,
    clean_text,
    dict_or_empty,
    join_lines,
    list_or_empty,
    observation,
    relative_path,
    short_line,
    str_or_none,
)
from nmemd.model import Extracted, Observation

AGENT: Final = SPEC.name
# Cline's hooks under the names nmem (and Claude Code) gives the same moments.
EVENTS: Final = {
    "TaskStart": "SessionStart", "TaskResume": "SessionStart", "TaskCancel": "SessionEnd",
    "TaskComplete": "SessionEnd", "UserPromptSubmit": "UserPromptSubmit", "PostToolUse": "PostToolUse",
    "PreToolUse": "PreToolUse", "PreCompact": "PreCompact",
}  # fmt: skip
# The Cline CLI 3.x (@cline/core) runs the file named after the hook but sends its own event name as
# `hookName` (verified with 3.0.65): the file each one runs.
HOOK_FILES: Final = {
    "agent_start": "TaskStart", "agent_resume": "TaskResume", "agent_abort": "TaskCancel",
    "agent_end": "TaskComplete", "agent_error": "TaskError", "tool_call": "PreToolUse",
    "tool_result": "PostToolUse", "prompt_submit": "UserPromptSubmit", "pre_compact": "PreCompact",
    "session_shutdown": "SessionShutdown",
}  # fmt: skip


def _digest(*parts: str) -> str:
    data = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def tool_key(session: str, call_id: str) -> str:
    """A CLI tool call's `tool_use_id`: its session and the CLI's own call id (live and imported alike)."""
    return "cline:" + _digest(session, call_id)


def _part(name: str) -> str:
    """The hook's own object's key: `TaskStart` -> `taskStart`."""
    return name[:1].lower() + name[1:]


def _abs(path: object, cwd: str | None) -> str:
    raw = clean_line(path, PATH_MAX)
    if raw and not raw.startswith("/") and cwd:
        return f"{cwd.rstrip('/')}/{raw.removeprefix('./')}"
    return raw


def normalized(p: dict[str, Any]) -> dict[str, Any]:
    """A Cline hook payload as nmem reads hook payloads (Claude Code's field names); the hook's name stays in
    `cline_hook`, its own object in `cline`."""
    hook = str_or_none(p.get("hookName")) or str_or_none(p.get("hook_event_name")) or "unknown"
    hook = HOOK_FILES.get(hook, hook)
    own = dict_or_empty(p.get(_part(hook)))
    out = dict(p)
    out["cline_hook"], out["cline"] = hook, own
    out["hook_event_name"] = EVENTS.get(hook, hook)
    # The CLI's session (`sessionContext.rootSessionId`, its history's `sessions/<id>/`), not the run's
    # `taskId` (a conversation id found nowhere on disk): what `nmem import-transcripts` reads back.
    session = str_or_none(dict_or_empty(p.get("sessionContext")).get("rootSessionId")) or str_or_none(p.get("taskId"))
    if session:
        out["session_id"] = session
    roots = [r for r in list_or_empty(p.get("workspaceRoots")) if isinstance(r, str) and r.startswith("/")]
    if roots and not isinstance(p.get("cwd"), str):
        out["cwd"] = roots[0]
    if hook == "TaskStart":
        out["source"] = "startup"
    elif hook == "TaskResume":
        out["source"] = "resume"
    elif hook in ("TaskCancel", "TaskComplete"):
        out["reason"] = "cancel" if hook == "TaskCancel" else "complete"
    elif hook == "UserPromptSubmit":
        out["prompt"] = own.get("prompt")
    elif hook in ("PostToolUse", "PreToolUse"):
        name = str_or_none(own.get("toolName")) or "unknown"
        params = own.get("parameters")
        out["tool_name"], out["tool_input"] = name, dict_or_empty(params)
        out["tool_response"] = own.get("result")
        call_id = dict_or_empty(p.get("tool_result")).get("id")
        if hook == "PostToolUse" and isinstance(call_id, str) and call_id and session:
            out["tool_use_id"] = tool_key(session, call_id)  # the CLI names its calls
        elif hook == "PostToolUse":
            canonical = json.dumps(params, sort_keys=True, ensure_ascii=False, default=str)
            raw = own.get("result")
            result = raw if isinstance(raw, str) else json.dumps(raw, default=str)
            out["tool_use_id"] = "cline:" + _digest(name, canonical, result)
    return out


def _command(name: str, cmd: str, result: str, failed: bool) -> Observation:
    """A command of either tool set: an error (head and tail of what it said) or its output."""
    if failed:
        first = " ".join(cmd.split())[:150]
        content = join_lines(f"command: {cmd}", clean_head_tail(result))
        return observation("error", f"Command failed: {first}", content, tool_name=name, command=cmd or None)
    out = clean_head_tail(result, OUTPUT_HEAD, OUTPUT_TAIL)
    return observation(
        "command",
        f"$ {short_line(cmd, 190)}",
        join_lines("output:\n" + out if out else ""),
        tool_name=name,
        command=cmd or None,
        dedup_key=f"cmd:{cmd}",
    )


def _read(name: str, path: str, rel: str) -> Observation:
    return observation("read", f"Read {rel}", "", file_path=path or None, tool_name=name, dedup_key=f"read:{path}")


def _write(name: str, path: str, rel: str, body: str) -> Observation:
    lines = body.count("\n") + (0 if body.endswith("\n") or not body else 1)
    content = join_lines(f"{lines} lines", clean_text(body, 1200, 15))
    return observation("write", f"Write {rel} ({lines} lines)", content, file_path=path or None, tool_name=name)


def _failed_on(name: str, path: str, rel: str, output: dict[str, Any]) -> Observation:
    """A CLI tool's failed output on a file (`read_files`, `editor`)."""
    error = str_or_none(output.get("error")) or str_or_none(output.get("result")) or ""
    title = f"{name} failed: {short_line(clean_text(error, 300), 100) or 'error'} — {rel}"
    content = join_lines(f"file: {path}", clean_text(error, 4000, 100))
    return observation("error", title, content, tool_name=name, file_path=path or None)


def _outputs(record: dict[str, Any]) -> list[dict[str, Any]]:
    out = record.get("output")
    return [dict_or_empty(o) for o in (out if isinstance(out, list) else [out])]


def _cli_tool(name: str, record: dict[str, Any], root: str | None, cwd: str | None) -> list[Observation]:
    """A finished call of the Cline CLI 3.x's own tools (`tool_result`: `input`, `output` with a `success` per
    command or file: the call's `postToolUse.success` stays true when a command fails)."""
    inp, outputs = dict_or_empty(record.get("input")), _outputs(record)
    obs: list[Observation] = []
    if name == "run_commands":
        commands = [c for c in list_or_empty(inp.get("commands")) if isinstance(c, str)]
        for i, command in enumerate(commands):
            o = outputs[i] if i < len(outputs) else {}
            result = str_or_none(o.get("result")) or ""
            failed = o.get("success") is False
            shown = (str_or_none(o.get("error")) or result) if failed else result
            obs.append(_command(name, clean_text(command, 2000), shown, failed))
        return obs
    if name == "read_files":
        for i, f in enumerate(list_or_empty(inp.get("files"))):
            path = _abs(dict_or_empty(f).get("path"), cwd)
            o = outputs[i] if i < len(outputs) else {}
            rel = relative_path(path, root) if path else "(no path)"
            obs.append(_failed_on(name, path, rel, o) if o.get("success") is False else _read(name, path, rel))
        return obs
    path = _abs(inp.get("path"), cwd)
    rel = relative_path(path, root) if path else "(no path)"
    o = outputs[0] if outputs else {}
    body = str_or_none(inp.get("new_text")) or ""
    if o.get("success") is False:
        return [_failed_on(name, path, rel, o)]
    if "created" in (str_or_none(o.get("result")) or "").lower() or (inp.get("old_text") is None and
                                                             inp.get("insert_line") is None):  # fmt: skip
        return [_write(name, path, rel, body)]
    old = str_or_none(inp.get("old_text")) or ""
    diff = join_lines("- " + old if old else "", "+ " + body)
    return [observation("edit", f"Edit {rel}", clean_text(diff, 1200, 20), file_path=path or None, tool_name=name)]


def _tool(p: dict[str, Any], own: dict[str, Any], root: str | None, cwd: str | None) -> list[Observation] | None:
    """A finished Cline tool call under nmem's types; None: one nmem does not know (stored generically)."""
    name = str_or_none(own.get("toolName")) or "unknown"
    inp = dict_or_empty(own.get("parameters"))
    result = str_or_none(own.get("result")) or ""
    failed = own.get("success") is False
    if name == "execute_command":
        return [_command(name, clean_text(inp.get("command"), 2000), result, failed)]
    record = dict_or_empty(p.get("tool_result"))
    if name in ("run_commands", "read_files", "editor") and record:
        return _cli_tool(name, record, root, cwd)
    path = _abs(inp.get("path"), cwd)
    rel = relative_path(path, root) if path else "(no path)"
    if failed:
        subject = rel if path else short_line(clean_text(json.dumps(inp, default=str), 300), 120)
        title = f"{name} failed: {short_line(clean_text(result, 300), 100) or 'error'}" + (
            f" — {subject}" if subject else ""
        )
        return [observation("error", title, join_lines(f"file: {path}" if path else "", clean_text(result, 4000, 100)),
                     tool_name=name, file_path=path or None)]  # fmt: skip
    if name == "read_file":
        return [_read(name, path, rel)]
    if name == "write_to_file":
        return [_write(name, path, rel, str_or_none(inp.get("content")) or "")]
    if name == "replace_in_file":
        diff = str_or_none(inp.get("diff")) or ""
        blocks = diff.count("<<<<<<< SEARCH") or diff.count("------- SEARCH") or 1
        return [
            observation(
                "edit",
                f"Edit {rel} ({blocks} blocks)",
                join_lines(f"{blocks} blocks", clean_text(diff, 1200, 20)),
                file_path=path or None,
                tool_name=name,
            )
        ]
    if name in ("search_files", "list_files", "list_code_definition_names"):
        pattern = clean_line(inp.get("regex") or inp.get("file_pattern") or "", 300)
        inside = f" in {rel}" if path and path != root else ""
        label = {"search_files": "Grep", "list_files": "List", "list_code_definition_names": "Definitions"}[name]
        title = f"{label} '{pattern}'{inside}" if pattern else f"{label}{inside or ' ' + rel}"
        return [observation("search", title, clean_text(result, 1500, 20), tool_name=name,
                     dedup_key=f"{name}:{pattern}:{path}:{inp.get('file_pattern')}")]  # fmt: skip
    if name == "use_mcp_tool":
        server, tool = clean_line(inp.get("server_name"), 80) or "mcp", clean_line(inp.get("tool_name"), 80) or "tool"
        args = clean_text(inp.get("arguments"), 1200) if isinstance(inp.get("arguments"), str) else ""
        return [
            observation(
                "mcp",
                f"MCP {server}/{tool}" + (f": {short_line(args, 120)}" if args else ""),
                join_lines(
                    "args: " + args if args else "", "result:\n" + r if (r := clean_text(result, 1500, 20)) else ""
                ),
                tool_name=f"mcp__{server}__{tool}",
            )
        ]
    return None


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """What nmem keeps of a (normalized) Cline event, where it differs from Claude Code's; None: as Claude
    Code's."""
    hook = p.get("cline_hook")
    own = dict_or_empty(p.get("cline"))
    meta = dict_or_empty(own.get("taskMetadata"))
    if hook in ("TaskStart", "TaskResume"):
        ex.source = "startup" if hook == "TaskStart" else "resume"
        task = clean_text(meta.get("initialTask"), 4000)
        state = dict_or_empty(own.get("previousState"))
        count = clean_line(state.get("messageCount"), 20)
        title = "Task started" if hook == "TaskStart" else "Task resumed" + (f" ({count} messages)" if count else "")
        return [observation("session", title + (f": {short_line(task, 150)}" if task else ""),
                     join_lines("initial task:\n" + task if task else "", f"ulid: {clean_line(meta.get('ulid'), 60)}"
                           if meta.get("ulid") else ""))]  # fmt: skip
    reply = dict_or_empty(p.get("turn")).get("outputText")
    if hook == "TaskComplete" and isinstance(reply, str) and reply.strip():
        # The CLI's agent_end: one run (a prompt's turn) ended with this answer; stored as a turn's reply.
        p["last_assistant_message"] = reply
        from nmemd.agents.claude_code.capture import stop_observations

        ex.hook_event = "Stop"
        return stop_observations(p, ex, root)
    if hook in ("TaskCancel", "TaskComplete"):
        ex.end_reason = "cancel" if hook == "TaskCancel" else "complete"
        return [observation("session", "Task cancelled" if hook == "TaskCancel" else "Task completed")]
    if hook == "PreCompact":
        detail = ", ".join(f"{k}: {v}" for k, v in list(own.items())[:10] if isinstance(v, str | int | float))
        return [observation("compact", "Compacting", clean_text(detail, 1000))]
    if hook == "PreToolUse":
        return []  # nmem does not install it; the call is stored when it has run (PostToolUse)
    if hook == "PostToolUse":
        name = str_or_none(own.get("toolName"))
        if name == "attempt_completion":  # the task's final answer: stored and keyed as a turn's reply
            p["last_assistant_message"] = dict_or_empty(own.get("parameters")).get("result")
            from nmemd.agents.claude_code.capture import stop_observations

            ex.hook_event = "Stop"
            return stop_observations(p, ex, root)
        return _tool(p, own, root, ex.cwd)
    return None
