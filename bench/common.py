"""Shared helpers for the nmem benchmarks: daemons in temp homes, timed spawns, stats, payloads.

Every wait here is bounded: readiness, child exits and socket replies all carry
timeouts, and `Daemon` removes its temp directories even when a benchmark fails.
"""

from __future__ import annotations

import json
import math
import os
import platform
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
SEND_PY = str(REPO / "nmem_client" / "send.py")
NMEMD = str(VENV_BIN / "nmemd")
NMEM_SEND = str(VENV_BIN / "nmem-send")
FIXTURE_NAME = "hook-stdin-claude-code-2.1.3x-feb2026.jsonl"
FIXTURE = Path(os.environ.get("NMEM_BENCH_FIXTURE", str(REPO.parent / "shared" / "fixtures" / FIXTURE_NAME)))
if not FIXTURE.exists():  # a worktree elsewhere: the shared folder of the workplace
    FIXTURE = Path("/work/shared/fixtures") / FIXTURE_NAME

READY_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 15.0
CHILD_TIMEOUT_S = 10.0


# --- statistics --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    if not values:
        return math.nan
    data = sorted(values)
    if len(data) == 1:
        return float(data[0])
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def p90(values: Sequence[float]) -> float:
    return percentile(values, 90)


def p99(values: Sequence[float]) -> float:
    return percentile(values, 99)


def ms(ns: float) -> float:
    return ns / 1e6


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# --- the machine -------------------------------------------------------------------------------


def machine_info() -> dict[str, str]:
    """nproc, CPU model, kernel, the venv's Python and the SQLite it links."""
    out = subprocess.run(
        [PYTHON, "-c", "import sys, sqlite3; print(sys.version.split()[0]); print(sqlite3.sqlite_version)"],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=True,
    ).stdout.split()
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu or platform.processor(),
        "kernel": platform.release(),
        "python": out[0],
        "sqlite": out[1],
    }


