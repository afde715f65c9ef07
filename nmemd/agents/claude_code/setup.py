"""What `nmem install`, `nmem uninstall` and `nmem doctor` do for Claude Code: its hooks in settings.json
(user or project), its MCP server in `~/.claude.json`, and the checks of both (or of nmem's Claude Code
plugin). The settings files are merged by `setup.settings_file`; their paths and hook table are `settings`."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Final

from nmemd import DISTRIBUTION, config
from nmemd.agents.claude_code import HOME, plugin, settings
from nmemd.capture.project import project_root
from nmemd.errors import NmemError
from nmemd.setup import settings_file
from nmemd.setup.agent_checks import other_agents
from nmemd.setup.agent_setup import AgentSetup, Installed, InstallOptions, looked_for, outcome
from nmemd.setup.checks import Check, command_paths, fail, home_tilde, ok, warn


def settings_target(project_scope: bool) -> Path:
    """Claude Code's settings file an install writes: the user's, or this project's."""
    if not project_scope:
        return settings.user_settings_path()
    root = project_root(os.getcwd()) or os.getcwd()
    return settings.project_settings_path(root)


def _prompt_recall() -> bool:
    """Whether prompt recall is on (config.toml, NMEM_PROMPT_RECALL): its UserPromptSubmit hook must then
    be waited for. A config that cannot be read counts as on: a hook waited for costs ~15 ms, one not
    waited for loses the recalled text."""
    try:
        return config.load().prompt_recall
    except NmemError:
        return True


def _install(o: InstallOptions) -> Installed:
    target = settings_target(o.project_scope)
    specs = settings.hook_specs(_prompt_recall())
    merged = settings_file.with_hooks(settings_file.load(target), target, settings_file.hook_command(), specs)
    state_path = settings.user_state_path()
    state = (
        settings_file.with_mcp(settings_file.load(state_path), state_path, sys.executable, settings_file.mcp_args())
        if o.mcp
        else None
    )
    if o.print_only:
        printed = f"# {target}\n{settings_file.render(merged)}"
        if state is not None:
            printed += f"# {state_path}: mcpServers.{settings_file.MCP_NAME}\n"
            printed += settings_file.render(
                {"mcpServers": {settings_file.MCP_NAME: state["mcpServers"][settings_file.MCP_NAME]}}
            )
        return Installed(printed=printed)
    hooks_written = settings_file.write(target, merged)
    mcp_written = settings_file.write(state_path, state) if state is not None else None
    lines = [f"hooks: {target} ({outcome(hooks_written)})"]
    if mcp_written is not None:
        lines.append(f"MCP server '{settings_file.MCP_NAME}': {state_path} ({outcome(mcp_written)})")
    return Installed(lines=lines, offer_import=True)


def _uninstall(o: InstallOptions) -> list[str]:
    target = settings_target(o.project_scope)
    # A project installed by an earlier version has its hooks in .claude/settings.json: clean both.
    targets = [target, target.with_name("settings.json")] if o.project_scope else [target]
    removed = [t for t in targets if t.exists() and settings_file.uninstall_hooks(t, settings.HOOKS).changed]
    state_path = settings.user_state_path()
    mcp_removed = o.mcp and state_path.exists() and settings_file.uninstall_mcp(state_path).changed
    lines = [f"hooks removed from {t}" for t in removed] or [f"no nmem hooks in {target}"]
    if mcp_removed:
        lines.append(f"MCP server '{settings_file.MCP_NAME}' removed from {state_path}")
    return lines


# --- doctor's checks -----------------------------------------------------------------------------


def _settings_files() -> list[tuple[Path, str]]:
    """User settings, then this project's (when it exists), with the install command for each."""
    files = [(settings.user_settings_path(), "nmem install")]
    try:
        root = project_root(os.getcwd()) or os.getcwd()
    except OSError:
        return files
    for project in (settings.project_settings_path(root), Path(root) / ".claude" / "settings.json"):
        if project.exists() and project != files[0][0]:
            files.append((project, f"cd {shlex.quote(root)} && nmem install --project"))
    return files


def _plugin() -> str | None:
    """The id of nmem's Claude Code plugin when the user's settings enable it (`nmem@<marketplace>`)."""
    try:
        enabled = settings_file.load(settings.user_settings_path()).get("enabledPlugins")
    except NmemError:
        return None
    ids = [k for k, on in enabled.items() if on is True and k.startswith(plugin.NAME + "@")] if isinstance(
        enabled, dict) else []  # fmt: skip
    return ids[0] if ids else None


def _plugin_check(name: str, command: str, plugin_id: str) -> Check:
    """The plugin's hooks or MCP server run `command` from PATH: nmem must be installed there."""
    found = shutil.which(command)
    if found is None:
        return fail(name, f"the Claude Code plugin {plugin_id} runs {command}, which is not on PATH",
                     f"pipx install {DISTRIBUTION}  # or: uv tool install {DISTRIBUTION}")  # fmt: skip
    return ok(name, f"from the Claude Code plugin {plugin_id} ({command}: {home_tilde(found)})")


