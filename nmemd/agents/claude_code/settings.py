"""Claude Code's settings: the hooks `nmem install` writes (`HOOKS`, from the spec's hook events, with
their matchers, timeouts and async flags) and where its settings files are (`~/.claude/settings.json`,
a project's `.claude/settings.local.json`, `~/.claude.json` for MCP servers). The plugin renders the
same table (`plugin`); `setup.settings_file` merges it into the files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import msgspec

from nmemd.agents.claude_code import SPEC
from nmemd.setup.settings_file import HookSpec

# Claude Code waits only for a synchronous hook; an async one is moved to the background at once
# (`"async": true`). SessionStart is synchronous because its stdout is the injected context, and
# UserPromptSubmit only while prompt recall is on (its stdout is then the recalled text; off, the
# default, it prints nothing, so nothing is worth its ~15 ms per prompt). The events that come at
# the end of a turn, a subagent or a compaction are synchronous: `claude -p` cancelled the ones
# still running in the background when it exits (issue #15: Stop lost in 8 of 20 runs). SessionEnd
# is async: Claude Code 2.1.330 leaves a backgrounded SessionEnd hook running as it exits instead of
# waiting ~15 ms for it (0 lost in `bench_claude_code.py --loss 20 --load`), and the client spools
# to the inbox on a SIGTERM either way (hook_command).
_HOW: Final[dict[str, HookSpec]] = {
    "SessionStart": HookSpec("SessionStart", matcher="startup|resume|clear|compact"),
    "UserPromptSubmit": HookSpec("UserPromptSubmit", run_async=True),
    "PostToolUse": HookSpec("PostToolUse", matcher="*", run_async=True),
    "PostToolUseFailure": HookSpec("PostToolUseFailure", matcher="*", run_async=True),
    "SessionEnd": HookSpec("SessionEnd", timeout=5, run_async=True),
}
HOOKS: tuple[HookSpec, ...] = tuple(_HOW.get(event, HookSpec(event)) for event in SPEC.hooks)
REPLY_EVENT = "UserPromptSubmit"  # synchronous only when prompt recall has something to print


def hook_specs(prompt_recall: bool = False) -> tuple[HookSpec, ...]:
    """HOOKS as `nmem install` writes them for this config: UserPromptSubmit waited for when its
    reply (prompt recall) reaches the model, in the background otherwise."""
    if not prompt_recall:
        return HOOKS
    return tuple(msgspec.structs.replace(s, run_async=False) if s.event == REPLY_EVENT else s for s in HOOKS)


def claude_dir() -> Path:
    return Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")


def user_settings_path() -> Path:
    return claude_dir() / "settings.json"


def user_state_path() -> Path:
    """`~/.claude.json`: where Claude Code keeps user-scope MCP servers."""
    override = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(override) / ".claude.json" if override else Path.home() / ".claude.json"


def project_settings_path(root: str) -> Path:
    """A project's install goes to `.claude/settings.local.json`: it names this machine's paths, and
    `.claude/settings.json` is the file teams commit (Claude Code reads both)."""
    return Path(root) / ".claude" / "settings.local.json"
