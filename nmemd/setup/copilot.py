"""nmem's hooks and MCP server in the GitHub Copilot CLI's user configuration, and out again.

`$COPILOT_HOME/settings.json` (default `~/.copilot`) gets nmem's handlers under `hooks`, one per
event, in the PascalCase ("VS Code compatible") form whose payloads name their event as Claude
Code's do (nmemd.capture.copilot); `$COPILOT_HOME/mcp-config.json` gets `mcpServers.nmem`. Every
other key, hook and server in both files is kept; both are backed up before a change
(nmemd.setup.install.write); uninstall removes exactly nmem's handlers and server.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any, Final

from nmemd.capture.copilot import copilot_home
from nmemd.errors import SettingsError
from nmemd.setup import install
from nmemd.setup.install import HooksAndMcp

AGENT: Final = "copilot"
MCP_NAME: Final = install.MCP_NAME
# All synchronous (Copilot runs a command hook to its end): `copilot -p` may exit before a
# background hook has run, and SessionStart's and UserPromptSubmit's stdout is the context.
HOOKS: Final = ("SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "PreCompact", "Stop",
                "SubagentStop", "SessionEnd")  # fmt: skip
TIMEOUT_S: Final = 10


def settings_path() -> Path:
    return copilot_home() / "settings.json"


def mcp_path() -> Path:
    return copilot_home() / "mcp-config.json"


def found() -> bool:
    """Whether Copilot is on this machine: its home folder, or `copilot` on PATH."""
    return copilot_home().is_dir() or shutil.which("copilot") is not None


def hook_command() -> str:
    return f"{install.hook_command()} --agent {AGENT}"


def handler(command: str) -> dict[str, Any]:
    return {"type": "command", "bash": command, "timeoutSec": TIMEOUT_S}


def is_ours(h: object) -> bool:
    return isinstance(h, dict) and install.is_our_command(h.get("bash"))


def _hooks(data: dict[str, Any], path: Path) -> dict[str, Any]:
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError(f'{path}: "hooks" is not an object')
    for event, handlers in hooks.items():
        if not isinstance(handlers, list):
            raise SettingsError(f'{path}: "hooks.{event}" is not a list')
    return hooks


def our_hooks(data: dict[str, Any], path: Path) -> list[tuple[str, str]]:
    """(event, command) of every handler of nmem's in a settings.json."""
    return [(e, str(h["bash"])) for e, hs in _hooks(data, path).items() for h in hs if is_ours(h)]


def without_hooks(data: dict[str, Any], path: Path) -> dict[str, Any]:
    cleaned = copy.deepcopy(data)
    hooks = _hooks(cleaned, path)
    for event in list(hooks):
        kept = [h for h in hooks[event] if not is_ours(h)]
        if len(kept) != len(hooks[event]):
            if kept:
                hooks[event] = kept
            else:
                del hooks[event]
    if data.get("hooks") and not hooks:  # held only nmem's
        del cleaned["hooks"]
    return cleaned


def with_hooks(data: dict[str, Any], path: Path, command: str) -> dict[str, Any]:
    """A copy of `data` with nmem's handlers present once, current and last, nothing else changed."""
    merged = copy.deepcopy(data)
    hooks = _hooks(merged, path)
    for event in HOOKS:
        existing = hooks.get(event, [])
        if [h for h in existing if is_ours(h)] == [handler(command)] and existing[-1] == handler(command):
            continue
        hooks[event] = [h for h in existing if not is_ours(h)] + [handler(command)]
    merged["hooks"] = hooks
    return merged


def with_mcp(data: dict[str, Any], path: Path, command: str) -> dict[str, Any]:
    merged = copy.deepcopy(data)
    servers = merged.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise SettingsError(f'{path}: "mcpServers" is not an object')
    servers[MCP_NAME] = {"type": "local", "command": command, "args": [], "tools": ["*"]}
    return merged


def plan_install(mcp: bool = True) -> HooksAndMcp:
    sp, mp = settings_path(), mcp_path()
    data = with_hooks(install.load(sp), sp, hook_command())
    servers = with_mcp(install.load(mp), mp, install.mcp_command()) if mcp else None
    return HooksAndMcp(sp, data, mp, servers)


def plan_uninstall(mcp: bool = True) -> HooksAndMcp:
    sp, mp = settings_path(), mcp_path()
    data = without_hooks(install.load(sp), sp) if sp.exists() else {}
    servers = install.without_mcp(install.load(mp), mp) if mcp and mp.exists() else None
    command, server = hook_command(), install.mcp_command()
    hooks_undo = install.Undo(lambda d: with_hooks(d, sp, command), lambda d: without_hooks(d, sp))
    mcp_undo = install.Undo(lambda d: with_mcp(d, mp, server), lambda d: install.without_mcp(d, mp))
    return HooksAndMcp(sp, data, mp, servers, hooks_undo, mcp_undo)
