"""nmem's hooks and MCP server in the Google Gemini CLI's user settings, and out again.

`~/.gemini/settings.json` (`$GEMINI_CLI_HOME/.gemini/settings.json` when that is set) gets nmem's
handlers, each in a group of its own after every other tool's, named `nmem`, and
`mcpServers.nmem` running `nmem-mcp`. User hooks run without any trust step (nmemd.capture.gemini).
Everything else in the file is kept; it is backed up before a change; uninstall removes exactly
nmem's handlers and server. Gemini reads settings.json with comments allowed: a file with comments
is not JSON to nmem, which then says so and changes nothing.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any, Final

from nmemd.errors import SettingsError
from nmemd.setup import install
from nmemd.setup.install import HookSpec, Written

AGENT: Final = "gemini"
MCP_NAME: Final = install.MCP_NAME
HOOK_NAME: Final = "nmem"
# Gemini's timeouts are milliseconds, and it waits for every hook, SessionEnd's too.
HOOKS: Final[tuple[HookSpec, ...]] = (
    HookSpec("SessionStart", timeout=10_000),
    HookSpec("BeforeAgent", timeout=10_000),
    HookSpec("AfterTool", timeout=10_000),
    HookSpec("AfterAgent", timeout=10_000),
    HookSpec("SessionEnd", timeout=5_000),
)


def gemini_dir() -> Path:
    return (Path(os.environ.get("GEMINI_CLI_HOME") or Path.home()) / ".gemini").absolute()


def settings_path() -> Path:
    return gemini_dir() / "settings.json"


def found() -> bool:
    """Whether the Gemini CLI is on this machine: its folder, or `gemini` on PATH."""
    return gemini_dir().is_dir() or shutil.which("gemini") is not None


def hook_command() -> str:
    """Claude Code's hook command (nmemd.setup.install.hook_command), naming the agent."""
    return f"{install.hook_command()} --agent {AGENT}"


def mcp_command() -> str:
    return install.mcp_command()


def handler(spec: HookSpec, command: str) -> dict[str, Any]:
    return {"name": HOOK_NAME, "type": "command", "command": command, "timeout": spec.timeout}


def our_hooks(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(event, handler) of each of nmem's handlers in settings.json's content."""
    hooks = data.get("hooks")
    found: list[tuple[str, dict[str, Any]]] = []
    for event, groups in hooks.items() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for h in handlers if isinstance(handlers, list) else []:
                if install.is_our_handler(h):
                    found.append((event, h))
    return found


def with_settings(data: dict[str, Any], path: Path, command: str, mcp: str | None) -> dict[str, Any]:
    """settings.json's content with nmem's handlers present once, current, each in its own group after
    the others', and (`mcp` given) `mcpServers.nmem`; everything else as it was."""
    merged = install.without_hooks(data, path)
    hooks = merged.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise SettingsError(f'{path}: "hooks" is not an object')
    for spec in HOOKS:
        groups = hooks.setdefault(spec.event, [])
        if not isinstance(groups, list):
            raise SettingsError(f"{path}: hooks.{spec.event} is not a list")
        groups.append({"hooks": [handler(spec, command)]})
    if mcp is not None:
        servers = merged.setdefault("mcpServers", {})
        if not isinstance(servers, dict):
            raise SettingsError(f'{path}: "mcpServers" is not an object')
        servers[MCP_NAME] = {"command": mcp, "args": []}
    return merged


def without_settings(data: dict[str, Any], path: Path, mcp: bool = True) -> dict[str, Any]:
    """settings.json's content without nmem's handlers (and, `mcp`, without `mcpServers.nmem`)."""
    cleaned = install.without_hooks(copy.deepcopy(data), path)
    if mcp:
        cleaned = install.without_mcp(cleaned, path)
    return cleaned


class Plan:
    """What install or uninstall will write, computed before anything is written."""

    def __init__(self, data: dict[str, Any], old: dict[str, Any], undo: install.Undo | None = None) -> None:
        self.path = settings_path()
        self.data = data
        self.old = old
        self.undo = undo  # an uninstall's (install.restored)


def plan_install(mcp: bool = True) -> Plan:
    path = settings_path()
    old = install.load(path)
    return Plan(with_settings(old, path, hook_command(), mcp_command() if mcp else None), old)


def plan_uninstall(mcp: bool = True) -> Plan:
    path = settings_path()
    old = install.load(path)
    command, server = hook_command(), mcp_command() if mcp else None
    undo = install.Undo(lambda d: with_settings(d, path, command, server), lambda d: without_settings(d, path, mcp))
    return Plan(without_settings(old, path, mcp), old, undo)


def apply(plan: Plan) -> Written:
    """Write settings.json (backup first); an uninstall that changes nothing writes nothing."""
    if plan.data == plan.old and not (plan.data and not plan.path.exists()):
        return Written(changed=False)
    return install.write(plan.path, plan.data, plan.undo)


def printed(plan: Plan) -> str:
    return f"# {plan.path}\n{install.render(plan.data)}"
