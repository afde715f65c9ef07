"""A real `nmemd` process, and the hook client run as installed hooks run it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from support.env import BIN, SEND_SCRIPT

READY_TIMEOUT_S = 20.0


RLIMIT_WRAPPER = (
    "import os, resource, signal, sys\n"
    "for spec in sys.argv[1].split(','):\n"
    "    name, soft, hard = spec.split(':')\n"
    "    resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class Daemon:
    """A real `nmemd` process; started by `start`, awaited through READY=1 on NOTIFY_SOCKET."""

    def __init__(self, env: dict[str, str], short_dir: str):
        self.env = {**os.environ, **env}
        self.notify_path = os.path.join(short_dir, "notify")
        self.proc: subprocess.Popen[bytes] | None = None
        self.home = Path(env["NMEM_HOME"])
        self.socket = env.get("NMEM_SOCKET", "")  # "": the default place (nmem_client.paths.socket_path)

    @property
    def db(self) -> Path:
        return self.home / "nmem.db"

    def start(
        self, *args: str, wait: bool = True, rlimits: dict[str, tuple[int, int]] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start nmemd; `rlimits` ({"RLIMIT_FSIZE": (soft, hard)}) runs it under those limits,
        with SIGXFSZ ignored (a write past RLIMIT_FSIZE then fails with EFBIG instead of killing it)."""
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if os.path.exists(self.notify_path):
            os.unlink(self.notify_path)
        notify.bind(self.notify_path)
        notify.settimeout(READY_TIMEOUT_S)
        env = {**self.env, "NOTIFY_SOCKET": self.notify_path}
        argv = [str(BIN / "nmemd"), *args]
        if rlimits:
            specs = ",".join(f"{name}:{soft}:{hard}" for name, (soft, hard) in rlimits.items())
            argv = [sys.executable, "-c", RLIMIT_WRAPPER, specs, *argv]
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if wait:
                while True:
                    message = notify.recv(4096)
                    if b"READY=1" in message:
                        break
        except TimeoutError:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"nmemd did not become ready: {err.decode(errors='replace')}") from None
        finally:
            notify.close()
        return self.proc

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            if self.proc.stderr:
                self.proc.stderr.close()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


def run_send(
    payload: bytes, env: dict[str, str] | None = None, timeout: float = 15.0, args: Sequence[str] = ()
) -> subprocess.CompletedProcess[bytes]:
    """Run the hook client exactly as installed hooks do: `python -I -S send.py`, with `args` after it
    (`("--agent", "codex")`, as `nmem install --agent codex` writes it)."""
    return subprocess.run(
        [sys.executable, "-I", "-S", str(SEND_SCRIPT), *args],
        input=payload,
        env={**os.environ, **(env or {})},
        capture_output=True,
        timeout=timeout,
    )
