"""`nmem doctor` against real temp homes: a good install passes, each broken piece is named with its fix.

Where the fix is safe to run here (install, chmod, daemon start), the test runs
the printed command through a shell and checks the doctor is then satisfied.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support.daemon import Daemon
from support.env import BIN, REPO
from support.helpers import kill_all, new_id, payload, send_hook

from nmemd.daemon.instance import InstanceLock
from nmemd.setup import doctor

NMEM = str(BIN / "nmem")


@pytest.fixture
def env(tmp_path: Path, nmem_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Claude Code's config and the systemd user dir in temp dirs; the venv first on PATH."""
    claude = tmp_path / "claude"
    claude.mkdir()
    extra = {
        "CLAUDE_CONFIG_DIR": str(claude),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        "NMEM_AUTOSTART": "0",
    }
    for key, value in extra.items():
        monkeypatch.setenv(key, value)
    return {**nmem_env, **extra}


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env={**os.environ, **env}, cwd=cwd)


def diagnose(env: dict[str, str], cwd: Path) -> tuple[int, dict[str, dict[str, Any]], str]:
    done = run([NMEM, "doctor", "--json"], env, cwd)
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] == (done.returncode == 0)
    checks = {c["name"]: c for c in report["checks"]}
    return done.returncode, checks, done.stderr


def apply_fix(fix: str, env: dict[str, str], cwd: Path) -> None:
    done = run(["bash", "-c", fix], env, cwd)
    assert done.returncode == 0, (fix, done.stderr)


def test_a_good_install_passes(env: dict[str, str], daemon: Daemon, tmp_path: Path) -> None:
    assert run([NMEM, "install"], env, tmp_path).returncode == 0
    daemon.start()
    assert send_hook(daemon.socket, new_id(), payload("doctor good"))[0] == b"OK"
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 0, checks
    assert {name: c["status"] for name, c in checks.items()} == dict.fromkeys(
        ["config", "entry points", "path", "hooks", "mcp", "socket", "daemon", "database", "wal", "backlog", "capture"]
        + ["disk", "service"],
        "ok",
    )
    text = run([NMEM, "doctor"], env, tmp_path)
    assert text.returncode == 0 and "FAIL" not in text.stdout and "hooks" in text.stdout


def test_missing_install_is_named_and_its_fix_repairs_it(env: dict[str, str], tmp_path: Path) -> None:
    code, checks, stderr = diagnose(env, tmp_path)
    assert code == 1
    assert stderr.strip() == "error: 2 checks failed: hooks, mcp"
    assert checks["hooks"]["status"] == "fail" and checks["hooks"]["fix"] == "nmem install"
    assert checks["mcp"]["status"] == "fail" and checks["mcp"]["fix"] == "nmem install"
    assert checks["daemon"]["status"] == "warn"  # not running yet is normal: not a failure
    apply_fix(checks["hooks"]["fix"], env, tmp_path)
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 0 and checks["hooks"]["status"] == "ok" and checks["mcp"]["status"] == "ok", checks

    # one hook event gone: named, and the same fix
    settings = Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json"
    data = json.loads(settings.read_text())
    del data["hooks"]["Stop"]
    settings.write_text(json.dumps(data))
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 1 and "lacks nmem hooks for Stop" in checks["hooks"]["detail"], checks["hooks"]
    apply_fix(checks["hooks"]["fix"], env, tmp_path)
    assert diagnose(env, tmp_path)[0] == 0

    # hooks calling an interpreter that is gone (a removed venv)
    stale = json.dumps({"hooks": {h: [{"hooks": [{"type": "command",
                        "command": "/gone/venv/bin/python -I -S /gone/nmem_client/send.py"}]}]
                        for h in json.loads(settings.read_text())["hooks"]}})  # fmt: skip
    settings.write_text(stale)
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 1 and "/gone/" in checks["hooks"]["detail"] and checks["hooks"]["fix"] == "nmem install"
    apply_fix(checks["hooks"]["fix"], env, tmp_path)
    assert diagnose(env, tmp_path)[0] == 0

    settings.write_text('{"hooks": {')  # not JSON: named, never rewritten by the doctor
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 1 and str(settings) in checks["hooks"]["detail"] and "not valid JSON" in checks["hooks"]["detail"]
    assert settings.read_text() == '{"hooks": {'


