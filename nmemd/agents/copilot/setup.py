"""nmem's hooks and MCP server in the GitHub Copilot CLI's user configuration, and out again.

`$COPILOT_HOME/settings.json` (default `~/.copilot`) gets nmem's handlers under `hooks`, one per
event, in the PascalCase ("VS Code compatible") form whose payloads name their event as Claude
Code's do (README.md); `$COPILOT_HOME/mcp-config.json` gets `mcpServers.nmem`. Every
other key, hook and server in both files is kept; both are backed up before a change
(nmemd.setup.settings_file.write); uninstall removes exactly nmem's handlers and server.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Final

from nmemd.agents.copilot import HOME, SPEC
from nmemd.agents.copilot.capture import copilot_home, session_state
from nmemd.errors import NmemError
from nmemd.setup import settings_file
from nmemd.setup.agent_checks import hooks_check, mcp_check, mcp_server
from nmemd.setup.agent_setup import (
    AgentSetup,
    Installed,
    InstallOptions,
    install_hooks_and_mcp,
    looked_for,
    uninstall_hooks_and_mcp,
)
from nmemd.setup.checks import Check, fail, home_tilde, ok
from nmemd.setup.handler_lists import HandlerLists, HooksFileAndMcpFile

AGENT: Final = SPEC.name
MCP_NAME: Final = settings_file.MCP_NAME
# All synchronous (Copilot runs a command hook to its end): `copilot -p` may exit before a
# background hook has run, and SessionStart's and UserPromptSubmit's stdout is the context.
HOOKS: Final = SPEC.hooks
TIMEOUT_S: Final = 10


def settings_path() -> Path:
    return copilot_home() / "settings.json"


def mcp_path() -> Path:
    return copilot_home() / "mcp-config.json"


hook_command: Final = functools.partial(settings_file.hook_command, AGENT)


def handler(command: str) -> dict[str, Any]:
    return {"type": "command", "bash": command, "timeoutSec": TIMEOUT_S}


_LISTS: Final = HandlerLists("bash", handler, drop_emptied=True)
is_ours = _LISTS.is_ours
our_hooks = _LISTS.ours  # (event, command) of every handler of nmem's in a settings.json
without_hooks = _LISTS.without


def with_hooks(data: dict[str, Any], path: Path, command: str) -> dict[str, Any]:
    return _LISTS.with_(data, path, command, HOOKS)


def with_mcp(data: dict[str, Any], path: Path, command: str) -> dict[str, Any]:
    return settings_file.with_server(data, path, {"type": "local", "command": command, "args": [], "tools": ["*"]})


_FILES: Final = HooksFileAndMcpFile(settings_path, mcp_path, hook_command, with_hooks, without_hooks, with_mcp)
plan_install = _FILES.plan_install
plan_uninstall = _FILES.plan_uninstall


# --- what `nmem install`, `nmem uninstall` and `nmem doctor` do for Copilot ----------------------


def _install(o: InstallOptions) -> Installed:
    done = install_hooks_and_mcp("Copilot", plan_install, o)
    if not o.print_only and session_state().is_dir():
        done.lines.append("import your existing Copilot history with: nmem import-transcripts")
    return done


def installed_hooks() -> list[tuple[str, str]]:
    """(event, command) of nmem's hooks in Copilot's settings.json; [] when unreadable."""
    try:
        return our_hooks(settings_file.load(settings_path()), settings_path())
    except NmemError:
        return []


def check() -> list[Check]:
    """Copilot's hooks (all of nmem's events, a client that exists, hooks not all disabled) and MCP
    server; nothing when nmem is not installed for Copilot."""
    hooks_file, mcp_file = settings_path(), mcp_path()
    try:
        data, servers = settings_file.load(hooks_file), settings_file.load(mcp_file)
        hooks = our_hooks(data, hooks_file)
    except NmemError as exc:
        return [fail("copilot", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = mcp_server(servers, MCP_NAME)
    if not hooks and not mcp:
        return []  # not installed for Copilot (on purpose, perhaps): nothing to check
    fix, where = "nmem install --agent copilot", home_tilde(hooks_file)
    verdict = hooks_check("copilot hooks", where, fix, hooks, HOOKS, hook_command())
    if (verdict is None or verdict.status == "warn") and data.get("disableAllHooks") is True:
        verdict = fail("copilot hooks", f"{where} sets disableAllHooks: Copilot runs no hook", "remove it")
    key = f"mcpServers.{MCP_NAME}"
    return [
        verdict or ok("copilot hooks", f"{len(hooks)} hook events in {where}"),
        mcp_check("copilot mcp", key, mcp, home_tilde(mcp_file), fix),
    ]


SETUP: Final = AgentSetup(
    found=HOME.found,
    looked=looked_for(HOME),
    install=_install,
    uninstall=lambda o: uninstall_hooks_and_mcp("Copilot", plan_uninstall, o),
    checks=(("copilot", lambda settings: check()),),
    hooked=lambda: bool(installed_hooks()),
    project_refusal="--project is for Claude Code: nmem installs Copilot's hooks in $COPILOT_HOME (default ~/.copilot)",
)
