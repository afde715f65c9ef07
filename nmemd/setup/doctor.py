"""`nmem doctor`: check the install end to end and say, for each problem, the command that fixes it.

Every check only reads: settings files, the socket directory, the database
(read-only), the service manager's unit files. A check that cannot tell is a
warning, never a crash. `fail` means memory is not being captured or kept
safely (the command exits 1); `warn` means something is worth a look
(a daemon not running yet is normal: the first hook starts it).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import msgspec

from nmem_client import paths
from nmemd import __version__, config
from nmemd.config import Settings
from nmemd.daemon import control
from nmemd.daemon.instance import lock_holder, socket_dir_is_ours, startup_problem
from nmemd.errors import NmemError
from nmemd.setup import cline, codex, copilot, cursor, gemini, install, plugin
from nmemd.store import readers
from nmemd.store.migrations import MIGRATIONS

Level = Literal["ok", "warn", "fail"]
ENTRY_POINTS = ("nmem", "nmemd", "nmem-send", "nmem-mcp")
STALE_BACKLOG_S = 120.0  # the daemon drains every few seconds: older waiting events mean it does not
SUN_PATH_MAX = 104  # macOS; Linux allows 108
SYSTEMCTL_TIMEOUT_S = 5.0


class Check(msgspec.Struct, kw_only=True):
    name: str
    status: Level
    detail: str
    fix: str | None = None  # a command to run (or, where none exists, what to do)


class Report(msgspec.Struct, kw_only=True):
    ok: bool  # no check failed
    checks: list[Check]


OWN_SOCKET = "/tmp/nmem-$(id -u)/nmemd.sock"


def _ok(name: str, detail: str) -> Check:
    return Check(name=name, status="ok", detail=detail)


def _warn(name: str, detail: str, fix: str | None = None) -> Check:
    return Check(name=name, status="warn", detail=detail, fix=fix)


def _fail(name: str, detail: str, fix: str | None) -> Check:
    return Check(name=name, status="fail", detail=detail, fix=fix)


def _home_tilde(path: Path | str) -> str:
    text, home = str(path), os.path.expanduser("~")
    return "~" + text[len(home) :] if home != "/" and text.startswith(home + "/") else text


def _private(path: str) -> str | None:
    """Why `path` is not ours alone (None: fine)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by us"
    if st.st_mode & 0o077:
        return f"{path} is mode {stat.S_IMODE(st.st_mode):o}: others can reach it"
    return None


# --- checks --------------------------------------------------------------------------------------


def check_config() -> tuple[Check, Settings]:
    """The effective config; on an error, the default paths so the other checks still run."""
    try:
        settings = config.load()
    except NmemError as exc:
        fallback = Settings(home=paths.home(), socket=paths.socket_path(), db=paths.db_path())
        target = Path(paths.home()) / "config.toml"
        fix = f"edit {target} or the NMEM_* variable it names, then: nmem config show"
        return _fail("config", str(exc), fix), fallback
    target = Path(settings.home) / "config.toml"
    return _ok("config", str(target) if target.exists() else "defaults (no config.toml)"), settings


def _reinstall_command() -> str:
    source = install.install_root()
    spec = shlex.quote(str(source)) if (source / "pyproject.toml").exists() else "nmem"
    editable = "-e " if (source / "pyproject.toml").exists() else ""
    return f"{shlex.quote(sys.executable)} -m pip install --force-reinstall --no-deps {editable}{spec}"


def check_entry_points(bin_dir: str | None = None) -> Check:
    """The executables hooks, services and MCP clients call, beside this Python."""
    where = bin_dir or os.path.dirname(os.path.abspath(sys.executable))
    missing = [n for n in ENTRY_POINTS if not os.access(os.path.join(where, n), os.X_OK)]
    client = install.install_root() / install.CLIENT_MARKER
    if not client.exists():
        missing.append(str(client))
    if missing:
        return _fail("entry points", f"missing in {where}: {', '.join(missing)}", _reinstall_command())
    return _ok("entry points", f"{', '.join(ENTRY_POINTS)} in {where}")


def _command_paths(command: str) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    return [w for w in words if w.startswith("/")]