def test_unsafe_modes_and_a_damaged_database(env: dict[str, str], daemon: Daemon, tmp_path: Path) -> None:
    assert run([NMEM, "install"], env, tmp_path).returncode == 0
    daemon.start()
    assert send_hook(daemon.socket, new_id(), payload("doctor modes"))[0] == b"OK"
    assert daemon.stop() == 0
    sock_dir = os.path.dirname(env["NMEM_SOCKET"])
    os.chmod(sock_dir, 0o777)  # the daemon's rule: a folder others may write to (0755 is fine for a given one)
    os.chmod(daemon.db, 0o644)
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 1
    assert checks["socket"]["status"] == "fail" and checks["socket"]["fix"] == f"chmod 700 {sock_dir}"
    assert checks["database"]["status"] == "fail" and checks["database"]["fix"].startswith("chmod 600 ")
    apply_fix(checks["socket"]["fix"], env, tmp_path)
    apply_fix(checks["database"]["fix"], env, tmp_path)
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 0, checks

    with open(daemon.db, "r+b") as fh:  # trash the pages after the header
        fh.seek(4096)
        fh.write(os.urandom(4096 * 4))
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 1 and checks["database"]["status"] == "fail"
    assert ".recover" in checks["database"]["fix"] and checks["database"]["fix"].startswith("nmem daemon stop && ")


def test_a_stale_backlog_is_stored_by_the_fix(env: dict[str, str], tmp_path: Path) -> None:
    from nmem_client import inbox

    assert inbox.store(new_id(), payload("waiting in the inbox")) == "inbox"
    db = Path(env["NMEM_HOME"]) / "nmem.db"
    conn = sqlite3.connect(db)
    conn.execute("UPDATE inbox SET received_at = ?", (time.time() - 3600,))
    conn.commit()
    conn.close()
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 1 and checks["backlog"]["status"] == "fail" and "1 in the inbox" in checks["backlog"]["detail"]
    try:
        apply_fix(checks["backlog"]["fix"], env, tmp_path)  # nmem daemon start: drains at start
        code, checks, _ = diagnose(env, tmp_path)
        assert checks["backlog"]["status"] == "ok" and checks["daemon"]["status"] == "ok", checks
    finally:
        run([NMEM, "daemon", "stop"], env, tmp_path)
        kill_all(env["NMEM_HOME"])


def test_frozen_daemon_bad_config_and_broken_service_units(env: dict[str, str], tmp_path: Path) -> None:
    assert run([NMEM, "install"], env, tmp_path).returncode == 0
    units = Path(env["XDG_CONFIG_HOME"]) / "systemd" / "user"
    units.mkdir(parents=True)
    (units / "nmemd.socket").write_text("[Socket]\nListenStream=%t/nmem/nmemd.sock\n")
    service = "[Service]\nType=notify\nExecStart=/gone/venv/bin/nmemd --started-by systemd\n"
    (units / "nmemd.service").write_text(service)
    lock_path = os.path.join(os.path.dirname(env["NMEM_SOCKET"]), "nmemd.lock")
    os.makedirs(os.path.dirname(lock_path), mode=0o700, exist_ok=True)
    lock = InstanceLock(lock_path)  # holds the lock like a daemon that stopped answering
    lock.acquire()
    try:
        code, checks, _ = diagnose(env, tmp_path)
    finally:
        lock.release()
    assert code == 1
    assert checks["daemon"]["status"] == "fail" and "does not answer" in checks["daemon"]["detail"]
    assert checks["daemon"]["fix"] == "nmem daemon restart"
    assert checks["service"]["status"] == "fail" and "/gone/venv/bin/nmemd" in checks["service"]["detail"]
    assert checks["service"]["fix"] == "nmem service install"

    config = Path(env["NMEM_HOME"]) / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("bogus = 1\n")
    code, checks, stderr = diagnose(env, tmp_path)
    assert code == 1 and checks["config"]["status"] == "fail" and "bogus" in checks["config"]["detail"]
    assert "hooks" in checks and "database" in checks  # the other checks still ran, on the default paths
    assert stderr.strip().splitlines()[0].startswith("error: ")


def test_entry_points_missing_from_a_bin_dir(tmp_path: Path) -> None:
    (tmp_path / "nmem").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "nmem", 0o755)
    check = doctor.check_entry_points(str(tmp_path))
    assert check.status == "fail" and "nmemd, nmem-send, nmem-mcp" in check.detail
    assert check.fix is not None and "pip install --force-reinstall" in check.fix
    assert doctor.check_entry_points().status == "ok"  # this venv


