"""Small helpers shared by the integration tests (fallback, kill recovery, bad input, instance).

No mocks: these talk to real daemons over real sockets and read real SQLite files.
Every wait is a bounded poll (`wait_until`), never a bare sleep.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from nmem_client import protocol
from nmemd.model import Extracted, Observation
from nmemd.store.batches import Incoming

T = TypeVar("T")
POLL_S = 0.02
NMEM = str(Path(sys.executable).parent / "nmem")
NMEM_TIMEOUT_S = 60.0


def nmem(
    *args: str,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    cwd: str | Path | None = None,
    timeout: float = NMEM_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """The installed `nmem` console script, run as a user would in this test's environment (what
    nmem_env set) plus `env` (NMEM_AUTOSTART=0 unless `env` says otherwise: the CLI does not read it,
    but a hook client or MCP bridge a command leads to would start no daemon)."""
    return subprocess.run(
        [NMEM, *args], capture_output=True, text=True, input=stdin, cwd=cwd, timeout=timeout,
        env={**os.environ, "NMEM_AUTOSTART": "0", **(env or {})},
    )  # fmt: skip


def nmem_bytes(
    *args: str | bytes,
    env: dict[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: str | Path | None = None,
    timeout: float = NMEM_TIMEOUT_S,
) -> subprocess.CompletedProcess[bytes]:
    """`nmem` with bytes in and out: arguments and output that need not be UTF-8."""
    return subprocess.run(
        [NMEM, *args], capture_output=True, input=stdin, cwd=cwd, timeout=timeout,
        env={**os.environ, "NMEM_AUTOSTART": "0", **(env or {})},
    )  # fmt: skip


def imported(*paths: str, timeout: float = 120.0) -> dict[str, Any]:
    """`nmem import-transcripts PATHS --json`: its report (the last line), once it exited 0 without a traceback."""
    done = nmem("import-transcripts", *paths, "--json", timeout=timeout)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


@contextlib.contextmanager
def umask_kept() -> Iterator[None]:
    """`inbox.store` sets and restores the process umask; from many threads at once the restores
    interleave, which is harmless for the one-shot client but must not leak into other tests."""
    umask = os.umask(0o022)
    os.umask(umask)
    try:
        yield
    finally:
        os.umask(umask)


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, message: str = "") -> T:
    """Poll `predicate` every ~20 ms until it returns something truthy; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {message or predicate!r}")
        time.sleep(POLL_S)  # the poll interval of a bounded wait, not a wait for an event


def new_id() -> str:
    return os.urandom(16).hex()


def prompt_event(marker: str, *, session_id: str | None = None, cwd: str = "/tmp/nmem-test-project") -> dict[str, Any]:
    """A real-shaped UserPromptSubmit payload whose session_id and prompt carry `marker`."""
    return {
        "session_id": session_id or marker,
        "transcript_path": f"/tmp/nmem-test-project/.claude/{marker}.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": f"please remember marker {marker}",
    }


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


def edit_incoming(n: int, words: int = 60) -> Incoming:
    """Event `n` for `store.commit_batch`: an edit of its own file, `words` words of a small
    vocabulary (FTS5 doclists of realistic size), 500 events a session."""
    text = " ".join(f"{WORDS[(n * 7 + k) % len(WORDS)]}{(n + k) % 97}" for k in range(words))
    obs = Observation(type="edit", title=f"Edit file{n}.py", content=text, file_path=f"/p/src/file{n}.py")
    ex = Extracted(hook_event="PostToolUse", session_id=f"s{n // 500}", cwd="/p", project="/p", observations=[obs])
    return Incoming(event_id=f"ev{n:08d}", received_at=1000.0 + n, extracted=ex)


# --- Claude Code hook payloads, in the shapes Claude Code sends -----------------------------------


def claude_event(hook: str, session: str, cwd: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": session, "transcript_path": f"{cwd}/.claude/{session}.jsonl", "cwd": cwd,
            "permission_mode": "default", "hook_event_name": hook, **fields}  # fmt: skip


def claude_tool(session: str, cwd: str, name: str, inp: dict[str, Any], resp: Any) -> dict[str, Any]:
    return claude_event("PostToolUse", session, cwd, tool_name=name, tool_input=inp, tool_response=resp,
                        tool_use_id=f"toolu_{os.urandom(8).hex()}")  # fmt: skip


def claude_edit(session: str, cwd: str, rel: str, old: str, new: str) -> dict[str, Any]:
    path = f"{cwd}/{rel}"
    return claude_tool(session, cwd, "Edit", {"file_path": path, "old_string": old, "new_string": new},
                       {"filePath": path, "oldString": old, "newString": new, "replaceAll": False})  # fmt: skip


def claude_bash(session: str, cwd: str, command: str, stdout: str, description: str = "") -> dict[str, Any]:
    return claude_tool(session, cwd, "Bash", {"command": command, "description": description},
                       {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False})  # fmt: skip


