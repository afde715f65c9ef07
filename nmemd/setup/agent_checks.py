"""`nmem doctor`'s checks of each agent nmem can be installed for besides Claude Code (Codex, the
Gemini CLI, Copilot CLI, Cursor, Cline, OpenCode): its hooks or plugin, and its MCP server. An agent
nmem is not installed for has nothing to check."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from nmemd.agents import registry
from nmemd.errors import NmemError
from nmemd.setup import cline, codex, copilot, cursor, gemini, install
from nmemd.setup.checks import Check, command_paths, fail, home_tilde, ok, warn


def codex_hooks() -> list[tuple[str, str, str]]:
    """(event, command, group matcher or "") of nmem's handlers in Codex's hooks.json; [] when unreadable."""
    try:
        data = install.load(codex.hooks_path())
    except NmemError:
        return []
    hooks = data.get("hooks")
    found = []
    for event, groups in hooks.items() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for h in handlers if isinstance(handlers, list) else []:
                if install.is_our_handler(h):
                    found.append((event, str(h.get("command", "")), str(group.get("matcher") or "")))
    return found


def gemini_hooks() -> list[tuple[str, dict[str, Any]]]:
    """(event, handler) of nmem's handlers in the Gemini CLI's settings.json; [] when unreadable."""
    try:
        return gemini.our_hooks(install.load(gemini.settings_path()))
    except NmemError:
        return []


def copilot_hooks() -> list[tuple[str, str]]:
    """(event, command) of nmem's hooks in Copilot's settings.json; [] when unreadable."""
    try:
        return copilot.our_hooks(install.load(copilot.settings_path()), copilot.settings_path())
    except NmemError:
        return []


def other_agents() -> str:
    """The other agents nmem's hooks are installed for ("Codex", "Codex and Gemini CLI"); "" for none."""
    setups = [(spec.label, spec.setup()) for spec in registry.AGENTS.values() if spec.setup is not None]
    return " and ".join(label for label, setup in setups if setup.hooked is not None and setup.hooked())


