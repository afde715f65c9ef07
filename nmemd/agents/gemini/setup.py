"""nmem's hooks and MCP server in the Google Gemini CLI's user settings, and out again.

`~/.gemini/settings.json` (`$GEMINI_CLI_HOME/.gemini/settings.json` when that is set) gets nmem's
handlers, each in a group of its own after every other tool's, named `nmem`, and
`mcpServers.nmem` running `nmem-mcp`. User hooks run without any trust step (README.md).
Everything else in the file is kept; it is backed up before a change; uninstall removes exactly
nmem's handlers and server. Gemini reads settings.json with comments allowed: a file with comments
is not JSON to nmem, which then says so and changes nothing.
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any, Final

from nmemd.agents.gemini import HOME, SPEC, history
from nmemd.errors import NmemError
from nmemd.setup import settings_file
from nmemd.setup.agent_checks import mcp_executable
from nmemd.setup.agent_setup import AgentSetup, Installed, InstallOptions, looked_for, outcome
from nmemd.setup.checks import Check, command_paths, fail, home_tilde, ok, warn
from nmemd.setup.settings_file import HookSpec, Written

AGENT: Final = SPEC.name
MCP_NAME: Final = settings_file.MCP_NAME
HOOK_NAME: Final = "nmem"
# Gemini's timeouts are milliseconds, and it waits for every hook, SessionEnd's too.
HOOKS: Final = tuple(HookSpec(e, timeout=5_000 if e == "SessionEnd" else 10_000) for e in SPEC.hooks)


gemini_dir: Final = HOME.path


def settings_path() -> Path:
    return gemini_dir() / "settings.json"


hook_command: Final = functools.partial(settings_file.hook_command, AGENT)


def handler(spec: HookSpec, command: str) -> dict[str, Any]:
    return {"name": HOOK_NAME, "type": "command", "command": command, "timeout": spec.timeout}


def our_hooks(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(event, handler) of each of nmem's handlers in settings.json's content."""
    return [(event, h) for event, _, h in settings_file.our_handlers(data)]


def with_settings(data: dict[str, Any], path: Path, command: str, mcp: str | None) -> dict[str, Any]:
    """settings.json's content with nmem's handlers present once, current, each in its own group after
    the others', and (`mcp` given) `mcpServers.nmem`; everything else as it was."""
    merged = settings_file.with_groups_of_ours(data, path, HOOKS, lambda spec: handler(spec, command))
    return settings_file.with_server(merged, path, {"command": mcp, "args": []}) if mcp is not None else merged


def without_settings(data: dict[str, Any], path: Path, mcp: bool = True) -> dict[str, Any]:
    """settings.json's content without nmem's handlers (and, `mcp`, without `mcpServers.nmem`)."""
    cleaned = settings_file.without_hooks(copy.deepcopy(data), path)
    if mcp:
        cleaned = settings_file.without_mcp(cleaned, path)
    return cleaned


class Plan:
    """What install or uninstall will write, computed before anything is written."""

    def __init__(self, data: dict[str, Any], old: dict[str, Any], undo: settings_file.Undo | None = None) -> None:
        self.path = settings_path()
        self.data = data
        self.old = old
        self.undo = undo  # an uninstall's (settings_file.restored)


def plan_install(mcp: bool = True) -> Plan:
    path = settings_path()
    old = settings_file.load(path)
    return Plan(with_settings(old, path, hook_command(), settings_file.mcp_command() if mcp else None), old)


def plan_uninstall(mcp: bool = True) -> Plan:
    path = settings_path()
    old = settings_file.load(path)
    command, server = hook_command(), settings_file.mcp_command() if mcp else None
    undo = settings_file.Undo(
        lambda d: with_settings(d, path, command, server), lambda d: without_settings(d, path, mcp)
    )
    return Plan(without_settings(old, path, mcp), old, undo)


def apply(plan: Plan) -> Written:
    """Write settings.json (backup first); an uninstall that changes nothing writes nothing."""
    if plan.data == plan.old and not (plan.data and not plan.path.exists()):
        return Written(changed=False)
    return settings_file.write(plan.path, plan.data, plan.undo)


