"""nmem as a user installs it: the wheel and sdist a release builds, under nmem's own name on the package index.

`python -m build` makes both; the wheel is installed into a fresh venv (its dependencies are this
environment's, so no index is needed) and used as a new user would: `nmem --version`, `nmem install`
into a fresh HOME, and a scripted session through the hooks it wrote, run as Claude Code runs them
(`sh -c`), then found again with `nmem search`. `pipx install` and `uv tool install` of that wheel
download pipx, uv and the dependencies from the package index, so they run where
`NMEM_TEST_PACKAGING=1` says the index is reachable (`.ci/run` sets it) and are skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nmemd import DISTRIBUTION

REPO = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT_S = 600.0
STEP_TIMEOUT_S = 60.0
FOUND_WITHIN_S = 30.0  # an event the hook put in the inbox (a slow ack) is stored at the next drain
COMMANDS = ("nmem", "nmem-send", "nmem-mcp", "nmemd")
# Built from a copy without these: other workers write bytecode into the repo while setuptools lists it,
# and the build's own build/ and *.egg-info stay out of the checkout.
NOT_SOURCE = (".git", ".venv", ".ci", "__pycache__", "*.pyc", "build", "dist", "*.egg-info", ".*_cache", "node_modules")
Done = subprocess.CompletedProcess[str]

pytestmark = [
    pytest.mark.slow,  # a wheel built and installed: about 25 s of the README command
    pytest.mark.timeout(300),  # a build, a venv, an install: seconds, more on a busy machine
    pytest.mark.xdist_group("packaging"),  # one worker: the module's build is shared by its tests
]
INDEX = pytest.mark.skipif(
    os.environ.get("NMEM_TEST_PACKAGING") != "1",
    reason="installs pipx and uv from the package index: set NMEM_TEST_PACKAGING=1 (.ci/run does)",
)
TEST_RUN = (
    "============ test session starts ============\n"
    + "".join(f"tests/test_api.py::test_case_{i} PASSED\n" for i in range(200))
    + "======= 200 passed, 3 skipped in 4.02s ======="
)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel built from it, as `python -m build` makes them for a release."""
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "nmem"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def _wheel(dist: Path) -> Path:
    [wheel] = dist.glob("*.whl")
    return wheel


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
    (home / ".claude").mkdir(parents=True)  # a user of Claude Code (nmem install skips an agent not installed)
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


def _run(args: list[str], env: dict[str, str], timeout: float = STEP_TIMEOUT_S, **kw: Any) -> Done:
    """A command of the user's, from their HOME (never this checkout: `python -m` would import it)."""
    return subprocess.run(args, env=env, cwd=env["HOME"], capture_output=True, text=True, timeout=timeout, **kw)


def _check_installed(nmem: Path, env: dict[str, str]) -> None:
    try:
        _use(nmem, env)
    finally:  # the hook started a daemon of that install
        _run([str(nmem), "daemon", "stop"], env)


def _hook(command: str, payload: dict[str, object], env: dict[str, str]) -> None:
    done = _run(["/bin/sh", "-c", command], env, input=json.dumps(payload))
    assert done.returncode == 0 and done.stderr == "", done.stderr


def _found(nmem: Path, env: dict[str, str], *query: str) -> str:
    """`nmem search QUERY --all --json`, again until it finds something (bounded)."""
    deadline = time.monotonic() + FOUND_WITHIN_S
    while True:
        done = _run([str(nmem), "search", *query, "--all", "--json"], env)
        assert done.returncode == 0, done.stderr
        if done.stdout.strip() or time.monotonic() > deadline:
            return done.stdout


