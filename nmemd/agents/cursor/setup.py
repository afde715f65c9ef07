"""nmem's hooks and MCP server in Cursor's user configuration, and out again.

`~/.cursor/hooks.json` gets one handler of nmem's per event (`{"command": ..., "timeout": ...}`,
version 1), after every other tool's; `~/.cursor/mcp.json` gets `mcpServers.nmem` running `nmem-mcp`.
Every other key, hook and server in both files is kept; both are backed up before a change
(nmemd.setup.settings_file.write); uninstall removes exactly nmem's handlers and server. What the hooks send
is in README.md.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Final

from nmemd.agents.cursor import HOME, SPEC
from nmemd.errors import NmemError, SettingsError
from nmemd.setup import settings_file
from nmemd.setup.agent_checks import hooks_check, mcp_check, mcp_server
from nmemd.setup.agent_setup import AgentSetup, install_hooks_and_mcp, looked_for, uninstall_hooks_and_mcp
from nmemd.setup.checks import Check, fail, home_tilde, ok
from nmemd.setup.handler_lists import HandlerLists, HooksFileAndMcpFile

AGENT: Final = SPEC.name
MCP_NAME: Final = settings_file.MCP_NAME
# The events nmem stores. Not beforeReadFile (it runs before every read with the whole file on stdin),
# nor postToolUse (the shell, edit and MCP hooks below say the same with their documented fields).
HOOKS: Final = SPEC.hooks
TIMEOUT_S: Final = 10


cursor_dir: Final = HOME.path  # `~/.cursor` (NMEM_CURSOR_DIR names another, for tests and unusual setups)


def hooks_path() -> Path:
    return cursor_dir() / "hooks.json"


def mcp_path() -> Path:
    return cursor_dir() / "mcp.json"


hook_command: Final = functools.partial(settings_file.hook_command, AGENT)


def handler(command: str) -> dict[str, Any]:
    return {"command": command, "timeout": TIMEOUT_S}


_LISTS: Final = HandlerLists("command", handler)
is_ours = _LISTS.is_ours
our_hooks = _LISTS.ours  # (event, command) of every handler of nmem's in a hooks.json
without_hooks = _LISTS.without


def with_hooks(data: dict[str, Any], path: Path, command: str) -> dict[str, Any]:
    """`data` with nmem's handlers (`HandlerLists.with_`), in the version of the file nmem knows."""
    version = data.get("version", 1)
    if version != 1:
        raise SettingsError(f"{path}: version {version!r}, nmem knows Cursor's hooks.json version 1")
    return _LISTS.with_({**data, "version": 1}, path, command, HOOKS)


def with_mcp(data: dict[str, Any], path: Path, command: str) -> dict[str, Any]:
    return settings_file.with_server(data, path, {"command": command, "args": []})


_FILES: Final = HooksFileAndMcpFile(hooks_path, mcp_path, hook_command, with_hooks, without_hooks, with_mcp)
plan_install = _FILES.plan_install
plan_uninstall = _FILES.plan_uninstall


# --- what `nmem install`, `nmem uninstall` and `nmem doctor` do for Cursor -----------------------


def check() -> list[Check]:
    """Cursor's hooks (all of nmem's events, a client that exists) and MCP server; nothing when nmem is
    not installed for Cursor."""
    hooks_file, mcp_file = hooks_path(), mcp_path()
    try:
        hooks = our_hooks(settings_file.load(hooks_file), hooks_file)
        servers = settings_file.load(mcp_file)
    except NmemError as exc:
        return [fail("cursor", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = mcp_server(servers, MCP_NAME)
    if not hooks and not mcp:
        return []  # not installed for Cursor: nothing to check
    fix, where = "nmem install --agent cursor", home_tilde(hooks_file)
    verdict = hooks_check("cursor hooks", where, fix, hooks, HOOKS, hook_command())
    return [
        verdict or ok("cursor hooks", f"{len(hooks)} hook events in {where}"),
        mcp_check("cursor mcp", f"mcpServers.{MCP_NAME}", mcp, home_tilde(mcp_file), fix),
    ]


SETUP: Final = AgentSetup(
    found=HOME.found,
    looked=looked_for(HOME),
    install=lambda o: install_hooks_and_mcp("Cursor", plan_install, o),
    uninstall=lambda o: uninstall_hooks_and_mcp("Cursor", plan_uninstall, o),
    checks=(("cursor", lambda settings: check()),),
    project_refusal="--project is for Claude Code: nmem installs cursor's hooks in your home folder",
)
