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
    return default_home()


def default_home() -> str:
    """`${XDG_DATA_HOME:-~/.local/share}/nmem`: the home without NMEM_HOME."""
    data = env("XDG_DATA_HOME")
    if not data:
        user_home = env("HOME")
        if not user_home:
            import os

            user_home = os.path.expanduser("~")
        data = join(user_home, ".local", "share")
    return join(data, "nmem")


def runtime_dir() -> str | None:
    """`XDG_RUNTIME_DIR` when it is a folder of ours, as the XDG spec requires of it. One of another
    user's (an `su` shell, a copied environment) would name a socket folder the daemon may not
    create: every hook would start a daemon that exits at once (issue #16, finding 7). Without
    one, the socket goes under NMEM_HOME, for the client and the daemon alike."""
    runtime = env("XDG_RUNTIME_DIR")
    if not runtime:
        return None
    try:
        st = posix.stat(runtime)
    except FileNotFoundError:
        return runtime  # not made yet: the daemon makes it, as its own
    except OSError:
        return None
    return runtime if st.st_uid == posix.geteuid() else None


def socket_path() -> str:
    """`NMEM_SOCKET`, else `$XDG_RUNTIME_DIR/nmem/nmemd.sock` (`runtime_dir`), else `$NMEM_HOME/run/nmemd.sock`."""
    configured = env("NMEM_SOCKET")
    if configured:
        return configured
    runtime = runtime_dir()
    if runtime:
        return join(runtime, "nmem", socket_name())
    return join(home(), "run", "nmemd.sock")


def socket_name() -> str:
    """`nmemd.sock` for the default home, `nmemd-<digest of the home>.sock` for any other: two
    NMEM_HOMEs of one user never share `$XDG_RUNTIME_DIR/nmem/`'s socket, and so never a daemon
    (issue #37, 1). Under NMEM_HOME/run the socket follows the home by its place already."""
    configured = env("NMEM_HOME")
    if not configured or configured.rstrip("/") == default_home().rstrip("/"):
        return "nmemd.sock"
    digest = fnv1a(absolute(configured).rstrip("/").encode("utf-8", "surrogateescape"))
    return f"nmemd-{digest:016x}.sock"


def absolute(path: str) -> str:
    return path if path.startswith("/") else join(posix.getcwd(), path)


def fnv1a(data: bytes) -> int:
    """FNV-1a, 64 bits: a stable digest at no import (`hashlib` costs ~2 ms; `hash()` is salted)."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def lock_path(sock: str) -> str:
    """The single-instance lock lives beside the socket it guards: `nmemd.lock`, or for a home's own
    socket (`socket_name`) `nmemd-<digest>.lock`, so that each of a folder's sockets has its own."""
    name = sock.rpartition("/")[2]
    if name.startswith("nmemd-") and name.endswith(".sock"):
        return join(dirname(sock), name[:-5] + ".lock")
    return join(dirname(sock), "nmemd.lock")


def store_id(folder: str | None = None) -> bytes:
    """The store a client means, as the daemon can check it: NMEM_HOME's device and inode in hex
    (`-` when it does not exist). Whatever spelling, symlink or relative path names it, one folder
    gives one id; a daemon serving another store refuses the frame (issue #37, 1)."""
    try:
        st = posix.stat(folder if folder is not None else home())
    except (OSError, ValueError):
        return b"-"
    return b"%x.%x" % (st.st_dev, st.st_ino)


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
    return st.st_uid == uid and given_folder_problem(dirname(path) or ".") is None  # it exists: the socket is there


# The folder rules the hook client, the daemon and `nmem doctor` all apply, so that none accepts
# what another refuses (issue #16, finding 7: a client that wrote the inbox and started, hook after
# hook, a daemon that refused the same folder and exited). README: Configuration, "Paths".


def own_folder_problem(folder: str) -> str | None:
    """Why `folder` may not be one nmem names itself (NMEM_HOME, its `run/`, `$XDG_RUNTIME_DIR/nmem`);
    None: it may, or it does not exist yet. A folder of ours, or a symlink of ours (or root's) to
    one. Its mode is not the question: the daemon tightens a folder of ours to 0700 at start."""
    uid = posix.geteuid()
    st, why = _followed(folder, uid)
    if st is None:
        return why
    if st.st_uid != uid:
        return f"{folder} is owned by uid {st.st_uid}, not by us ({uid})"
    return None


