"""OpenAI Codex CLI: what its hooks send and its rollout files hold, as nmem reads them.

Verified against the real CLI, codex-cli 0.169.0 (`npm install @openai/codex@0.169.0`: the native
Rust binary is in the optional package `@openai/codex-linux-x64`, `vendor/<triple>/bin/codex`),
run offline against a scripted Responses API on 127.0.0.1 (tests/e2e/test_codex.py), and read
from the source of openai/codex (`codex-rs/hooks/src/engine/discovery.rs`,
`codex-rs/hooks/src/config_rules.rs`, `codex-rs/config/src/hook_config.rs`,
`codex-rs/config/src/fingerprint.rs`).

Hooks configuration
    `$CODEX_HOME/hooks.json` (`CODEX_HOME` defaults to `~/.codex`), `{"hooks": {"<Event>": [group]}}`
    with `group = {"matcher": "...", "hooks": [{"type": "command", "command": "...", "timeout": s,
    "async": bool, "statusMessage": "..."}]}` (the same shape may sit in config.toml under `[hooks]`;
    both at once draw a warning). A command runs through the shell, the payload on its stdin.
    Events: SessionStart, UserPromptSubmit, PreToolUse, PermissionRequest, PostToolUse, PreCompact,
    PostCompact, Stop, SessionEnd (its timeout clamped to 1-3 s, default 1), SubagentStart/Stop.
    nmem installs SessionStart, UserPromptSubmit, PostToolUse, PreCompact, PostCompact, Stop and
    SessionEnd, all synchronous (nmemd.agents.codex.setup).
    A failed command is a PostToolUse like any other: no PostToolUseFailure fires for it.
    `timeout` defaults to 600 s. The `features.hooks` flag is stable and on.

Trust
    A hook that is not the administrator's runs only once trusted: config.toml's
    `[hooks.state."<key>"] trusted_hash = "sha256:..."`, written by the TUI's `/hooks` when the user
    trusts it. `<key>` is `<absolute path of hooks.json>:<event label>:<group index>:<handler index>`
    (labels `session_start`, `user_prompt_submit`, `pre_tool_use`, `post_tool_use`, `pre_compact`,
    `post_compact`, `stop`, ...). The hash is SHA-256 over the compact, key-sorted JSON of
    `{"event_name": <label>, "matcher": <matcher, absent when none>, "hooks": [<handler with
    "timeout" always present (600 when unset) and "async" always present, None fields absent>]}`
    (`trusted_hash` below). An untrusted or modified hook is skipped silently: no prompt, no warning,
    in `codex exec` as in the TUI. `codex exec --dangerously-bypass-hook-trust` runs untrusted hooks
    for one invocation (it warns on stderr). `nmem install --agent codex` records the trust of the
    hooks it writes, exactly those (their hash changes if anyone edits them, and Codex then skips
    them until trusted again in `/hooks`; `nmem doctor` says so).

Payloads (stdin, JSON; every event)
    `session_id` (a UUIDv7, also the rollout's id), `transcript_path` (the rollout file), `cwd`,
    `hook_event_name`, `model`, `permission_mode`; `turn_id` on turn events.
    SessionStart: `source` ("startup", "resume", "clear"). UserPromptSubmit: `prompt`.
    PreToolUse / PostToolUse: `tool_name`, `tool_input`, `tool_use_id` (the model's `call_id`),
    and PostToolUse `tool_response`, a string (the command's output; no exit code, which nmem reads
    from the rollout file, where Codex has written it by then: `rollout_exit_code`). The tool names:
    `Bash` for the shell (`exec_command`, `shell`, `local_shell` alike; `tool_input.command` is
    the command line), `apply_patch` (`tool_input.command` holds the whole patch, `*** Begin
    Patch` / `*** Update File: <path>` / `*** Add File:` / `*** Delete File:` / `*** Move to:`),
    MCP tools as `mcp__<server>__<tool>`. Stop: `stop_hook_active`, `last_assistant_message`.
    PreCompact / PostCompact: `trigger`. SessionEnd: `reason` ("other" at the end of `codex exec`).

Replies
    SessionStart's stdout `{"hookSpecificOutput": {"hookEventName": "SessionStart",
    "additionalContext": "..."}}` reaches the model as a developer message of the first request
    (plain text on stdout is taken as the context too): the form nmem's daemon already answers
    Claude Code's SessionStart in (nmemd.recall.replies), so a Codex session gets the same context.

Rollout files (`nmem import-transcripts`)
    `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<local time>-<session id>.jsonl`, one
    `{"timestamp": ISO-8601 UTC, "type": ..., "payload": {...}}` per line (0.169 adds `ordinal`).
    `session_meta` (first line: `id`, `cwd`, `cli_version`, `source`, `model_provider`,
    `git.branch` when in a repository); `turn_context` (`cwd`, `model`, `turn_id`);
    `response_item` with payload types `message` (role user / assistant / developer, `content`
    blocks `input_text` / `output_text`), `function_call` (`name` `exec_command` / `shell` with JSON
    `arguments`: `cmd` or `command`, `workdir`; `call_id`), `function_call_output` (`call_id`,
    `output`, a string with a `Process exited with code N` line before `Output:`), `custom_tool_call`
    (`apply_patch`, the patch in `input`) and `custom_tool_call_output`, `reasoning`;
    `event_msg` with payload types `task_started` / `task_complete` (`last_agent_message`) /
    `token_count` / `item_completed` (0.169: `UserMessage`, `CommandExecution` with `exit_code`,
    `FileChange`, `AgentMessage`) / `exec_command_end` (older versions: `call_id`, `exit_code`);
    `compacted` (`message`: the summary). Live capture and the import name a tool call alike,
    `tool:<session>:<call_id>`, so a session seen by both is stored once.

The model, offline
    config.toml `model_provider = "<id>"` and `[model_providers.<id>] base_url =
    "http://127.0.0.1:<port>/v1", wire_api = "responses", env_key = "<VAR>"` (the key is read
    from that variable). Codex then calls `POST <base_url>/responses` (streamed server-sent events:
    `response.created`, `response.output_item.done` per item, `response.completed`) and nothing
    else. Tools offered to `gpt-5.5`: `exec_command` (function, `{"cmd": ...}`), `apply_patch`
    (custom, freeform), `write_stdin`, `view_image`, ...

MCP
    config.toml `[mcp_servers.<name>] command = "...", args = [...]` (stdio); `nmem install --agent
    codex` registers `[mcp_servers.nmem]` running `nmem-mcp`. Codex starts it with the session and
    defers its tools: the model is told the namespace `mcp__nmem` and the server's instructions, and
    finds the tools with Codex's own `tool_search` (a `tool_search_call` Codex answers itself), then
    calls them as `{"type": "function_call", "namespace": "mcp__nmem", "name": "search", ...}`. The
    PostToolUse hook names such a call `mcp__nmem__search`, as Claude Code does.
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any, Final

from nmemd.capture.fields import (
    CMD_MAX,
    PATH_MAX,
    clean_head_tail,
    clean_line,
    clean_text,
    dict_or_empty,
    join_lines,
    observation,
    relative_path,
    str_or_none,
)
from nmemd.capture.tools import ToolCall, tool_observation
from nmemd.model import Extracted, Observation

AGENT: Final = "codex"
PATCH_MAX: Final = 200_000  # chars of a patch read for its files and counts (the excerpts are far shorter)
FILES_MAX: Final = 20  # files of one patch that get an observation each
_FILE_OP: Final = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$")
_MOVE: Final = re.compile(r"^\*\*\* Move to: (.+?)\s*$")
_EXIT: Final = re.compile(r"\A(?:Exit code|Process exited with code):? (-?\d+)")


class PatchFile:
    """One file of an `apply_patch` patch: what happens to it, and its lines."""

    __slots__ = ("op", "path", "move_to", "removed", "added", "lines")

    def __init__(self, op: str, path: str) -> None:
        self.op, self.path, self.move_to = op, path, ""
        self.removed = self.added = 0
        self.lines: list[str] = []


def parse_patch(text: str) -> list[PatchFile]:
    """The files of a Codex patch (`*** Begin Patch` ... `*** End Patch`), in order. Never raises;
    text that is not a patch has no files."""
    files: list[PatchFile] = []
    current: PatchFile | None = None
    for line in text[:PATCH_MAX].splitlines():
        if m := _FILE_OP.match(line):
            current = PatchFile(m.group(1).lower(), m.group(2))
            files.append(current)
        elif current is None or line.startswith("*** "):
            if current is not None and (m := _MOVE.match(line)):
                current.move_to = m.group(1)
            elif line.startswith("*** End"):
                current = None
        elif line.startswith("+"):
            current.added += 1
            current.lines.append(line)
        elif line.startswith("-"):
            current.removed += 1
            current.lines.append(line)
        elif line.startswith("@@") or current.op == "update":
            current.lines.append(line)
    return files


def _absolute(path: str, cwd: str | None) -> str:
    return path if os.path.isabs(path) or not cwd else os.path.normpath(os.path.join(cwd, path))


def exit_code(text: object) -> int | None:
    """The exit code a Codex tool output starts with (`Exit code: 1`, `Process exited with code 2`)."""
    m = _EXIT.match(text) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


def apply_patch_observations(t: ToolCall, cwd: str | None) -> list[Observation]:
    raw = t.inp.get("command") or t.inp.get("input") or t.inp.get("patch")
    patch = raw if isinstance(raw, str) else ""
    files = parse_patch(patch)
    code = exit_code(t.resp)
    if code not in (None, 0) or not files:
        output = clean_text(t.resp if isinstance(t.resp, str) else "", 1500, 30)
        names = ", ".join(relative_path(clean_line(f.path, PATH_MAX), t.root) for f in files[:5])
        title = f"apply_patch failed (exit {code})" if code not in (None, 0) else "apply_patch (no file in the patch)"
        return [
            observation("error" if code not in (None, 0) else "tool", title + (f": {names}" if names else ""),
                 join_lines(output, clean_text(patch, 1200, 20)), tool_name="apply_patch")
        ]  # fmt: skip
    out = []
    for f in files[:FILES_MAX]:
        path = _absolute(clean_line(f.path, PATH_MAX), cwd)
        rel = relative_path(path, t.root)
        body = clean_text("\n".join(f.lines), 1200, 20)
        if f.op == "add":
            detail = f"created, {f.added} lines"
            out.append(observation("write", f"Write {rel} ({detail})", join_lines(detail, body), file_path=path))
        elif f.op == "delete":
            out.append(observation("edit", f"Delete {rel}", "deleted", file_path=path))
        else:
            detail = f"-{f.removed} +{f.added} lines"
            if f.move_to:
                detail += f", moved to {relative_path(_absolute(clean_line(f.move_to, PATH_MAX), cwd), t.root)}"
            out.append(observation("edit", f"Edit {rel} ({detail})", join_lines(detail, body), file_path=path))
    if len(files) > FILES_MAX:
        out[-1].content = join_lines(out[-1].content, f"… and {len(files) - FILES_MAX} more files in the same patch")
    for obs in out:
        obs.tool_name = "apply_patch"
    return out


ROLLOUT_TAIL: Final = 256 * 1024  # bytes of a rollout's end searched for a call's exit code
_ID_SAFE: Final = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def rollout_exit_code(path: object, call_id: object) -> int | None:
    """The exit code Codex recorded for a shell call in its rollout file (`item_completed` of a
    `CommandExecution`, or `exec_command_end` before 0.169), from the last ROLLOUT_TAIL bytes; None
    when it is not there (yet) or anything is odd. Codex writes that line before it runs the
    PostToolUse hook, whose payload says nothing of the exit code. Only a regular `rollout-*.jsonl`
    file is read, and only that number is taken from it. Never raises."""
    if not isinstance(path, str) or not isinstance(call_id, str) or not _ID_SAFE.fullmatch(call_id):
        return None
    name = os.path.basename(path)
    if not (os.path.isabs(path) and name.startswith("rollout-") and name.endswith(".jsonl")):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        start = max(st.st_size - ROLLOUT_TAIL, 0)
        data = os.pread(fd, st.st_size - start, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    needle = f'"{call_id}"'.encode()
    end = len(data)
    while (at := data.rfind(needle, 0, end)) >= 0:
        first = data.rfind(b"\n", 0, at) + 1
        last = data.find(b"\n", at)
        line = data[first : last if last >= 0 else len(data)]
        end = first
        if b'"exit_code"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        payload = record.get("payload") if isinstance(record, dict) else None
        item = payload.get("item") if isinstance(payload, dict) else None
        for found in (item, payload):
            if isinstance(found, dict) and call_id in (found.get("id"), found.get("call_id")):
                code = found.get("exit_code")
                if isinstance(code, int) and not isinstance(code, bool):
                    return code
    return None


def shell_observations(
    t: ToolCall, rollout: object = None, call_id: object = None, known: int | None = None
) -> list[Observation]:
    """Codex's shell tools as Claude Code's Bash: the command, its output; an error when the output
    names a non-zero exit code (a rollout's output does) or the rollout file records one for the call
    (the live hook's payload names none)."""
    code = known if known is not None else exit_code(t.resp)
    if code is None and rollout is not None:
        code = rollout_exit_code(rollout, call_id)
    if code in (None, 0):
        return [tool_observation(t)]
    output = t.resp if isinstance(t.resp, str) else ""
    cmd = clean_text(t.inp.get("command"), CMD_MAX)
    first = " ".join(cmd.split())[:150]
    return [
        observation(
            "error",
            f"Bash failed (exit {code}): {first}",
            content := join_lines(f"command: {cmd}", clean_head_tail(output)),
            limit=len(content),
            tool_name="Bash",
            command=cmd or None,
        )
    ]


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """What nmem keeps of a Codex event, where it differs from Claude Code's; None: as Claude Code's."""
    event = ex.hook_event
    if event in ("UserPromptSubmit", "PreCompact", "PostCompact") and ex.session_id != "unknown":
        # Codex sends no prompt id; its turn's id names the prompt in the rollout file too.
        ex.prompt_id = clean_line(str_or_none(p.get("turn_id")), 200) or None
    if event != "PostToolUse":
        return None
    name = str_or_none(p.get("tool_name")) or "unknown"
    tool = ToolCall(name, dict_or_empty(p.get("tool_input")), p.get("tool_response"), root)
    if name == "apply_patch":
        return apply_patch_observations(tool, ex.cwd)
    if name == "Bash":
        if "nmem_exit_code" in p:  # the rollout import read it already (nmemd.agents.codex.history): no file to read
            code = p["nmem_exit_code"]
            known = code if isinstance(code, int) and not isinstance(code, bool) and code != 0 else None
            return shell_observations(tool, known=known)
        return shell_observations(tool, p.get("transcript_path"), p.get("tool_use_id"))
    return None
