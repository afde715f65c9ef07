"""`nmem install` / `uninstall` against real settings files holding other tools' hooks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.env import BIN
from support.helpers import nmem

OTHER = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test:*)"], "deny": []},
    "env": {"FOO": "1"},
    "hooks": {
        "PostToolUse": [
            {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "prettier --write", "timeout": 30}]}
        ],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send claude"}]}],
    },
}


@pytest.fixture
def claude_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "claude"
    path.mkdir()
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(path))
    return path


def test_install_keeps_everything_is_idempotent_and_uninstall_restores(claude_dir: Path) -> None:
    settings = claude_dir / "settings.json"
    settings.write_text(json.dumps(OTHER, indent=4))
    state = claude_dir / ".claude.json"
    state.write_text(json.dumps({"numStartups": 7, "mcpServers": {"other": {"command": "x"}}}))

    assert nmem("install").returncode == 0
    first = json.loads(settings.read_text())
    assert first["model"] == "opus" and first["env"] == {"FOO": "1"} and first["permissions"] == OTHER["permissions"]
    post = first["hooks"]["PostToolUse"]
    assert post[0] == OTHER["hooks"]["PostToolUse"][0]  # the other tool's group, untouched
    ours = post[1]["hooks"][0]
    assert post[1]["matcher"] == "*" and ours["async"] is True and "-I -S" in ours["command"]
    assert first["hooks"]["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    assert first["hooks"]["Notification"] == OTHER["hooks"]["Notification"]
    for event in (
        "UserPromptSubmit",
        "PostToolUseFailure",
        "PreCompact",
        "PostCompact",
        "Stop",
        "SubagentStop",
        "SessionEnd",
    ):
        assert "nmem_client/send.py" in first["hooks"][event][0]["hooks"][0]["command"]
    assert list(claude_dir.glob("settings.json.nmem-backup-*"))
    mcp = json.loads(state.read_text())
    assert mcp["numStartups"] == 7 and mcp["mcpServers"]["other"] == {"command": "x"}
    server = mcp["mcpServers"]["nmem"]  # the bridge as hooks run the client: no site, ~10 ms less at start
    assert Path(server["command"]).resolve() == Path(sys.executable).resolve() and server["args"][:2] == ["-I", "-S"]
    assert server["args"][2].endswith("nmem_client/bridge.py") and Path(server["args"][2]).is_file()

    again = nmem("install")
    assert again.returncode == 0 and "already up to date" in again.stdout
    assert json.loads(settings.read_text()) == first

    assert nmem("uninstall").returncode == 0
    assert json.loads(settings.read_text()) == OTHER
    assert json.loads(state.read_text()) == {"numStartups": 7, "mcpServers": {"other": {"command": "x"}}}


def test_install_into_missing_file_then_uninstall_leaves_empty_object(claude_dir: Path) -> None:
    assert nmem("install", "--no-mcp").returncode == 0
    assert "SessionStart" in json.loads((claude_dir / "settings.json").read_text())["hooks"]
    assert nmem("uninstall", "--no-mcp").returncode == 0
    assert json.loads((claude_dir / "settings.json").read_text()) == {}


def test_install_print_changes_nothing(claude_dir: Path) -> None:
    out = nmem("install", "--print")
    assert out.returncode == 0 and "nmem_client/send.py" in out.stdout and "nmem_client/bridge.py" in out.stdout
    assert not (claude_dir / "settings.json").exists() and not (claude_dir / ".claude.json").exists()


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"hooks": []}'])
def test_bad_settings_file_is_refused_with_one_line_and_left_alone(claude_dir: Path, content: str) -> None:
    settings = claude_dir / "settings.json"
    settings.write_text(content)
    out = nmem("install")
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(settings) in lines[0] and "Traceback" not in out.stderr
    assert settings.read_text() == content
    assert not list(claude_dir.glob("settings.json.nmem-backup-*"))


def test_installed_hook_command_runs_the_client(claude_dir: Path) -> None:
    assert nmem("install", "--no-mcp").returncode == 0
    command = json.loads((claude_dir / "settings.json").read_text())["hooks"]["Stop"][0]["hooks"][0]["command"]
    done = subprocess.run(command, shell=True, input=b"", capture_output=True, timeout=30)
    assert done.returncode == 0 and done.stderr == b""


def test_a_project_install_goes_to_the_local_settings_a_team_does_not_commit(claude_dir: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".claude").mkdir()
    shared = repo / ".claude" / "settings.json"
    shared.write_text(json.dumps(OTHER))
    run = lambda *a: subprocess.run([str(BIN / "nmem"), *a], capture_output=True, text=True, timeout=60, cwd=repo)  # noqa: E731
    assert run("install", "--project", "--no-import").returncode == 0
    local = json.loads((repo / ".claude" / "settings.local.json").read_text())
    assert (
        "SessionStart" in local["hooks"] and json.loads(shared.read_text()) == OTHER
    )  # nothing machine-specific committed
    done = run("uninstall", "--project")
    assert done.returncode == 0 and "hooks removed from" in done.stdout
    assert "SessionStart" not in json.loads((repo / ".claude" / "settings.local.json").read_text()).get("hooks", {})


def test_backups_are_private_and_every_one_is_kept(claude_dir: Path) -> None:
    """Issue #28, finding 10: only the newest backup was kept, so a second install deleted the backup
    of the original. Every backup is a new 0600 file, the original's among them."""
    settings = claude_dir / "settings.json"
    originals = []
    for n in range(3):  # each round changes the file, so each install backs it up again
        originals.append(json.dumps({**OTHER, "model": f"m{n}"}))
        settings.write_text(originals[-1])
        assert nmem("install", "--no-mcp").returncode == 0
        assert nmem("install", "--no-mcp").returncode == 0  # unchanged: no backup
        assert nmem("uninstall", "--no-mcp").returncode == 0
        assert settings.read_text() == originals[-1]  # nothing else changed it: given back byte for byte
    backups = sorted(claude_dir.glob("settings.json.nmem-backup-*"))
    assert len(backups) == 6 and all(b.stat().st_mode & 0o777 == 0o600 for b in backups)
    assert {b.read_text() for b in backups} >= set(originals)


