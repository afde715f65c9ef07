"""Map a hook's `cwd` to the project it belongs to.

Memory is scoped per project, and `cwd` follows `cd` into subdirectories, so the
project is the git top-level of `cwd` (found by walking up to a `.git` directory
or file, no subprocess), else `cwd` itself. Paths that do not exist on this
machine (replayed or imported events) and relative paths are returned as given.
The user's home directory and `/` are never a project root on their own (a
dotfiles repository in `$HOME` would otherwise swallow every unversioned project).

A linked git worktree (`git worktree add`: its `.git` is a file naming a gitdir under
the main repository's `.git/worktrees/`) belongs to its repository's project: one memory
per repository, whichever checkout a session runs in. The session keeps its own `cwd`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Final

from nmem_client import paths

LOG = logging.getLogger("nmemd.project")
_TTL_SECONDS: Final = 300.0  # a later `git init` is seen within this time
_HOME: Final = os.path.normpath(os.path.expanduser("~"))
_NOT_ROOTS: Final = frozenset({_HOME, os.path.sep})
_GIT_FILE_MAX: Final = 4096  # a `.git` file or `commondir` is one line
_CACHE_MAX: Final = 256
# The walk is a few stat() calls, well under a millisecond on a local disk. One that takes longer
# (a FUSE folder whose server never answers, planted as /tmp/.git; a hung network mount) goes on in
# its own thread while the caller, the daemon's event loop included, takes `cwd` as the project
# (issue #28, finding 1). At most _MAX_WALKING such walks at once; past that, no new one starts.
_WALK_WAIT_S: Final = 0.2
_MAX_WALKING: Final = 4

_lock = threading.Lock()
_cache: dict[str, tuple[int, str]] = {}  # cwd -> (epoch, root)
_walking: set[str] = set()


def project_root(cwd: str | None) -> str | None:
    """The git top-level containing `cwd`, else `cwd` (normalized if it exists); None if empty.
    Never waits more than _WALK_WAIT_S, whatever the filesystem does."""
    if not cwd:
        return None
    epoch = int(time.monotonic() // _TTL_SECONDS)
    with _lock:
        hit = _cache.get(cwd)
        if hit is not None and hit[0] == epoch:
            return hit[1]
        if cwd in _walking or len(_walking) >= _MAX_WALKING:
            return cwd  # a walk that has not ended: this one would not either
        _walking.add(cwd)
    done = threading.Event()
    found: list[str] = []
    walker = threading.Thread(target=_walk, args=(cwd, epoch, done, found), name="nmem-project", daemon=True)
    walker.start()
    if done.wait(_WALK_WAIT_S) and found:
        return found[0]
    LOG.warning("the project of %r is not known after %.1f s (a folder above it does not answer): cwd used", cwd,
                _WALK_WAIT_S)  # fmt: skip
    return cwd


def _walk(cwd: str, epoch: int, done: threading.Event, found: list[str]) -> None:
    """Find `cwd`'s root and cache it, however late it ends (later events then have it)."""
    try:
        root = _find_root(cwd)
        found.append(root)
        with _lock:
            if len(_cache) >= _CACHE_MAX:
                _cache.clear()
            _cache[cwd] = (epoch, root)
    finally:
        with _lock:
            _walking.discard(cwd)
        done.set()


def _find_root(cwd: str) -> str:
    if "\0" in cwd or not os.path.isabs(cwd):
        return cwd
    start = os.path.normpath(cwd)
    try:
        if not os.path.isdir(start):
            return cwd
        path = start
        while True:
            dot_git = os.path.join(path, ".git")
            if os.path.exists(dot_git):
                if path in _NOT_ROOTS and path != start:
                    return cwd
                return _main_worktree(dot_git) or path
            parent = os.path.dirname(path)
            if parent == path:
                return start
            path = parent
    except (OSError, ValueError):
        return cwd


def _main_worktree(dot_git: str) -> str | None:
    """The main checkout of a linked worktree whose `.git` file is `dot_git`; None for anything else
    (a `.git` directory, a submodule's `.git` file: its gitdir has no `commondir`). Anyone may
    plant `/tmp/.git`: both files are read only if regular, small, and without waiting (a FIFO
    there froze the daemon, issue #28 finding 1)."""
    try:
        first = paths.read_regular(dot_git, _GIT_FILE_MAX).decode("utf-8", "replace").strip()
        if not first.startswith("gitdir:"):
            return None
        gitdir = os.path.join(os.path.dirname(dot_git), first[len("gitdir:") :].strip())
        raw = paths.read_regular(os.path.join(gitdir, "commondir"), _GIT_FILE_MAX)
        common = os.path.normpath(os.path.join(gitdir, raw.decode("utf-8", "replace").strip()))
    except (OSError, ValueError):
        return None
    # <main>/.git for a normal repository; a bare repository (`repo.git`) has no checkout: name it.
    return os.path.dirname(common) if os.path.basename(common) == ".git" else common


def short_name(project: str) -> str:
    """The last path component of `project` (`/a/b/nmem/` -> `nmem`)."""
    trimmed = project.rstrip("/\\")
    if not trimmed:
        return project
    return trimmed.replace("\\", "/").rsplit("/", 1)[-1]