def cpu_busy(interval: float = 0.5) -> float:
    """Fraction of all CPUs busy over `interval` (before a benchmark starts: what others use)."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(interval)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def wait_quiet(timeout_s: float, max_busy: float = 0.25) -> None:
    """Wait (bounded) until the CPUs are mostly idle: other work on a 2-core box skews every figure."""
    if timeout_s <= 0:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        busy = cpu_busy(1.0)
        if busy <= max_busy:
            return
    print(f"warning: CPUs still busy after waiting {timeout_s:.0f} s; figures will be noisy")


def add_quiet_arg(parser: Any) -> None:
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="first wait up to this long for the CPUs to be idle (<= 25%% busy)",
    )


def add_tree_store_arg(parser: Any) -> None:
    """`--tree-store`: the store a baseline `--tree` searches, when a migration changed how the index is kept."""
    parser.add_argument(
        "--tree-store",
        type=Path,
        help="the store --tree searches (default --store): one it built, when a migration changed how the"
        " store is indexed (the same rows)",
    )


def trees_and_stores(
    root: Path, store: Path, tree: Path | None, tree_store: Path | None
) -> list[tuple[str, Path, Path]]:
    """(label, checkout, store) of this checkout, then of `--tree` on its `--tree-store` (else `store`)."""
    out = [("this tree", root, store)]
    if tree:
        out.append(("--tree " + str(tree), tree.resolve(), tree_store or store))
    return out


_WORK = (
    "import sqlite3, time\n"
    "c = sqlite3.connect(':memory:')\n"
    "q = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<400000) SELECT count(*) FROM c'\n"
    "t = time.perf_counter(); c.execute(q).fetchone(); print(time.perf_counter() - t)\n"
)


def parallel_capacity() -> float:
    """How many cores' worth two processes get right now (2.0 on an idle 2-core machine).

    The same SQLite-heavy work once alone, then twice at once. On a shared virtual machine the
    second core may be busy elsewhere: then two threads of one daemon cannot add up either,
    and a throughput figure means less. Printed with every benchmark's machine line.
    """

    def run(n: int) -> list[float]:
        procs = [subprocess.Popen([sys.executable, "-c", _WORK], stdout=subprocess.PIPE, text=True)
                 for _ in range(n)]  # fmt: skip
        return [float(p.communicate(timeout=CHILD_TIMEOUT_S)[0]) for p in procs]

    alone = min(run(1)[0] for _ in range(2))
    together = max(run(2))
    return 2 * alone / together


def print_machine() -> None:
    """One line: the machine, and how busy it was just before (other work skews every figure)."""
    info = machine_info()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        "machine: "
        + ", ".join(f"{k}={v}" for k, v in info.items())
        + f" | load average {load}, CPU busy before start {cpu_busy():.0%},"
        f" two-process capacity {parallel_capacity():.2f} cores"
    )


# --- processes ---------------------------------------------------------------------------------


def rss_kb(pid: int) -> int:
    """VmRSS of a live process in kB (from /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def child_pids(pid: int) -> list[int]:
    """The live children of a process (nmemd's extraction worker), from /proc/<pid>/task/*/children."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:  # the thread ended meanwhile
            continue
    return out


def _wait_child(pid: int, timeout: float) -> int:
    """waitpid with a bound: poll a pidfd first, SIGKILL on timeout."""
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise TimeoutError(f"child {pid} did not exit within {timeout} s")
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(pidfd)
    return os.waitstatus_to_exitcode(status)


def timed_spawn(argv: Sequence[str], stdin: bytes, env: dict[str, str], timeout: float = CHILD_TIMEOUT_S) -> int:
    """Run argv once with `stdin` on a pipe; return wall time in ns (spawn to reap).

    `os.posix_spawn` + a pidfd wait keeps the harness's own cost small and, above
    all, identical for the baseline and the subject. The payload is written into
    the pipe before the spawn (it fits the pipe buffer), like a hook runner would.
    """
    if len(stdin) > 60_000:
        raise ValueError("payload larger than a pipe buffer")
    r, w = os.pipe()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        if stdin:
            os.write(w, stdin)
        os.close(w)
        w = -1
        actions = [(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
        start = time.perf_counter_ns()
        pid = os.posix_spawn(argv[0], list(argv), env, file_actions=actions)
        code = _wait_child(pid, timeout)
        elapsed = time.perf_counter_ns() - start
    finally:
        os.close(r)
        os.close(devnull)
        if w >= 0:
            os.close(w)
    if code != 0:
        raise RuntimeError(f"{argv} exited with {code}")
    return elapsed


# --- payloads ----------------------------------------------------------------------------------


def load_fixture(hook_event: str = "PostToolUse") -> list[dict[str, Any]]:
    """The real hook payloads of one kind from the shared fixture."""
    events = []
    with FIXTURE.open() as fh:
        for line in fh:
            if line.strip():
                event = json.loads(line)
                if event.get("hook_event_name") == hook_event:
                    events.append(event)
    if not events:
        raise RuntimeError(f"no {hook_event} events in {FIXTURE}")
    return events


def template(tool_name: str) -> dict[str, Any]:
    for event in load_fixture():
        if event.get("tool_name") == tool_name:
            return event
    raise KeyError(tool_name)


def vary(event: dict[str, Any], tag: str, n: int, sessions: int = 0) -> bytes:
    """A copy of `event` made unique by `n`: session, tool_use_id, command and paths differ.

    sessions > 0 spreads events over that many session ids (else one session per n).
    Unique commands and paths keep the daemon's dedup from collapsing anything.
    """
    out = dict(event)
    out["session_id"] = f"bench-{tag}-{n % sessions if sessions else n}"
    out["tool_use_id"] = f"toolu_bench{tag}{n:08d}"
    tool_input = dict(out.get("tool_input") or {})
    if "command" in tool_input:
        tool_input["command"] = f"{tool_input['command']} # {tag} {n}"
    for key in ("file_path", "path"):
        if isinstance(tool_input.get(key), str):
            tool_input[key] = f"{tool_input[key]}.{tag}{n}"
    for key in ("pattern", "description"):
        if isinstance(tool_input.get(key), str):
            tool_input[key] = f"{tool_input[key]} {tag}{n}"
    out["tool_input"] = tool_input
    return json.dumps(out).encode()


def repeat(event: dict[str, Any], tag: str, session: int, n: int) -> bytes:
    """The same tool call repeated within one session (dedup collapses them into one observation
    with a count); each repeat is a new call, with its own tool_use_id, as when an agent re-reads
    a file. (Calls with one tool_use_id are one call: stored once by their natural key.)"""
    out = dict(event)
    out["session_id"] = f"bench-{tag}-{session}"
    out["tool_use_id"] = f"toolu_bench{tag}r{n:08d}"
    return json.dumps(out).encode()


# --- wire --------------------------------------------------------------------------------------


def new_event_id() -> bytes:
    """The hook client's own ids (time-ordered, see nmem_client.protocol)."""
    from nmem_client.protocol import new_event_id as client_id

    return client_id()


def frame(body: bytes, event_id: bytes | None = None, kind: bytes = b"hook") -> bytes:
    return b"NMEM1 %s %s %d\n" % (kind, event_id or new_event_id(), len(body)) + body


def read_frame(sock: socket.socket) -> tuple[bytes, bytes]:
    """Read one reply: its header line and, for OK, its body. The socket's timeout bounds it."""
    buf = b""
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("daemon closed the connection")
        buf += chunk
    head, _, rest = buf.partition(b"\n")
    if head.startswith(b"OK "):
        size = int(head[3:])
        while len(rest) < size:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            rest += chunk
    return head, rest


def read_reply(sock: socket.socket) -> bytes:
    """Read one reply; return its header line."""
    return read_frame(sock)[0]


def ping_facts(sock_path: str, timeout: float = 5.0) -> dict[str, Any]:
    """The daemon's facts (committed, batches, ...), from one `ping`."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(frame(b"", b"-", b"ping"))
        facts: dict[str, Any] = json.loads(read_frame(s)[1])
        return facts


def ping(sock_path: str, timeout: float = 5.0) -> bytes:
    """One `ping` frame; the reply header (b"OK <n>")."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(frame(b"", b"-", b"ping"))
        return read_reply(s)


def send_one(sock_path: str, body: bytes, timeout: float = 5.0) -> bytes:
    """Connect, send one hook frame, return the reply header (b"OK 0" on success)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(frame(body))
        return read_reply(s)


# --- SQLite ------------------------------------------------------------------------------------


def db_counts(db: str) -> dict[str, int]:
    """events, distinct sessions among them, inbox rows (read-only)."""
    if not os.path.exists(db):
        return {"events": 0, "sessions": 0, "inbox": 0}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        events = conn.execute("SELECT count(*) FROM events").fetchone()[0] if "events" in tables else 0
        sessions = (
            conn.execute("SELECT count(DISTINCT session_id) FROM events").fetchone()[0] if "events" in tables else 0
        )
        inbox = conn.execute("SELECT count(*) FROM inbox").fetchone()[0] if "inbox" in tables else 0
    finally:
        conn.close()
    return {"events": events, "sessions": sessions, "inbox": inbox}


# --- daemons -----------------------------------------------------------------------------------


class Home:
    """A temp NMEM_HOME plus a short directory for the sockets; removed by `cleanup`."""

    def __init__(self) -> None:
        self.home = tempfile.mkdtemp(prefix="nmem-bench-home-")
        self.run_dir = tempfile.mkdtemp(prefix="nmb", dir="/tmp")  # AF_UNIX paths are short
        self.socket = os.path.join(self.run_dir, "d.sock")
        self.notify = os.path.join(self.run_dir, "n.sock")
        self.db = os.path.join(self.home, "nmem.db")
        self.log = os.path.join(self.home, "nmemd.stderr")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NMEM_") and k != "NOTIFY_SOCKET"}
        env.update(NMEM_HOME=self.home, NMEM_SOCKET=self.socket, NMEM_AUTOSTART="0")
        env.update(extra)
        return env

    def cleanup(self) -> None:
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self) -> Home:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class Daemon:
    """An `nmemd` in a `Home`, started with readiness read from NOTIFY_SOCKET.

    `start()` returns the ns from spawn to READY=1. `stop()` sends SIGTERM and
    waits (bounded), SIGKILL as a last resort.
    """

    def __init__(self, home: Home, env: dict[str, str] | None = None, args: Iterable[str] = ()):
        self.home = home
        self.extra_env = env or {}
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self._notify: socket.socket | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = READY_TIMEOUT_S) -> int:
        if os.path.exists(self.home.notify):
            os.unlink(self.home.notify)
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind(self.home.notify)
        env = self.home.env(NOTIFY_SOCKET=self.home.notify, **self.extra_env)
        stderr = open(self.home.log, "ab")  # noqa: SIM115 - handed to the child, closed below
        try:
            start = time.perf_counter_ns()
            self.proc = subprocess.Popen(
                [NMEMD, *self.args], env=env, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr
            )
        finally:
            stderr.close()
        ready_ns = self.wait_ready(start, timeout)
        return ready_ns - start

    def wait_ready(self, start_ns: int, timeout: float) -> int:
        """Block until READY=1 arrives; return its perf_counter_ns. Raise if the daemon dies or times out."""
        assert self._notify is not None and self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise TimeoutError(f"nmemd not ready within {timeout} s; log: {self.tail_log()}")
            ready, _, _ = select.select([self._notify], [], [], min(left, 0.05))
            if ready:
                message = self._notify.recv(4096)
                if b"READY=1" in message.split(b"\n"):
                    return time.perf_counter_ns()
                continue
            if self.proc.poll() is not None:
                raise RuntimeError(f"nmemd exited with {self.proc.returncode}; log: {self.tail_log()}")

    def tail_log(self, lines: int = 20) -> str:
        texts = []
        for path in (self.home.log, os.path.join(self.home.home, "logs", "nmemd.log")):
            try:
                texts.append("\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:]))
            except OSError:
                pass
        return "\n".join(texts)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    code = self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    code = self.proc.wait(timeout)
            else:
                code = self.proc.returncode
            if code != 0:
                print(f"  warning: nmemd pid {self.proc.pid} exited with {code}")
        if self._notify is not None:
            self._notify.close()
            self._notify = None
        return code

    def __enter__(self) -> Daemon:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
