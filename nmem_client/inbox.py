"""The client's fallback: write the raw event where the daemon will find it.

Used when the daemon is absent, refuses, or does not acknowledge in time.
The inbox is a table in the daemon's own database (the daemon drains it at
start and periodically); when even SQLite cannot take the write (locked by a
frozen daemon, disk full), the event becomes a 0600 file in the spool
directory. Every path keys on the same `event_id`, so a retry is a no-op.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

from nmem_client import paths

# The daemon's migrations create the same table with this exact DDL, so a
# database first created by a client is a valid database for the daemon.
INBOX_DDL = (
    "CREATE TABLE IF NOT EXISTS inbox ("
    "event_id TEXT PRIMARY KEY, received_at REAL NOT NULL, payload BLOB NOT NULL"
    ") WITHOUT ROWID"
)
BUSY_TIMEOUT_MS = 1000


def connect(db_path: str, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """Open the database with the same pragmas the daemon uses."""
    paths.make_dirs(os.path.dirname(db_path))
    conn = sqlite3.connect(db_path, timeout=busy_timeout_ms / 1000.0, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes effect on a new file
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


DISK_FULL_ERRNOS = (28, 122)  # ENOSPC, EDQUOT (Linux; macOS's EDQUOT is 69)
failure: str | None = None  # why the last `store` lost its event, when it knows (a full disk)


def full_disk_reason(home: str) -> str:
    """What a full disk means for nmem, and what to free (the hook's notice, status and doctor say it)."""
    return (
        f"disk full: no space left on the disk holding {home}; free some there (`df -h {home}` shows it,"
        f" `du -sh {home}/*` what nmem holds)"
    )


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError) and exc.errno in (*DISK_FULL_ERRNOS, 69):
        return True
    return isinstance(exc, sqlite3.Error) and (
        getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "database or disk is full" in str(exc)
    )


def store(event_id: str, payload: bytes) -> str:
    """Store one raw event for the daemon; return where it went ("inbox", "spool" or "lost"; then
    `failure` says why when the disk is full)."""
    global failure
    full = False
    old_umask = os.umask(0o077)
    try:
        try:
            conn = connect(paths.db_path())
            try:
                conn.execute(INBOX_DDL)
                conn.execute(
                    "INSERT INTO inbox(event_id, received_at, payload) VALUES (?, ?, ?)"
                    " ON CONFLICT(event_id) DO NOTHING",
                    (event_id, time.time(), payload),
                )
            finally:
                conn.close()
            return "inbox"
        except (sqlite3.Error, OSError) as exc:
            full = _disk_full(exc)
        try:
            spool(event_id, payload)
            return "spool"
        except OSError as exc:
            failure = full_disk_reason(paths.home()) if full or _disk_full(exc) else None
            return "lost"
    finally:
        os.umask(old_umask)


def spooled(event_id: str, payload: bytes) -> bool:
    """`spool`, False when it cannot be written (the inbox is tried then). No umask needed: the folder and
    the file get their modes explicitly (`paths.make_dirs`, `paths.create_private`)."""
    try:
        spool(event_id, payload)
        return True
    except OSError:
        return False


def spool(event_id: str, payload: bytes) -> None:
    """Write `spool/<event_id>.event` atomically (temp name, then rename)."""
    directory = paths.spool_dir()
    paths.make_dirs(directory)
    paths.write_private(os.path.join(directory, f"{event_id}.event"), payload)


ON_FIRST_USE = ("--idle-timeout", "900", "--started-by", "client")


def daemon_command(args: tuple[str, ...] = ON_FIRST_USE) -> list[str]:
    """How to start nmemd from here: the interpreter running us, in safe-path mode."""
    return [sys.executable, "-P", "-m", "nmemd", *args]


REPORT_ENV = "NMEM_START_REPORT_FD"  # where a daemon that cannot start says why (nmemd.__main__)
REPORT_FD = 3


def start_daemon(args: tuple[str, ...] = ON_FIRST_USE, *, report: bool = False) -> int | None:
    """Start nmemd detached: new session, stdio on /dev/null, no zombie left behind.

    A double fork: the grandchild is re-parented to init, and we reap the child
    at once. Concurrent starters are fine: the daemon's flock keeps one.
    `report`: return the non-blocking read end of a pipe on which a daemon that cannot start
    writes `failed <why>` before it exits (a SessionStart then stops waiting for it at once).
    """
    argv = daemon_command(args)
    reader, writer = os.pipe() if report else (-1, -1)
    pid = os.fork()
    if pid == 0:  # child
        try:
            import _signal  # type: ignore[import-not-found]  # builtin, loaded at start

            # A hook client that got SIGTERM ignores it from then on (send.py): the daemon must not inherit that.
            _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            first_free = 3
            if writer >= 0:
                os.dup2(writer, REPORT_FD)
                os.environ[REPORT_ENV] = str(REPORT_FD)
                first_free = REPORT_FD + 1
            os.closerange(first_free, 1024)
            for name in ("NMEM_HOME", "NMEM_SOCKET"):  # the daemon works from /: a relative path would move
                value = os.environ.get(name)
                if value and not value.startswith("/"):
                    os.environ[name] = os.path.abspath(value)
            os.chdir("/")
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.waitpid(pid, 0)
    if writer < 0:
        return None
    os.close(writer)
    os.set_blocking(reader, False)
    return reader
