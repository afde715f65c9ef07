"""What `nmem install`, `nmem uninstall` and `nmem doctor` do for each agent, as one `AgentSetup` per
agent (the registry's `AgentSpec.setup` names it): whether the agent is on this machine, its install and
uninstall (they say what they did in lines; the CLI prints them), and its doctor checks.

An install or uninstall raises NmemError for a file it cannot read or write; the CLI says it in one line.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nmemd import config
from nmemd.capture.project import project_root
from nmemd.errors import NmemError
from nmemd.setup import agent_checks
from nmemd.setup.checks import Check, home_tilde

if TYPE_CHECKING:
    from nmemd.config import Settings
    from nmemd.setup.install import HooksAndMcp, Written


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


def _not_found(folder: Path | str, command: str) -> str:
    return f"no {home_tilde(folder)}, no {command} on PATH"  # `looked`


# --- Claude Code ---------------------------------------------------------------------------------


def settings_target(project_scope: bool) -> Path:
    """Claude Code's settings file an install writes: the user's, or this project's."""
    from nmemd.setup import install as inst

    if not project_scope:
        return inst.user_settings_path()
    root = project_root(os.getcwd()) or os.getcwd()
    return inst.project_settings_path(root)


def _prompt_recall() -> bool:
    """Whether prompt recall is on (config.toml, NMEM_PROMPT_RECALL): its UserPromptSubmit hook must then
    be waited for. A config that cannot be read counts as on: a hook waited for costs ~15 ms, one not
    waited for loses the recalled text."""
    try:
        return config.load().prompt_recall
    except NmemError:
        return True


def _claude_found() -> bool:
    from nmemd.setup import install as inst

    return inst.claude_dir().is_dir() or shutil.which("claude") is not None


def _claude_looked() -> str:
    from nmemd.setup import install as inst

    return _not_found(inst.claude_dir(), "claude")


def _install_claude(o: InstallOptions) -> Installed:
    from nmemd.setup import install as inst

    target = settings_target(o.project_scope)
    specs = inst.hook_specs(_prompt_recall())
    settings = inst.with_hooks(inst.load(target), target, inst.hook_command(), specs)
    state_path = inst.user_state_path()
    state = inst.with_mcp(inst.load(state_path), state_path, sys.executable, inst.mcp_args()) if o.mcp else None
    if o.print_only:
        printed = f"# {target}\n{inst.render(settings)}"
        if state is not None:
            printed += f"# {state_path}: mcpServers.{inst.MCP_NAME}\n"
            printed += inst.render({"mcpServers": {inst.MCP_NAME: state["mcpServers"][inst.MCP_NAME]}})
        return Installed(printed=printed)
    hooks_written = inst.write(target, settings)
    mcp_written = inst.write(state_path, state) if state is not None else None
    lines = [f"hooks: {target} ({outcome(hooks_written)})"]
    if mcp_written is not None:
        lines.append(f"MCP server '{inst.MCP_NAME}': {state_path} ({outcome(mcp_written)})")
    return Installed(lines=lines, offer_import=True)


def _uninstall_claude(o: InstallOptions) -> list[str]:
    from nmemd.setup import install as inst

    target = settings_target(o.project_scope)
    # A project installed by an earlier version has its hooks in .claude/settings.json: clean both.
    targets = [target, target.with_name("settings.json")] if o.project_scope else [target]
    removed = [t for t in targets if t.exists() and inst.uninstall_hooks(t).changed]
    state_path = inst.user_state_path()
    mcp_removed = o.mcp and state_path.exists() and inst.uninstall_mcp(state_path).changed
    lines = [f"hooks removed from {t}" for t in removed] or [f"no nmem hooks in {target}"]
    if mcp_removed:
        lines.append(f"MCP server '{inst.MCP_NAME}' removed from {state_path}")
    return lines


def _claude_hooks(settings: Settings) -> list[Check] | Check:
    from nmemd.setup import doctor

    return doctor.check_hooks(settings.prompt_recall)


def _claude_mcp(settings: Settings) -> list[Check] | Check:
    from nmemd.setup import doctor

    return doctor.check_mcp()


CLAUDE_CODE = AgentSetup(
    found=_claude_found,
    looked=_claude_looked,
    install=_install_claude,
    uninstall=_uninstall_claude,
    checks=(("hooks", _claude_hooks), ("mcp", _claude_mcp)),
)


# --- Codex ---------------------------------------------------------------------------------------


def _install_codex(o: InstallOptions) -> Installed:
    from nmemd.history.importer import codex_root
    from nmemd.setup import codex

    plan = codex.plan_install(mcp=o.mcp)
    if o.print_only:
        return Installed(printed=codex.printed(plan))
    hooks_written, config_written = codex.apply(plan)
    what = "trust of nmem's hooks" + (f" and MCP server '{codex.MCP_NAME}'" if o.mcp else "")
    lines = [f"Codex hooks: {plan.hooks} ({outcome(hooks_written)})",
             f"Codex {what}: {plan.config} ({outcome(config_written)})"]  # fmt: skip
    if os.path.isdir(codex_root()):
        lines.append("import your existing Codex history with: nmem import-transcripts")
    return Installed(lines=lines)