def claude_failure(session: str, cwd: str, command: str, error: str) -> dict[str, Any]:
    return claude_event("PostToolUseFailure", session, cwd, tool_name="Bash", tool_input={"command": command},
                        error=error, tool_use_id=f"toolu_{os.urandom(8).hex()}")  # fmt: skip


def big_payload(marker: str, rng: random.Random) -> bytes:
    words = " ".join(f"w{rng.randrange(10**9):09d}" for _ in range(400))  # ~4 KB of distinct FTS terms
    event = prompt_event(marker)
    event["prompt"] = f"please remember marker {marker} {words}"
    return json.dumps(event).encode()


def payload(marker: str, **kwargs: Any) -> bytes:
    return json.dumps(prompt_event(marker, **kwargs)).encode()


# --- raw wire ---------------------------------------------------------------------------------


def connect(sock_path: str, timeout: float = 5.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock_path)
    except BaseException:
        s.close()
        raise
    return s


def raw_hook_exchange(sock_path: str, event_id: str, body: bytes, timeout: float = 5.0) -> bytes:
    """Connect, send one hook frame, return everything the daemon sends until it closes."""
    with connect(sock_path, timeout=timeout) as s:
        try:
            s.sendall(protocol.encode_request(protocol.KIND_HOOK, event_id.encode(), body))
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
        return data


def read_reply(s: socket.socket) -> tuple[bytes, bytes]:
    """Read one reply: (b"OK", body) or (b"ERR", b"<code> <message>"); (b"", b"") if the peer closed."""
    buf = b""
    while b"\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            return b"", buf
        buf += chunk
    head, _, rest = buf.partition(b"\n")
    if head.startswith(b"ERR "):
        return b"ERR", head[4:]
    assert head.startswith(b"OK "), head
    size = int(head[3:])
    while len(rest) < size:
        chunk = s.recv(65536)
        if not chunk:
            raise AssertionError("daemon closed the connection inside an OK reply")
        rest += chunk
    return b"OK", rest[:size]


def send_frame(
    sock_path: str, kind: bytes, event_id: str | bytes, body: bytes, timeout: float = 10.0
) -> tuple[bytes, bytes]:
    """One frame on a fresh connection; return its reply."""
    eid = event_id.encode() if isinstance(event_id, str) else event_id
    with connect(sock_path, timeout) as s:
        s.sendall(protocol.encode_request(kind, eid, body))
        return read_reply(s)


def send_hook(sock_path: str, event_id: str, body: bytes, timeout: float = 10.0) -> tuple[bytes, bytes]:
    return send_frame(sock_path, protocol.KIND_HOOK, event_id, body, timeout)


def ping(sock_path: str, timeout: float = 2.0) -> dict[str, Any] | None:
    try:
        status, body = send_frame(sock_path, protocol.KIND_PING, protocol.NO_EVENT_ID, b"", timeout)
    except OSError:
        return None
    return json.loads(body) if status == b"OK" else None


def peer_closed(s: socket.socket) -> bool:
    """True once the daemon has closed its side (recv returns b"" or the connection was reset)."""
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


# --- database / files -------------------------------------------------------------------------


def scalar(db: Path, sql: str, params: tuple[object, ...] = ()) -> Any:
    """One value through a read-only connection; None when the database or table does not exist yet."""
    if not db.exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    try:
        row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return None
        raise
    finally:
        conn.close()


def count(db: Path, table: str, where: str = "1", params: tuple[object, ...] = ()) -> int:
    return int(scalar(db, f"SELECT count(*) FROM {table} WHERE {where}", params) or 0)


def log_text(home: Path) -> str:
    path = home / "logs" / "nmemd.log"
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


# --- processes --------------------------------------------------------------------------------


def lock_path(sock_path: str) -> str:
    return os.path.join(os.path.dirname(sock_path), "nmemd.lock")


def lock_pid(sock_path: str) -> int | None:
    """The pid of the daemon holding the instance lock of `sock_path`, None when nobody holds it."""
    from nmemd.daemon.instance import lock_holder

    return lock_holder(lock_path(sock_path))


def pid_running(pid: int) -> bool:
    """Alive and not a zombie (a detached daemon's zombie may linger if init does not reap)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:
        return True
    return state not in (b"Z", b"X")


def nmem_processes(home: Path | str) -> list[int]:
    """Pids of every live process (other than us) whose environment has NMEM_HOME=home (Linux /proc)."""
    needle = b"NMEM_HOME=" + os.fsencode(str(home))
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env and pid_running(int(name)):
            found.append(int(name))
    return found


def daemon_processes(home: Path | str) -> list[int]:
    """Our nmemd processes (console script or `python -m nmemd`) for this NMEM_HOME."""
    pids = []
    for pid in nmem_processes(home):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"/nmemd") or a == b"nmemd" for a in argv):
            pids.append(pid)
    return pids


def kill_all(home: Path | str, sig: int = signal.SIGKILL, timeout: float = 10.0) -> list[int]:
    """Kill every process left for this NMEM_HOME (daemons a client started); return their pids."""
    pids = nmem_processes(home)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    wait_until(lambda: not any(pid_running(p) for p in pids), timeout, "leftover nmem processes to exit")
    return pids
