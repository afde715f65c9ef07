"""Removing nmem in the "wrong" order never breaks the agent (issue #37, 2): an installation's venv removed
(`pipx uninstall`) under the hooks `nmem install --agent all` wrote leaves hook commands that do nothing,
silently, with exit 0, and the daemon that installation ran exits. A throwaway installation (its own venv
and its own copy of the packages), the real hook commands run through `sh -c` as agents run them, the
real daemon a hook started."""

from __future__ import annotations

import json
import os
import shutil
import site
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import run_send
from support.env import REPO
from support.helpers import count, daemon_processes, kill_all, nmem, pid_running, prompt_event, wait_until

pytestmark = pytest.mark.daemon
TIMEOUT_S = 60.0


@pytest.fixture
def throwaway(tmp_path: Path, nmem_env: dict[str, str]) -> Iterator[tuple[Path, dict[str, str]]]:
    """A venv of its own whose nmem is a copy of this checkout (dependencies from the test's venv), and an
    environment with every agent's folder present in a fresh HOME."""
    root = tmp_path / "install"
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)
    packages = root / "site"
    for name in ("nmemd", "nmem_client"):
        shutil.copytree(REPO / name, packages / name, ignore=shutil.ignore_patterns("__pycache__"))
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    (purelib / "nmem_under_test.pth").write_text(f"{packages}\n" + "\n".join(site.getsitepackages()) + "\n")
    home = tmp_path / "user"
    for folder in (".claude", ".codex", ".gemini"):
        (home / folder).mkdir(parents=True)
    for key in ("COPILOT_HOME", "NMEM_CURSOR_DIR"):
        Path(nmem_env[key]).mkdir(parents=True)
    Path(nmem_env["NMEM_CLINE_HOOKS_DIR"]).parent.mkdir(parents=True)
    env = {**os.environ, **nmem_env, "HOME": str(home), "NMEM_TUNE_INSTALL_CHECK_S": "0.2"}
    env.pop("CLAUDE_CONFIG_DIR", None)
    yield venv, env
    kill_all(nmem_env["NMEM_HOME"])


def _commands(folders: list[Path]) -> list[list[str]]:
    """Every hook command nmem wrote under `folders`, as the argv an agent runs it with."""
    found: list[list[str]] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, str) and "nmem_client/send.py" in value and value.startswith("trap"):
            found.append(["sh", "-c", value])

    for folder in folders:
        for path in folder.rglob("*"):
            if not path.is_file():
                continue
            text = path.read_text(errors="replace")
            if path.suffix == ".json":
                walk(json.loads(text))
            elif text.startswith("#!/bin/sh") and "nmem_client/send.py" in text:
                found.append(["sh", str(path)])  # Cline runs its hook script itself
    return found


def _agent(command: str) -> str:
    line = next(line for line in command.splitlines() if "nmem_client/send.py" in line)
    return line.split(" --agent ")[1].split()[0] if " --agent " in line else "claude-code"


def test_hooks_and_daemon_after_the_venv_is_removed(throwaway: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    venv, env = throwaway
    installed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "from nmemd.cli import main; main()", "install", "--agent", "all",
         "--no-import"], env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    folders = [Path(env["HOME"]), *(Path(env[k]).parent for k in ("COPILOT_HOME", "NMEM_CURSOR_DIR"))]
    folders.append(Path(env["NMEM_CLINE_HOOKS_DIR"]))
    commands = _commands(folders)
    agents = {_agent(Path(c[1]).read_text() if len(c) == 2 else c[2]) for c in commands}
    assert agents >= {"claude-code", "codex", "gemini", "copilot", "cursor", "cline"}, installed.stdout

    event = json.dumps(prompt_event("orderlive")).encode()
    first = subprocess.run(commands[0], input=event, env=env, capture_output=True, timeout=TIMEOUT_S)
    assert first.returncode == 0 and first.stderr == b""
    db = Path(env["NMEM_HOME"]) / "nmem.db"
    wait_until(lambda: count(db, "observations", "session_id = 'orderlive'"), 30, "the hook's daemon to store it")
    daemons = wait_until(lambda: daemon_processes(env["NMEM_HOME"]), 10, "the daemon the hook started")

    shutil.rmtree(venv.parent)  # pipx uninstall: the venv and everything in it
    for argv in commands:
        done = subprocess.run(argv, input=event, env=env, capture_output=True, timeout=TIMEOUT_S)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), (argv, done)
    wait_until(lambda: not any(pid_running(p) for p in daemons), 30, "the daemon of the removed install to exit")


def test_uninstall_says_what_it_leaves_and_stops_on_request(nmem_env: dict[str, str], tmp_path: Path) -> None:
    """`nmem uninstall` names the daemon, team shares, the memory and the program it leaves; `--stop`
    stops the daemon, `--leave-teams` stops sharing."""
    claude = tmp_path / "claude"
    claude.mkdir()
    env = {"CLAUDE_CONFIG_DIR": str(claude)}
    assert nmem("install", "--no-import", env=env).returncode == 0
    assert nmem("daemon", "start").returncode == 0
    try:
        pid = json.loads(nmem("status", "--json").stdout)["daemon"]["pid"]
        assert run_send(json.dumps(prompt_event("leftmark")).encode()).returncode == 0
        db = Path(nmem_env["NMEM_HOME"]) / "nmem.db"
        with sqlite3.connect(db) as conn:  # a project shared with a team (the row nmem team join writes)
            conn.execute(
                "INSERT INTO team_projects VALUES ('/src/shared-app', 'p1', 'core', 'postgresql:///x', 'kim', 0, 0)"
            )
        conn.close()

        kept = nmem("uninstall", "--yes", env=env)
        assert kept.returncode == 0, kept.stderr
        for said in ("left in place", f"the daemon (pid {pid})", "nmem daemon stop", "/src/shared-app",
                     "nmem team leave", nmem_env["NMEM_HOME"], "pipx uninstall"):  # fmt: skip
            assert said in kept.stdout, (said, kept.stdout)
        assert pid_running(pid)  # asked nothing, stopped nothing

        assert nmem("install", "--no-import", env=env).returncode == 0
        stopped = nmem("uninstall", "--yes", "--stop", "--leave-teams", env=env)
        assert stopped.returncode == 0 and f"nmemd (pid {pid}) stopped" in stopped.stdout, stopped
        assert "/src/shared-app is no longer shared" in stopped.stdout, stopped.stdout
        assert count(db, "team_projects") == 0
        assert not pid_running(pid)
    finally:
        nmem("daemon", "stop")
