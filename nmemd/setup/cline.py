"""nmem's hook scripts in Cline's global hooks folder, and out again.

Cline runs an executable named after each hook (nmemd.capture.cline). `nmem install --agent cline`
writes one small script per hook nmem uses into `~/Documents/Cline/Hooks/`, each marked as nmem's in
its second line and running `send.py --agent cline`. A file of that name that is not nmem's is the
user's own hook: it is left alone and named in the report (Cline runs one file per hook name).
Uninstall removes exactly the files that carry nmem's mark. Cline keeps its MCP servers in its own
extension storage, so nmem does not write them: it prints how to add `nmem-mcp` in Cline's MCP view.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nmem_client import paths
from nmemd.errors import SettingsError
from nmemd.setup import files, install

AGENT: Final = "cline"
MARK: Final = "# nmem hook: written by `nmem install --agent cline`, removed by `nmem uninstall --agent cline`"
# Not PreToolUse: the call is stored once it has run (PostToolUse); a PreToolUse hook that fails blocks the tool.
HOOKS: Final = ("TaskStart", "TaskResume", "UserPromptSubmit", "PostToolUse", "PreCompact", "TaskComplete",
                "TaskCancel")  # fmt: skip


def hooks_dir() -> Path:
    """`~/Documents/Cline/Hooks` (NMEM_CLINE_HOOKS_DIR names another, for tests and unusual setups)."""
    return Path(os.environ.get("NMEM_CLINE_HOOKS_DIR") or Path.home() / "Documents" / "Cline" / "Hooks").absolute()


def found() -> bool:
    """Whether Cline is on this machine: its Documents folder, or `cline` on PATH."""
    return hooks_dir().parent.is_dir() or shutil.which("cline") is not None


def hook_command() -> str:
    return f"{install.hook_command()} --agent {AGENT}"


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
    return MARK in text and install.CLIENT_MARKER in text


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
