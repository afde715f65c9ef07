"""Two team members for tests and benches: each an NMEM_HOME with its own daemon, PostgreSQL role,
machine name and checkout of one project (same remote, different paths), plus a TCP proxy that can
stall and drop connections between a daemon and the server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
SEND = Path(__file__).resolve().parents[2] / "nmem_client" / "send.py"
READY_S = 30.0


@dataclass
class Member:
    """One machine of one member: NMEM_HOME, socket, daemon and a checkout of the shared project."""

    name: str
    root: Path  # everything of this member lives under it
    dsn: str = ""
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.home = self.root / "home"
        self.sock_dir = tempfile.mkdtemp(prefix="nmt", dir="/tmp")
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("NMEM_", "PG"))},
            "NMEM_HOME": str(self.home),
            "NMEM_SOCKET": os.path.join(self.sock_dir, "nmemd.sock"),
            "NMEM_TEAM_MACHINE": f"{self.name}-box",
            "NMEM_AUTOSTART": "0",
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / ".config"),  # each machine its own config.toml
            **self.env,
        }

    @property
    def db(self) -> Path:
        return self.home / "nmem.db"

    def checkout(self, name: str, remote: str | None) -> Path:
        path = self.root / "src" / name
        path.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(path)], check=True)
        if remote:
            subprocess.run(["git", "-C", str(path), "remote", "add", "origin", remote], check=True)
        return path

    def start(self, extra: dict[str, str] | None = None) -> None:
        notify_path = os.path.join(self.sock_dir, "notify")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(notify_path)
        notify.settimeout(READY_S)
        env = {**self.env, **(extra or {}), "NOTIFY_SOCKET": notify_path}
        self.proc = subprocess.Popen(
            [str(BIN / "nmemd")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            while b"READY=1" not in notify.recv(4096):
                pass
        finally:
            notify.close()

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        self.proc = None
        return code

    def nmem(self, *args: str, timeout: float = 60, stdin: str = "") -> subprocess.CompletedProcess[str]:
        """`nmem ARGS` as this member; `stdin` is what it reads there (a DSN for `team join`)."""
        return subprocess.run(
            [str(BIN / "nmem"), *args], input=stdin, capture_output=True, text=True, timeout=timeout, env=self.env
        )

    def hook(self, payload: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
        """The real hook client, as installed hooks run it."""
        return subprocess.run(
            [sys.executable, "-I", "-S", str(SEND)],
            input=json.dumps(payload).encode(),
            env=self.env,
            capture_output=True,
            timeout=30,
        )

    def search(self, *words: str, project: Path | None = None) -> list[dict[str, Any]]:
        args = ["search", *words, "--json", "--limit", "200"]
        args += ["--project", str(project)] if project else ["--all"]
        done = self.nmem(*args)
        if done.returncode != 0:
            return []
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        shutil.rmtree(self.sock_dir, ignore_errors=True)


@contextmanager
def two_members(admin_dsn: str, root: Path, team: str = "acme") -> Iterator[tuple[Member, Member]]:
    """A team made on the server at `admin_dsn` and its members al and bo, each with a home under `root`;
    their daemons stopped and homes removed after."""
    from nmemd.team import admin

    admin.init(admin_dsn, team)
    a = Member("al", root / "al")
    b = Member("bo", root / "bo")
    a.dsn = admin.add_member(admin_dsn, team, "al").dsn
    b.dsn = admin.add_member(admin_dsn, team, "bo").dsn
    try:
        yield a, b
    finally:
        for m in (a, b):
            m.cleanup()


class HooksArriving:
    """`hook(n)` for n = 0, 1, ... on a thread, `gap_s` apart, while the `with` block runs: a busy session
    beside what the test does. `sent` counts them; what a hook raised is raised as the block ends."""

    def __init__(self, hook: Callable[[int], object], gap_s: float = 0.005, join_s: float = 60.0) -> None:
        self.hook, self.gap_s, self.join_s = hook, gap_s, join_s
        self.sent = 0
        self._failed: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.hook(self.sent)
                self.sent += 1
                self._stop.wait(self.gap_s)
        except BaseException as exc:  # noqa: BLE001 - raised on the test's thread
            self._failed.append(exc)

    def __enter__(self) -> HooksArriving:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.join_s)
        if exc[0] is None:
            assert not self._failed and not self._thread.is_alive(), self._failed


def bash_event(session: str, cwd: Path, command: str, output: str, n: int = 0) -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": str(cwd / ".claude" / f"{session}.jsonl"),
        "cwd": str(cwd),
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_use_id": f"toolu_{session}_{n}",
        "tool_input": {"command": command},
        "tool_response": {"stdout": output, "stderr": "", "interrupted": False},
    }


class Proxy:
    """A TCP proxy between daemons and the server that can stall (hold every byte) and drop (close
    every connection). Threads, one pair per connection; `close` stops it all."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flowing = threading.Event()
        self.flowing.set()
        self.lock = threading.Lock()
        self.conns: list[socket.socket] = []
        self.closed = False
        self.accepted = 0  # connections made through it
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.accepted += 1
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while not self.flowing.wait(0.5):
                    if self.closed:
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stall(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def drop(self) -> None:
        """Close every connection now (new ones are accepted)."""
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.closed = True
        self.flowing.set()
        self.listener.close()
        self.drop()


def via(dsn: str, proxy: Proxy) -> str:
    """`dsn` through the proxy."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    d = conninfo_to_dict(dsn)
    d["host"], d["port"] = "127.0.0.1", str(proxy.port)
    return make_conninfo("", **{k: str(v) for k, v in d.items() if v is not None})