def check_gemini() -> list[Check]:
    """The Gemini CLI's hooks (all of nmem's events, a client that exists, not disabled) and MCP server;
    nothing when nmem is not installed for the Gemini CLI."""
    path = gemini.settings_path()
    try:
        data = install.load(path)
    except NmemError as exc:
        return [fail("gemini", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    hooks = gemini.our_hooks(data)
    servers = data.get("mcpServers")
    mcp = servers.get(gemini.MCP_NAME) if isinstance(servers, dict) else None
    if not hooks and not mcp:
        return []  # not installed for the Gemini CLI (on purpose, perhaps): nothing to check
    fix = "nmem install --agent gemini"
    where = home_tilde(path)
    events = {e for e, _ in hooks}
    missing = [h.event for h in gemini.HOOKS if h.event not in events]
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
    elif gemini.HOOK_NAME in disabled or any(c in disabled for c in commands):
        checks.append(fail("gemini hooks", f"nmem's hooks are in hooksConfig.disabled in {where}",
                            "enable them in the Gemini CLI's /hooks"))  # fmt: skip
    elif any(c != gemini.hook_command() for c in commands):
        checks.append(warn("gemini hooks", f"hooks in {where} call another nmem installation than this one", fix))
    else:
        checks.append(ok("gemini hooks", f"{len(events)} hook events in {where}"))
    command = str(mcp.get("command", "")) if isinstance(mcp, dict) else ""
    if not mcp:
        checks.append(warn("gemini mcp", f"no mcpServers.{gemini.MCP_NAME} in {where}", fix))
    elif not os.access(command, os.X_OK):
        checks.append(fail("gemini mcp", f"mcpServers.{gemini.MCP_NAME} runs {command or '(nothing)'}, not an"
                            " executable", fix))  # fmt: skip
    else:
        checks.append(ok("gemini mcp", f"mcpServers.{gemini.MCP_NAME} in {where} runs {command}"))
    return checks


def _hooks_check(
    label: str, where: str, fix: str, hooks: list[tuple[str, str]], wanted: Iterable[str], expected: str
) -> Check | None:
    """The verdict on an agent's (event, command) hooks of nmem's; None when they are all in order."""
    missing = [e for e in wanted if e not in {e for e, _ in hooks}]
    broken = sorted({p for _, c in hooks for p in command_paths(c) if not os.path.exists(p)})
    if not hooks:
        return fail(label, f"no nmem hooks in {where}", fix)
    if missing:
        return fail(label, f"{where} lacks nmem hooks for {', '.join(missing)}", fix)
    if broken:
        return fail(label, f"hooks in {where} call {broken[0]}, which does not exist", fix)
    if any(c != expected for _, c in hooks):
        return warn(label, f"hooks in {where} call another nmem installation than this one", fix)
    return None


def _mcp_check(label: str, key: str, mcp: object, where: str, fix: str) -> Check:
    """The verdict on an `mcpServers`-style entry of nmem's: there, and running a command that exists."""
    command = mcp.get("command") if isinstance(mcp, dict) else None
    if mcp is None:
        return warn(label, f"no {key} in {where}", fix)
    if not isinstance(command, str) or not os.path.exists(command):
        return fail(label, f"{key} runs {command or '(nothing)'}, which does not exist", fix)
    return ok(label, f"{key} in {where} runs {command}")


def _servers(data: dict[str, Any], name: str) -> object:
    servers = data.get("mcpServers")
    return servers.get(name) if isinstance(servers, dict) else None


def check_copilot() -> list[Check]:
    """Copilot's hooks (all of nmem's events, a client that exists, hooks not all disabled) and MCP
    server; nothing when nmem is not installed for Copilot."""
    settings_file, mcp_file = copilot.settings_path(), copilot.mcp_path()
    try:
        data, servers = install.load(settings_file), install.load(mcp_file)
        hooks = copilot.our_hooks(data, settings_file)
    except NmemError as exc:
        return [fail("copilot", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = _servers(servers, copilot.MCP_NAME)
    if not hooks and not mcp:
        return []  # not installed for Copilot (on purpose, perhaps): nothing to check
    fix, where = "nmem install --agent copilot", home_tilde(settings_file)
    verdict = _hooks_check("copilot hooks", where, fix, hooks, copilot.HOOKS, copilot.hook_command())
    if (verdict is None or verdict.status == "warn") and data.get("disableAllHooks") is True:
        verdict = fail("copilot hooks", f"{where} sets disableAllHooks: Copilot runs no hook", "remove it")
    key = f"mcpServers.{copilot.MCP_NAME}"
    return [
        verdict or ok("copilot hooks", f"{len(hooks)} hook events in {where}"),
        _mcp_check("copilot mcp", key, mcp, home_tilde(mcp_file), fix),
    ]


def check_cursor() -> list[Check]:
    """Cursor's hooks (all of nmem's events, a client that exists) and MCP server; nothing when nmem is
    not installed for Cursor."""
    hooks_file, mcp_file = cursor.hooks_path(), cursor.mcp_path()
    try:
        hooks = cursor.our_hooks(install.load(hooks_file), hooks_file)
        servers = install.load(mcp_file)
    except NmemError as exc:
        return [fail("cursor", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = _servers(servers, cursor.MCP_NAME)
    if not hooks and not mcp:
        return []  # not installed for Cursor: nothing to check
    fix, where = "nmem install --agent cursor", home_tilde(hooks_file)
    verdict = _hooks_check("cursor hooks", where, fix, hooks, cursor.HOOKS, cursor.hook_command())
    return [
        verdict or ok("cursor hooks", f"{len(hooks)} hook events in {where}"),
        _mcp_check("cursor mcp", f"mcpServers.{cursor.MCP_NAME}", mcp, home_tilde(mcp_file), fix),
    ]


def check_cline() -> list[Check]:
    """nmem's Cline hook scripts (every one, executable, a client that exists); nothing when nmem is not
    installed for Cline."""
    hooks = cline.our_hooks()
    if not hooks:
        return []
    fix, where = "nmem install --agent cline", home_tilde(cline.hooks_dir())
    missing = [h for h in cline.HOOKS if h not in {h for h, _ in hooks}]
    idle = [h for h, _ in hooks if not os.access(cline.hooks_dir() / h, os.X_OK)]
    broken = sorted({p for _, c in hooks for p in command_paths(c) if not os.path.exists(p)})
    if missing:
        return [fail("cline hooks", f"{where} lacks nmem's {', '.join(missing)}", fix)]
    if idle:
        return [fail("cline hooks", f"{where}/{idle[0]} is not executable: Cline does not run it", fix)]
    if broken:
        return [fail("cline hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix)]
    if any(c != cline.hook_command() for _, c in hooks):
        return [warn("cline hooks", f"hooks in {where} call another nmem installation than this one", fix)]
    return [ok("cline hooks", f"{len(hooks)} hook scripts in {where} (the CLI runs them with hooks-enabled=true)")]


def check_opencode() -> list[Check]:
    """OpenCode's plugin (nmem's nmem.js, current, a client that exists) and MCP server; nothing when
    nmem is not installed for OpenCode."""
    from nmemd.setup import opencode

    plugin_file, config_file = opencode.plugin_path(), opencode.config_path()
    try:
        text, data = opencode.read_plugin(plugin_file), install.load(config_file)
    except NmemError as exc:
        return [fail("opencode", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = opencode.mcp_entry(data)
    if text is None and mcp is None:
        return []  # not installed for OpenCode (on purpose, perhaps): nothing to check
    fix, where = "nmem install --agent opencode", home_tilde(plugin_file)
    argv = opencode.plugin_argv(text) if text is not None else None
    checks: list[Check] = []
    if text is None:
        checks.append(fail("opencode plugin", f"no {where}", fix))
    elif argv is None:
        checks.append(fail("opencode plugin", f"{where} is not nmem's plugin", f"move it away, then {fix}"))
    elif missing := [a for a in argv[:1] + argv[3:4] if not os.path.exists(a)]:
        checks.append(fail("opencode plugin", f"{where} calls {missing[0]}, which does not exist", fix))
    elif text != opencode.plugin_text():
        checks.append(warn("opencode plugin", f"{where} is another nmem installation's or version's", fix))
    else:
        checks.append(ok("opencode plugin", f"{where} sends OpenCode's events to nmem"))
    command = mcp.get("command") if mcp is not None else None
    program = command[0] if isinstance(command, list) and command and isinstance(command[0], str) else None
    if mcp is None:
        checks.append(warn("opencode mcp", f"no mcp.{opencode.MCP_NAME} in {home_tilde(config_file)}", fix))
    elif program is None or not os.access(program, os.X_OK):
        checks.append(fail("opencode mcp", f"mcp.{opencode.MCP_NAME} runs {program or '(nothing)'}, not an"
                            " executable", fix))  # fmt: skip
    elif mcp.get("enabled") is False:
        checks.append(warn("opencode mcp", f"mcp.{opencode.MCP_NAME} is disabled in {home_tilde(config_file)}", fix))
    else:
        checks.append(ok("opencode mcp", f"mcp.{opencode.MCP_NAME} in {home_tilde(config_file)} runs {program}"))
    return checks


def check_codex() -> list[Check]:
    """Codex's hooks (all of nmem's events, a client that exists, trusted by Codex) and MCP server;
    nothing when nmem is not installed for Codex."""
    hooks_file, config_file = codex.hooks_path(), codex.config_path()
    try:
        data = install.load(hooks_file)
        _, config = codex.load_config(config_file)
    except NmemError as exc:
        return [fail("codex", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    handlers = codex.our_handlers(data, hooks_file)
    mcp = codex.toml_table(codex.toml_table(config, "mcp_servers"), codex.MCP_NAME)
    if not handlers and not mcp:
        return []  # not installed for Codex (on purpose, perhaps): nothing to check
    fix = "nmem install --agent codex"
    where = home_tilde(hooks_file)
    events = {e for e, _, _ in codex_hooks()}
    missing = [h.event for h in codex.HOOKS if h.event not in events]
    checks: list[Check] = []
    commands = {c for _, c, _ in codex_hooks()}
    broken = sorted({p for c in commands for p in command_paths(c) if not os.path.exists(p)})
    state = codex.toml_table(codex.toml_table(config, "hooks"), "state")
    untrusted = [k for k, h in handlers if codex.toml_table(state, k).get("trusted_hash") != h]
    disabled = [k for k, _ in handlers if codex.toml_table(state, k).get("enabled") is False]
    if not handlers:
        checks.append(fail("codex hooks", f"no nmem hooks in {where}", fix))
    elif missing:
        checks.append(fail("codex hooks", f"{where} lacks nmem hooks for {', '.join(missing)}", fix))
    elif broken:
        checks.append(fail("codex hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix))
    elif untrusted:
        checks.append(fail("codex hooks", f"Codex skips {len(untrusted)} of nmem's {len(handlers)} hooks: not"
                            f" trusted in {home_tilde(config_file)} (changed since they were trusted?)",
                            fix + "  # or trust them in Codex's /hooks"))  # fmt: skip
    elif disabled:
        checks.append(warn("codex hooks", f"{len(disabled)} of nmem's hooks are disabled in Codex's /hooks",
                            "enable them in Codex's /hooks"))  # fmt: skip
    elif any(c != codex.hook_command() for c in commands):
        checks.append(warn("codex hooks", f"hooks in {where} call another nmem installation than this one", fix))
    else:
        checks.append(ok("codex hooks", f"{len(handlers)} hook events in {where}, trusted"))
    command = str(mcp.get("command", ""))
    if not mcp:
        checks.append(warn("codex mcp", f"no [mcp_servers.{codex.MCP_NAME}] in {home_tilde(config_file)}", fix))
    elif not os.access(command, os.X_OK):
        checks.append(fail("codex mcp", f"[mcp_servers.{codex.MCP_NAME}] runs {command or '(nothing)'}, not an"
                            " executable", fix))  # fmt: skip
    else:
        checks.append(ok("codex mcp", f"[mcp_servers.{codex.MCP_NAME}] in {home_tilde(config_file)} runs {command}"))
    return checks
