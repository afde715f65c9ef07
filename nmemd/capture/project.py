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
import queue
import threading
import time
from typing import Final

from nmem_client import paths

LOG = logging.getLogger("nmemd.project")
_TTL_SECONDS: Final = 300.0  # a later `git init` is seen within this time (by the next event after it)
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
_cache: dict[str, tuple[float, str]] = {}  # cwd -> (when its walk began, root), oldest first
_walking: set[str] = set()
# A known cwd whose answer is older than _TTL_SECONDS is answered from the cache at once and walked
# again by one long-lived thread, off the caller: a caller that waited for that walk, the daemon's
# event loop included, waited for a thread to get the GIL back after each stat(), 49-51 ms while team
# sync's threads were busy (bench_team_pull.py, issue #40). A refresh that never ends holds the
# others back: their cwds keep their last answer, which is what they would get without it.
_refreshes: queue.SimpleQueue[str] = queue.SimpleQueue()
_refreshing: set[str] = set()
_refresher: threading.Thread | None = None


def project_root(cwd: str | None) -> str | None:
    """The git top-level containing `cwd`, else `cwd` (normalized if it exists); None if empty.
    Never waits more than _WALK_WAIT_S, whatever the filesystem does, and only for a `cwd` not seen
    before: a known one is answered from the cache, refreshed in the background when it is old."""
    if not cwd:
        return None
    now = time.monotonic()
    with _lock:
        hit = _cache.get(cwd)
        if hit is not None:
            if now - hit[0] >= _TTL_SECONDS and cwd not in _refreshing:
                _refreshing.add(cwd)
                _refreshes.put(cwd)
            return hit[1]
        if cwd in _walking or len(_walking) >= _MAX_WALKING:
            return cwd  # a walk that has not ended: this one would not either
        _walking.add(cwd)
    _start_refresher()  # here, where the caller waits anyway: a thread's start waits for it to run
    done = threading.Event()
    found: list[str] = []
    walker = threading.Thread(target=_walk, args=(cwd, now, done, found), name="nmem-project", daemon=True)
    walker.start()
    if done.wait(_WALK_WAIT_S) and found:
        return found[0]
    LOG.warning("the project of %r is not known after %.1f s (a folder above it does not answer): cwd used", cwd,
                _WALK_WAIT_S)  # fmt: skip
    return cwd


def _walk(cwd: str, began: float, done: threading.Event, found: list[str]) -> None:
    """Find `cwd`'s root and cache it, however late it ends (later events then have it)."""
    try:
        root = _find_root(cwd)
        found.append(root)
        _remember(cwd, began, root)
    finally:
        with _lock:
            _walking.discard(cwd)
        done.set()


def _remember(cwd: str, began: float, root: str) -> None:
    with _lock:
        _cache.pop(cwd, None)  # to the end: the oldest entry goes first when the cache is full
        while len(_cache) >= _CACHE_MAX:
            del _cache[next(iter(_cache))]
        _cache[cwd] = (began, root)


def _start_refresher() -> None:
    global _refresher
    with _lock:
        if _refresher is not None and _refresher.is_alive():  # not alive: a forked child has no threads
            return
        _refresher = threading.Thread(target=_refresh_forever, name="nmem-project-refresh", daemon=True)
        _refresher.start()


def _refresh_forever() -> None:
    while True:
        cwd = _refreshes.get()
        try:
            began = time.monotonic()
            _remember(cwd, began, _find_root(cwd))
        except Exception:  # noqa: BLE001 - the last answer stays; the thread must not end
            LOG.debug("refreshing the project of %r failed", cwd, exc_info=True)
        finally:
            with _lock:
                _refreshing.discard(cwd)


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