def _use(nmem: Path, env: dict[str, str]) -> None:
    version = _run([str(nmem), "--version"], env)
    assert version.returncode == 0 and version.stdout.startswith("nmem "), version.stderr
    done = _run([str(nmem), "install", "--no-import"], env)
    assert done.returncode == 0, done.stderr
    settings = json.loads((Path(env["HOME"]) / ".claude" / "settings.json").read_text())
    hooks = {event: groups[0]["hooks"][0]["command"] for event, groups in settings["hooks"].items()}
    assert str(REPO) not in hooks["SessionStart"]  # the installed copy, not this checkout
    base = {"session_id": "pkg", "cwd": env["HOME"]}
    _hook(hooks["SessionStart"], {**base, "hook_event_name": "SessionStart", "source": "startup"}, env)
    _hook(hooks["UserPromptSubmit"], {**base, "hook_event_name": "UserPromptSubmit",
                                      "prompt": "run the quokka tests and tell me what was skipped"}, env)  # fmt: skip
    run = {**base, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_use_id": "toolu_pkg_1",
           "tool_input": {"command": "pytest -v tests/test_api.py"}, "tool_response": {"stdout": TEST_RUN}}  # fmt: skip
    _hook(hooks["PostToolUse"], run, env)
    found = _run([str(nmem), "sessions", "--all", "--json"], env)
    assert found.returncode == 0 and '"pkg"' in found.stdout, (found.stdout, found.stderr)
    prompt = [json.loads(line) for line in _found(nmem, env, "quokka").splitlines()]
    # the prompt first, then what its turn did (issue #39: an event is found with the words of its turn)
    assert [r["type"] for r in prompt] in (["prompt"], ["prompt", "command"]), prompt
    skipped = [json.loads(line) for line in _found(nmem, env, "skipped").splitlines()]
    assert any(r["title"] == "$ pytest -v tests/test_api.py" for r in skipped), skipped  # the verdict is kept
    doctor = _run([str(nmem), "doctor", "--json"], {**env, "PATH": f"{nmem.parent}:{env['PATH']}"})
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["path"]["status"] == "ok", checks["path"]  # this nmem is the one on PATH
    assert checks["daemon"]["status"] == "ok", checks["daemon"]  # the hook started this installation's daemon


def test_the_wheel_and_the_sdist_build_under_our_name(dist: Path) -> None:
    """`nmem` on the package index is another project: ours is DISTRIBUTION, its commands nmem's."""
    wheel = _wheel(dist)
    [sdist] = dist.glob("*.tar.gz")
    assert wheel.name.startswith(DISTRIBUTION.replace("-", "_") + "-") and sdist.name.startswith(wheel.name[:20])
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
        assert f"Name: {DISTRIBUTION}\n" in z.read(meta).decode()
        scripts = z.read(meta.replace("METADATA", "entry_points.txt")).decode()
    assert "nmem_client/send.py" in names and "nmemd/cli/__init__.py" in names
    assert all(f"{c} = " in scripts for c in COMMANDS), scripts
    with tarfile.open(sdist) as t:
        members = t.getnames()
    assert any(m.endswith("/nmem_client/send.py") for m in members) and any(m.endswith("/README.md") for m in members)


def test_extras_that_name_nmem_name_this_distribution() -> None:
    """`nmem[team]` in an extra would install the package index's `nmem`, another project."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION
    named = [r for reqs in project["optional-dependencies"].values() for r in reqs if r.startswith("nmem")]
    assert all(r.startswith(DISTRIBUTION + "[") for r in named), named


def test_the_built_wheel_installs_and_a_session_through_its_hooks_is_remembered(
    dist: Path, user: dict[str, str], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=STEP_TIMEOUT_S)
    python = str(venv / "bin" / "python")
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], user).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "nmem-test-deps.pth").write_text("\n".join(sorted(ours)) + "\n")  # the dependencies, no index
    done = _run([python, "-m", "pip", "install", "-q", "--no-index", str(_wheel(dist))], user, INSTALL_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    where = _run([python, "-c", "import nmemd; print(nmemd.__file__)"], user).stdout
    assert where.startswith(str(venv)), where  # the wheel's copy, not this checkout
    _check_installed(venv / "bin" / "nmem", user)


@pytest.mark.packaging
@pytest.mark.timeout(1800)
@INDEX
def test_pipx_install(tools: Path, dist: Path, user: dict[str, str], tmp_path: Path) -> None:
    """The README's `pipx install nmem-agent-memory`, of the wheel built here."""
    env = {**user, "PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    done = _run([str(tools / "pipx"), "install", str(_wheel(dist))], env, INSTALL_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    _check_installed(tmp_path / "bin" / "nmem", env)


@pytest.mark.packaging
@pytest.mark.timeout(1800)
@INDEX
def test_uv_tool_install(tools: Path, dist: Path, user: dict[str, str], tmp_path: Path) -> None:
    """The README's `uv tool install nmem-agent-memory`, of the wheel built here."""
    env = {**user, "UV_TOOL_DIR": str(tmp_path / "uv-tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin"),
           "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_PYTHON_DOWNLOADS": "never"}  # fmt: skip
    uv = [str(tools / "uv"), "tool", "install", "--python", sys.executable, str(_wheel(dist))]
    done = _run(uv, env, INSTALL_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    _check_installed(tmp_path / "bin" / "nmem", env)
