"""One daemon per socket: safe directories, the flock, the listening socket, sd_notify.

The kernel drops a flock when its process dies, so unlike a PID file it can
never go stale; a socket left behind by `kill -9` is unlinked only while we
hold the lock and after a connect() proved nobody serves it.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import struct
import sys

from nmem_client import paths
from nmemd.errors import AlreadyRunning, DaemonError, UnsafePathError

LOG = logging.getLogger("nmemd.instance")
LAUNCHD_SOCKET_NAME = "Listener"  # the plist's Sockets entry (nmemd.setup.service writes it)
SD_LISTEN_FDS_START = 3


def ensure_private_dir(path: str, *, ours: bool = True) -> None:
    """Make sure `path` is a directory nmem may keep private things in, by the rules the hook client
    and `nmem doctor` apply too (`paths.own_folder_problem`, `paths.given_folder_problem`).

    A directory nmem creates, or one it names itself (NMEM_HOME, `$XDG_RUNTIME_DIR/nmem`,
    `$NMEM_HOME/run`), must be ours (a symlink of ours to one is fine) and is made 0700. A directory
    it is given (`ours=False`: the folder of an NMEM_SOCKET the user chose, such as /tmp) is used as
    it is, never chmod-ed (that would lock everyone else out of /tmp or a home directory): the socket
    in it is 0600 and every peer's uid is checked."""
    created = not os.path.lexists(path)
    paths.make_dirs(path)
    if created or ours:
        why = paths.own_folder_problem(path)
        if why:
            raise UnsafePathError(why)
        if os.stat(path).st_mode & 0o077:
            os.chmod(path, 0o700)  # ours: tighten rather than refuse
        return
    why = paths.given_folder_problem(path)
    if why:
        raise UnsafePathError(f"{why}: choose another NMEM_SOCKET")


def socket_dir_is_ours(socket_path: str, home: str) -> bool:
    """Whether the socket's folder is one nmem names itself (made 0700) rather than one it is given."""
    folder = os.path.dirname(socket_path) or "."
    runtime = paths.runtime_dir()
    own = {os.path.join(home, "run")} | ({os.path.join(runtime, "nmem")} if runtime else set())
    return os.path.normpath(folder) in {os.path.normpath(p) for p in own}


def ensure_socket_dir(socket_path: str, home: str) -> None:
    """The socket's directory: nmem's own when it is one of the default places, else a given one."""
    ensure_private_dir(os.path.dirname(socket_path) or ".", ours=socket_dir_is_ours(socket_path, home))


def startup_problem(home: str, socket_path: str) -> str | None:
    """Why a daemon would refuse these paths at start (None: it would not), without creating anything:
    `nmem daemon start` and `nmem doctor` say it instead of a start that fails in the background."""
    folder = os.path.dirname(socket_path) or "."
    home_problem = paths.own_folder_problem(home) or _cannot_create(home)
    if socket_dir_is_ours(socket_path, home) or not os.path.lexists(folder):
        return home_problem or paths.own_folder_problem(folder)
    return home_problem or paths.given_folder_problem(folder)


def _cannot_create(folder: str) -> str | None:
    """Why `folder`, missing, could not be made (`/proc/nope`); None when it exists or could. Tried:
    its first missing level is made and removed again, since no mode bit tells (root, /proc)."""
    if os.path.lexists(folder):
        return None
    head = os.path.abspath(folder)
    while not os.path.lexists(os.path.dirname(head)) and os.path.dirname(head) != head:
        head = os.path.dirname(head)
    try:
        os.mkdir(head, 0o700)
    except FileExistsError:
        return None
    except OSError as exc:
        return f"{folder} cannot be created: {exc.strerror}"
    try:
        os.rmdir(head)
    except OSError:
        pass
    return None


# Locks this process already holds, by path: `nmemd` takes its lock before importing the
# daemon (a losing starter then exits before paying for anyio, aiosqlite and the server), and
# `serve()` adopts it. Two flocks on two descriptors of one file conflict even within a
# process, so adopting is the only way to hand the lock on.
_held: dict[str, int] = {}


class InstanceLock:
    """An exclusive, non-blocking flock on a lock file: beside the socket (one daemon per socket),
    and in NMEM_HOME (one daemon per store). The file holds the pid, then `note` (the socket a
    store's daemon serves, for the message a second one prints)."""

    def __init__(self, path: str, note: str = ""):
        self.path = path
        self.note = note
        self.fd: int | None = None

    def acquire(self) -> None:
        adopted = _held.get(self.path)
        if adopted is not None:
            self.fd = adopted
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder, note = _read_holder(fd)
            os.close(fd)
            who = f" (pid {holder})" if holder else ""
            if note:
                raise AlreadyRunning(
                    f"nmemd already serves this store on {note}{who}; lock {self.path}: point NMEM_SOCKET there,"
                    " or stop that daemon first"
                ) from None
            raise AlreadyRunning(f"nmemd is already running{who}; lock {self.path}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n{self.note}\n".encode() if self.note else f"{os.getpid()}\n".encode())
        self.fd = fd
        _held[self.path] = fd

    def release(self) -> None:
        """Drop the lock; a no-op when whoever adopted it released it already."""
        if self.fd is not None and _held.get(self.path) == self.fd:
            del _held[self.path]
            os.close(self.fd)  # closing drops the flock
        self.fd = None


