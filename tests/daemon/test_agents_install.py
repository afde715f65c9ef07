"""`nmem install --agent codex` / `uninstall` / `doctor` against real Codex config files holding other things."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

import pytest
from support.env import BIN
from support.helpers import nmem

from nmemd.agents.codex import setup as codex

CONFIG = """# my Codex settings
model = "gpt-5.5"
approval_policy = "on-request"

[mcp_servers.docs]
command = "docs-mcp"
args = ["--port", "0"]

[projects."/home/dev/app"]
trust_level = "trusted"

[hooks.state."/elsewhere/hooks.json:stop:0:0"]
trusted_hash = "sha256:0000"
"""
HOOKS = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done", "timeout": 5}]}]}}


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fresh CODEX_HOME and Claude Code folder; neither agent is on PATH."""
    codex_home, claude = tmp_path / "codex", tmp_path / "claude"
    codex_home.mkdir()
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "gemini"))  # no Gemini CLI: `--agent all` leaves it
    monkeypatch.setenv("PATH", str(BIN) + ":/usr/bin:/bin")
    return codex_home, claude


def _ok(*args: str) -> str:
    done = nmem(*args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_the_trust_hash_is_the_one_codex_accepts() -> None:
    # A handler the real Codex 0.169.0 ran without --dangerously-bypass-hook-trust, trusted by this hash.
    command = (
        'cat > /tmp/cx/hook_ss.json; echo \'{"hookSpecificOutput":{"hookEventName":"SessionStart",'
        '"additionalContext":"CTX-MARKER-123"}}\''
    )
    digest = codex.trusted_hash("SessionStart", None, {"type": "command", "command": command})
    assert digest == "sha256:75582c16303fb70f3a0d555f51bf5b7b367d6cb11cfb8c310cda3d4868525a4f"
    # What Codex normalizes: the default timeout, async, SessionEnd's clamp, a matcher it ignores.
    assert digest == codex.trusted_hash("SessionStart", None, {"command": command, "timeout": 600, "async": False})
    assert codex.trusted_hash("SessionEnd", None, {"command": "x", "timeout": 30}) == codex.trusted_hash(
        "SessionEnd", None, {"command": "x", "timeout": 3}
    )
    assert codex.trusted_hash("Stop", "*", {"command": "x"}) == codex.trusted_hash("Stop", None, {"command": "x"})
    assert codex.trusted_hash("PostToolUse", "*", {"command": "x"}) != codex.trusted_hash(
        "PostToolUse", None, {"command": "x"}
    )


def test_install_keeps_everything_trusts_only_its_hooks_is_idempotent_and_uninstall_restores(
    homes: tuple[Path, Path],
) -> None:
    home, _ = homes
    config, hooks = home / "config.toml", home / "hooks.json"
    config.write_text(CONFIG)
    hooks.write_text(json.dumps(HOOKS))

    out = _ok("install", "--agent", "codex")
    assert "Codex hooks" in out and "backup" in out
    data = json.loads(hooks.read_text())
    assert data["hooks"]["Stop"][0] == HOOKS["hooks"]["Stop"][0]  # the other tool's group first, untouched
    for spec in codex.HOOKS:
        (ours,) = [h for g in data["hooks"][spec.event] for h in g["hooks"] if "send.py" in h["command"]]
        assert ours["command"].endswith("send.py --agent codex") and "-I -S" in ours["command"]
        assert ours["timeout"] == spec.timeout and "async" not in ours
    parsed = tomllib.loads(config.read_text())
    assert parsed["model"] == "gpt-5.5" and parsed["approval_policy"] == "on-request"
    assert parsed["mcp_servers"]["docs"] == {"command": "docs-mcp", "args": ["--port", "0"]}
    assert parsed["mcp_servers"]["nmem"] == {"command": str(BIN / "nmem-mcp"), "args": []}
    assert parsed["projects"] == {"/home/dev/app": {"trust_level": "trusted"}}
    state = parsed["hooks"]["state"]
    assert state.pop("/elsewhere/hooks.json:stop:0:0") == {"trusted_hash": "sha256:0000"}
    expected = {
        f"{hooks}:session_start:0:0", f"{hooks}:user_prompt_submit:0:0", f"{hooks}:post_tool_use:0:0",
        f"{hooks}:pre_compact:0:0", f"{hooks}:post_compact:0:0", f"{hooks}:stop:1:0", f"{hooks}:session_end:0:0",
    }  # fmt: skip
    assert set(state) == expected  # the other tool's Stop hook is not trusted by nmem: only nmem's
    assert config.read_text().startswith(CONFIG)  # comments and layout kept: nmem's tables are appended
    backups = sorted(home.glob("*.nmem-backup-*"))
    assert [b.name.split(".nmem")[0] for b in backups] == ["config.toml", "hooks.json"]
    assert all(stat.S_IMODE(b.stat().st_mode) == 0o600 for b in backups)
    assert backups[0].read_text() == CONFIG

    before = (config.read_bytes(), hooks.read_bytes())
    assert "already up to date" in _ok("install", "--agent", "codex")
    assert (config.read_bytes(), hooks.read_bytes()) == before

    _ok("uninstall", "--agent", "codex")
    assert config.read_text() == CONFIG
    assert json.loads(hooks.read_text()) == HOOKS


def test_a_hooks_file_of_nmems_alone_goes_on_uninstall_and_no_mcp_leaves_the_server(
    homes: tuple[Path, Path],
) -> None:
    home, _ = homes
    _ok("install", "--agent", "codex", "--no-mcp")
    parsed = tomllib.loads((home / "config.toml").read_text())
    assert "mcp_servers" not in parsed and len(parsed["hooks"]["state"]) == len(codex.HOOKS)
    _ok("install", "--agent", "codex")
    assert "nmem" in tomllib.loads((home / "config.toml").read_text())["mcp_servers"]
    _ok("uninstall", "--agent", "codex", "--no-mcp")
    assert not (home / "hooks.json").exists()
    parsed = tomllib.loads((home / "config.toml").read_text())
    assert "hooks" not in parsed and "nmem" in parsed["mcp_servers"]
    _ok("uninstall", "--agent", "codex")
    assert (home / "config.toml").read_text() == ""


def test_print_changes_nothing(homes: tuple[Path, Path]) -> None:
    home, _ = homes
    out = _ok("install", "--agent", "codex", "--print")
    assert "send.py --agent codex" in out and "[mcp_servers.nmem]" in out and "trusted_hash" in out
    assert list(home.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model = \n", "is not valid TOML"),
        ('mcp_servers = { docs = { command = "x" } }\n', "cannot edit its tables"),
        ('hooks = "nope"\n', "cannot edit its tables"),
    ],
)
def test_a_config_nmem_cannot_edit_is_a_clear_error_and_nothing_is_written(
    homes: tuple[Path, Path], text: str, message: str
) -> None:
    home, _ = homes
    (home / "config.toml").write_text(text)
    done = nmem("install", "--agent", "codex")
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr
    assert (home / "config.toml").read_text() == text and not (home / "hooks.json").exists()


