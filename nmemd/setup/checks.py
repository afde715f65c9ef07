"""What `nmem doctor` reports, one finding at a time: a check's shape and the small helpers every
check uses (the daemon's and the store's in `doctor`, each agent's in `agent_checks`)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Literal

import msgspec

Level = Literal["ok", "warn", "fail"]


class Check(msgspec.Struct, kw_only=True):
    name: str
    status: Level
    detail: str
    fix: str | None = None  # a command to run (or, where none exists, what to do)


def ok(name: str, detail: str) -> Check:
    return Check(name=name, status="ok", detail=detail)


def warn(name: str, detail: str, fix: str | None = None) -> Check:
    return Check(name=name, status="warn", detail=detail, fix=fix)


def fail(name: str, detail: str, fix: str | None) -> Check:
    return Check(name=name, status="fail", detail=detail, fix=fix)


def home_tilde(path: Path | str) -> str:
    text, home = str(path), os.path.expanduser("~")
    return "~" + text[len(home) :] if home != "/" and text.startswith(home + "/") else text


def command_paths(command: str) -> list[str]:
    """The absolute paths a hook's command names: each must exist."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    return [w for w in words if w.startswith("/")]