def _settings_files() -> list[tuple[Path, str]]:
    """User settings, then this project's (when it exists), with the install command for each."""
    from nmemd.capture.project import project_root

    files = [(install.user_settings_path(), "nmem install")]
    try:
        root = project_root(os.getcwd()) or os.getcwd()
    except OSError:
        return files
    for project in (install.project_settings_path(root), Path(root) / ".claude" / "settings.json"):
        if project.exists() and project != files[0][0]:
            files.append((project, f"cd {shlex.quote(root)} && nmem install --project"))
    return files


def _plugin() -> str | None:
    """The id of nmem's Claude Code plugin when the user's settings enable it (`nmem@<marketplace>`)."""
    try:
        enabled = install.load(install.user_settings_path()).get("enabledPlugins")
    except NmemError:
        return None
    ids = [k for k, on in enabled.items() if on is True and k.startswith(plugin.NAME + "@")] if isinstance(
        enabled, dict) else []  # fmt: skip
    return ids[0] if ids else None


def _plugin_check(name: str, command: str, plugin_id: str) -> Check:
    """The plugin's hooks or MCP server run `command` from PATH: nmem must be installed there."""
    found = shutil.which(command)
    if found is None:
        return _fail(name, f"the Claude Code plugin {plugin_id} runs {command}, which is not on PATH",
                     "pipx install nmem  # or: uv tool install nmem")  # fmt: skip
    return _ok(name, f"from the Claude Code plugin {plugin_id} ({command}: {_home_tilde(found)})")


def check_hooks() -> Check:
    """nmem's handler on every hook event it needs, calling a client that exists (or the plugin's)."""
    wanted = [h.event for h in install.HOOKS]
    found: dict[str, str] = {}  # event -> command
    where: list[str] = []
    fix = "nmem install"
    for path, command in _settings_files():
        try:
            data = install.load(path)
        except NmemError as exc:
            return _fail("hooks", str(exc), f"repair or restore {path} (nmem install keeps a .nmem-backup-* copy)")
        hooks = data.get("hooks")
        if not isinstance(hooks, dict):
            continue
        for event, groups in hooks.items():
            for group in groups if isinstance(groups, list) else []:
                handlers = group.get("hooks") if isinstance(group, dict) else None
                for h in handlers if isinstance(handlers, list) else []:
                    if isinstance(h, dict) and install.CLIENT_MARKER in str(h.get("command", "")):
                        found.setdefault(event, str(h["command"]))
                        if _home_tilde(path) not in where:
                            where.append(_home_tilde(path))
                            fix = command
    user = _home_tilde(install.user_settings_path())
    plugin_id = _plugin()
    if plugin_id and found:  # each event would be sent twice, under two ids
        return _warn("hooks", f"nmem's hooks are in {', '.join(where)} and in the Claude Code plugin {plugin_id}",
                     f"nmem uninstall  # or: claude plugin disable {plugin_id}")  # fmt: skip
    if plugin_id:
        return _plugin_check("hooks", "nmem-send", plugin_id)
    if not found:
        detail = f"no nmem hooks in {user} (nor in this project's .claude/settings.local.json)"
        if other := _other_agents():  # capture runs, from another agent: Claude Code is only not set up (yet)
            return _warn("hooks", detail + f"; {other}'s are installed", "nmem install  # for Claude Code")
        return _fail("hooks", detail, "nmem install")
    missing = [e for e in wanted if e not in found]
    if missing:
        return _fail("hooks", f"{', '.join(where)} lacks nmem hooks for {', '.join(missing)}", fix)
    current = install.hook_command()
    broken = sorted({p for c in found.values() for p in _command_paths(c) if not os.path.exists(p)})
    if broken:
        return _fail("hooks", f"hooks in {', '.join(where)} call {broken[0]}, which does not exist", fix)
    if any(c != current for c in found.values()):
        return _warn("hooks", f"hooks in {', '.join(where)} call another nmem installation than this one", fix)
    return _ok("hooks", f"{len(wanted)} hook events in {', '.join(where)}")


def _codex_hooks() -> list[tuple[str, str, str]]:
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
                if install._is_ours(h):
                    found.append((event, str(h.get("command", "")), str(group.get("matcher") or "")))
    return found


def _gemini_hooks() -> list[tuple[str, dict[str, Any]]]:
    """(event, handler) of nmem's handlers in the Gemini CLI's settings.json; [] when unreadable."""
    try:
        return gemini.our_hooks(install.load(gemini.settings_path()))
    except NmemError:
        return []