def test_a_bad_hooks_file_is_a_clear_error(homes: tuple[Path, Path]) -> None:
    home, _ = homes
    (home / "hooks.json").write_text("[1, 2")
    done = nmem("install", "--agent", "codex")
    assert done.returncode == 1 and "not valid JSON" in done.stderr and "Traceback" not in done.stderr


def test_agent_all_installs_for_the_agents_found_and_bad_agents_are_refused(homes: tuple[Path, Path]) -> None:
    home, claude = homes
    out = _ok("install", "--agent", "all", "--no-import")
    assert "Codex hooks" in out and "settings.json" not in out  # no Claude Code here
    claude.mkdir()
    out = _ok("install", "--agent", "all", "--no-import")
    assert (claude / "settings.json").exists() and "already up to date" in out
    _ok("uninstall", "--agent", "all")
    assert not (home / "hooks.json").exists() and "hooks" not in json.loads((claude / "settings.json").read_text())
    for args, message in (
        (("install", "--agent", "aider"), "unknown agent 'aider'"),
        (("install", "--agent", "codex", "--project"), "--project is for Claude Code"),
    ):
        done = nmem(*args)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def _doctor() -> dict[str, dict[str, str]]:
    done = nmem("doctor", "--json")
    assert "Traceback" not in done.stderr
    return {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def test_doctor_checks_codexs_hooks_their_trust_and_the_mcp_server(homes: tuple[Path, Path]) -> None:
    home, _ = homes
    assert not {"codex", "codex hooks", "codex mcp"} & set(_doctor())  # not installed for Codex: not checked
    _ok("install", "--agent", "codex")
    checks = _doctor()
    assert checks["codex hooks"]["status"] == "ok" and "trusted" in checks["codex hooks"]["detail"]
    assert checks["codex mcp"]["status"] == "ok"
    assert checks["hooks"]["status"] == checks["mcp"]["status"] == "warn"  # Claude Code not set up: Codex is
    hooks = home / "hooks.json"
    data = json.loads(hooks.read_text())
    data["hooks"]["Stop"][0]["hooks"][0]["timeout"] = 11  # edited by hand: Codex no longer trusts it
    hooks.write_text(json.dumps(data))
    check = _doctor()["codex hooks"]
    assert check["status"] == "fail" and "Codex skips 1 of nmem's 7 hooks" in check["detail"]
    assert check["fix"].startswith("nmem install --agent codex")
    _ok("install", "--agent", "codex")
    assert _doctor()["codex hooks"]["status"] == "ok"
    _ok("uninstall", "--agent", "codex")
    assert not {"codex", "codex hooks", "codex mcp"} & set(_doctor())


def test_comments_after_nmems_tables_stay_and_text_nmem_cannot_edit_safely_is_left_alone(
    homes: tuple[Path, Path],
) -> None:
    home, _ = homes
    config = home / "config.toml"
    _ok("install", "--agent", "codex")
    config.write_text(config.read_text() + '\n# my note about the project\n[projects."/p"]\ntrust_level = "trusted"\n')
    _ok("uninstall", "--agent", "codex")
    assert config.read_text() == '# my note about the project\n[projects."/p"]\ntrust_level = "trusted"\n'

    tricky = 'notes = """\n[mcp_servers.nmem]\ncommand = "in a string"\n"""\n'  # a header-like line in a string
    config.write_text(tricky)
    done = nmem("install", "--agent", "codex")
    if done.returncode == 0:  # edited: the string must have come through whole
        assert tomllib.loads(config.read_text())["notes"] == '[mcp_servers.nmem]\ncommand = "in a string"\n'
    else:
        assert "nothing was changed" in done.stderr and "Traceback" not in done.stderr
        assert config.read_text() == tricky
