"""`nmem install --agent copilot` / `uninstall` / `doctor` against real Copilot config files holding other things."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from support.env import BIN
from support.helpers import nmem

from nmemd.agents.copilot import setup as copilot

SETTINGS = {
    "banner": "never",
    "hooks": {"Stop": [{"type": "command", "bash": "notify-send done", "timeoutSec": 5}]},
}
MCP = {"mcpServers": {"docs": {"type": "local", "command": "docs-mcp", "args": [], "tools": ["*"]}}}


def _same_command(written: str, expected: str) -> bool:
    """The same hook command, its interpreter named either way (`.venv/bin/python` or `python3`, one file)."""
    a, b = shlex.split(written), shlex.split(expected)
    if len(a) != len(b):
        return False
    return all(x == y or (x[:1] == "/" and os.path.samefile(x, y)) for x, y in zip(a, b, strict=True))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh COPILOT_HOME holding the user's own settings and MCP server; Copilot is not on PATH."""
    home = tmp_path / "copilot"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(SETTINGS, indent=2))
    (home / "mcp-config.json").write_text(json.dumps(MCP, indent=2))
    monkeypatch.setenv("COPILOT_HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("PATH", str(BIN) + ":/usr/bin:/bin")
    return home


def _ok(*args: str) -> str:
    done = nmem(*args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_install_twice_then_uninstall_leaves_the_users_files_as_they_were(home: Path) -> None:
    _ok("install", "--agent", "copilot")
    settings = json.loads((home / "settings.json").read_text())
    assert settings["banner"] == "never"
    assert settings["hooks"]["Stop"][0] == SETTINGS["hooks"]["Stop"][0]
    for event in copilot.HOOKS:
        (h,) = [h for h in settings["hooks"][event] if copilot.is_ours(h)]
        assert {**h, "bash": ""} == {"type": "command", "bash": "", "timeoutSec": copilot.TIMEOUT_S}
        assert _same_command(h["bash"], copilot.hook_command())
        assert h["bash"].endswith("--agent copilot")
    servers = json.loads((home / "mcp-config.json").read_text())["mcpServers"]
    assert servers["docs"] == MCP["mcpServers"]["docs"]
    assert servers["nmem"]["type"] == "local" and servers["nmem"]["command"].endswith("nmem-mcp")
    assert list(home.glob("settings.json.nmem-backup-*")) and list(home.glob("mcp-config.json.nmem-backup-*"))
    before = {p.name: p.read_text() for p in home.glob("*.json")}

    assert "already up to date" in _ok("install", "--agent", "copilot")
    assert {p.name: p.read_text() for p in home.glob("*.json")} == before

    doctor = nmem("doctor")
    assert "copilot hooks" in doctor.stdout and "copilot mcp" in doctor.stdout, doctor.stdout

    _ok("uninstall", "--agent", "copilot")
    assert json.loads((home / "settings.json").read_text()) == SETTINGS
    assert json.loads((home / "mcp-config.json").read_text()) == MCP
    assert "no nmem hooks" in _ok("uninstall", "--agent", "copilot")


def test_install_print_changes_nothing_and_bad_files_are_a_clear_error(home: Path) -> None:
    printed = _ok("install", "--agent", "copilot", "--print")
    assert "--agent copilot" in printed and "nmem-mcp" in printed
    assert json.loads((home / "settings.json").read_text()) == SETTINGS
    (home / "settings.json").write_text('{"hooks": [1, 2]}')
    done = nmem("install", "--agent", "copilot")
    assert done.returncode == 1 and "is not an object" in done.stderr and "Traceback" not in done.stderr
    assert (home / "settings.json").read_text() == '{"hooks": [1, 2]}'
    done = nmem("install", "--agent", "copilot", "--project")
    assert done.returncode == 2 and "--project is for Claude Code" in done.stderr


def test_a_settings_file_that_held_only_nmems_hooks_loses_the_hooks_key(home: Path) -> None:
    (home / "settings.json").write_text("{}")
    _ok("install", "--agent", "copilot", "--no-mcp")
    assert json.loads((home / "mcp-config.json").read_text()) == MCP
    _ok("uninstall", "--agent", "copilot", "--no-mcp")
    assert json.loads((home / "settings.json").read_text()) == {}
