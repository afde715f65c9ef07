"""nmem removed in the "wrong" order never breaks Claude Code (issue #37, 2): `nmem install` run from an
installation of its own (a venv and a copy of the packages), then that installation deleted, as
`pipx uninstall` before `nmem uninstall` leaves it. The real Claude Code then runs a session through the
hooks nmem wrote: every one of them runs, finishes with status 0 and says nothing, and the session's
answer is the model's. Skipped, with the reason, without the binary."""

from __future__ import annotations

import json
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from claude_code import SKIP_REASON, World, claude_bin
from fakeapi import FakeAPI, text, tool
from support.env import REPO

pytestmark = [
    pytest.mark.claude_code,
    pytest.mark.skipif(claude_bin() is None, reason=SKIP_REASON),
    pytest.mark.timeout(900),
]
STATUS = re.compile(r"status (\d+)")
# What Claude Code logs of a hook that failed or spoke: a status other than 0, an error, its stderr. (Its MCP
# server, gone with the installation, is reported by Claude Code as a server that failed to connect.)
COMPLAINT = re.compile(r"(?i)\bhooks?\b.*(status [1-9]|error|fail|stderr)|send\.py.*no such file")


def _install_from_a_throwaway(world: World) -> Path:
    """`nmem install` run by an installation that can be deleted: its own venv (no pip) whose packages
    are a copy of this checkout's, dependencies from the test's venv. Returns the installation's root."""
    root = world.root / "install"
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    packages = root / "site"
    for name in ("nmemd", "nmem_client"):
        shutil.copytree(REPO / name, packages / name, ignore=shutil.ignore_patterns("__pycache__"))
    purelib = next((venv / "lib").glob("python3*/site-packages"))
    (purelib / "nmem_under_test.pth").write_text(f"{packages}\n" + "\n".join(site.getsitepackages()) + "\n")
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys; from nmemd.cli import main; sys.exit(main())"]
        + ["install", "--no-import"],
        env=world.env,
        cwd=world.project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return root


def _nmem_hook_lines(debug: str, client: str) -> list[str]:
    return [line for line in debug.splitlines() if client in line]


def test_claude_code_runs_clean_after_nmem_was_removed_before_its_hooks() -> None:
    binary = claude_bin()
    assert binary is not None
    with FakeAPI() as api:
        world = World(binary, api.url)
        try:
            root = _install_from_a_throwaway(world)
            client = str(root / "site" / "nmem_client" / "send.py")
            settings = json.loads((world.home / ".claude" / "settings.json").read_text())
            assert client in json.dumps(settings["hooks"]), "nmem install wrote no hook for the throwaway client"
            shutil.rmtree(root)  # `pipx uninstall`: the venv and the client are gone, the hooks stay

            api.scripts["removed"] = [
                [tool("Bash", command="echo still-working", description="Say it works")],
                [text("Everything still works.")],
            ]
            run = world.claude_run("E2E-removed run one command")

            result = [m for m in run.messages if m.get("type") == "result"]
            assert result and result[-1].get("result") == "Everything still works.", run.proc.stdout[-2000:]
            assert not result[-1].get("is_error"), result[-1]
            fired = run.hooks_fired()
            for event in ("SessionStart", "UserPromptSubmit", "PostToolUse", "Stop"):
                assert fired.get(event, 0) >= 1, f"{event} never ran nmem's hook: {fired}"
            statuses = [int(m) for line in _nmem_hook_lines(run.debug, client) for m in STATUS.findall(line)]
            assert statuses and set(statuses) == {0}, "\n".join(_nmem_hook_lines(run.debug, client))
            complaints = [line for line in run.debug.splitlines() if COMPLAINT.search(line)]
            assert not complaints, "\n".join(complaints)
            assert not world.db.exists(), "the removed installation stored something"
        finally:
            world.cleanup()
