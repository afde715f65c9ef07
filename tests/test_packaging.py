"""nmem installed the way Python command-line tools are: `pipx install` and `uv tool install` from the checkout.

Each installs into directories of the test's own, then `nmem --version`, `nmem install` into a
fresh HOME, and the SessionStart hook it wrote, run as Claude Code runs it (`sh -c`), with a daemon of that
install. These download pipx, uv and the build backend from the package index, so they run where
`NMEM_TEST_PACKAGING=1` says the index is reachable (`.ci/run` sets it) and are skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 600.0
STEP_TIMEOUT_S = 60.0

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(
        os.environ.get("NMEM_TEST_PACKAGING") != "1",
        reason="installs pipx and uv from the package index: set NMEM_TEST_PACKAGING=1 (.ci/run does)",
    ),
]


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding pipx and uv."""
    venv = tmp_path_factory.mktemp("tools") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=STEP_TIMEOUT_S)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "pipx", "uv"], capture_output=True,
                          text=True, timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return venv / "bin"


@pytest.fixture
def user(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A fresh HOME with nmem's paths inside it (a short socket directory under /tmp)."""
    short = tempfile.mkdtemp(prefix="nmp", dir="/tmp")
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        "HOME": str(home),
        "NMEM_HOME": str(home / "nmem"),
        "NMEM_SOCKET": os.path.join(short, "nmemd.sock"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
    }
    env.pop("VIRTUAL_ENV", None)
    yield env
    shutil.rmtree(short, ignore_errors=True)


def _check_installed(nmem: Path, env: dict[str, str]) -> None:
    try:
        _use(nmem, env)
    finally:  # the hook started a daemon of that install
        subprocess.run([str(nmem), "daemon", "stop"], env=env, capture_output=True, timeout=STEP_TIMEOUT_S)


def _use(nmem: Path, env: dict[str, str]) -> None:
    version = subprocess.run([str(nmem), "--version"], env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert version.returncode == 0 and version.stdout.startswith("nmem "), version.stderr
    done = subprocess.run([str(nmem), "install", "--no-import"], env=env, capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings = json.loads((Path(env["HOME"]) / ".claude" / "settings.json").read_text())
    [group] = settings["hooks"]["SessionStart"]
    command = group["hooks"][0]["command"]
    assert str(REPO) not in command  # the installed copy, not this checkout
    payload = {"session_id": "pkg", "hook_event_name": "SessionStart", "source": "startup", "cwd": env["HOME"]}
    hook = subprocess.run(["/bin/sh", "-c", command], input=json.dumps(payload), env=env, capture_output=True,
                          text=True, timeout=STEP_TIMEOUT_S)  # fmt: skip
    assert hook.returncode == 0 and hook.stderr == ""
    found = subprocess.run([str(nmem), "sessions", "--all", "--json"], env=env, capture_output=True, text=True,
                           timeout=STEP_TIMEOUT_S)  # fmt: skip
    assert found.returncode == 0 and '"pkg"' in found.stdout, (found.stdout, found.stderr)


def test_pipx_install(tools: Path, user: dict[str, str], tmp_path: Path) -> None:
    env = {**user, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    done = subprocess.run([str(tools / "pipx"), "install", str(REPO)], env=env, capture_output=True, text=True,
                          timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _check_installed(tmp_path / "bin" / "nmem", env)


def test_uv_tool_install(tools: Path, user: dict[str, str], tmp_path: Path) -> None:
    env = {**user, "UV_TOOL_DIR": str(tmp_path / "uv-tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
           "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_PYTHON_DOWNLOADS": "never"}  # fmt: skip
    done = subprocess.run([str(tools / "uv"), "tool", "install", "--python", sys.executable, str(REPO)], env=env,
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    _check_installed(tmp_path / "bin" / "nmem", env)