def _uninstall_codex(o: InstallOptions) -> list[str]:
    from nmemd.setup import codex

    plan = codex.plan_uninstall(mcp=o.mcp)
    hooks_written, config_written = codex.apply(plan)
    lines = [f"Codex hooks removed from {plan.hooks}" if hooks_written.changed else f"no nmem hooks in {plan.hooks}"]
    if config_written.changed:
        what = "trust of nmem's hooks" + (f" and MCP server '{codex.MCP_NAME}'" if o.mcp else "")
        lines.append(f"Codex {what} removed from {plan.config}")
    return lines


def _codex_found() -> bool:
    from nmemd.setup import codex

    return codex.found()


def _codex_looked() -> str:
    from nmemd.setup import codex

    return _not_found(codex.codex_home(), "codex")


CODEX = AgentSetup(
    found=_codex_found,
    looked=_codex_looked,
    install=_install_codex,
    uninstall=_uninstall_codex,
    checks=(("codex", lambda settings: agent_checks.check_codex()),),
    hooked=lambda: bool(agent_checks.codex_hooks()),
    project_refusal="--project is for Claude Code: Codex reads its hooks from $CODEX_HOME (default ~/.codex)",
)


# --- Gemini CLI ----------------------------------------------------------------------------------


def _install_gemini(o: InstallOptions) -> Installed:
    from nmemd.history.importer import gemini_root
    from nmemd.setup import gemini

    plan = gemini.plan_install(mcp=o.mcp)
    if o.print_only:
        return Installed(printed=gemini.printed(plan))
    written = gemini.apply(plan)
    what = "hooks" + (f" and MCP server '{gemini.MCP_NAME}'" if o.mcp else "")
    lines = [f"Gemini CLI {what}: {plan.path} ({outcome(written)})"]
    if os.path.isdir(gemini_root()):
        lines.append("import your existing Gemini CLI history with: nmem import-transcripts")
    return Installed(lines=lines)


def _uninstall_gemini(o: InstallOptions) -> list[str]:
    from nmemd.setup import gemini

    plan = gemini.plan_uninstall(mcp=o.mcp)
    written = gemini.apply(plan)
    if written.changed:
        what = "hooks" + (f" and MCP server '{gemini.MCP_NAME}'" if o.mcp else "")
        return [f"Gemini CLI {what} removed from {plan.path}"]
    return [f"no nmem hooks in {plan.path}"]


def _gemini_found() -> bool:
    from nmemd.setup import gemini

    return gemini.found()


def _gemini_looked() -> str:
    from nmemd.setup import gemini

    return _not_found(gemini.gemini_dir(), "gemini")


GEMINI = AgentSetup(
    found=_gemini_found,
    looked=_gemini_looked,
    install=_install_gemini,
    uninstall=_uninstall_gemini,
    checks=(("gemini", lambda settings: agent_checks.check_gemini()),),
    hooked=lambda: bool(agent_checks.gemini_hooks()),
    project_refusal="--project is for Claude Code: nmem installs into the Gemini CLI's user settings (~/.gemini)",
)


# --- agents whose hooks and MCP servers are two JSON files of their own (Copilot, Cursor) ---------


def _install_hooks_and_mcp(label: str, plan_install: Callable[..., HooksAndMcp], o: InstallOptions) -> Installed:
    from nmemd.setup.install import MCP_NAME

    plan = plan_install(mcp=o.mcp)
    if o.print_only:
        return Installed(printed=plan.printed())
    hooks_written, mcp_written = plan.apply()
    lines = [f"{label} hooks: {plan.hooks} ({outcome(hooks_written)})"]
    if plan.mcp_data is not None:
        lines.append(f"{label} MCP server '{MCP_NAME}': {plan.mcp} ({outcome(mcp_written)})")
    return Installed(lines=lines)


def _uninstall_hooks_and_mcp(label: str, plan_uninstall: Callable[..., HooksAndMcp], o: InstallOptions) -> list[str]:
    from nmemd.setup.install import MCP_NAME

    plan = plan_uninstall(mcp=o.mcp)
    hooks_written, mcp_written = plan.apply(uninstall=True)
    lines = [f"{label} hooks removed from {plan.hooks}" if hooks_written.changed else f"no nmem hooks in {plan.hooks}"]
    if mcp_written.changed:
        lines.append(f"{label} MCP server '{MCP_NAME}' removed from {plan.mcp}")
    return lines


def _install_copilot(o: InstallOptions) -> Installed:
    from nmemd.capture.copilot import session_state
    from nmemd.setup import copilot

    done = _install_hooks_and_mcp("Copilot", copilot.plan_install, o)
    if not o.print_only and session_state().is_dir():
        done.lines.append("import your existing Copilot history with: nmem import-transcripts")
    return done


def _uninstall_copilot(o: InstallOptions) -> list[str]:
    from nmemd.setup import copilot

    return _uninstall_hooks_and_mcp("Copilot", copilot.plan_uninstall, o)


def _copilot_found() -> bool:
    from nmemd.setup import copilot

    return copilot.found()


