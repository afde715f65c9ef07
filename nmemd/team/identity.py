"""A project's identity across machines: its normalized git remote, else the name given at join.

`git@github.com:acme/api.git`, `https://github.com/acme/api` and `ssh://git@github.com/acme/api`
are one project, `github.com/acme/api`: host (lowercase, no user, no port) and path (no `.git`, no
slashes around it). The remote is read from the repository's own `config` file, never by running
`git`, and without blocking: a FIFO or a huge file where `config` should be is not read.
A linked worktree's `project_root` is already its main checkout (capture/project.py), so every
worktree of a repository maps to the one remote.

Paths travel relative to the project root (`to_relative`) and are shown under each machine's own
checkout (`to_local`).
"""

from __future__ import annotations

import os
import re
import stat
from typing import Final

from nmem_client import paths

CONFIG_MAX_BYTES: Final = 256 * 1024  # a git config is a few KB; more is not one
_SCP: Final = re.compile(r"^(?:(?P<user>[^@/\s]+)@)?(?P<host>[^:/\s]+):(?!//)(?P<path>.+)$")
_URL: Final = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*)://(?:[^@/]*@)?(?P<host>[^/:]+)(?::\d*)?(?P<path>/.*)?$", re.I)
_SECTION: Final = re.compile(r'^\s*\[\s*remote\s+"(?P<name>[^"]*)"\s*\]\s*$')
_ANY_SECTION: Final = re.compile(r"^\s*\[")
_URL_LINE: Final = re.compile(r"^\s*url\s*=\s*(?P<url>.*?)\s*$", re.I)
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/@:+-]{0,199}$")


def normalize_remote(url: str) -> str | None:
    """`host/owner/repo` of a git remote URL (scp-like, ssh://, https://, git://); None for a local
    path or anything else that names no host."""
    url = url.strip().strip('"')
    if not url or "\0" in url:
        return None
    host, path = "", ""
    m = _URL.match(url)
    if m:
        if m.group("scheme").lower() == "file":
            return None
        host, path = m.group("host"), m.group("path") or ""
    else:
        m = _SCP.match(url)
        if not m or "/" in m.group("host"):
            return None
        host, path = m.group("host"), m.group("path")
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")].rstrip("/")
    host = host.lower().strip("[]")
    if not host or not path or ".." in path.split("/"):
        return None
    return f"{host}/{path}"


def valid_name(name: str) -> bool:
    """A project name given at join: short, printable, no spaces."""
    return bool(_NAME.match(name))


def read_small_file(path: str, limit: int = CONFIG_MAX_BYTES) -> str | None:
    """The text of a regular file of at most `limit` bytes, read without waiting
    (`nmem_client.paths.read_regular`, as capture reads `.git` files); None otherwise (missing, a
    FIFO, a device, a directory, too big, unreadable). A `.git/config` that is a symlink is followed
    (`git` itself does), the size bound and the non-blocking open still hold."""
    try:
        return paths.read_regular(path, limit, follow=True).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def git_dir(root: str) -> str | None:
    """The git directory holding `root`'s config: `root/.git`, or where a `.git` file points (its
    `commondir` for a linked worktree)."""
    dot_git = os.path.join(root, ".git")
    try:
        st = os.stat(dot_git)
    except (OSError, ValueError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return dot_git
    text = read_small_file(dot_git, 4096)
    if not text or not text.startswith("gitdir:"):
        return None
    gitdir = os.path.join(root, text[len("gitdir:") :].strip())
    common = read_small_file(os.path.join(gitdir, "commondir"), 4096)
    return os.path.normpath(os.path.join(gitdir, common.strip())) if common else gitdir


def remote_url(root: str) -> str | None:
    """The URL of `origin` (else the first remote) in the repository at `root`'s config."""
    gd = git_dir(root)
    if gd is None and os.path.basename(root.rstrip("/")).endswith(".git"):
        gd = root  # a bare repository
    text = read_small_file(os.path.join(gd, "config")) if gd else None
    if not text:
        return None
    urls: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _SECTION.match(line):
            current = m.group("name")
        elif _ANY_SECTION.match(line):
            current = None
        elif current is not None and current not in urls and (u := _URL_LINE.match(line)):
            urls[current] = u.group("url")
    return urls.get("origin") or next(iter(urls.values()), None)


def project_id(root: str) -> str | None:
    """The normalized remote of the project at `root`, or None (no remote: a name is given at join)."""
    url = remote_url(root)
    return normalize_remote(url) if url else None


def to_relative(path: str | None, root: str) -> str | None:
    """`path` relative to the project root, for the server; None for a path outside it."""
    if not path:
        return None
    top = root.rstrip("/")
    if path.startswith(top + "/"):
        return path[len(top) + 1 :]
    if not os.path.isabs(path) and not path.startswith(".."):
        return path
    return None


def to_local(relative: str | None, root: str) -> str | None:
    """A teammate's relative path under this machine's checkout."""
    if not relative:
        return None
    if os.path.isabs(relative) or relative.startswith("../") or "/../" in relative:
        return relative
    return root.rstrip("/") + "/" + relative