def test_uninstall_says_what_went_and_where_the_memory_stays(claude_dir: Path) -> None:
    assert nmem("install", "--no-import").returncode == 0
    done = nmem("uninstall")
    assert done.returncode == 0, done.stderr
    assert "hooks removed from" in done.stdout and "MCP server 'nmem' removed from" in done.stdout
    assert "your memory stays in" in done.stdout and "rm -r" in done.stdout


def test_the_repositorys_claude_code_plugin_is_what_nmem_renders() -> None:
    """`claude-plugin/` and the marketplace beside it are rendered from Claude Code's
    `settings.HOOKS`
    (`python -m nmemd.agents.claude_code.plugin` writes them): the plugin and `nmem install` never drift apart."""
    from nmemd.agents.claude_code import plugin
    from nmemd.agents.claude_code.settings import HOOKS

    root = Path(__file__).resolve().parents[2]
    for path, text in plugin.rendered(root).items():
        assert path.read_text() == text, f"{path} is stale: run .venv/bin/python -m nmemd.agents.claude_code.plugin"
    hooks = json.loads((root / plugin.FOLDER / "hooks" / "hooks.json").read_text())["hooks"]
    assert set(hooks) == {spec.event for spec in HOOKS}


def _waited_for(settings: Path) -> set[str]:
    """The events whose nmem hook Claude Code waits for (no `"async": true`)."""
    hooks = json.loads(settings.read_text())["hooks"]
    return {event for event, groups in hooks.items() for g in groups for h in g["hooks"] if h.get("async") is not True}


def test_claude_code_waits_only_for_hooks_whose_reply_matters(
    claude_dir: Path, nmem_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """UserPromptSubmit prints nothing while prompt recall is off (the default), and SessionEnd never
    prints: both run in the background. Prompt recall on (config.toml), install waits for the prompt's."""
    settings = claude_dir / "settings.json"
    assert nmem("install", "--no-mcp").returncode == 0
    end_of_work = {"SessionStart", "PreCompact", "PostCompact", "Stop", "SubagentStop"}
    assert _waited_for(settings) == end_of_work

    home = Path(nmem_env["NMEM_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("prompt_recall = true\n")
    assert nmem("install", "--no-mcp").returncode == 0
    assert _waited_for(settings) == end_of_work | {"UserPromptSubmit"}

    (home / "config.toml").write_text("prompt_recall = false\n")
    monkeypatch.setenv("NMEM_PROMPT_RECALL", "true")  # the variable counts as the file does
    assert nmem("install", "--no-mcp").returncode == 0
    assert _waited_for(settings) == end_of_work | {"UserPromptSubmit"}
    monkeypatch.delenv("NMEM_PROMPT_RECALL")
    assert nmem("install", "--no-mcp").returncode == 0
    assert _waited_for(settings) == end_of_work

    (home / "config.toml").write_text("prompt_recall = [\n")  # unreadable: recall may be on, so wait for it
    assert nmem("install", "--no-mcp").returncode == 0
    assert _waited_for(settings) == end_of_work | {"UserPromptSubmit"}
