"""The `nmem` command line: help everywhere, status, and clear one-line errors with the right exit codes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.env import BIN
from support.helpers import nmem, payload

NMEM = str(BIN / "nmem")
TIMEOUT_S = 20.0


def one_error_line(done: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_console_script_help() -> None:
    done = nmem("--help")
    assert done.returncode == 0, done.stderr
    for name in ("status", "search", "show", "timeline", "sessions", "daemon"):
        assert name in done.stdout


@pytest.mark.parametrize("name", ["nmem-send", "nmem-mcp"])
def test_the_stdlib_entry_points_print_usage_without_reading_stdin(name: str) -> None:
    """`--help` prints a short usage and exits 0 (they printed nothing; hooks pass no arguments)."""
    with subprocess.Popen([str(BIN / name), "--help"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:  # fmt: skip
        out, err = proc.communicate(timeout=TIMEOUT_S)
    assert proc.returncode == 0 and out.startswith(f"usage: {name}") and err == ""


def test_status_json_without_and_with_a_daemon(daemon: Daemon) -> None:
    before = nmem("status", "--json")
    assert before.returncode == 0, before.stderr
    facts = json.loads(before.stdout)
    assert facts["daemon"]["running"] is False and facts["database"]["exists"] is False

    daemon.start()
    assert run_send(payload("cli-status")).returncode == 0
    during = json.loads(nmem("status", "--json").stdout)
    assert during["daemon"]["running"] is True and during["daemon"]["pid"] == daemon.proc.pid  # type: ignore[union-attr]
    assert during["database"]["observations"] == 1
    assert daemon.stop() == 0

    after = json.loads(nmem("status", "--json").stdout)
    assert after["daemon"]["running"] is False and after["database"]["observations"] == 1


def test_status_waits_out_a_full_connection_queue_instead_of_calling_the_daemon_absent(daemon: Daemon) -> None:
    """A frozen daemon's listen backlog filled by idle peers: connect() fails with EAGAIN. `nmem status`
    retries that (the daemon is up) and reports it running once it accepts again."""
    daemon.start()
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    peers: list[socket.socket] = []
    try:
        while True:  # until the kernel refuses: the backlog is full
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(daemon.socket)
            except BlockingIOError:
                s.close()
                break
            peers.append(s)
            assert len(peers) < 10_000, "the listen backlog never filled"
        status = subprocess.Popen(
            [NMEM, "status", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "NMEM_AUTOSTART": "0"},
        )  # fmt: skip
        with pytest.raises(subprocess.TimeoutExpired):
            status.wait(timeout=0.5)  # retrying, not answering "not running"
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
        for s in peers:
            s.close()
    out, err = status.communicate(timeout=TIMEOUT_S)
    assert status.returncode == 0, err
    assert json.loads(out)["daemon"]["running"] is True
    assert daemon.stop() == 0


def test_read_commands_without_a_database_say_so(nmem_env: dict[str, str]) -> None:
    db = Path(nmem_env["NMEM_HOME"]) / "nmem.db"
    for args in (["search", "anything"], ["search", "--all", "x"], ["show", "1"], ["timeline", "1"], ["sessions"]):
        line = one_error_line(nmem(*args))
        assert "no database yet" in line and str(db) in line
    assert not db.exists()  # reading never creates it


def test_unknown_ids_are_one_clear_line(daemon: Daemon) -> None:
    daemon.start()
    assert run_send(payload("cli-show")).returncode == 0

    def check() -> None:
        assert one_error_line(nmem("show", "424242")) == "error: no observation with id 424242"
        both = nmem("show", "1", "424242", "--json")
        assert one_error_line(both) == "error: no observation with id 424242"
        assert json.loads(both.stdout)["title"] == "please remember marker cli-show"  # the known one still prints
        assert one_error_line(nmem("timeline", "424242")) == "error: no observation with id 424242"
        assert one_error_line(nmem("search", "--all", "**")).endswith("nothing to search for (no letters or digits)")

    check()  # the daemon answers (or refuses, and the CLI reads the reason locally)
    assert daemon.stop() == 0
    check()  # read-only, no daemon


@pytest.mark.parametrize(
    "args",
    [
        ["search"],
        ["search", "--all", "--project", "/x", "q"],
        ["search", "--type", "bogus", "q"],
        ["search", "--limit", "0", "q"],
        ["search", "--since", "last tuesday", "q"],
        ["show"],
        ["show", "0"],
        ["timeline", "1", "--before", "-1"],
        ["sessions", "--limit", "-3"],
        ["no-such-command"],
    ],
)
def test_usage_errors_exit_2_without_a_traceback(args: list[str]) -> None:
    done = nmem(*args)
    assert done.returncode == 2, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Usage" in done.stderr


def test_context_command_prints_what_session_start_injects(daemon: Daemon) -> None:
    """`nmem context` shows the context the SessionStart hook receives, with or without a daemon."""
    project = "/tmp/nmem-ctx-project"
    daemon.start()
    for n in range(3):
        run_send(
            json.dumps(
                {
                    "session_id": "c1",
                    "hook_event_name": "PostToolUse",
                    "tool_name": "Edit",
                    "cwd": project,
                    "tool_input": {"file_path": f"{project}/mod{n}.py", "old_string": "a", "new_string": "b"},
                    "tool_response": {"filePath": f"{project}/mod{n}.py"},
                }
            ).encode()
        )
    hook = run_send(
        json.dumps(
            {"session_id": "c2", "hook_event_name": "SessionStart", "source": "startup", "cwd": project}
        ).encode()
    )
    injected = json.loads(hook.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "mod0.py" in injected
    for running in (True, False):
        out = subprocess.run(
            [str(BIN / "nmem"), "context", "--project", project], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("<nmem-context>") and "mod0.py" in out.stdout
        if running:
            daemon.stop()


def test_project_by_path_name_or_unique_suffix_everywhere(daemon: Daemon, tmp_path: Path) -> None:
    """`--project` takes a path, a folder name or a unique path suffix, with or without a daemon; a name
    that two projects share is refused with both paths, one line."""
    roots = [tmp_path / "org" / "immunize", tmp_path / "org" / "ledger", tmp_path / "fork" / "ledger"]
    daemon.start()
    for i, root in enumerate(roots):
        (root / ".git").mkdir(parents=True)
        prompt = {"session_id": f"p{i}", "hook_event_name": "UserPromptSubmit", "cwd": str(root),
                  "prompt": f"wombat check number {i}"}  # fmt: skip
        assert run_send(json.dumps(prompt).encode()).returncode == 0
    elsewhere = str(tmp_path)  # no project is named by the current directory's files
    for running in (True, False):
        for given, expected in [("immunize", roots[0]), ("org/ledger", roots[1]), (str(roots[2]), roots[2])]:
            done = subprocess.run([NMEM, "search", "wombat", "--project", given, "--json"], capture_output=True,
                                  text=True, timeout=TIMEOUT_S, cwd=elsewhere)  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert {json.loads(line)["project"] for line in done.stdout.splitlines()} == {str(expected)}, given
        sessions = subprocess.run([NMEM, "sessions", "--project", "immunize", "--json"], capture_output=True,
                                  text=True, timeout=TIMEOUT_S, cwd=elsewhere)  # fmt: skip
        assert [json.loads(line)["session_id"] for line in sessions.stdout.splitlines()] == ["p0"], sessions.stderr
        line = one_error_line(nmem("search", "wombat", "--project", "ledger"))
        assert str(roots[1]) in line and str(roots[2]) in line
        assert "no project named 'nowhere'" in one_error_line(nmem("search", "wombat", "--project", "nowhere"))
        empty = subprocess.run([NMEM, "search", "zeppelin", "--project", "immunize"], capture_output=True,
                               text=True, timeout=TIMEOUT_S, cwd=elsewhere)  # fmt: skip
        assert empty.returncode == 0 and empty.stdout == "", empty.stderr
        assert "nothing found in " in empty.stderr and "--all for every project, --type edit|" in empty.stderr
        if running:
            assert daemon.stop() == 0


def test_daemon_stop_returns_once_the_process_is_gone(nmem_env: dict[str, str]) -> None:
    started = subprocess.run([NMEM, "daemon", "start"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert started.returncode == 0, started.stderr
    pid = json.loads(nmem("status", "--json").stdout)["daemon"]["pid"]
    stopped = subprocess.run([NMEM, "daemon", "stop"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
    with pytest.raises(ProcessLookupError):  # not a moment later: already
        os.kill(pid, 0)


@pytest.mark.slow
def test_a_search_right_after_a_hook_started_the_daemon_finds_its_event(nmem_env: dict[str, str]) -> None:
    """The hook's event waits in the inbox while the daemon it started comes up: the search waits for it."""
    env = {**os.environ, "NMEM_AUTOSTART": "1"}
    try:
        for i in range(3):
            word = f"quokka{i}x"
            body = {"session_id": f"s{i}", "hook_event_name": "UserPromptSubmit", "cwd": "/tmp", "prompt": word}
            assert run_send(json.dumps(body).encode(), env=env).returncode == 0
            found = subprocess.run([NMEM, "search", word, "--all", "--json"], capture_output=True, text=True,
                                   timeout=TIMEOUT_S, env=env)  # fmt: skip
            assert found.returncode == 0 and word in found.stdout, (i, found.stdout, found.stderr)
            assert subprocess.run([NMEM, "daemon", "stop"], capture_output=True, timeout=TIMEOUT_S).returncode == 0
    finally:
        subprocess.run([NMEM, "daemon", "stop"], capture_output=True, timeout=TIMEOUT_S)


