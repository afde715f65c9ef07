"""What `nmem install`, `nmem uninstall` and `nmem doctor` do for an agent, as an `AgentSetup` (each
agent's is in its folder, `nmemd/agents/<name>/setup.py`; the registry's `AgentSpec.setup` names it):
whether the agent is on this machine, its install and uninstall (they say what they did in lines; the
CLI prints them), and its doctor checks.

An install or uninstall raises NmemError for a file it cannot read or write; the CLI says it in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nmemd.setup.checks import Check, home_tilde

if TYPE_CHECKING:
    from nmemd.agent_spec import AgentHome
    from nmemd.config import Settings
    from nmemd.setup.settings_file import HooksAndMcp, Written


@dataclass(frozen=True, kw_only=True)
class InstallOptions:
    print_only: bool = False  # show what would be written, change nothing
    mcp: bool = True  # register (or remove) the MCP server too
    project_scope: bool = False  # this project's settings (Claude Code only)


@dataclass(kw_only=True)
class Installed:
    printed: str | None = None  # with print_only: what would be written, printed as is
    lines: list[str] = field(default_factory=list)  # what it did, one line each
    offer_import: bool = False  # ask to import the agent's existing history now


@dataclass(frozen=True, kw_only=True)
class AgentSetup:
    found: Callable[[], bool]  # the agent is on this machine (its folder, or its command on PATH)
    looked: Callable[[], str]  # where nmem looked for it, said when it is not found
    install: Callable[[InstallOptions], Installed]
    uninstall: Callable[[InstallOptions], list[str]]
    # Doctor's checks of the agent's install, each under the name a check that cannot run is reported by.
    checks: tuple[tuple[str, Callable[[Settings], list[Check] | Check]], ...] = ()
    # Why `--project` does not apply to it (it installs in the user's home); None: it does.
    project_refusal: str | None = None
    # nmem's hooks are in its settings (doctor then calls a Claude Code without nmem's "not set up yet").
    hooked: Callable[[], bool] | None = None


def outcome(w: Written) -> str:
    if not w.changed:
        return "already up to date"
    return f"updated, backup {w.backup.name}" if w.backup else "created"


def not_found(folder: Path | str, command: str) -> str:
    """An `AgentSetup.looked`: where nmem looked for an agent it did not find."""
    return f"no {home_tilde(folder)}, no {command} on PATH"


def looked_for(home: AgentHome) -> Callable[[], str]:
    """The `AgentSetup.looked` of an agent found by its `AgentHome`."""
    return lambda: not_found(home.sign(), home.commands[0])


# The install and uninstall of an agent whose hooks and MCP server are two JSON files of its own
# (Copilot, Cursor: setup.settings_file.HooksAndMcp).


def install_hooks_and_mcp(label: str, plan_install: Callable[..., HooksAndMcp], o: InstallOptions) -> Installed:
    from nmemd.setup.settings_file import MCP_NAME

    plan = plan_install(mcp=o.mcp)
    if o.print_only:
        return Installed(printed=plan.printed())
    hooks_written, mcp_written = plan.apply()
    lines = [f"{label} hooks: {plan.hooks} ({outcome(hooks_written)})"]
    if plan.mcp_data is not None:
        lines.append(f"{label} MCP server '{MCP_NAME}': {plan.mcp} ({outcome(mcp_written)})")
    return Installed(lines=lines)


def uninstall_hooks_and_mcp(label: str, plan_uninstall: Callable[..., HooksAndMcp], o: InstallOptions) -> list[str]:
    from nmemd.setup.settings_file import MCP_NAME

    plan = plan_uninstall(mcp=o.mcp)
    hooks_written, mcp_written = plan.apply(uninstall=True)
    lines = [f"{label} hooks removed from {plan.hooks}" if hooks_written.changed else f"no nmem hooks in {plan.hooks}"]
    if mcp_written.changed:
        lines.append(f"{label} MCP server '{MCP_NAME}' removed from {plan.mcp}")
    return lines
