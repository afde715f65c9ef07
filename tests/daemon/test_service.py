"""OS service support: real socket activation, the rendered units checked by systemd, and the installer's
refusals (the units and plist as rendered, in process: tests/unit/test_service_units.py).

The daemon is started the way systemd starts it (listening fd 3, LISTEN_FDS,
LISTEN_PID, NOTIFY_SOCKET) by this test itself, so it runs everywhere; the
systemd tools are used in addition when the machine has them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import READY_TIMEOUT_S, run_send
from support.env import BIN
from support.helpers import connect, count, log_text, new_id, payload, ping, wait_until

from nmemd.setup import service

NMEMD = str(BIN / "nmemd")
# What systemd does between fork and exec: the listening socket becomes fd 3 and LISTEN_PID names
# the process that will run nmemd (exec keeps the pid, so the wrapper's own pid is right).
EXEC_WRAPPER = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "if fd != 3:\n"
    "    os.dup2(fd, 3)\n"
    "    os.close(fd)\n"
    "os.environ['LISTEN_PID'] = str(os.getpid())\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class Notify:
    """A NOTIFY_SOCKET the test reads with bounded waits."""

    def __init__(self, path: str):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.messages: list[bytes] = []

    def wait_for(self, word: bytes, proc: subprocess.Popen[bytes] | None = None) -> None:
        self.sock.settimeout(READY_TIMEOUT_S)
        while not any(word in m.split(b"\n") for m in self.messages):
            try:
                self.messages.append(self.sock.recv(4096))
            except TimeoutError:
                err = b""
                if proc is not None:
                    proc.kill()
                    err = proc.communicate(timeout=10)[1] or b""
                raise AssertionError(f"no {word!r} on NOTIFY_SOCKET: {err.decode(errors='replace')}") from None

    def drain(self) -> list[bytes]:
        """Everything already queued (the sender has exited, so nothing more can arrive)."""
        self.sock.setblocking(False)
        while True:
            try:
                self.messages.append(self.sock.recv(4096))
            except BlockingIOError:
                return self.messages

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify(short_dir: str) -> Iterator[Notify]:
    n = Notify(os.path.join(short_dir, "notify"))
    yield n
    n.close()


def _listening_socket(path: str) -> socket.socket:
    """Bind and listen like a systemd .socket unit with SocketMode=0600."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o600)
    sock.listen(16)
    return sock


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.stderr:
            proc.stderr.close()


# --- (a) socket activation for real ----------------------------------------------------------------


def test_socket_activated_daemon_serves_notifies_and_never_unlinks(nmem_env: dict[str, str], notify: Notify) -> None:
    sock_path = nmem_env["NMEM_SOCKET"]
    listener = _listening_socket(sock_path)
    before = os.lstat(sock_path)
    env = {**os.environ, "LISTEN_FDS": "1", "LISTEN_FDNAMES": "nmemd.socket", "NOTIFY_SOCKET": notify.path}
    proc = subprocess.Popen(
        [sys.executable, "-c", EXEC_WRAPPER, str(listener.fileno()), NMEMD, "--started-by", "systemd"],
        env=env,
        pass_fds=(listener.fileno(),),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        notify.wait_for(b"READY=1", proc)
        facts = ping(sock_path)
        assert facts is not None and facts["pid"] == proc.pid and facts["started_by"] == "systemd"
        assert "socket-activated" in log_text(Path(nmem_env["NMEM_HOME"]))

        marker = f"act-{new_id()[:12]}"
        done = run_send(payload(marker))
        assert done.returncode == 0, done.stderr
        assert count(Path(nmem_env["NMEM_HOME"]) / "nmem.db", "events", "session_id = ?", (marker,)) == 1
        assert ping(sock_path) is not None  # still the daemon, not the client's fallback
    finally:
        code = _stop(proc)
    assert code == 0
    assert b"STOPPING=1" in b"\n".join(notify.drain()).split(b"\n")

    # The socket belongs to the manager: same inode, still a socket, still accepting for the next start.
    after = os.lstat(sock_path)
    assert stat.S_ISSOCK(after.st_mode)
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)
    assert stat.S_IMODE(after.st_mode) == 0o600
    connect(sock_path).close()
    listener.close()


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate not on PATH")
def test_daemon_runs_under_systemd_socket_activate(nmem_env: dict[str, str], notify: Notify) -> None:
    sock_path = nmem_env["NMEM_SOCKET"]
    os.makedirs(os.path.dirname(sock_path), mode=0o700, exist_ok=True)
    env = {**os.environ, "NOTIFY_SOCKET": notify.path}
    args = ["systemd-socket-activate", "--listen", sock_path]
    args += [f"--setenv={k}" for k in ("NMEM_HOME", "NMEM_SOCKET", "NOTIFY_SOCKET")]
    proc = subprocess.Popen([*args, NMEMD], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: os.path.exists(sock_path) or proc.poll() is not None, timeout=READY_TIMEOUT_S,
                   message="systemd-socket-activate to listen")  # fmt: skip
        assert proc.poll() is None
        connect(sock_path).close()  # the first connection starts the daemon if the tool waits for one
        notify.wait_for(b"READY=1", proc)
        marker = f"ssa-{new_id()[:12]}"
        done = run_send(payload(marker))
        assert done.returncode == 0, done.stderr
        assert count(Path(nmem_env["NMEM_HOME"]) / "nmem.db", "events", "session_id = ?", (marker,)) == 1
        facts = ping(sock_path)
        assert facts is not None
        assert "socket-activated" in log_text(Path(nmem_env["NMEM_HOME"]))
    finally:
        code = _stop(proc)
    assert code == 0
    assert b"STOPPING=1" in b"\n".join(notify.drain()).split(b"\n")


