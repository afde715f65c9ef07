"""Where nmem keeps its state, resolved from the environment the same way everywhere."""

from __future__ import annotations

import posix  # builtin; `os` is not loaded under `python -I -S` and costs ~1 ms to import
import sys


def env(name: str) -> str | None:
    """An environment variable, through `os.environ` when loaded (it sees in-process changes)."""
    loaded = sys.modules.get("os")
    if loaded is not None:
        return loaded.environ.get(name)  # type: ignore[no-any-return]
    raw = posix.environ.get(name.encode())
    return None if raw is None else raw.decode("utf-8", "surrogateescape")


def join(*parts: str) -> str:
    """`os.path.join` for the simple paths built here (an absolute part restarts the path)."""
    out = ""
    for part in parts:
        if part.startswith("/") or not out:
            out = part
        else:
            out = out.rstrip("/") + "/" + part
    return out


def dirname(path: str) -> str:
    head = path.rpartition("/")[0]
    return head if head else ("/" if path.startswith("/") else "")


def home() -> str:
    """`NMEM_HOME`, else `${XDG_DATA_HOME:-~/.local/share}/nmem`."""
    configured = env("NMEM_HOME")
    if configured:
        return configured
    data = env("XDG_DATA_HOME")
    if not data:
        user_home = env("HOME")
        if not user_home:
            import os

            user_home = os.path.expanduser("~")
        data = join(user_home, ".local", "share")
    return join(data, "nmem")


def socket_path() -> str:
    """`NMEM_SOCKET`, else `$XDG_RUNTIME_DIR/nmem/nmemd.sock`, else `$NMEM_HOME/run/nmemd.sock`."""
    configured = env("NMEM_SOCKET")
    if configured:
        return configured
    runtime = env("XDG_RUNTIME_DIR")
    if runtime:
        return join(runtime, "nmem", "nmemd.sock")
    return join(home(), "run", "nmemd.sock")


def lock_path(sock: str) -> str:
    """The single-instance lock lives beside the socket it guards."""
    return join(dirname(sock), "nmemd.lock")


def trusted_socket(path: str) -> bool:
    """Whether a listener at `path` may be our daemon: a socket we own, in a folder we own (or root
    owns) that others cannot write to (unless sticky, like /tmp). Another user's listener at our
    path would get the raw, unredacted payload and could answer into the agent's context (issue
    #16, finding 8). Nothing there is not a reason to refuse: the connect reports it."""
    uid = posix.geteuid()
    try:
        st = posix.lstat(path)
    except OSError:
        return True
    return st.st_uid == uid and _safe_folder(dirname(path) or ".", uid)


def trusted_home() -> bool:
    """Whether the inbox may be written: NMEM_HOME (when it exists) and its database are ours and
    not writable by others. A folder another user made first would get our events."""
    uid = posix.geteuid()
    folder = home()
    try:
        posix.lstat(folder)
    except OSError:
        return True  # nmem creates it, 0700
    if not _safe_folder(folder, uid, owner_only=True):
        return False
    try:
        db = posix.lstat(db_path())
    except OSError:
        return True
    return db.st_uid == uid and not db.st_mode & 0o022


def _safe_folder(folder: str, uid: int, *, owner_only: bool = False) -> bool:
    try:
        st = posix.stat(folder)
    except OSError:
        return False
    if st.st_uid != uid and (owner_only or st.st_uid != 0):
        return False
    return not (st.st_mode & 0o022 and not st.st_mode & 0o1000)


def store_socket() -> str | None:
    """The socket of the daemon that locked this store (`$NMEM_HOME/store.lock`: pid, then socket),
    for a client whose environment names another socket (issue #16, finding 1); None without one.
    The file is the daemon's own, in the user's private NMEM_HOME."""
    try:
        with open(join(home(), "store.lock"), "rb") as f:
            lines = f.read(4096).split(b"\n")
    except OSError:
        return None
    socket = lines[1].decode("utf-8", "surrogateescape").strip() if len(lines) > 1 else ""
    return socket if socket.startswith("/") else None


def db_path() -> str:
    return join(home(), "nmem.db")


def spool_dir() -> str:
    """Last-resort files for events that could reach neither the daemon nor SQLite."""
    return join(home(), "spool")


def make_dirs(path: str, mode: int = 0o700) -> None:
    """`os.makedirs(path, mode, exist_ok=True)`, except that a missing parent (`~/.local`,
    `~/.local/share`) is made 0755 at most: makedirs gives parents 0777 less the umask, and under
    umask 000 that is a folder anyone may write to. Folders that exist are left as they are."""
    import os

    missing = []
    head = os.path.abspath(path)
    while not os.path.lexists(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode if folder == missing[0] else 0o755)  # the umask may only take more away
        except FileExistsError:
            pass