def _copilot_hooks() -> list[tuple[str, str]]:
    """(event, command) of nmem's hooks in Copilot's settings.json; [] when unreadable."""
    try:
        return copilot.our_hooks(install.load(copilot.settings_path()), copilot.settings_path())
    except NmemError:
        return []


def _other_agents() -> str:
    """The other agents nmem's hooks are installed for ("Codex", "Codex and Gemini CLI"); "" for none."""
    found = (("Codex", _codex_hooks), ("Gemini CLI", _gemini_hooks), ("Copilot CLI", _copilot_hooks))
    return " and ".join(n for n, hooks in found if hooks())


def check_gemini() -> list[Check]:
    """The Gemini CLI's hooks (all of nmem's events, a client that exists, not disabled) and MCP server;
    nothing when nmem is not installed for the Gemini CLI."""
    path = gemini.settings_path()
    try:
        data = install.load(path)
    except NmemError as exc:
        return [_fail("gemini", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    hooks = gemini.our_hooks(data)
    servers = data.get("mcpServers")
    mcp = servers.get(gemini.MCP_NAME) if isinstance(servers, dict) else None
    if not hooks and not mcp:
        return []  # not installed for the Gemini CLI (on purpose, perhaps): nothing to check
    fix = "nmem install --agent gemini"
    where = _home_tilde(path)
    events = {e for e, _ in hooks}
    missing = [h.event for h in gemini.HOOKS if h.event not in events]
    commands = {str(h.get("command", "")) for _, h in hooks}
    broken = sorted({p for c in commands for p in _command_paths(c) if not os.path.exists(p)})
    raw_config = data.get("hooksConfig")
    config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
    raw_disabled = config.get("disabled")
    disabled: list[Any] = raw_disabled if isinstance(raw_disabled, list) else []
    checks: list[Check] = []
    if not hooks:
        checks.append(_fail("gemini hooks", f"no nmem hooks in {where}", fix))
    elif missing:
        checks.append(_fail("gemini hooks", f"{where} lacks nmem hooks for {', '.join(missing)}", fix))
    elif broken:
        checks.append(_fail("gemini hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix))
    elif config.get("enabled") is False:
        checks.append(_fail("gemini hooks", f"hooksConfig.enabled is false in {where}: no hook runs",
                            "set it to true, or remove it"))  # fmt: skip
    elif gemini.HOOK_NAME in disabled or any(c in disabled for c in commands):
        checks.append(_fail("gemini hooks", f"nmem's hooks are in hooksConfig.disabled in {where}",
                            "enable them in the Gemini CLI's /hooks"))  # fmt: skip
    elif any(c != gemini.hook_command() for c in commands):
        checks.append(_warn("gemini hooks", f"hooks in {where} call another nmem installation than this one", fix))
    else:
        checks.append(_ok("gemini hooks", f"{len(events)} hook events in {where}"))
    command = str(mcp.get("command", "")) if isinstance(mcp, dict) else ""
    if not mcp:
        checks.append(_warn("gemini mcp", f"no mcpServers.{gemini.MCP_NAME} in {where}", fix))
    elif not os.access(command, os.X_OK):
        checks.append(_fail("gemini mcp", f"mcpServers.{gemini.MCP_NAME} runs {command or '(nothing)'}, not an"
                            " executable", fix))  # fmt: skip
    else:
        checks.append(_ok("gemini mcp", f"mcpServers.{gemini.MCP_NAME} in {where} runs {command}"))
    return checks


def check_copilot() -> list[Check]:
    """Copilot's hooks (all of nmem's events, a client that exists, hooks not all disabled) and MCP
    server; nothing when nmem is not installed for Copilot."""
    settings_file, mcp_file = copilot.settings_path(), copilot.mcp_path()
    try:
        data, servers = install.load(settings_file), install.load(mcp_file)
        hooks = copilot.our_hooks(data, settings_file)
    except NmemError as exc:
        return [_fail("copilot", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = servers.get("mcpServers", {}).get(copilot.MCP_NAME) if isinstance(servers.get("mcpServers"), dict) else None
    if not hooks and not mcp:
        return []  # not installed for Copilot (on purpose, perhaps): nothing to check
    fix, where = "nmem install --agent copilot", _home_tilde(settings_file)
    missing = [e for e in copilot.HOOKS if e not in {e for e, _ in hooks}]
    broken = sorted({p for _, c in hooks for p in _command_paths(c) if not os.path.exists(p)})
    checks = []
    if not hooks:
        checks.append(_fail("copilot hooks", f"no nmem hooks in {where}", fix))
    elif missing:
        checks.append(_fail("copilot hooks", f"{where} lacks nmem hooks for {', '.join(missing)}", fix))
    elif broken:
        checks.append(_fail("copilot hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix))
    elif data.get("disableAllHooks") is True:
        checks.append(_fail("copilot hooks", f"{where} sets disableAllHooks: Copilot runs no hook", "remove it"))
    elif any(c != copilot.hook_command() for _, c in hooks):
        checks.append(_warn("copilot hooks", f"hooks in {where} call another nmem installation than this one", fix))
    else:
        checks.append(_ok("copilot hooks", f"{len(hooks)} hook events in {where}"))
    command = mcp.get("command") if isinstance(mcp, dict) else None
    if mcp is None:
        checks.append(_warn("copilot mcp", f"no mcpServers.{copilot.MCP_NAME} in {_home_tilde(mcp_file)}", fix))
    elif not isinstance(command, str) or not os.path.exists(command):
        checks.append(_fail("copilot mcp", f"mcpServers.{copilot.MCP_NAME} runs {command or '(nothing)'}, which"
                            " does not exist", fix))  # fmt: skip
    else:
        checks.append(_ok("copilot mcp", f"mcpServers.{copilot.MCP_NAME} in {_home_tilde(mcp_file)} runs {command}"))
    return checks


def check_cursor() -> list[Check]:
    """Cursor's hooks (all of nmem's events, a client that exists) and MCP server; nothing when nmem is
    not installed for Cursor."""
    hooks_file, mcp_file = cursor.hooks_path(), cursor.mcp_path()
    try:
        hooks = cursor.our_hooks(install.load(hooks_file), hooks_file)
        servers = install.load(mcp_file)
    except NmemError as exc:
        return [_fail("cursor", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = servers.get("mcpServers", {}).get(cursor.MCP_NAME) if isinstance(servers.get("mcpServers"), dict) else None
    if not hooks and not mcp:
        return []  # not installed for Cursor: nothing to check
    fix, where = "nmem install --agent cursor", _home_tilde(hooks_file)
    missing = [e for e in cursor.HOOKS if e not in {e for e, _ in hooks}]
    broken = sorted({p for _, c in hooks for p in _command_paths(c) if not os.path.exists(p)})
    checks = []
    if not hooks:
        checks.append(_fail("cursor hooks", f"no nmem hooks in {where}", fix))
    elif missing:
        checks.append(_fail("cursor hooks", f"{where} lacks nmem hooks for {', '.join(missing)}", fix))
    elif broken:
        checks.append(_fail("cursor hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix))
    elif any(c != cursor.hook_command() for _, c in hooks):
        checks.append(_warn("cursor hooks", f"hooks in {where} call another nmem installation than this one", fix))
    else:
        checks.append(_ok("cursor hooks", f"{len(hooks)} hook events in {where}"))
    command = mcp.get("command") if isinstance(mcp, dict) else None
    if mcp is None:
        checks.append(_warn("cursor mcp", f"no mcpServers.{cursor.MCP_NAME} in {_home_tilde(mcp_file)}", fix))
    elif not isinstance(command, str) or not os.path.exists(command):
        checks.append(_fail("cursor mcp", f"mcpServers.{cursor.MCP_NAME} runs {command or '(nothing)'}, which"
                            " does not exist", fix))  # fmt: skip
    else:
        checks.append(_ok("cursor mcp", f"mcpServers.{cursor.MCP_NAME} in {_home_tilde(mcp_file)} runs {command}"))
    return checks


def check_cline() -> list[Check]:
    """nmem's Cline hook scripts (every one, executable, a client that exists); nothing when nmem is not
    installed for Cline."""
    hooks = cline.our_hooks()
    if not hooks:
        return []
    fix, where = "nmem install --agent cline", _home_tilde(cline.hooks_dir())
    missing = [h for h in cline.HOOKS if h not in {h for h, _ in hooks}]
    idle = [h for h, _ in hooks if not os.access(cline.hooks_dir() / h, os.X_OK)]
    broken = sorted({p for _, c in hooks for p in _command_paths(c) if not os.path.exists(p)})
    if missing:
        return [_fail("cline hooks", f"{where} lacks nmem's {', '.join(missing)}", fix)]
    if idle:
        return [_fail("cline hooks", f"{where}/{idle[0]} is not executable: Cline does not run it", fix)]
    if broken:
        return [_fail("cline hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix)]
    if any(c != cline.hook_command() for _, c in hooks):
        return [_warn("cline hooks", f"hooks in {where} call another nmem installation than this one", fix)]
    return [_ok("cline hooks", f"{len(hooks)} hook scripts in {where} (the CLI runs them with hooks-enabled=true)")]


def check_opencode() -> list[Check]:
    """OpenCode's plugin (nmem's nmem.js, current, a client that exists) and MCP server; nothing when
    nmem is not installed for OpenCode."""
    from nmemd.setup import opencode

    plugin_file, config_file = opencode.plugin_path(), opencode.config_path()
    try:
        text, data = opencode.read_plugin(plugin_file), install.load(config_file)
    except NmemError as exc:
        return [_fail("opencode", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    mcp = opencode.mcp_entry(data)
    if text is None and mcp is None:
        return []  # not installed for OpenCode (on purpose, perhaps): nothing to check
    fix, where = "nmem install --agent opencode", _home_tilde(plugin_file)
    argv = opencode.plugin_argv(text) if text is not None else None
    checks: list[Check] = []
    if text is None:
        checks.append(_fail("opencode plugin", f"no {where}", fix))
    elif argv is None:
        checks.append(_fail("opencode plugin", f"{where} is not nmem's plugin", f"move it away, then {fix}"))
    elif missing := [a for a in argv[:1] + argv[3:4] if not os.path.exists(a)]:
        checks.append(_fail("opencode plugin", f"{where} calls {missing[0]}, which does not exist", fix))
    elif text != opencode.plugin_text():
        checks.append(_warn("opencode plugin", f"{where} is another nmem installation's or version's", fix))
    else:
        checks.append(_ok("opencode plugin", f"{where} sends OpenCode's events to nmem"))
    command = mcp.get("command") if mcp is not None else None
    program = command[0] if isinstance(command, list) and command and isinstance(command[0], str) else None
    if mcp is None:
        checks.append(_warn("opencode mcp", f"no mcp.{opencode.MCP_NAME} in {_home_tilde(config_file)}", fix))
    elif program is None or not os.access(program, os.X_OK):
        checks.append(_fail("opencode mcp", f"mcp.{opencode.MCP_NAME} runs {program or '(nothing)'}, not an"
                            " executable", fix))  # fmt: skip
    elif mcp.get("enabled") is False:
        checks.append(_warn("opencode mcp", f"mcp.{opencode.MCP_NAME} is disabled in {_home_tilde(config_file)}", fix))
    else:
        checks.append(_ok("opencode mcp", f"mcp.{opencode.MCP_NAME} in {_home_tilde(config_file)} runs {program}"))
    return checks


def check_codex() -> list[Check]:
    """Codex's hooks (all of nmem's events, a client that exists, trusted by Codex) and MCP server;
    nothing when nmem is not installed for Codex."""
    hooks_file, config_file = codex.hooks_path(), codex.config_path()
    try:
        data = install.load(hooks_file)
        _, config = codex.load_config(config_file)
    except NmemError as exc:
        return [_fail("codex", str(exc), "repair or restore it (nmem install keeps a .nmem-backup-* copy)")]
    handlers = codex.our_handlers(data, hooks_file)
    mcp = codex._table(codex._table(config, "mcp_servers"), codex.MCP_NAME)
    if not handlers and not mcp:
        return []  # not installed for Codex (on purpose, perhaps): nothing to check
    fix = "nmem install --agent codex"
    where = _home_tilde(hooks_file)
    events = {e for e, _, _ in _codex_hooks()}
    missing = [h.event for h in codex.HOOKS if h.event not in events]
    checks: list[Check] = []
    commands = {c for _, c, _ in _codex_hooks()}
    broken = sorted({p for c in commands for p in _command_paths(c) if not os.path.exists(p)})
    state = codex._table(codex._table(config, "hooks"), "state")
    untrusted = [k for k, h in handlers if codex._table(state, k).get("trusted_hash") != h]
    disabled = [k for k, _ in handlers if codex._table(state, k).get("enabled") is False]
    if not handlers:
        checks.append(_fail("codex hooks", f"no nmem hooks in {where}", fix))
    elif missing:
        checks.append(_fail("codex hooks", f"{where} lacks nmem hooks for {', '.join(missing)}", fix))
    elif broken:
        checks.append(_fail("codex hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix))
    elif untrusted:
        checks.append(_fail("codex hooks", f"Codex skips {len(untrusted)} of nmem's {len(handlers)} hooks: not"
                            f" trusted in {_home_tilde(config_file)} (changed since they were trusted?)",
                            fix + "  # or trust them in Codex's /hooks"))  # fmt: skip
    elif disabled:
        checks.append(_warn("codex hooks", f"{len(disabled)} of nmem's hooks are disabled in Codex's /hooks",
                            "enable them in Codex's /hooks"))  # fmt: skip
    elif any(c != codex.hook_command() for c in commands):
        checks.append(_warn("codex hooks", f"hooks in {where} call another nmem installation than this one", fix))
    else:
        checks.append(_ok("codex hooks", f"{len(handlers)} hook events in {where}, trusted"))
    command = str(mcp.get("command", ""))
    if not mcp:
        checks.append(_warn("codex mcp", f"no [mcp_servers.{codex.MCP_NAME}] in {_home_tilde(config_file)}", fix))
    elif not os.access(command, os.X_OK):
        checks.append(_fail("codex mcp", f"[mcp_servers.{codex.MCP_NAME}] runs {command or '(nothing)'}, not an"
                            " executable", fix))  # fmt: skip
    else:
        checks.append(_ok("codex mcp", f"[mcp_servers.{codex.MCP_NAME}] in {_home_tilde(config_file)} runs {command}"))
    return checks


def check_mcp() -> Check:
    state_path = install.user_state_path()
    try:
        state = install.load(state_path)
    except NmemError as exc:
        return _fail("mcp", str(exc), f"repair or restore {state_path}")
    servers = state.get("mcpServers")
    entry = servers.get(install.MCP_NAME) if isinstance(servers, dict) else None
    where = _home_tilde(state_path)
    plugin_id = _plugin()
    if plugin_id and not isinstance(entry, dict):
        return _plugin_check("mcp", plugin.MCP_COMMAND, plugin_id)
    if not isinstance(entry, dict):
        if _other_agents():  # another agent's are there: Claude Code is only not set up (yet)
            return _warn("mcp", f"no '{install.MCP_NAME}' MCP server in {where}", "nmem install  # for Claude Code")
        return _fail("mcp", f"no '{install.MCP_NAME}' MCP server in {where}", "nmem install")
    command = str(entry.get("command", ""))
    if not os.access(command, os.X_OK):
        return _fail("mcp", f"the '{install.MCP_NAME}' MCP server runs {command or '(nothing)'}, not an executable",
                     "nmem install")  # fmt: skip
    return _ok("mcp", f"'{install.MCP_NAME}' in {where} runs {command}")


def check_socket(settings: Settings) -> Check:
    sock = settings.socket
    directory = os.path.dirname(sock)
    if len(os.fsencode(sock)) >= SUN_PATH_MAX:
        return _fail("socket", f"{sock} is longer than a Unix socket path may be ({SUN_PATH_MAX - 1} bytes)",
                     f"export NMEM_SOCKET={OWN_SOCKET}  # or another short path")  # fmt: skip
    if not os.path.lexists(directory):
        return _ok("socket", f"{directory} does not exist yet: the daemon creates it 0700")
    ours = socket_dir_is_ours(sock, settings.home)
    why = paths.own_folder_problem(directory) if ours else paths.given_folder_problem(directory)
    if why:  # the rule the daemon and the hook client apply (issue #16, finding 7)
        mine = os.stat(directory).st_uid == os.geteuid() if os.path.isdir(directory) else False
        fix = f"chmod 700 {shlex.quote(directory)}" if mine else f"export NMEM_SOCKET={OWN_SOCKET}  # a folder of yours"
        return _fail("socket", why, fix)
    if os.path.lexists(sock):
        st = os.lstat(sock)
        if not stat.S_ISSOCK(st.st_mode):
            return _fail("socket", f"{sock} is not a socket", f"nmem daemon stop; rm {shlex.quote(sock)}")
        why = _private(sock)
        if why:
            return _fail("socket", why, f"chmod 600 {shlex.quote(sock)}")
    mode = f"directory {stat.S_IMODE(os.stat(directory).st_mode):o}"
    return _ok("socket", f"{sock} ({mode}{', socket 0600' if os.path.exists(sock) else ''})")


def check_daemon(settings: Settings) -> Check:
    facts = control.ping(timeout=2.0)
    if facts is not None:
        detail = f"running, pid {facts.pid}, started by {facts.started_by}, version {facts.version}"
        if facts.version != __version__:
            return _warn("daemon", f"{detail}; this nmem is {__version__}", "nmem daemon restart")
        if facts.last_error:
            return _warn("daemon", f"{detail}; last error: {facts.last_error}", f"see {settings.log_dir}/nmemd.log")
        return _ok("daemon", detail)
    holder = lock_holder(settings.lock)
    if holder is not None:
        who = f"pid {holder}" if holder > 0 else "a process"
        return _fail("daemon", f"{who} holds {settings.lock} but does not answer on {settings.socket}",
                     "nmem daemon restart")  # fmt: skip
    refused = startup_problem(settings.home, settings.socket)
    if refused:  # every hook would start one that exits at once (issue #16, finding 7)
        return _fail("daemon", f"not running, and cannot start: {refused}",
                     "fix that path, or point NMEM_HOME / NMEM_SOCKET elsewhere")  # fmt: skip
    return _warn("daemon", "not running (the first hook event starts it)",
                 "nmem daemon start  # or: nmem service install")  # fmt: skip


def _recover_command(settings: Settings) -> str:
    """Move the file (with its -wal and -shm) aside and rebuild what SQLite can still read."""
    db = shlex.quote(settings.db)
    broken = shlex.quote(os.path.join(os.path.dirname(settings.db), f"broken-{int(time.time())}"))
    name = shlex.quote(os.path.basename(settings.db))
    return (f"nmem daemon stop && mkdir {broken} && mv {db}* {broken}/"
            f" && sqlite3 {broken}/{name} .recover | sqlite3 {db}")  # fmt: skip


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def check_database(settings: Settings) -> list[Check]:
    """Integrity (quick_check, read-only), schema, file modes, WAL size and the raw-event backlog."""
    db = settings.db
    if not os.path.exists(db):
        return [_ok("database", f"{db} does not exist yet: created on the first event")]
    unsafe = [w for w in (_private(p) for p in (db, db + "-wal") if os.path.exists(p)) if w]
    if unsafe:
        return [_fail("database", unsafe[0], f"chmod 600 {shlex.quote(db)}*")]
    try:
        conn = readers.open_readonly(db)
        try:
            problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(5)")]
            applied = {str(r[0]) for r in conn.execute("SELECT name FROM schema_migrations")} if _table_exists(
                conn, "schema_migrations") else set()  # fmt: skip
            inbox = conn.execute("SELECT count(*), min(received_at) FROM inbox").fetchone() if _table_exists(
                conn, "inbox") else (0, None)  # fmt: skip
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return [_fail("database", f"{db} cannot be read: {exc}", _recover_command(settings))]
    checks = []
    if problems != ["ok"]:
        checks.append(_fail("database", f"{db} is damaged: {'; '.join(problems)}", _recover_command(settings)))
    else:
        pending = [name for name, _ in MIGRATIONS if name not in applied]
        if pending and applied:
            checks.append(_warn("database", f"{db}: schema waits for {', '.join(pending)}", "nmem daemon restart"))
        else:
            checks.append(_ok("database", f"{db}: quick_check ok"))
    checks.append(_check_wal(settings))
    checks.append(_check_backlog(settings, int(inbox[0] or 0), inbox[1]))
    return checks


def _check_wal(settings: Settings) -> Check:
    try:
        wal = os.stat(settings.db + "-wal").st_size
    except OSError:
        wal = 0
    limit = 2 * settings.maintenance_wal_truncate_bytes
    if wal > limit:
        return _warn("wal", f"{wal / 1048576:.0f} MB, more than twice the checkpoint threshold",
                     "nmem maintain --job checkpoint")  # fmt: skip
    return _ok("wal", f"{wal / 1048576:.1f} MB")


def _check_backlog(settings: Settings, inbox: int, oldest: float | None) -> Check:
    spooled: list[float] = []
    try:
        for entry in os.scandir(settings.spool):
            if entry.name.endswith(".event"):
                spooled.append(entry.stat().st_mtime)
    except OSError:
        pass
    times = [t for t in (oldest, *spooled) if t is not None]
    waiting = inbox + len(spooled)
    if not waiting:
        return _ok("backlog", "no raw events waiting")
    age = time.time() - min(times) if times else 0.0
    detail = f"{inbox} in the inbox, {len(spooled)} spooled, oldest {age:.0f} s"
    if age < STALE_BACKLOG_S:
        return _ok("backlog", detail + " (the daemon drains them)")
    running = control.ping(timeout=2.0) is not None
    fix = "nmem daemon restart" if running else "nmem daemon start  # it stores them at start"
    return _fail("backlog", f"{detail}: not stored yet", fix)


def _exec_start(unit_text: str) -> str | None:
    for line in unit_text.splitlines():
        if line.startswith("ExecStart="):
            words = _command_paths(line.removeprefix("ExecStart=").lstrip("@-:+!"))
            return words[0] if words else None
    return None


def _systemctl(*args: str) -> str:
    try:
        done = subprocess.run(["systemctl", "--user", *args], capture_output=True, text=True,
                              timeout=SYSTEMCTL_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    words = done.stdout.split()
    return words[0] if words else "unknown"


def check_service() -> Check:
    """Units are optional; when installed they must start an nmemd that exists, and be enabled."""
    from nmemd.setup import service

    if sys.platform == "darwin":
        plist = service.launchd_plist_path()
        if not plist.exists():
            return _ok("service", "no LaunchAgent (optional: nmem service install)")
        import plistlib

        try:
            program = str(plistlib.loads(plist.read_bytes())["ProgramArguments"][0])
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            return _fail("service", f"{plist} cannot be read: {exc}", "nmem service install")
        if not os.access(program, os.X_OK):
            return _fail("service", f"{plist} starts {program}, which does not exist", "nmem service install")
        return _ok("service", f"{plist} starts {program}")
    unit_dir = service.systemd_user_dir()
    units = [unit_dir / service.SOCKET_UNIT, unit_dir / service.SERVICE_UNIT]
    present = [u for u in units if u.exists()]
    if not present:
        return _ok("service", "no systemd user units (optional: nmem service install)")
    if len(present) < len(units):
        missing = next(u for u in units if not u.exists())
        return _fail("service", f"{missing} is missing", "nmem service install")
    try:
        program = _exec_start(units[1].read_text(encoding="utf-8"))
    except OSError as exc:
        return _fail("service", f"{units[1]} cannot be read: {exc.strerror}", "nmem service install")
    if program is None or not os.access(program, os.X_OK):
        return _fail("service", f"{units[1]} starts {program or 'nothing'}, which does not exist",
                     "nmem service install")  # fmt: skip
    enabled = _systemctl("is-enabled", service.SOCKET_UNIT)
    if enabled != "enabled":
        return _warn("service", f"units installed, socket unit is {enabled}",
                     f"systemctl --user enable --now {service.SOCKET_UNIT}")  # fmt: skip
    return _ok("service", f"{units[1]} starts {program}; socket enabled")


# --- all of them ---------------------------------------------------------------------------------


def _guarded(name: str, fn: Callable[[], Any]) -> list[Check]:
    """A check that cannot run is reported as a failed check, not as a traceback."""
    try:
        out = fn()
    except (OSError, sqlite3.Error, NmemError, ValueError) as exc:
        return [_fail(name, f"could not check: {exc}", None)]
    return out if isinstance(out, list) else [out]


def run() -> Report:
    """Every check, in the order a problem is best fixed in."""
    first, settings = check_config()
    checks = [first]
    checks += _guarded("entry points", check_entry_points)
    checks += _guarded("hooks", check_hooks)
    checks += _guarded("mcp", check_mcp)
    checks += _guarded("codex", check_codex)
    checks += _guarded("gemini", check_gemini)
    checks += _guarded("copilot", check_copilot)
    checks += _guarded("cursor", check_cursor)
    checks += _guarded("cline", check_cline)
    checks += _guarded("opencode", check_opencode)
    checks += _guarded("socket", lambda: check_socket(settings))
    checks += _guarded("daemon", lambda: check_daemon(settings))
    checks += _guarded("database", lambda: check_database(settings))
    checks += _guarded("service", check_service)
    return Report(ok=all(c.status != "fail" for c in checks), checks=checks)