def check_hooks(prompt_recall: bool = False) -> Check:
    """nmem's handler on every hook event it needs, calling a client that exists (or the plugin's),
    waited for where its reply matters (UserPromptSubmit with prompt recall on) and nowhere else."""
    specs = settings.hook_specs(prompt_recall)
    wanted = [h.event for h in specs]
    found: dict[str, str] = {}  # event -> command
    waits: dict[str, bool] = {}  # event -> Claude Code waits for it (no "async": true)
    where: list[str] = []
    fix = "nmem install"
    for path, command in _settings_files():
        try:
            data = settings_file.load(path)
        except NmemError as exc:
            return fail("hooks", str(exc), f"repair or restore {path} (nmem install keeps a .nmem-backup-* copy)")
        # the exact command nmem writes, not a mention of its client
        for event, _, h in settings_file.our_handlers(data):
            found.setdefault(event, str(h["command"]))
            waits.setdefault(event, h.get("async") is not True)
            if home_tilde(path) not in where:
                where.append(home_tilde(path))
                fix = command
    user = home_tilde(settings.user_settings_path())
    plugin_id = _plugin()
    if plugin_id and found:  # each event would be sent twice, under two ids
        return warn("hooks", f"nmem's hooks are in {', '.join(where)} and in the Claude Code plugin {plugin_id}",
                     f"nmem uninstall  # or: claude plugin disable {plugin_id}")  # fmt: skip
    if plugin_id:
        if prompt_recall:  # the plugin's hooks are fixed: UserPromptSubmit runs in the background there
            return warn("hooks", f"prompt recall is on, but the Claude Code plugin {plugin_id} runs UserPromptSubmit"
                        " in the background, so what it recalls never reaches the model",
                        f"claude plugin disable {plugin_id} && nmem install")  # fmt: skip
        return _plugin_check("hooks", "nmem-send", plugin_id)
    if not found:
        detail = f"no nmem hooks in {user} (nor in this project's .claude/settings.local.json)"
        if other := other_agents():  # capture runs, from another agent: Claude Code is only not set up (yet)
            return warn("hooks", detail + f"; {other}'s are installed", "nmem install  # for Claude Code")
        return fail("hooks", detail, "nmem install")
    missing = [e for e in wanted if e not in found]
    if missing:
        return fail("hooks", f"{', '.join(where)} lacks nmem hooks for {', '.join(missing)}", fix)
    current = settings_file.hook_command()
    broken = sorted({p for c in found.values() for p in command_paths(c) if not os.path.exists(p)})
    if broken:
        return fail("hooks", f"hooks in {', '.join(where)} call {broken[0]}, which does not exist", fix)
    if any(c != current for c in found.values()):
        return warn("hooks", f"hooks in {', '.join(where)} call another nmem installation than this one", fix)
    if prompt_recall and not waits.get(settings.REPLY_EVENT, True):
        return warn("hooks", f"prompt recall is on, but {', '.join(where)} runs UserPromptSubmit in the background,"
                    " so what it recalls never reaches the model", fix)  # fmt: skip
    slow = [s.event for s in specs if s.run_async and waits.get(s.event, False)]
    if slow:
        return warn("hooks", f"Claude Code waits for nmem's {', '.join(slow)} hook in {', '.join(where)}, which"
                    " prints nothing (~15 ms each time; an install from an older nmem)", fix)  # fmt: skip
    return ok("hooks", f"{len(wanted)} hook events in {', '.join(where)}")


def check_mcp() -> Check:
    """nmem's MCP server in `~/.claude.json` (or the plugin's), running an executable that exists."""
    state_path = settings.user_state_path()
    try:
        state = settings_file.load(state_path)
    except NmemError as exc:
        return fail("mcp", str(exc), f"repair or restore {state_path}")
    servers = state.get("mcpServers")
    entry = servers.get(settings_file.MCP_NAME) if isinstance(servers, dict) else None
    where = home_tilde(state_path)
    plugin_id = _plugin()
    if plugin_id and not isinstance(entry, dict):
        return _plugin_check("mcp", plugin.MCP_COMMAND, plugin_id)
    if not isinstance(entry, dict):
        if other_agents():  # another agent's are there: Claude Code is only not set up (yet)
            return warn(
                "mcp", f"no '{settings_file.MCP_NAME}' MCP server in {where}", "nmem install  # for Claude Code"
            )
        return fail("mcp", f"no '{settings_file.MCP_NAME}' MCP server in {where}", "nmem install")
    command = str(entry.get("command", ""))
    if not os.access(command, os.X_OK):
        named = f"the '{settings_file.MCP_NAME}' MCP server runs {command or '(nothing)'}"
        return fail("mcp", f"{named}, not an executable", "nmem install")
    given = entry.get("args")
    args = [str(a) for a in given] if isinstance(given, list) else []
    gone = [a for a in args if a.startswith("/") and not os.path.exists(a)]
    if gone:
        return fail(
            "mcp", f"the '{settings_file.MCP_NAME}' MCP server runs {gone[0]}, which does not exist", "nmem install"
        )
    return ok("mcp", f"'{settings_file.MCP_NAME}' in {where} runs {shlex.join([command, *args])}")


SETUP: Final = AgentSetup(
    found=HOME.found,
    looked=looked_for(HOME),
    install=_install,
    uninstall=_uninstall,
    checks=(("hooks", lambda config: check_hooks(config.prompt_recall)), ("mcp", lambda config: check_mcp())),
)
