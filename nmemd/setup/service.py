"""Run nmemd under the OS service manager: systemd user units on Linux, a LaunchAgent on macOS.

Both socket-activate the daemon, so the socket exists from login on and a
crash costs no events: the manager keeps listening and starts nmemd again on
the next connection. Unit text is built here rather than read from the repo's
`systemd/` and `launchd/` templates because only the packages are installed;
tests keep those templates equal to what these functions render.
"""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

import msgspec

from nmem_client import paths
from nmemd.daemon.instance import LAUNCHD_SOCKET_NAME
from nmemd.errors import ServiceError

Manager = Literal["systemd", "launchd"]

SOCKET_UNIT = "nmemd.socket"
SERVICE_UNIT = "nmemd.service"
LAUNCHD_LABEL = "dev.nmem.nmemd"
SYSTEMD_SOCKET = "%t/nmem/nmemd.sock"  # %t is $XDG_RUNTIME_DIR, where paths.socket_path() looks first
COMMAND_TIMEOUT_S = 30.0  # systemctl/launchctl block on the manager; never hang the CLI on them

_HEADER = "# Written by `nmem service install`; `nmem service uninstall` removes it.\n"

_SOCKET_TEXT = (
    _HEADER
    + f"""[Unit]
Description=nmem memory daemon socket

[Socket]
ListenStream={SYSTEMD_SOCKET}
SocketMode=0600
DirectoryMode=0700
Accept=no

[Install]
WantedBy=sockets.target
"""
)

# Only options that work in user units: filesystem namespacing (ProtectSystem, ProtectHome,
# PrivateTmp) is unavailable there and would hide $XDG_RUNTIME_DIR and $HOME anyway.
_SERVICE_TEXT = (
    _HEADER
    + f"""[Unit]
Description=nmem memory daemon
Requires={SOCKET_UNIT}
After={SOCKET_UNIT}

[Service]
Type=notify
ExecStart=@NMEMD@ --started-by systemd --socket {SYSTEMD_SOCKET}
Restart=on-failure
RestartSec=1
RestartPreventExitStatus=4
TimeoutStopSec=15
UMask=0077
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native
RestrictAddressFamilies=AF_UNIX
"""
)


class Installed(msgspec.Struct, kw_only=True):
    manager: Manager
    nmemd: str
    socket: str
    files: list[str]
    stopped_pid: int | None = None  # a hand-started daemon stopped so the manager owns the socket


class Uninstalled(msgspec.Struct, kw_only=True):
    manager: Manager
    removed: list[str]


class ServiceStatus(msgspec.Struct, kw_only=True):
    manager: Manager
    installed: bool
    files: list[str]
    enabled: str  # systemd: is-enabled of the socket unit; launchd: "loaded" / "not loaded"
    socket_state: str  # systemd: is-active of the socket unit; launchd: the job's state
    daemon_state: str
    socket: str


# --- rendering -----------------------------------------------------------------------------------


def _systemd_exec_path(path: str) -> str:
    """Quote a path for ExecStart: systemd expands % specifiers and $VARS and splits on spaces."""
    escaped = path.replace("%", "%%").replace("$", "$$")
    if any(c in escaped for c in " \t\"'\\"):
        escaped = '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return escaped


def render_systemd(nmemd_path: str) -> dict[str, str]:
    """The two user units, file name -> text, with ExecStart pointing at `nmemd_path`."""
    exec_path = nmemd_path if nmemd_path == "@NMEMD@" else _systemd_exec_path(nmemd_path)
    return {SOCKET_UNIT: _SOCKET_TEXT, SERVICE_UNIT: _SERVICE_TEXT.replace("@NMEMD@", exec_path)}


def render_launchd(nmemd_path: str, socket_path: str, log_dir: str) -> str:
    """The LaunchAgent plist: launchd expands neither ~ nor $HOME, so every path is absolute."""
    plist = {
        "Label": LAUNCHD_LABEL,
        # --socket keeps the daemon's lock and status on the path launchd listens on.
        "ProgramArguments": [nmemd_path, "--started-by", "launchd", "--socket", socket_path],
        "Sockets": {
            LAUNCHD_SOCKET_NAME: {
                "SockPathName": socket_path,
                "SockPathMode": 0o600,  # plists hold decimal: 384
                "SockType": "stream",
            }
        },
        "Umask": 0o077,
        "ProcessType": "Background",
        "StandardOutPath": os.path.join(log_dir, "nmemd.stdout.log"),
        "StandardErrorPath": os.path.join(log_dir, "nmemd.stderr.log"),
    }
    return plistlib.dumps(plist, sort_keys=False).decode()


