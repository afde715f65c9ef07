"""OpenCode: what nmem's plugin sends from it and its session database holds, as nmem reads them.

Verified against the real CLI, opencode-ai 1.18.33 (`npm install opencode-ai@1.18.33`: the native
binary, a compiled Bun program, is in the optional package `opencode-linux-x64`; it needs no Node at
run time), run offline against a scripted OpenAI-compatible chat completions API on 127.0.0.1
(tests/e2e/test_opencode.py). Its source (sst/opencode) was too large to fetch here; the plugin
hooks' shapes below are what 1.18.33 passed to a probe plugin that logged every call.

The model, offline
    A custom provider in opencode.json: `"provider": {"<id>": {"npm": "@ai-sdk/openai-compatible",
    "options": {"baseURL": "http://127.0.0.1:<port>/v1", "apiKey": "..."}, "models": {"<model>":
    {"name": "...", "tool_call": true}}}}` and `"model": "<id>/<model>"` (and `small_model`, used for
    the session's title). That provider package is bundled: nothing is downloaded. OpenCode then calls
    only `POST <baseURL>/chat/completions`, streamed (`chat.completion.chunk` events, tool calls as
    `delta.tool_calls`, `finish_reason` "tool_calls" or "stop", `data: [DONE]`). `opencode run
    "<prompt>"` runs one prompt non-interactively and approves every tool call. With HOME and the
    XDG_* directories in a temporary folder, `OPENCODE_DISABLE_AUTOUPDATE=1`,
    `OPENCODE_DISABLE_MODELS_FETCH=1` and `OPENCODE_DISABLE_LSP_DOWNLOAD=1` it needs no network.
    Tools offered: `bash` (`command`, `description`), `read` (`filePath`, `offset`, `limit`),
    `write` (`filePath`, `content`), `edit` (`filePath`, `oldString`, `newString`, `replaceAll`),
    `glob` (`pattern`, `path`), `grep` (`pattern`, `path`, `include`; it runs ripgrep, which it
    fails without), `task`, `todowrite`, `webfetch`, `skill`; an MCP server's tools as
    `<server>_<tool>`. A relative `filePath` is relative to the session's directory.

Plugins
    OpenCode has no command hooks: it loads every `*.js` / `*.ts` file in `~/.config/opencode/plugin/`
    (`$XDG_CONFIG_HOME/opencode/plugin/`; `plugins/` too) and the project's `.opencode/plugin/`, in
    its own Bun runtime. A plugin module exports async functions `({project, client, $, directory,
    worktree}) => hooks`; `$` is Bun's shell and `Bun.spawn` is there, so a plugin can run any command
    and pipe it a payload. The hooks nmem uses (nmemd.agents.opencode.setup writes `nmem.js`):
    `event({event})` receives every bus event `{id, type, properties}`: `session.created`
    (`properties.info`: `id`, `directory`, `parentID` for a subagent's session, `version`),
    `session.idle` (`sessionID`; the turn is over), `session.compacted` (`sessionID`),
    `message.part.updated` (`part`: a tool part `{type: "tool", tool, callID, state: {status:
    "running" | "completed" | "error", input, output, error, metadata}}`, a text part `{type: "text",
    text, time}`), and many more (`session.updated`, `session.status`, `session.diff`,
    `message.updated`, `file.edited`, `plugin.added`, ...). `chat.message(input, output)` runs for
    each user message: `output.message` (`id`, `sessionID`, `role`, `model`), `output.parts` (the
    `text` parts; `synthetic` ones are OpenCode's own). `tool.execute.after(input, output)` runs for
    each tool call that finished: `input` `{tool, sessionID, callID, args}`, `output` `{title, output,
    metadata}` (bash: `metadata.exit`, `metadata.output`; edit: `metadata.diff`, `filediff`; write:
    `metadata.filepath`, `exists`; read: `metadata.display`); a tool that throws (grep without
    ripgrep) gets no `tool.execute.after`: its part goes to `status: "error"` with `state.error`,
    which nmem's plugin reads from `message.part.updated`. Hooks are awaited.

Context
    `experimental.chat.system.transform({sessionID, model}, output)` runs before every model request;
    strings pushed to `output.system` reach the model as a system message (verified: the fake API
    receives them). nmem's plugin sends SessionStart once per session, waits (bounded) for the
    daemon's reply (`hookSpecificOutput.additionalContext`, as for Claude Code) and adds it there.

What the plugin sends (`send.py --agent opencode`, one JSON object on stdin, Claude Code's names)
    SessionStart (`session.created`): `session_id`, `cwd`, `source: "startup"`, `parent_session_id`.
    UserPromptSubmit (`chat.message`): `prompt` (its text parts), `prompt_id` (the message's id, as
    the database keeps it), `model` (`<provider>/<model>`). PostToolUse (`tool.execute.after`):
    `tool_name` (OpenCode's), `tool_input` (its args), `tool_use_id` (the `callID`), `tool_response`
    `{title, output, metadata}`. PostToolUseFailure (an error tool part): `tool_name`, `tool_input`,
    `tool_use_id`, `error`. Stop (`session.idle`): `last_assistant_message` (the session's last text
    part). PostCompact (`session.compacted`). Every payload has `session_id`, `cwd` (the plugin's
    `directory`) and `hook_event_name`; `session_id` is OpenCode's (`ses_...`).

Session storage (`nmem import-transcripts`, nmemd.agents.opencode.history)
    Since 1.2 one SQLite database, `~/.local/share/opencode/opencode.db` (`$XDG_DATA_HOME/opencode/`),
    in WAL mode: `session` (`id`, `project_id`, `parent_id`, `directory`, `title`, `version`,
    `time_created`, `time_updated` in ms), `message` (`id`, `session_id`, `time_created`, `data`: JSON
    `{role, time, agent, model | modelID/providerID, finish, ...}`), `part` (`id`, `message_id`,
    `session_id`, `time_created`, `time_updated`, `data`: JSON, the part as the bus sends it without
    its ids), `project` (`id`, `worktree`). Before 1.2 the same records were JSON files under
    `~/.local/share/opencode/storage/` (`session/`, `message/<session>/`, `part/<message>/`); nmem
    reads only the database. Live capture and the import name a tool call `tool:<session>:<callID>`
    and a prompt `prompt:<session>:<message id>`, so a session seen by both is stored once.

MCP
    opencode.json `"mcp": {"<name>": {"type": "local", "command": ["<program>", ...], "enabled":
    true}}`; `nmem install --agent opencode` registers `nmem` running `nmem-mcp` in the user's
    `~/.config/opencode/opencode.json`.
"""

from __future__ import annotations

import os
from typing import Any, Final

from nmemd.agents.codex import capture as codex
from nmemd.capture.fields import dict_or_empty, int_or_none, str_or_none
from nmemd.capture.tools import ToolCall, tool_observation
from nmemd.model import Extracted, Observation

AGENT: Final = "opencode"
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
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "opencode")


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