def test_version() -> None:
    from importlib.metadata import version

    for flag in ("--version", "-V"):
        done = nmem(flag)
        assert done.returncode == 0 and done.stdout == f"nmem {version('nmem-agent-memory')}\n" and done.stderr == ""


def test_outside_a_terminal_lines_are_whole_and_ids_unambiguous(daemon: Daemon) -> None:
    """In a pipe: plain lines, never wrapped or cut (a long path stays whole), full session ids, and a
    command's details do not repeat it; on a terminal, ids are cut no shorter than tells them apart."""
    from nmemd.cli.common import unique_prefixes

    long_dir = "/home/someone/projects/some-really-long-project-name/src/components/deeply/nested"
    daemon.start()
    for sid in ("pipx-sess", "pipx-sess2", "pipx-sess3"):
        body = {"session_id": sid, "hook_event_name": "UserPromptSubmit", "cwd": "/tmp", "prompt": f"wombat {sid}"}
        assert run_send(json.dumps(body).encode()).returncode == 0
    bash = {"session_id": "pipx-sess", "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": "t1",
            "tool_input": {"command": f"ls -la {long_dir}/"}, "tool_response": {"stdout": "x", "stderr": ""},
            "cwd": "/tmp"}  # fmt: skip
    assert run_send(json.dumps(bash).encode()).returncode == 0
    env = {**os.environ, "COLUMNS": "80"}
    sessions = subprocess.run([NMEM, "sessions", "--all"], capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert {line.split()[0] for line in sessions.stdout.splitlines()[1:]} == {"pipx-sess", "pipx-sess2", "pipx-sess3"}
    hits = json.loads(nmem("search", "ls", "--all", "--json").stdout.splitlines()[0])
    show = subprocess.run([NMEM, "show", str(hits["id"])], capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert f"$ ls -la {long_dir}/\n" in show.stdout  # one line, whole
    assert show.stdout.count(long_dir) == 1  # not again as a "command" fact
    config = subprocess.run([NMEM, "config", "show"], capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert any(line.split()[:2] == ["db", str(daemon.db)] for line in config.stdout.splitlines()), config.stdout
    assert unique_prefixes(["pipx-sess", "pipx-sess2", "pipx-sess3", "0123456789abc"]) == {
        "pipx-sess": "pipx-sess", "pipx-sess2": "pipx-sess2", "pipx-sess3": "pipx-sess3", "0123456789abc": "01234567",
    }  # fmt: skip
