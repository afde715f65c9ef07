"""The viewer that stays (`nmem ui --background`): an address to come back to.

It listens on a fixed loopback port and keeps its secret path and secret in a 0600 file under
`$NMEM_HOME/ui/`, so a bookmark of its address works after the first visit (the cookie outlives
the browser) and after the viewer itself restarts. `nmem ui` opens the running one instead of
starting another.

Nothing secret is sent to find out whether it runs: a server on that port is taken for ours only
when the file names a live process of this user and (where /proc tells) the listening socket is
this user's. While it is not running, another user may take its port and record what a bookmark
sends (the secret path, the cookie): the guard answers only this user's connections (Linux:
`guard.peer_uid`), so the copy opens nothing (issue #37, 5). Where that cannot be told (macOS),
keep it running (start it at login) to hold the port."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import msgspec

from nmem_client import paths

DEFAULT_PORT: Final = 47613  # an unassigned port: the same address every time
STATE_FILE: Final = "viewer.json"
COOKIE_DAYS: Final = 400  # browsers keep a cookie at most this long
READY_S: Final = 20.0


class Viewer(msgspec.Struct, kw_only=True):
    """Where the viewer that stays listens, its secret path and secret, and its process."""

    port: int
    key: str
    secret: str
    pid: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{self.key}/"

    @property
    def sign_in(self) -> str:
        return f"{self.url}?token={self.secret}"


def folder(home: str) -> Path:
    """`$NMEM_HOME/ui`, 0700 (the opener files of `nmem ui` live there too)."""
    from nmemd.daemon.instance import ensure_private_dir

    path = Path(home) / "ui"
    ensure_private_dir(str(path))
    return path


def load(home: str) -> Viewer | None:
    """The state file, or None when there is none (or it is unreadable: a new one is made)."""
    path = Path(home) / "ui" / STATE_FILE
    try:
        fd = paths.open_regular(str(path))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None  # not ours, or others may read it: not a secret any more
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        return msgspec.json.decode(data, type=Viewer)
    except msgspec.DecodeError:
        return None


def save(home: str, viewer: Viewer) -> None:
    """Write the state file private from its first byte, replacing the old one atomically."""
    paths.write_private(str(folder(home) / STATE_FILE), msgspec.json.encode(viewer))


def for_port(home: str, port: int) -> Viewer:
    """The state to serve with on `port`: the saved secret path and secret when there are some
    (bookmarks and cookies stay good), else new ones."""
    old = load(home)
    if old is not None:
        return Viewer(port=port, key=old.key, secret=old.secret)
    return Viewer(port=port, key=secrets.token_urlsafe(16), secret=secrets.token_urlsafe(32))


def port_for(home: str, port: int) -> int:
    """`port` when given, else the one the viewer that stays had (its bookmarks name it), else DEFAULT_PORT."""
    if port:
        return port
    old = load(home)
    return old.port if old is not None else DEFAULT_PORT


def running(home: str) -> Viewer | None:
    """The viewer that stays, when its process lives and listens on its port as this user."""
    viewer = load(home)
    if viewer is None or viewer.pid <= 0:
        return None
    try:
        os.kill(viewer.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return None  # another user's process took the pid
    owner = _listener_uid(viewer.port)
    if owner is not None and owner != os.getuid():
        return None
    if owner is None and not _listening(viewer.port):
        return None
    return viewer


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _listener_uid(port: int) -> int | None:
    """The uid owning the socket listening on 127.0.0.1:`port`, from /proc/net/tcp (Linux); None
    when nothing listens there or this system has no such file."""
    try:
        with open("/proc/net/tcp", encoding="ascii") as fh:
            lines = fh.read().splitlines()[1:]
    except OSError:
        return None
    want = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    for line in lines:
        fields = line.split()
        if len(fields) > 7 and fields[1] in want and fields[3] == "0A":  # 0A: LISTEN
            return int(fields[7])
    return None


def start(home: str, port: int, env: dict[str, str] | None = None) -> Viewer:
    """Start the viewer that stays in its own session, logging to `$NMEM_HOME/logs/ui.log`, and
    wait until it listens. Raises OSError with the reason when it does not come up."""
    logs = Path(home) / "logs"
    from nmemd.daemon.instance import ensure_private_dir

    ensure_private_dir(str(logs))
    log_fd = os.open(logs / "ui.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        argv = [sys.executable, "-c", "from nmemd.cli import main; main()", "ui", "--serve-background", "--port",
                str(port)]  # fmt: skip
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, cwd="/",
                                start_new_session=True, env=env)  # fmt: skip
    finally:
        os.close(log_fd)
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        viewer = running(home)
        if viewer is not None and viewer.pid == proc.pid:
            return viewer
        if proc.poll() is not None:
            raise OSError(f"the viewer exited at once (status {proc.returncode}); see {logs / 'ui.log'}")
        time.sleep(0.05)  # the poll interval of a bounded wait
    raise OSError(f"the viewer did not listen within {READY_S:.0f} s; see {logs / 'ui.log'}")


def stop(home: str) -> int | None:
    """Stop the viewer that stays; its pid, or None when none runs. The state file stays (the next
    start keeps the address and the secret)."""
    import signal

    viewer = running(home)
    if viewer is None:
        return None
    os.kill(viewer.pid, signal.SIGTERM)
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        try:
            os.kill(viewer.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)  # the poll interval of a bounded wait
    return viewer.pid


def describe(viewer: Viewer) -> str:
    return json.dumps({"url": viewer.url, "pid": viewer.pid})
