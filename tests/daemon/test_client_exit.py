"""The hook client when Claude Code exits or starts without a daemon (issue #15, items 1 and 3).

`claude -p` sends SIGTERM to hooks still running when it exits: the installed hook command
ignores it until the client handles it, and a client waiting on the daemon then puts its event
in the inbox and exits 0. A SessionStart with no daemon starts one and answers with the context.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from support.daemon import Daemon, run_send
from support.helpers import count, daemon_processes, kill_all, new_id, payload, wait_until

from nmemd.setup import settings_file

EXIT_BOUND_S = 30.0  # far below the client's own timeout in these tests (NMEM_TIMEOUT_MS below)
LONG_TIMEOUT = {"NMEM_TIMEOUT_MS": "600000"}


@pytest.fixture
def no_stray_daemons(nmem_env: dict[str, str]) -> Iterator[None]:
    yield
    kill_all(nmem_env["NMEM_HOME"])
    assert not daemon_processes(nmem_env["NMEM_HOME"])


def _hook(data: bytes, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The client started as Claude Code starts it: the installed hook command, through sh."""
    proc = subprocess.Popen(
        settings_file.hook_command(),
        shell=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.close()
    return proc


PYTHON = os.path.realpath(sys.executable)


def _python_running(pid: int) -> bool:
    """The shell has exec'd the interpreter (same pid; the shell's own command line names send.py too)."""
    try:
        return os.readlink(f"/proc/{pid}/exe") == PYTHON
    except OSError:
        return False


def _has_socket(pid: int) -> bool:
    """The client opened its connection to the daemon: it is waiting for the acknowledgement."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:") for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, bytes]:
    assert proc.stdout is not None and proc.stderr is not None
    try:
        code = proc.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=EXIT_BOUND_S)
        raise
    finally:
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    return code, err


@pytest.mark.parametrize("round_", range(5))
def test_sigterm_as_the_client_starts_loses_nothing(daemon: Daemon, round_: int) -> None:
    """SIGTERM while Python starts (the window in which `claude -p` cancelled Stop): ignored."""
    daemon.start()
    marker = f"term-start-{new_id()[:12]}"
    proc = _hook(payload(marker), {})
    # Spin (bounded, no sleep) so that the signal lands while Python starts, the window that matters.
    deadline = time.monotonic() + 10
    while not _python_running(proc.pid):
        assert proc.poll() is None, "the client ended before the shell was seen to exec it"
        assert time.monotonic() < deadline, "the shell never exec'd the client"
    proc.send_signal(signal.SIGTERM)
    code, err = _finish(proc)
    assert (code, err) == (0, b"")
    wait_until(lambda: count(daemon.db, "events", "session_id = ?", (marker,)) == 1, 20, "the event stored")


def test_sigterm_while_waiting_on_the_daemon_spools_the_event(daemon: Daemon) -> None:
    daemon.start()
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)  # accepts (the kernel queues), never answers
    marker = f"term-wait-{new_id()[:12]}"
    try:
        proc = _hook(payload(marker), LONG_TIMEOUT)
        wait_until(lambda: _has_socket(proc.pid), 10, "the client to wait on the daemon")
        proc.send_signal(signal.SIGTERM)
        code, err = _finish(proc)  # it would otherwise wait NMEM_TIMEOUT_MS (10 minutes)
        assert (code, err) == (0, b"")
        assert count(daemon.db, "inbox") == 1
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    # The daemon had the frame too: the same event id, stored once whichever path wins.
    wait_until(lambda: count(daemon.db, "inbox") == 0, 20, "the inbox drained")
    assert count(daemon.db, "events", "session_id = ?", (marker,)) == 1


def _session_start(session_id: str, cwd: str) -> bytes:
    return json.dumps(
        {
            "session_id": session_id,
            "transcript_path": f"/tmp/{session_id}.jsonl",
            "cwd": cwd,
            "hook_event_name": "SessionStart",
            "source": "startup",
        }
    ).encode()


def test_session_start_with_no_daemon_answers_with_the_context(
    daemon: Daemon, short_dir: str, no_stray_daemons: None
) -> None:
    project = os.path.join(short_dir, "proj")
    os.makedirs(project)
    marker = f"ctx-{new_id()[:12]}"
    daemon.start()
    done = run_send(payload(marker, cwd=project))
    assert done.returncode == 0
    assert daemon.stop() == 0  # the daemon is gone, as after an on-first-use daemon exited idle

    started = run_send(_session_start(f"next-{marker}", project), timeout=60)
    assert started.returncode == 0 and started.stderr == b""
    reply = json.loads(started.stdout)
    context = reply["hookSpecificOutput"]["additionalContext"]
    assert "<nmem-context>" in context and marker in context
    wait_until(lambda: count(daemon.db, "events", "session_id = ?", (f"next-{marker}",)) == 1, 20, "stored once")


def test_session_start_with_no_daemon_and_no_autostart_waits_for_nothing(daemon: Daemon, short_dir: str) -> None:
    done = run_send(_session_start(f"noauto-{new_id()[:8]}", short_dir), env={"NMEM_AUTOSTART": "0"})
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert count(daemon.db, "inbox") == 1


@pytest.mark.parametrize(
    ("agent", "start"),
    [
        ("cursor", {"hook_event_name": "sessionStart", "conversation_id": "{sid}", "workspace_roots": ["{cwd}"]}),
        ("cline", {"hookName": "TaskStart", "taskId": "{sid}", "workspaceRoots": ["{cwd}"],
                   "taskStart": {"taskMetadata": {"taskId": "{sid}"}}}),
    ],
)  # fmt: skip
def test_another_agents_session_start_with_no_daemon_answers_too(
    daemon: Daemon, short_dir: str, no_stray_daemons: None, agent: str, start: dict[str, object]
) -> None:
    """Cursor names its start `sessionStart`, Cline `TaskStart` (under `hookName`): the client that
    starts the daemon waits for their context too."""
    project = os.path.join(short_dir, "proj")
    os.makedirs(project)
    marker = f"ctx-{new_id()[:12]}"
    daemon.start()
    assert run_send(payload(marker, cwd=project)).returncode == 0
    assert daemon.stop() == 0
    body = json.dumps(start).replace("{sid}", f"next-{marker}").replace("{cwd}", project)
    started = run_send(body.encode(), timeout=60, args=("--agent", agent))
    assert started.returncode == 0 and started.stderr == b""
    assert marker in started.stdout.decode(), started.stdout