def _copilot_looked() -> str:
    from nmemd.capture.copilot import copilot_home

    return _not_found(copilot_home(), "copilot")


COPILOT = AgentSetup(
    found=_copilot_found,
    looked=_copilot_looked,
    install=_install_copilot,
    uninstall=_uninstall_copilot,
    checks=(("copilot", lambda settings: agent_checks.check_copilot()),),
    hooked=lambda: bool(agent_checks.copilot_hooks()),
    project_refusal="--project is for Claude Code: nmem installs Copilot's hooks in $COPILOT_HOME (default ~/.copilot)",
)


def _install_cursor(o: InstallOptions) -> Installed:
    from nmemd.setup import cursor

    return _install_hooks_and_mcp("Cursor", cursor.plan_install, o)


def _uninstall_cursor(o: InstallOptions) -> list[str]:
    from nmemd.setup import cursor

    return _uninstall_hooks_and_mcp("Cursor", cursor.plan_uninstall, o)


def _cursor_found() -> bool:
    from nmemd.setup import cursor

    return cursor.found()


def _cursor_looked() -> str:
    from nmemd.setup import cursor

    return _not_found(cursor.cursor_dir(), "cursor")


CURSOR = AgentSetup(
    found=_cursor_found,
    looked=_cursor_looked,
    install=_install_cursor,
    uninstall=_uninstall_cursor,
    checks=(("cursor", lambda settings: agent_checks.check_cursor()),),
    project_refusal="--project is for Claude Code: nmem installs cursor's hooks in your home folder",
)


# --- Cline ---------------------------------------------------------------------------------------


def _install_cline(o: InstallOptions) -> Installed:
    from nmemd.setup import cline
    from nmemd.setup import install as inst

    if o.print_only:
        return Installed(printed=cline.printed())
    result = cline.install_scripts()
    lines = []
    if result.written:
        lines.append(f"Cline hooks: {', '.join(result.written)} written in {result.folder}")
    if result.current:
        lines.append(f"Cline hooks: {', '.join(result.current)} already up to date")
    lines += [f"Cline hook {result.folder / name} is not nmem's: left alone, so nmem does not see {name}"
              for name in result.foreign]  # fmt: skip
    if o.mcp:
        lines.append(cline.MCP_HINT.format(command=inst.mcp_command()))
    return Installed(lines=lines)


def _uninstall_cline(o: InstallOptions) -> list[str]:
    from nmemd.setup import cline

    result = cline.uninstall_scripts()
    if result.removed:
        return [f"Cline hooks {', '.join(result.removed)} removed from {result.folder}"]
    return [f"no nmem hooks in {result.folder}"]


def _cline_found() -> bool:
    from nmemd.setup import cline

    return cline.found()


def _cline_looked() -> str:
    from nmemd.setup import cline

    return _not_found(cline.hooks_dir().parent, "cline")


CLINE = AgentSetup(
    found=_cline_found,
    looked=_cline_looked,
    install=_install_cline,
    uninstall=_uninstall_cline,
    checks=(("cline", lambda settings: agent_checks.check_cline()),),
    project_refusal="--project is for Claude Code: nmem installs cline's hooks in your home folder",
)


# --- OpenCode ------------------------------------------------------------------------------------


def _install_opencode(o: InstallOptions) -> Installed:
    from nmemd.capture.opencode import database
    from nmemd.setup import opencode

    plan = opencode.plan_install(mcp=o.mcp)
    if o.print_only:
        return Installed(printed=opencode.printed(plan))
    plugin_written, config_written = opencode.apply(plan)
    lines = [f"OpenCode plugin: {plan.plugin_path} ({outcome(plugin_written)})"]
    if config_written is not None:
        lines.append(f"OpenCode MCP server '{opencode.MCP_NAME}': {plan.config_path} ({outcome(config_written)})")
    if os.path.isfile(database()):
        lines.append("import your existing OpenCode history with: nmem import-transcripts")
    return Installed(lines=lines)


def _uninstall_opencode(o: InstallOptions) -> list[str]:
    from nmemd.setup import opencode

    plan = opencode.plan_uninstall(mcp=o.mcp)
    plugin_written, config_written = opencode.apply(plan)
    lines = [f"OpenCode plugin removed: {plan.plugin_path}" if plugin_written.changed
             else f"no nmem plugin at {plan.plugin_path}"]  # fmt: skip
    if config_written is not None and config_written.changed:
        lines.append(f"OpenCode MCP server '{opencode.MCP_NAME}' removed from {plan.config_path}")
    return lines


def _opencode_found() -> bool:
    from nmemd.setup import opencode

    return opencode.found()


def _opencode_looked() -> str:
    from nmemd.capture.opencode import config_dir

    return _not_found(Path(config_dir()), "opencode")


OPENCODE = AgentSetup(
    found=_opencode_found,
    looked=_opencode_looked,
    install=_install_opencode,
    uninstall=_uninstall_opencode,
    checks=(("opencode", lambda settings: agent_checks.check_opencode()),),
    project_refusal="--project is for Claude Code: nmem installs OpenCode's plugin in ~/.config/opencode",
)
