"""nmem's hook scripts in Cline's global hooks folder, and out again.

Cline runs an executable named after each hook (README.md). `nmem install --agent cline`
writes one small script per hook nmem uses into `~/Documents/Cline/Hooks/`, each marked as nmem's in
its second line and running `send.py --agent cline`. A file of that name that is not nmem's is the
user's own hook: it is left alone and named in the report (Cline runs one file per hook name).
Uninstall removes exactly the files that carry nmem's mark. Cline keeps its MCP servers in its own
extension storage, so nmem does not write them: it prints how to add `nmem-mcp` in Cline's MCP view.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nmem_client import paths
from nmemd.agents.cline import HOME, SPEC
from nmemd.errors import SettingsError
from nmemd.setup import files, settings_file
from nmemd.setup.agent_setup import AgentSetup, Installed, InstallOptions, looked_for
from nmemd.setup.checks import Check, command_paths, fail, home_tilde, ok, warn

AGENT: Final = SPEC.name
MARK: Final = "# nmem hook: written by `nmem install --agent cline`, removed by `nmem uninstall --agent cline`"
# Not PreToolUse: the call is stored once it has run (PostToolUse); a PreToolUse hook that fails blocks the tool.
HOOKS: Final = SPEC.hooks


hooks_dir: Final = HOME.path  # `~/Documents/Cline/Hooks` (NMEM_CLINE_HOOKS_DIR names another, for tests)


hook_command: Final = functools.partial(settings_file.hook_command, AGENT)


def script(command: str) -> str:
    return f"#!/bin/sh\n{MARK}\n{command}\n"


def is_ours(path: Path) -> bool:
    """Whether `path` is a regular file nmem wrote (its mark and the hook client in it)."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > 64 * 1024:
            return False
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return MARK in text and settings_file.CLIENT_MARKER in text


def our_hooks() -> list[tuple[str, str]]:
    """(hook, the script's command line) of every script of nmem's in the hooks folder."""
    found = []
    for name in HOOKS:
        path = hooks_dir() / name
        if is_ours(path):
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            found.append((name, lines[2] if len(lines) > 2 else ""))
    return found


@dataclass
class Result:
    folder: Path
    written: list[str] = field(default_factory=list)
    current: list[str] = field(default_factory=list)  # already nmem's, unchanged
    foreign: list[str] = field(default_factory=list)  # the user's own hooks of these names, left alone
    removed: list[str] = field(default_factory=list)


def _write(path: Path, text: str) -> None:
    files.replace(path, text.encode("utf-8"), 0o755)  # private until it is whole, never writable by others


def install_scripts(print_only: bool = False) -> Result:
    """Write nmem's hook scripts (idempotent); never overwrite a hook that is not nmem's."""
    folder = hooks_dir()
    result = Result(folder)
    text = script(hook_command())
    for name in HOOKS:
        path = folder / name
        if path.exists() or path.is_symlink():
            if not is_ours(path):
                result.foreign.append(name)
                continue
            if path.read_text(encoding="utf-8", errors="replace") == text and os.access(path, os.X_OK):
                result.current.append(name)
                continue
        result.written.append(name)
    if print_only or not result.written:
        return result
    try:
        paths.make_dirs(str(folder))  # not 0777 under umask 000: others could replace the scripts the agent runs
        for name in result.written:
            _write(folder / name, text)
    except OSError as exc:
        raise SettingsError(f"cannot write nmem's hook scripts in {folder}: {exc.strerror}") from exc
    return result


def uninstall_scripts() -> Result:
    """Remove exactly nmem's hook scripts; the user's own hooks stay."""
    folder = hooks_dir()
    result = Result(folder)
    for name in HOOKS:
        path = folder / name
        if is_ours(path):
            try:
                path.unlink()
            except OSError as exc:
                raise SettingsError(f"cannot remove {path}: {exc.strerror}") from exc
            result.removed.append(name)
        elif path.exists():
            result.foreign.append(name)
    return result


def printed() -> str:
    return "".join(f"# {hooks_dir() / name} (mode 755)\n{script(hook_command())}" for name in HOOKS)


MCP_HINT: Final = "add nmem's MCP server in Cline's MCP view (Configure MCP Servers): command {command}, no arguments"


# --- what `nmem install`, `nmem uninstall` and `nmem doctor` do for Cline ------------------------


def _install(o: InstallOptions) -> Installed:
    if o.print_only:
        return Installed(printed=printed())
    result = install_scripts()
    lines = []
    if result.written:
        lines.append(f"Cline hooks: {', '.join(result.written)} written in {result.folder}")
    if result.current:
        lines.append(f"Cline hooks: {', '.join(result.current)} already up to date")
    lines += [f"Cline hook {result.folder / name} is not nmem's: left alone, so nmem does not see {name}"
              for name in result.foreign]  # fmt: skip
    if o.mcp:
        lines.append(MCP_HINT.format(command=settings_file.mcp_command()))
    return Installed(lines=lines)


def _uninstall(o: InstallOptions) -> list[str]:
    result = uninstall_scripts()
    if result.removed:
        return [f"Cline hooks {', '.join(result.removed)} removed from {result.folder}"]
    return [f"no nmem hooks in {result.folder}"]


def check() -> list[Check]:
    """nmem's Cline hook scripts (every one, executable, a client that exists); nothing when nmem is not
    installed for Cline."""
    hooks = our_hooks()
    if not hooks:
        return []
    fix, where = "nmem install --agent cline", home_tilde(hooks_dir())
    missing = [h for h in HOOKS if h not in {h for h, _ in hooks}]
    idle = [h for h, _ in hooks if not os.access(hooks_dir() / h, os.X_OK)]
    broken = sorted({p for _, c in hooks for p in command_paths(c) if not os.path.exists(p)})
    if missing:
        return [fail("cline hooks", f"{where} lacks nmem's {', '.join(missing)}", fix)]
    if idle:
        return [fail("cline hooks", f"{where}/{idle[0]} is not executable: Cline does not run it", fix)]
    if broken:
        return [fail("cline hooks", f"hooks in {where} call {broken[0]}, which does not exist", fix)]
    if any(c != hook_command() for _, c in hooks):
        return [warn("cline hooks", f"hooks in {where} call another nmem installation than this one", fix)]
    return [ok("cline hooks", f"{len(hooks)} hook scripts in {where} (the CLI runs them with hooks-enabled=true)")]


SETUP: Final = AgentSetup(
    found=HOME.found,
    looked=looked_for(HOME),
    install=_install,
    uninstall=_uninstall,
    checks=(("cline", lambda settings: check()),),
    project_refusal="--project is for Claude Code: nmem installs cline's hooks in your home folder",
)
