"""Map a hook's `cwd` to the project it belongs to.

Memory is scoped per project, and `cwd` follows `cd` into subdirectories, so the
project is the git top-level of `cwd` (found by walking up to a `.git` directory
or file, no subprocess), else `cwd` itself. Paths that do not exist on this
machine (replayed or imported events) and relative paths are returned as given.
The user's home directory and `/` are never a project root on their own (a
dotfiles repository in `$HOME` would otherwise swallow every unversioned project).
"""

from __future__ import annotations

import os
import time
from functools import lru_cache
from typing import Final

_TTL_SECONDS: Final = 300.0  # a later `git init` is seen within this time
_HOME: Final = os.path.normpath(os.path.expanduser("~"))
_NOT_ROOTS: Final = frozenset({_HOME, os.path.sep})


def project_root(cwd: str | None) -> str | None:
    """The git top-level containing `cwd`, else `cwd` (normalized if it exists); None if empty."""
    if not cwd:
        return None
    return _cached_root(cwd, int(time.monotonic() // _TTL_SECONDS))


@lru_cache(maxsize=256)
def _cached_root(cwd: str, epoch: int) -> str:
    del epoch  # part of the cache key only
    return _find_root(cwd)


def _find_root(cwd: str) -> str:
    if "\0" in cwd or not os.path.isabs(cwd):
        return cwd
    start = os.path.normpath(cwd)
    try:
        if not os.path.isdir(start):
            return cwd
        path = start
        while True:
            if os.path.exists(os.path.join(path, ".git")):
                return path if (path not in _NOT_ROOTS or path == start) else cwd
            parent = os.path.dirname(path)
            if parent == path:
                return start
            path = parent
    except (OSError, ValueError):
        return cwd


def short_name(project: str) -> str:
    """The last path component of `project` (`/a/b/nmem/` -> `nmem`)."""
    trimmed = project.rstrip("/\\")
    if not trimmed:
        return project
    return trimmed.replace("\\", "/").rsplit("/", 1)[-1]