def printed(plan: Plan) -> str:
    return f"# {plan.path}\n{settings_file.render(plan.data)}"


# --- what `nmem install`, `nmem uninstall` and `nmem doctor` do for the Gemini CLI ---------------


def _install(o: InstallOptions) -> Installed:
    plan = plan_install(mcp=o.mcp)
    if o.print_only:
        return Installed(printed=printed(plan))
    written = apply(plan)
    what = "hooks" + (f" and MCP server '{MCP_NAME}'" if o.mcp else "")
    lines = [f"Gemini CLI {what}: {plan.path} ({outcome(written)})"]
    if os.path.isdir(history.tmp_root()):
        lines.append("import your existing Gemini CLI history with: nmem import-transcripts")
    return Installed(lines=lines)


def _uninstall(o: InstallOptions) -> list[str]:
    plan = plan_uninstall(mcp=o.mcp)
    written = apply(plan)
    if written.changed:
        what = "hooks" + (f" and MCP server '{MCP_NAME}'" if o.mcp else "")
        return [f"Gemini CLI {what} removed from {plan.path}"]
    return [f"no nmem hooks in {plan.path}"]


def installed_hooks() -> list[tuple[str, dict[str, Any]]]:
    """(event, handler) of nmem's handlers in the Gemini CLI's settings.json; [] when unreadable."""
    try:
        return our_hooks(settings_file.load(settings_path()))
    except NmemError:
        return []


def check() -> list[Check]:
    """The Gemini CLI's hooks (all of nmem's events, a client that exists, not disabled) and MCP server;
    nothing when nmem is not installed for the Gemini CLI."""
    path = settings_path()
    try:
        data = settings_file.load(path)
    except NmemError as exc:
        return [fail("gemini", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    hooks = our_hooks(data)
    servers = data.get("mcpServers")
    mcp = servers.get(MCP_NAME) if isinstance(servers, dict) else None
    if not hooks and not mcp:
        return []  # not installed for the Gemini CLI (on purpose, perhaps): nothing to check
    fix = "nmem install --agent gemini"
    where = home_tilde(path)
    events = {e for e, _ in hooks}
    missing = [h.event for h in HOOKS if h.event not in events]
    commands = {str(h.get("command", "")) for _, h in hooks}
    broken = sorted({p for c in commands for p in command_paths(c) if not os.path.exists(p)})
    raw_config = data.get("hooksConfig")
    config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
    raw_disabled = config.get("disabled")
    disabled: list[Any] = raw_disabled if isinstance(raw_disabled, list) else []
    checks: list[Check] = []
    if not hooks:
        checks.append(fail("gemini hooks", f"no nmem hooks in {where}", fix))
    elif missing:
        checks.append(fail("gemini hooks", f"{where} lacks nmem hooks for {', '.join(missing)}", fix))
    elif broken:
        checks.append(fail("gemini hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix))
    elif config.get("enabled") is False:
        checks.append(fail("gemini hooks", f"hooksConfig.enabled is false in {where}: no hook runs",
                            "set it to true, or remove it"))  # fmt: skip
    elif HOOK_NAME in disabled or any(c in disabled for c in commands):
        checks.append(fail("gemini hooks", f"nmem's hooks are in hooksConfig.disabled in {where}",
                            "enable them in the Gemini CLI's /hooks"))  # fmt: skip
    elif any(c != hook_command() for c in commands):
        checks.append(warn("gemini hooks", f"hooks in {where} call another nmem installation than this one", fix))
    else:
        checks.append(ok("gemini hooks", f"{len(events)} hook events in {where}"))
    command = (str(mcp.get("command", "")) if isinstance(mcp, dict) else "") if mcp else None
    return [*checks, mcp_executable("gemini mcp", f"mcpServers.{MCP_NAME}", command, where, fix)]


SETUP: Final = AgentSetup(
    found=HOME.found,
    looked=looked_for(HOME),
    install=_install,
    uninstall=_uninstall,
    checks=(("gemini", lambda settings: check()),),
    hooked=lambda: bool(installed_hooks()),
    project_refusal="--project is for Claude Code: nmem installs into the Gemini CLI's user settings (~/.gemini)",
)
