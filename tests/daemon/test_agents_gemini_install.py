"""`nmem install --agent gemini` / `uninstall` / `doctor` against a Gemini CLI settings.json holding other things."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest
from support.env import BIN
from support.helpers import nmem

from nmemd.agents.gemini import setup as gemini
from nmemd.setup import settings_file

SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "ui": {"theme": "GitHub"},
    "mcpServers": {"docs": {"command": "docs-mcp", "args": ["--port", "0"]}},
    "hooks": {"AfterTool": [{"matcher": "write_file", "hooks": [{"type": "command", "command": "lint.sh"}]}]},
}


@pytest.fixture
def gemini_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh GEMINI_CLI_HOME (the Gemini CLI's folder is `.gemini` in it), and Codex's and Claude Code's."""
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "g"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("PATH", str(BIN) + ":/usr/bin:/bin")
    folder = tmp_path / "g" / ".gemini"
    folder.mkdir(parents=True)
    return folder


def _same_command(written: str, expected: str) -> bool:
    """The same hook command, its interpreter named either way (`.venv/bin/python` or `python3`, one file)."""
    a, b = shlex.split(written), shlex.split(expected)
    if len(a) != len(b):
        return False
    return all(x == y or (x[:1] == "/" and os.path.samefile(x, y)) for x, y in zip(a, b, strict=True))


def _ok(*args: str) -> str:
    done = nmem(*args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_install_keeps_everything_is_idempotent_and_uninstall_restores(gemini_home: Path) -> None:
    path = gemini_home / "settings.json"
    path.write_text(json.dumps(SETTINGS, indent=2))
    os.chmod(path, 0o640)
    out = _ok("install", "--agent", "gemini")
    assert "Gemini CLI hooks and MCP server 'nmem'" in out and "updated, backup" in out
    data = json.loads(path.read_text())
    ours = gemini.our_hooks(data)
    assert [e for e, _ in ours] == ["AfterTool", "SessionStart", "BeforeAgent", "AfterAgent", "SessionEnd"]
    assert all(_same_command(h["command"], gemini.hook_command()) and h["name"] == "nmem" and h["timeout"] >= 5000
               for _, h in ours), ours  # fmt: skip
    assert gemini.hook_command().endswith("send.py --agent gemini")
    assert data["hooks"]["AfterTool"][0] == SETTINGS["hooks"]["AfterTool"][0]  # the user's first, untouched
    assert data["mcpServers"] == {
        **SETTINGS["mcpServers"],
        "nmem": {"command": settings_file.mcp_command(), "args": []},
    }
    assert {k: v for k, v in data.items() if k not in ("hooks", "mcpServers")} == {
        k: v for k, v in SETTINGS.items() if k not in ("hooks", "mcpServers")
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    backups = list(gemini_home.glob("settings.json.nmem-backup-*"))
    assert len(backups) == 1 and json.loads(backups[0].read_text()) == SETTINGS
    assert stat.S_IMODE(backups[0].stat().st_mode) == 0o600

    before = path.read_text()
    assert "already up to date" in _ok("install", "--agent", "gemini")
    assert path.read_text() == before

    out = _ok("uninstall", "--agent", "gemini")
    assert "removed from" in out
    assert json.loads(path.read_text()) == SETTINGS
    assert "no nmem hooks" in _ok("uninstall", "--agent", "gemini")


def test_install_into_no_settings_and_print_and_no_mcp(tmp_path: Path, gemini_home: Path) -> None:
    path = gemini_home / "settings.json"
    shown = _ok("install", "--agent", "gemini", "--print")
    assert not path.exists() and f"# {path}" in shown and "send.py --agent gemini" in shown
    assert "created" in _ok("install", "--agent", "gemini", "--no-mcp")
    assert "mcpServers" not in json.loads(path.read_text())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    _ok("install", "--agent", "gemini")
    _ok("uninstall", "--agent", "gemini", "--no-mcp")  # the hooks go, the server stays
    assert json.loads(path.read_text()) == {
        "mcpServers": {"nmem": {"command": settings_file.mcp_command(), "args": []}}
    }


def test_bad_settings_are_a_clear_error_and_unchanged(gemini_home: Path) -> None:
    path = gemini_home / "settings.json"
    for text, message in (
        ('{\n  // my comment\n  "ui": {}\n}\n', "is not valid JSON"),
        ('["a list"]', "not an object"),
        ('{"hooks": []}', '"hooks" is not an object'),
        ('{"mcpServers": "x"}', '"mcpServers" is not an object'),
    ):
        path.write_text(text)
        done = nmem("install", "--agent", "gemini")
        assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert path.read_text() == text
    assert nmem("install", "--agent", "gemini", "--project").returncode == 2


def test_all_installs_for_every_agent_found(gemini_home: Path, tmp_path: Path) -> None:
    out = _ok("install", "--agent", "all", "--no-import")  # only the Gemini CLI's folder is there
    assert "Gemini CLI hooks" in out and "Codex" not in out
    assert gemini.our_hooks(json.loads((gemini_home / "settings.json").read_text()))
    _ok("uninstall", "--agent", "all")
    assert not gemini.our_hooks(json.loads((gemini_home / "settings.json").read_text()))


def _doctor() -> dict[str, dict[str, str]]:
    done = nmem("doctor", "--json")
    assert "Traceback" not in done.stderr
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def test_doctor_checks_the_gemini_hooks_and_the_mcp_server(gemini_home: Path) -> None:
    assert not {"gemini", "gemini hooks", "gemini mcp"} & set(_doctor())  # not installed: not checked
    _ok("install", "--agent", "gemini")
    checks = _doctor()
    assert checks["gemini hooks"]["status"] == "ok" and checks["gemini mcp"]["status"] == "ok"
    assert checks["hooks"]["status"] == checks["mcp"]["status"] == "warn"  # Claude Code not set up: Gemini is
    assert "Gemini CLI's are installed" in checks["hooks"]["detail"]
    path = gemini_home / "settings.json"
    data = json.loads(path.read_text())
    del data["hooks"]["AfterTool"]
    data["hooksConfig"] = {"disabled": ["nmem"]}
    path.write_text(json.dumps(data))
    check = _doctor()["gemini hooks"]
    assert check["status"] == "fail" and "lacks nmem hooks for AfterTool" in check["detail"]
    _ok("install", "--agent", "gemini")
    check = _doctor()["gemini hooks"]
    assert check["status"] == "fail" and "hooksConfig.disabled" in check["detail"]
    path.write_text("{not json")
    assert _doctor()["gemini"]["status"] == "fail"
    path.write_text("{}")
    assert not {"gemini", "gemini hooks", "gemini mcp"} & set(_doctor())