def given_folder_problem(folder: str) -> str | None:
    """Why the folder of a socket the user chose (`NMEM_SOCKET=/tmp/x.sock`) may not hold ours;
    None: it may, or it does not exist yet (then nmem creates it, 0700). Ours or root's, and others
    may not write to it unless it is sticky like /tmp (they could replace our socket)."""
    uid = posix.geteuid()
    st, why = _followed(folder, uid)
    if st is None:
        return why
    if st.st_uid not in (uid, 0):
        return f"{folder} is owned by uid {st.st_uid}, not by us ({uid}) or root"
    if st.st_mode & 0o022 and not st.st_mode & 0o1000:
        return f"{folder} may be written by others and has no sticky bit"
    return None


def _followed(folder: str, uid: int) -> tuple[posix.stat_result | None, str | None]:
    """The folder's stat through a symlink of ours or root's (another user's could be re-pointed
    anywhere); (None, None) when it does not exist, (None, why) when it may not be used."""
    try:
        st = posix.lstat(folder)
    except OSError:
        return None, None
    if st.st_mode & 0o170000 == 0o120000:  # S_IFLNK
        if st.st_uid not in (uid, 0):
            return None, f"{folder} is a symlink owned by uid {st.st_uid}, not by us ({uid})"
        try:
            st = posix.stat(folder)
        except OSError:
            return None, f"{folder} is a symlink to nothing"
    if st.st_mode & 0o170000 != 0o040000:  # S_IFDIR
        return None, f"{folder} is not a directory"
    return st, None


def home_problem() -> str | None:
    """Why the inbox may not be written (None: it may): NMEM_HOME must be ours (`own_folder_problem`)
    and so must its database, which others may not write. A folder another user made first would
    get our events."""
    why = own_folder_problem(home())
    if why is not None:
        return why
    try:
        db = posix.lstat(db_path())
    except OSError:
        return None
    if db.st_uid != posix.geteuid() or db.st_mode & 0o022:
        return f"{db_path()} is not ours alone"
    return None


def store_socket() -> str | None:
    """The socket of the daemon that locked this store (`$NMEM_HOME/store.lock`: pid, then socket),
    for a client whose environment names another socket (issue #16, finding 1); None without one.
    The file is the daemon's own, in the user's private NMEM_HOME."""
    try:
        lines = read_regular(join(home(), "store.lock"), 4096).split(b"\n")
    except OSError:
        return None
    socket = lines[1].decode("utf-8", "surrogateescape").strip() if len(lines) > 1 else ""
    return socket if socket.startswith("/") else None


def open_regular(path: str, *, follow: bool = False) -> int:
    """A descriptor of the regular file at `path` (not through a symlink unless `follow`), opened for
    reading: the one safe way nmem opens a file others may have planted something at.

    Never waits: opened non-blocking, so a FIFO planted there answers at once; anything that is not a
    regular file (a FIFO, a device, a folder) raises OSError, its descriptor closed."""
    flags = posix.O_RDONLY | posix.O_NONBLOCK | posix.O_NOCTTY | posix.O_CLOEXEC | (0 if follow else posix.O_NOFOLLOW)
    fd = posix.open(path, flags)
    try:
        if posix.fstat(fd).st_mode & 0o170000 != 0o100000:  # S_IFREG
            raise OSError(22, "not a regular file", path)
    except BaseException:
        posix.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int, *, follow: bool = False) -> bytes:
    """The bytes of the regular file at `path` (`open_regular`), at most `limit` of them: a larger one
    (a 2 GB file, one that grows while read) raises OSError."""
    fd = open_regular(path, follow=follow)
    try:
        if posix.fstat(fd).st_size > limit:
            raise OSError(27, f"larger than {limit} bytes", path)  # EFBIG
        chunks = []
        left = limit + 1  # a file that grew since fstat is refused too
        while left > 0:
            chunk = posix.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        posix.close(fd)
    if len(data) > limit:
        raise OSError(27, f"larger than {limit} bytes", path)
    return data


def db_path() -> str:
    return join(home(), "nmem.db")


def spool_dir() -> str:
    """Last-resort files for events that could reach neither the daemon nor SQLite."""
    return join(home(), "spool")


def create_private(path: str, data: bytes, mode: int = 0o600) -> None:
    """A new file at `path` holding `data`, fsynced, with `mode` (0600: private from its first byte,
    whatever the umask): the one way nmem writes a file. Never through a link nor over anything already
    there (FileExistsError); a failed write leaves no file."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # the umask took bits away: give back the ones `mode` has, no more
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    os.close(fd)


def write_private(final: str, data: bytes) -> None:
    """`final` complete or absent: a new 0600 temp file beside it (`create_private`), then renamed over
    it. A temp file a crashed writer of the same pid left is removed first."""
    import os

    tmp = f"{final}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    create_private(tmp, data)
    os.replace(tmp, final)


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