# --- the machine ---------------------------------------------------------------------------------


def detect() -> Manager:
    """launchd on macOS, else systemd when `systemctl` is on PATH; ServiceError otherwise."""
    if sys.platform == "darwin" and shutil.which("launchctl"):
        return "launchd"
    if sys.platform != "darwin" and shutil.which("systemctl"):
        return "systemd"
    raise ServiceError(
        "no service manager found (neither systemctl --user nor launchctl is on PATH); run `nmem daemon start` instead"
    )


def nmemd_path() -> str:
    """The absolute path of the nmemd installed beside this Python (the same venv), else on PATH."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "nmemd")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("nmemd")
    if found:
        return os.path.abspath(found)
    raise ServiceError("cannot find the nmemd executable next to this Python or on PATH")


def systemd_user_dir() -> Path:
    config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config_home) / "systemd" / "user"


def launchd_plist_path() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


def launchd_log_dir() -> Path:
    return Path.home() / "Library" / "Logs" / "nmem"


def _run(args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a manager command with a timeout; a failure becomes a one-line ServiceError."""
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False
        )
    except FileNotFoundError:
        raise ServiceError(f"{args[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise ServiceError(f"`{' '.join(args)}` did not finish within {COMMAND_TIMEOUT_S:.0f} s") from None
    if check and done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise ServiceError(f"`{' '.join(args)}` failed ({done.returncode}): {why[0] if why else 'no output'}")
    return done


def _write(path: Path, text: str) -> None:
    """Replace atomically so a manager never reads half a unit."""
    from nmemd.setup import files

    paths.make_dirs(str(path.parent), 0o755)
    files.replace(path, text.encode("utf-8"), 0o644)  # never open to others' writes, whatever the umask


def _stop_hand_started(socket_path: str) -> int | None:
    """Stop a daemon no manager runs: it would hold the lock, and the managed one would exit 4."""
    from nmem_client import paths
    from nmemd import config
    from nmemd.control import control
    from nmemd.daemon.instance import lock_holder

    if lock_holder(paths.lock_path(socket_path)) is None:
        return None
    if paths.socket_path() != socket_path:
        return None  # this shell talks to another socket: leave that daemon alone
    facts = control.ping()
    if facts is not None and facts.started_by in ("systemd", "launchd"):
        return None
    return control.stop(config.load())


def _systemd_socket_path() -> str:
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return os.path.join(runtime, "nmem", "nmemd.sock")


def _launchd_socket_path() -> str:
    from nmem_client import paths

    return paths.socket_path()


def install() -> Installed:
    """Write the units with this machine's absolute nmemd path and start listening on the socket."""
    manager = detect()
    exe = nmemd_path()
    if manager == "systemd":
        _user_manager_answers()  # before anything changes: without a user bus every step below fails
        sock = _systemd_socket_path()
        unit_dir = systemd_user_dir()
        written = [unit_dir / name for name in render_systemd(exe)]
        existed = {path for path in written if path.exists()}
        stopped = None
        try:
            for path, text in zip(written, render_systemd(exe).values(), strict=True):
                _write(path, text)
            _run(["systemctl", "--user", "daemon-reload"])
            stopped = _stop_hand_started(sock)  # only now: the manager is there to take over
            _run(["systemctl", "--user", "enable", "--now", SOCKET_UNIT])
            _run(["systemctl", "--user", "try-restart", SERVICE_UNIT])  # a reinstall picks up the new ExecStart
        except ServiceError as exc:
            raise ServiceError(f"{exc}. {_undo(written, existed, stopped)}") from None
        return Installed(manager=manager, nmemd=exe, socket=sock, files=[str(p) for p in written], stopped_pid=stopped)
    sock = _launchd_socket_path()
    if len(sock.encode()) >= 104:
        raise ServiceError(f"socket path {sock} is longer than macOS allows (103 bytes); set NMEM_SOCKET")
    stopped = _stop_hand_started(sock)
    from nmemd.daemon.instance import ensure_private_dir

    ensure_private_dir(os.path.dirname(sock))  # launchd binds the socket but creates no directory
    log_dir = launchd_log_dir()
    paths.make_dirs(str(log_dir))
    plist = launchd_plist_path()
    target = f"gui/{os.getuid()}"
    if _run(["launchctl", "print", f"{target}/{LAUNCHD_LABEL}"], check=False).returncode == 0:
        _run(["launchctl", "bootout", f"{target}/{LAUNCHD_LABEL}"], check=False)
    _write(plist, render_launchd(exe, sock, str(log_dir)))
    _run(["launchctl", "bootstrap", target, str(plist)])
    return Installed(manager=manager, nmemd=exe, socket=sock, files=[str(plist)], stopped_pid=stopped)


def _user_manager_answers() -> None:
    """`systemctl --user` needs the user's service manager over its bus (a login session, or lingering)."""
    done = _run(["systemctl", "--user", "show-environment"], check=False)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise ServiceError(
            f"`systemctl --user` cannot reach your user service manager ({why[0] if why else 'no answer'}); "
            "nothing was changed, and a running daemon keeps running. Log in with a session that starts one, "
            "or have root run `loginctl enable-linger $USER`; or go on without a service: hooks start the "
            "daemon when they need it (`nmem daemon start` starts it now)"
        )


def _undo(written: list[Path], existed: set[Path], stopped: int | None) -> str:
    """Take back a failed install: the unit files it added, and the daemon it stopped; say what was done."""
    for path in written:
        if path not in existed:
            path.unlink(missing_ok=True)
    _run(["systemctl", "--user", "daemon-reload"], check=False)
    said = "The unit files it added were removed"
    if stopped is not None:
        from nmemd import config
        from nmemd.control import control

        try:
            control.start(config.load())
            said += f"; the daemon it had stopped (pid {stopped}) was started again"
        except Exception as exc:  # the message must still go out
            said += f"; the daemon it had stopped (pid {stopped}) did not start again ({exc}): run `nmem daemon start`"
    return said


def uninstall() -> Uninstalled:
    """Stop the daemon and the socket, then remove exactly the files install wrote."""
    manager = detect()
    removed: list[str] = []
    if manager == "systemd":
        unit_dir = systemd_user_dir()
        _run(["systemctl", "--user", "disable", "--now", SOCKET_UNIT], check=False)  # fine if never enabled
        _run(["systemctl", "--user", "stop", SERVICE_UNIT], check=False)
        for name in (SERVICE_UNIT, SOCKET_UNIT):
            path = unit_dir / name
            if path.exists():
                path.unlink()
                removed.append(str(path))
        _run(["systemctl", "--user", "daemon-reload"])
        return Uninstalled(manager=manager, removed=removed)
    _run(["launchctl", "bootout", f"gui/{os.getuid()}/{LAUNCHD_LABEL}"], check=False)  # fine if not loaded
    plist = launchd_plist_path()
    if plist.exists():
        plist.unlink()
        removed.append(str(plist))
    return Uninstalled(manager=manager, removed=removed)


def _word(args: list[str]) -> str:
    """The one-word answer of `systemctl is-…` (it exits non-zero for 'inactive' too)."""
    done = _run(args, check=False)
    out = done.stdout.strip().splitlines()
    return out[0] if out else "unknown"


def status() -> ServiceStatus:
    """What the manager knows: unit files present, enabled, socket listening, daemon running."""
    manager = detect()
    if manager == "systemd":
        unit_dir = systemd_user_dir()
        files = [str(unit_dir / n) for n in (SOCKET_UNIT, SERVICE_UNIT) if (unit_dir / n).exists()]
        return ServiceStatus(
            manager=manager,
            installed=len(files) == 2,
            files=files,
            enabled=_word(["systemctl", "--user", "is-enabled", SOCKET_UNIT]),
            socket_state=_word(["systemctl", "--user", "is-active", SOCKET_UNIT]),
            daemon_state=_word(["systemctl", "--user", "is-active", SERVICE_UNIT]),
            socket=_systemd_socket_path(),
        )
    plist = launchd_plist_path()
    done = _run(["launchctl", "print", f"gui/{os.getuid()}/{LAUNCHD_LABEL}"], check=False)
    state = "unknown"
    for line in done.stdout.splitlines():
        key, sep, value = line.strip().partition(" = ")
        if sep and key == "state":
            state = value
            break
    loaded = done.returncode == 0
    return ServiceStatus(
        manager=manager,
        installed=plist.exists(),
        files=[str(plist)] if plist.exists() else [],
        enabled="loaded" if loaded else "not loaded",
        socket_state="listening" if loaded else "inactive",
        daemon_state=state if loaded else "inactive",
        socket=_launchd_socket_path(),
    )


# --- launchd socket activation -------------------------------------------------------------------
