"""`nmem install --agent opencode` / `uninstall` / `doctor` against a real OpenCode configuration folder holding
other things: nmem's own plugin file and `mcp.nmem`, everything else kept, removed exactly."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from support import helpers
from support.env import BIN

from nmemd.agents.opencode import setup as opencode

CONFIG = {
    "$schema": "https://opencode.ai/config.json",
    "model": "anthropic/claude-sonnet-4-5",
    "mcp": {"docs": {"type": "local", "command": ["docs-mcp"], "enabled": True}},
}
OTHER_PLUGIN = "export const Other = async () => ({})\n"


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh XDG_CONFIG_HOME whose opencode/ holds the user's opencode.json and another plugin."""
    base = tmp_path / "xdg-config"
    folder = base / "opencode"
    (folder / "plugin").mkdir(parents=True)
    (folder / "opencode.json").write_text(json.dumps(CONFIG, indent=2))
    (folder / "plugin" / "other.js").write_text(OTHER_PLUGIN)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("PATH", str(BIN) + ":/usr/bin:/bin")
    return folder


def nmem(*args: str) -> subprocess.CompletedProcess[str]:
    """helpers.nmem, and never a traceback."""
    done = helpers.nmem(*args)
    assert "Traceback" not in done.stderr
    return done


def test_install_writes_the_plugin_and_mcp_keeps_the_rest_and_uninstall_removes_exactly_them(config_dir: Path) -> None:
    done = nmem("install", "--agent", "opencode")
    assert done.returncode == 0, done.stderr
    plugin = config_dir / "plugin" / "nmem.js"
    text = plugin.read_text()
    assert text.startswith(opencode.MARKER)
    argv = opencode.plugin_argv(text)
    assert argv is not None and argv[-2:] == ["--agent", "opencode"] and os.path.exists(argv[3])
    config = json.loads((config_dir / "opencode.json").read_text())
    assert config["model"] == CONFIG["model"] and config["mcp"]["docs"] == CONFIG["mcp"]["docs"]
    assert config["mcp"]["nmem"]["type"] == "local" and config["mcp"]["nmem"]["enabled"] is True
    assert os.access(config["mcp"]["nmem"]["command"][0], os.X_OK)
    assert list(config_dir.glob("opencode.json.nmem-backup-*"))

    again = nmem("install", "--agent", "opencode")
    assert again.returncode == 0 and again.stdout.count("already up to date") == 2, again.stdout

    doctor = nmem("doctor")
    assert "opencode plugin" in doctor.stdout and "opencode mcp" in doctor.stdout
    assert not [ln for ln in doctor.stdout.splitlines() if ln[6:].startswith("opencode") and not ln.startswith("ok")]

    gone = nmem("uninstall", "--agent", "opencode")
    assert gone.returncode == 0, gone.stderr
    assert not plugin.exists()
    assert (config_dir / "plugin" / "other.js").read_text() == OTHER_PLUGIN
    assert json.loads((config_dir / "opencode.json").read_text()) == CONFIG
    after = nmem("doctor").stdout
    assert "opencode plugin" not in after and "opencode mcp" not in after


def test_doctor_names_a_broken_plugin_and_a_missing_mcp_server(config_dir: Path) -> None:
    assert nmem("install", "--agent", "opencode", "--no-mcp").returncode == 0
    plugin = config_dir / "plugin" / "nmem.js"
    argv = opencode.plugin_argv(plugin.read_text())
    assert argv is not None
    plugin.write_text(
        opencode.plugin_text([argv[0], "-I", "-S", "/nowhere/nmem_client/send.py", "--agent", "opencode"])
    )
    out = nmem("doctor").stdout
    assert "/nowhere/nmem_client/send.py, which does not exist" in out
    assert "no mcp.nmem in" in out


def test_a_plugin_file_of_another_owner_is_never_overwritten_nor_removed(config_dir: Path) -> None:
    foreign = config_dir / "plugin" / "nmem.js"
    foreign.write_text(OTHER_PLUGIN)
    done = nmem("install", "--agent", "opencode")
    assert done.returncode == 1 and "is not nmem's" in done.stderr
    assert foreign.read_text() == OTHER_PLUGIN
    assert nmem("uninstall", "--agent", "opencode").returncode == 0
    assert foreign.read_text() == OTHER_PLUGIN


def test_a_config_file_with_comments_is_refused_unchanged(config_dir: Path) -> None:
    path = config_dir / "opencode.json"
    path.write_text('{\n  // mine\n  "model": "x/y"\n}\n')
    done = nmem("install", "--agent", "opencode")
    assert done.returncode == 1 and "is not valid JSON" in done.stderr
    assert path.read_text().startswith("{\n  // mine")
    assert not (config_dir / "plugin" / "nmem.js").exists()


def test_project_scope_is_refused_for_opencode(config_dir: Path) -> None:
    done = nmem("install", "--agent", "opencode", "--project")
    assert done.returncode == 2 and "--project is for Claude Code" in done.stderr
