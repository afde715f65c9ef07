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
    for one invocation (it warns on stderr). `nmem install
    --agent codex` records the trust of the hooks it writes, exactly those (their hash changes if
    anyone edits them, and Codex then skips them until trusted again in `/hooks`).

Payloads (stdin, JSON; every event)
    `session_id` (a UUIDv7, also the rollout's id), `transcript_path` (the rollout file), `cwd`,
    `hook_event_name`, `model`, `permission_mode`; `turn_id` on turn events.
    SessionStart: `source` ("startup", "resume", "clear"). UserPromptSubmit: `prompt`.
    PreToolUse / PostToolUse: `tool_name`, `tool_input`, `tool_use_id` (the model's `call_id`),
    and PostToolUse `tool_response`, a string (the command's output; no exit code). The tool names:
    `Bash` for the shell (`exec_command`, `shell`, `local_shell` alike; `tool_input.command` is
    the command line), `apply_patch` (`tool_input.command` holds the whole patch, `*** Begin
    Patch` / `*** Update File: <path>` / `*** Add File:` / `*** Delete File:` / `*** Move to:`),
    MCP tools as `mcp__<server>__<tool>`. Stop: `stop_hook_active`, `last_assistant_message`.
    PreCompact / PostCompact: `trigger`. SessionEnd: `reason` ("other" at the end of `codex exec`).

Replies
    SessionStart's stdout `{"hookSpecificOutput": {"hookEventName": "SessionStart",
    "additionalContext": "..."}}` reaches the model as a developer message of the first request
    (plain text on stdout is taken as the context too). nmem's daemon answers a Codex SessionStart in
    that form (`session_start_reply`).

Rollout files (`nmem import-transcripts`)
    `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<local time>-<session id>.jsonl`, one
    `{"timestamp": ISO-8601 UTC, "type": ..., "payload": {...}}` per line (0.169 adds `ordinal`).
    `session_meta` (first line: `id`, `cwd`, `cli_version`, `source`, `model_provider`,
    `git.branch` when in a repository); `turn_context` (`cwd`, `model`, `turn_id`);
    `response_item` with payload types `message` (role user / assistant / developer, `content`
    blocks `input_text` / `output_text`), `function_call` (`name` `exec_command` / `shell` with JSON
    `arguments`: `cmd` or `command`, `workdir`; `call_id`), `function_call_output` (`call_id`,
    `output`, a string that starts with `Process exited with code N`), `custom_tool_call`
    (`apply_patch`, the patch in `input`) and `custom_tool_call_output`, `reasoning`;
    `event_msg` with payload types `user_message` / `task_started` / `task_complete`
    (`last_agent_message`) / `token_count` / `item_completed` (0.169: `CommandExecution` with
    `exit_code`, `FileChange`) / `exec_command_end` (older versions: `call_id`, `exit_code`);
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
    codex` registers `[mcp_servers.nmem]` running `nmem-mcp`.
"""