def test_another_nmem_first_on_path_is_named(env: dict[str, str], tmp_path: Path) -> None:
    """Issue #31: `nmem` on the package index is another project; its command, first on PATH, is named."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "nmem").write_text("#!/bin/sh\necho 'Cognitive memory for AI agents'\n")
    os.chmod(other / "nmem", 0o755)
    code, checks, _ = diagnose({**env, "PATH": f"{other}:{env['PATH']}"}, tmp_path)
    path = checks["path"]
    assert (
        path["status"] == "warn" and f"{other}/nmem comes first on PATH: another program called nmem" in path["detail"]
    )
    assert path["fix"].startswith(f"put {BIN} first on PATH") and "pipx uninstall nmem" in path["fix"]
    shutil.copy(BIN / "nmem", other / "nmem")  # a second installation of ours
    _, checks, _ = diagnose({**env, "PATH": f"{other}:{env['PATH']}"}, tmp_path)
    assert "another installation of this nmem" in checks["path"]["detail"]
    _, checks, _ = diagnose(env, tmp_path)
    assert checks["path"] == {"name": "path", "status": "ok", "detail": f"nmem: {BIN}/nmem", "fix": None}


def test_a_daemon_of_another_installation_is_named_with_its_restart(env: dict[str, str], tmp_path: Path) -> None:
    """Issue #31: a daemon left running by another installation (a clone's .venv after the README's first
    command) is not the one this nmem's hooks were installed for: doctor names it and the restart."""
    other = tmp_path / "other-install"
    for package in ("nmemd", "nmem_client"):
        shutil.copytree(REPO / package, other / package, ignore=shutil.ignore_patterns("__pycache__"))
    assert run([NMEM, "install"], env, tmp_path).returncode == 0
    try:
        started = run([NMEM, "daemon", "start"], {**env, "PYTHONPATH": str(other)}, tmp_path)  # that copy's
        assert started.returncode == 0, started.stderr
        _, checks, _ = diagnose(env, tmp_path)
        check = checks["daemon"]
        assert check["status"] == "warn" and f"from {other} (python " in check["detail"], check
        assert f"not this nmem (0.1.0.dev0 in {REPO})" in check["detail"]
        assert check["fix"] == f"{BIN}/nmem daemon restart"
        apply_fix(check["fix"], env, tmp_path)
        _, checks, _ = diagnose(env, tmp_path)
        assert checks["daemon"]["status"] == "ok", checks["daemon"]
    finally:
        run([NMEM, "daemon", "stop"], env, tmp_path)


def test_hooks_waited_for_against_prompt_recall(env: dict[str, str], tmp_path: Path) -> None:
    """Prompt recall on with UserPromptSubmit in the background: its text never reaches the model (warn,
    `nmem install` fixes it); an older install that makes Claude Code wait for hooks printing nothing:
    warn, the same fix."""
    assert run([NMEM, "install"], env, tmp_path).returncode == 0
    assert diagnose(env, tmp_path)[1]["hooks"]["status"] == "ok"

    home = Path(env["NMEM_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("prompt_recall = true\n")
    _, checks, _ = diagnose(env, tmp_path)
    assert checks["hooks"]["status"] == "warn" and "prompt recall is on" in checks["hooks"]["detail"], checks
    assert checks["hooks"]["fix"] == "nmem install"
    apply_fix(checks["hooks"]["fix"], env, tmp_path)
    assert diagnose(env, tmp_path)[1]["hooks"]["status"] == "ok"

    (home / "config.toml").write_text("prompt_recall = false\n")
    _, checks, _ = diagnose(env, tmp_path)
    assert checks["hooks"]["status"] == "warn" and "UserPromptSubmit" in checks["hooks"]["detail"], checks
    apply_fix(checks["hooks"]["fix"], env, tmp_path)
    assert diagnose(env, tmp_path)[1]["hooks"]["status"] == "ok"

    settings = Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json"  # SessionEnd as nmem installed it before
    data = json.loads(settings.read_text())
    data["hooks"]["SessionEnd"][0]["hooks"][0].pop("async")
    settings.write_text(json.dumps(data))
    _, checks, _ = diagnose(env, tmp_path)
    assert checks["hooks"]["status"] == "warn" and "SessionEnd" in checks["hooks"]["detail"], checks
    apply_fix(checks["hooks"]["fix"], env, tmp_path)
    assert diagnose(env, tmp_path)[1]["hooks"]["status"] == "ok"


def test_an_mcp_server_whose_bridge_is_gone(env: dict[str, str], tmp_path: Path) -> None:
    """The MCP server runs `python -I -S .../bridge.py`: a removed checkout is named, `nmem install` fixes it."""
    assert run([NMEM, "install"], env, tmp_path).returncode == 0
    state = Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json"
    data = json.loads(state.read_text())
    data["mcpServers"]["nmem"]["args"][-1] = "/gone/nmem_client/bridge.py"
    state.write_text(json.dumps(data))
    code, checks, _ = diagnose(env, tmp_path)
    assert code == 1 and checks["mcp"]["status"] == "fail" and "/gone/" in checks["mcp"]["detail"], checks["mcp"]
    apply_fix(checks["mcp"]["fix"], env, tmp_path)
    _, checks, _ = diagnose(env, tmp_path)
    assert checks["mcp"]["status"] == "ok" and "bridge.py" in checks["mcp"]["detail"], checks["mcp"]