def _read_holder(fd: int) -> tuple[int | None, str]:
    """The pid in a lock file and its note (empty when none)."""
    try:
        lines = os.pread(fd, 4096, 0).decode("utf-8", "replace").split("\n")
        pid = int(lines[0]) if lines[0].strip() else None
    except (OSError, ValueError):
        return None, ""
    return pid, lines[1].strip() if len(lines) > 1 else ""


def holder(path: str) -> tuple[int, str] | None:
    """The pid (-1 when unreadable) and note of the daemon holding the lock at `path`; None when
    nobody holds it. The note is the socket a store's daemon serves (empty for a socket's lock)."""
    try:
        fd = paths.open_regular(path)  # never waits: a FIFO planted there is not a lock
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, note = _read_holder(fd)
            return (pid or -1, note)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def lock_holder(path: str) -> int | None:
    """The pid written by the daemon holding `path`, or None when nobody holds it."""
    held = holder(path)
    return None if held is None else held[0]


def inherited_socket() -> socket.socket | None:
    """The listening socket systemd (LISTEN_FDS/LISTEN_PID) or launchd passed us, if any."""
    if sys.platform == "darwin":  # pragma: no cover - exercised on macOS only
        launchd_fd = launchd_listener_fd()  # None when launchd did not start us
        if launchd_fd is not None:
            os.set_inheritable(launchd_fd, False)
            handed = socket.socket(fileno=launchd_fd)
            if handed.family != socket.AF_UNIX or handed.type != socket.SOCK_STREAM:
                raise UnsafePathError("the launchd socket is not a Unix stream socket")
            return handed
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        count = 0
    for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(key, None)
    if count < 1:
        return None
    fd = SD_LISTEN_FDS_START
    os.set_inheritable(fd, False)
    sock = socket.socket(fileno=fd)
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise UnsafePathError("the inherited socket is not a Unix stream socket")
    return sock


def bind_socket(path: str) -> socket.socket:
    """Bind `path` 0600, replacing a stale socket. Call only while holding the lock."""
    if os.path.lexists(path):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(0.5)
            probe.connect(path)
        except OSError as exc:
            if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK):
                raise
            LOG.info("removing stale socket %s", path)
            os.unlink(path)
        else:
            raise AlreadyRunning(f"another process already serves {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(512)
    return sock


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end (Linux SO_PEERCRED, BSD getpeereid)."""
    if hasattr(socket, "SO_PEERCRED"):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return int(uid)
    if sys.platform == "darwin":  # pragma: no cover - exercised on macOS only
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        uid_t, gid_t = ctypes.c_uint32(), ctypes.c_uint32()
        if libc.getpeereid(sock.fileno(), ctypes.byref(uid_t), ctypes.byref(gid_t)) == 0:
            return int(uid_t.value)
    return None


def sd_notify(message: str) -> bool:
    """Send one datagram to $NOTIFY_SOCKET (systemd Type=notify); no libsystemd needed."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address or address[0] not in "/@":
        return False
    target = "\0" + address[1:] if address[0] == "@" else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(target)
            s.sendall(message.encode())
    except OSError:
        LOG.warning("sd_notify(%s) to %s failed", message, address)
        return False
    return True


def launchd_listener_fd(name: str = LAUNCHD_SOCKET_NAME) -> int | None:
    """The fd launchd listens on for our plist's `Sockets` entry; None off macOS or outside launchd.

    launchd hands sockets over only through launch_activate_socket(3), not as
    fds in the environment, hence ctypes (no pyobjc needed).
    """
    if sys.platform != "darwin":
        return None
    import ctypes

    libc = ctypes.CDLL("/usr/lib/libSystem.B.dylib", use_errno=True)
    activate = libc.launch_activate_socket
    activate.argtypes = [
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_int)),
        ctypes.POINTER(ctypes.c_size_t),
    ]
    activate.restype = ctypes.c_int
    libc.free.argtypes = [ctypes.c_void_p]
    fds = ctypes.POINTER(ctypes.c_int)()
    count = ctypes.c_size_t()
    err = activate(name.encode(), ctypes.byref(fds), ctypes.byref(count))
    if err in (errno.ESRCH, errno.ENOENT):  # not started by launchd / no such Sockets entry
        return None
    if err:
        raise DaemonError(f"launch_activate_socket({name}) failed: {os.strerror(err)}")
    try:
        got = [int(fds[i]) for i in range(count.value)]
    finally:
        libc.free(ctypes.cast(fds, ctypes.c_void_p))
    for extra in got[1:]:  # one SockPathName gives one fd; close any surplus rather than leak it
        os.close(extra)
    return got[0] if got else None