# --- (b) systemd units -----------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not on PATH")
def test_systemd_analyze_verify_accepts_the_units(short_dir: str) -> None:
    unit_dir = Path(short_dir) / "units"
    unit_dir.mkdir()
    for name, text in service.render_systemd(NMEMD).items():
        (unit_dir / name).write_text(text)
    runtime = Path(short_dir) / "runtime"
    runtime.mkdir(mode=0o700)
    files = [str(unit_dir / "nmemd.socket"), str(unit_dir / "nmemd.service")]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    done = subprocess.run(["systemd-analyze", "verify", "--user", *files], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    if done.returncode != 0 and "Failed to initialize manager" in done.stderr:
        done = subprocess.run(["systemd-analyze", "verify", *files], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # verify exits 0 on parse warnings too: none may mention our files.
    assert not [line for line in done.stderr.splitlines() if "nmemd." in line], done.stderr


# --- (d) the installer ----------------------------------------------------------------------------


def test_service_install_without_a_manager_prints_one_line_and_exits_1() -> None:
    empty = tempfile.mkdtemp(dir="/tmp")
    try:
        for command in ("install", "uninstall", "status"):
            done = subprocess.run([str(BIN / "nmem"), "service", command], env={**os.environ, "PATH": empty},
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            assert done.returncode == 1, done
            assert done.stdout == ""
            lines = done.stderr.splitlines()
            assert len(lines) == 1, done.stderr
            assert lines[0].startswith("error: no service manager found")
    finally:
        shutil.rmtree(empty, ignore_errors=True)


@pytest.mark.skipif(sys.platform == "darwin", reason="the fake systemctl stands in for systemd only")
def test_service_install_writes_units_and_runs_systemctl(short_dir: str, tmp_path: Path) -> None:
    fake_bin = Path(short_dir) / "bin"
    fake_bin.mkdir()
    calls = Path(short_dir) / "calls"
    (fake_bin / "systemctl").write_text(f'#!/bin/sh\necho "$*" >> {calls}\necho enabled\n')
    (fake_bin / "systemctl").chmod(0o755)
    config = tmp_path / "config"
    env = {**os.environ, "PATH": str(fake_bin), "XDG_CONFIG_HOME": str(config),
           "XDG_RUNTIME_DIR": str(Path(short_dir) / "rt")}  # fmt: skip
    done = subprocess.run([str(BIN / "nmem"), "service", "install"], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    unit_dir = config / "systemd" / "user"
    assert f"ExecStart={NMEMD} " in (unit_dir / "nmemd.service").read_text()
    assert (unit_dir / "nmemd.socket").read_text() == service.render_systemd(NMEMD)["nmemd.socket"]
    assert calls.read_text().splitlines() == [
        "--user show-environment",
        "--user daemon-reload",
        "--user enable --now nmemd.socket",
        "--user try-restart nmemd.service",
    ]

    calls.unlink()
    done = subprocess.run([str(BIN / "nmem"), "service", "uninstall"], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not (unit_dir / "nmemd.service").exists() and not (unit_dir / "nmemd.socket").exists()
    assert calls.read_text().splitlines() == [
        "--user disable --now nmemd.socket",
        "--user stop nmemd.service",
        "--user daemon-reload",
    ]


@pytest.mark.skipif(sys.platform == "darwin", reason="the fake systemctl stands in for systemd only")
@pytest.mark.parametrize("fails", ["show-environment", "enable"])
def test_a_failed_service_install_changes_nothing_and_leaves_the_daemon_running(
    short_dir: str, tmp_path: Path, fails: str
) -> None:
    """Issue #16, finding 15: without a user bus (`systemctl --user` answers nothing), install stopped
    the running daemon first, then failed and left its unit files. Now the bus is asked first; a step
    that fails later takes back the files it added and starts again the daemon it stopped."""
    fake_bin = Path(short_dir) / "bin"
    fake_bin.mkdir()
    (fake_bin / "systemctl").write_text(
        f'#!/bin/sh\ncase "$*" in *{fails}*) echo "Failed to connect to bus: No medium found" >&2; exit 1;; esac\n'
    )
    (fake_bin / "systemctl").chmod(0o755)
    config = tmp_path / "config"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NMEM_")}
    env.update(PATH=f"{fake_bin}:{os.environ['PATH']}", XDG_CONFIG_HOME=str(config),
               XDG_RUNTIME_DIR=str(Path(short_dir) / "rt"), XDG_DATA_HOME=str(tmp_path / "data"))  # fmt: skip
    # The default home (no NMEM_HOME): its socket is the one the socket unit holds, %t/nmem/nmemd.sock;
    # another home's daemon has a socket of its own and is no hand-started rival (issue #37, 1).
    nmem = str(BIN / "nmem")
    assert subprocess.run([nmem, "daemon", "start"], env=env, capture_output=True, timeout=60).returncode == 0
    try:
        done = subprocess.run([nmem, "service", "install"], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and done.stdout == "", done
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
        if fails == "show-environment":
            assert "cannot reach your user service manager" in lines[0] and "nothing was changed" in lines[0]
        else:
            assert "unit files it added were removed" in lines[0] and "was started again" in lines[0], lines[0]
        assert not list((config / "systemd" / "user").glob("nmemd.*")) if (config / "systemd").exists() else True
        status = subprocess.run([nmem, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
        assert json.loads(status.stdout)["daemon"]["running"] is True, status
    finally:
        subprocess.run([nmem, "daemon", "stop"], env=env, capture_output=True, timeout=60)
