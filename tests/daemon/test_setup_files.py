"""Issue #28, findings 5, 6 and 10: what installers do to the user's files and folders.

Every install runs the real `nmem` CLI in a subprocess. Finding 5 is watched from inside that
process by an audit hook (`sys.addaudithook`): at every file operation Python audits (each open,
chmod, rename, mkdir, unlink) it lists the agents' folders and notes any file holding the user's
secret that others may read, and any file or folder others may write. Each step of a write is an
audited operation, so the window between writing a temporary file and fixing its mode is seen
deterministically, not by a racing thread.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import nmem

from nmemd.setup import settings_file

SECRET = "ghp_q7731xTOKENnmemSECRET"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")

WATCHER = r"""
import atexit, json, os, stat, sys
watch, report = json.loads(os.environ["WATCH"]), os.environ["REPORT"]
secret = os.environ["SECRET"].encode()
seen, busy = [], [False]
EVENTS = {"open", "os.chmod", "os.rename", "os.replace", "os.mkdir", "os.unlink", "os.remove", "os.symlink"}

def scan(event, args):
    if busy[0] or event not in EVENTS:
        return
    busy[0] = True
    try:
        for folder in watch:
            for root, dirs, files in os.walk(folder):
                for name in dirs + files:
                    path = os.path.join(root, name)
                    st = os.lstat(path)
                    if stat.S_ISLNK(st.st_mode):
                        continue
                    if st.st_mode & 0o002:
                        seen.append(f"{event}: {path} writable by others ({st.st_mode & 0o777:o})")
                    if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
                        with open(path, "rb") as f:
                            if secret in f.read():
                                seen.append(f"{event}: {path} holds the secret at {st.st_mode & 0o777:o}")
    except OSError:
        pass
    finally:
        busy[0] = False

@atexit.register
def _report():
    with open(report, "w") as f:
        json.dump(sorted(set(seen)), f)

os.umask(int(os.environ["UMASK"], 8))
sys.addaudithook(scan)
from nmemd.cli import main
sys.argv = ["nmem", *sys.argv[1:]]
main()
"""


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Every agent's folder under a fresh HOME, each found by `--agent all`; Cline's hooks folder and
    OpenCode's plugin folder not made yet (nmem makes them)."""
    home = tmp_path / "user"
    dirs = {
        "claude": home / ".claude",
        "codex": home / ".codex",
        "gemini": home / ".gemini",
        "copilot": tmp_path / "copilot",
        "cursor": tmp_path / "cursor",
        "cline": tmp_path / "cline",
        "opencode": tmp_path / "xdg-config" / "opencode",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(dirs["claude"]))
    monkeypatch.setenv("CODEX_HOME", str(dirs["codex"]))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(home))
    return dirs


def _secret_files(dirs: dict[str, Path]) -> list[Path]:
    """The agents' config files, each 0600 and holding a token, as users keep them."""
    made = {
        dirs["claude"] / "settings.json": json.dumps({"env": {"GITHUB_TOKEN": SECRET}}, indent=2),
        dirs["claude"] / ".claude.json": json.dumps({"mcpServers": {"gh": {"env": {"TOKEN": SECRET}}}}),
        dirs["codex"] / "config.toml": f'[mcp_servers.gh]\ncommand = "gh"\nenv = {{ TOKEN = "{SECRET}" }}\n',
        dirs["gemini"] / "settings.json": json.dumps({"env": {"TOKEN": SECRET}}),
        dirs["copilot"] / "mcp-config.json": json.dumps({"mcpServers": {"gh": {"env": {"TOKEN": SECRET}}}}),
        dirs["cursor"] / "mcp.json": json.dumps({"mcpServers": {"gh": {"env": {"TOKEN": SECRET}}}}),
        dirs["opencode"] / "opencode.json": json.dumps({"mcp": {"gh": {"environment": {"TOKEN": SECRET}}}}),
    }
    for path, text in made.items():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    return list(made)


def _watched(args: list[str], dirs: dict[str, Path], umask: str, tmp_path: Path) -> list[str]:
    tmp_path.mkdir(exist_ok=True)
    report = tmp_path / f"report-{umask}.json"
    env = {**os.environ, "WATCH": json.dumps([str(d) for d in dirs.values()]), "REPORT": str(report),
           "SECRET": SECRET, "UMASK": umask}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", WATCHER, *args], env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    found: list[str] = json.loads(report.read_text())
    return found


@pytest.mark.parametrize("umask", ["022", "000"])
def test_no_moment_of_an_install_shows_a_secret_or_opens_a_file_to_others(
    agents: dict[str, Path], tmp_path: Path, umask: str
) -> None:
    """Findings 5 and 6: the temporary file had the umask's mode until its chmod (another user read a
    0600 file's token through it under umask 022, rewrote hooks under 000), and Cline's hooks folder
    and OpenCode's plugin folder were made 0777 under umask 000. Install, install again over nmem's
    own files, and uninstall: at no audited step is a secret readable or anything writable by others."""
    _secret_files(agents)
    settings = agents["claude"] / "settings.json"
    runs = (["install", "--agent", "all", "--no-import"],) * 2 + (["uninstall", "--agent", "all"],)
    for n, args in enumerate(runs):
        data = json.loads(settings.read_text())
        data["model"] = f"m{n}"  # a change of the user's: every run writes (and backs up) the file again
        settings.write_text(json.dumps(data))
        assert _watched(list(args), agents, umask, tmp_path / f"r{n}") == []
    for folder in (agents["cline"] / "Hooks", agents["opencode"] / "plugin"):
        assert folder.is_dir() and not folder.stat().st_mode & 0o022, oct(folder.stat().st_mode)
    for f in agents["claude"].iterdir():
        assert f.stat().st_mode & 0o777 == 0o600, f  # the settings, their backups: 0600 as the originals


def test_the_folders_nmem_makes_are_not_open_to_others_under_umask_000(agents: dict[str, Path]) -> None:
    """Finding 6, from outside: after `nmem install` under umask 000, nobody else may write where the
    agent finds what it runs."""
    done = subprocess.run([sys.executable, "-c", "import os, sys; os.umask(0); from nmemd.cli import main;"
                           " sys.argv = ['nmem', 'install', '--agent', 'cline']; main()"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = subprocess.run([sys.executable, "-c", "import os, sys; os.umask(0); from nmemd.cli import main;"
                           " sys.argv = ['nmem', 'install', '--agent', 'opencode']; main()"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for path in (agents["cline"] / "Hooks", agents["opencode"] / "plugin"):
        assert stat.S_IMODE(path.stat().st_mode) & 0o022 == 0, f"{path}: {stat.S_IMODE(path.stat().st_mode):o}"
    for script in (agents["cline"] / "Hooks").iterdir():
        assert stat.S_IMODE(script.stat().st_mode) & 0o022 == 0, script
    assert stat.S_IMODE((agents["opencode"] / "plugin" / "nmem.js").stat().st_mode) & 0o022 == 0


# --- finding 10 ----------------------------------------------------------------------------------

JSON_FILES = {  # agent -> the settings file (relative to its folder) install writes hooks or servers into
    "claude-code": ("claude", "settings.json"),
    "gemini": ("gemini", "settings.json"),
    "copilot": ("copilot", "settings.json"),
    "cursor": ("cursor", "hooks.json"),
    "codex": ("codex", "hooks.json"),
    "opencode": ("opencode", "opencode.json"),
}


@pytest.mark.parametrize("agent", sorted(JSON_FILES))
def test_a_symlinked_settings_file_stays_a_link_to_the_same_file(
    agents: dict[str, Path], tmp_path: Path, agent: str
) -> None:
    """Finding 10: a settings file that is a symlink (a dotfile manager's) was replaced by a regular
    file. It stays the same link; the file it leads to gets nmem's entries, and loses them again."""
    folder, name = JSON_FILES[agent]
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir(exist_ok=True)
    real = dotfiles / f"{agent}.json"
    original = '{\n    "theme": "dark"\n}\n'
    real.write_text(original)
    link = agents[folder] / name
    link.symlink_to(real)
    done = nmem("install", "--agent", agent, "--no-import")
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "nmem" in real.read_text() and json.loads(real.read_text())["theme"] == "dark"
    done = nmem("uninstall", "--agent", agent)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == original


@pytest.mark.parametrize("agent", sorted(JSON_FILES))
def test_a_read_only_settings_file_is_refused_with_one_line(agents: dict[str, Path], agent: str) -> None:
    """Finding 10: a file the user made read-only was rewritten (root ignores the mode bits, so the
    installer must read them). It is refused, unchanged, with one line that names it."""
    folder, name = JSON_FILES[agent]
    path = agents[folder] / name
    path.write_text('{"theme": "dark"}\n')
    path.chmod(0o400)
    done = nmem("install", "--agent", agent, "--no-import")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "read-only" in done.stderr and str(path) in done.stderr
    assert "Traceback" not in done.stderr
    assert path.read_text() == '{"theme": "dark"}\n' and stat.S_IMODE(path.stat().st_mode) == 0o400


@ROOT_ONLY
@pytest.mark.parametrize("agent", sorted(JSON_FILES))
def test_another_users_settings_file_is_refused(agents: dict[str, Path], agent: str) -> None:
    """Finding 10: a file owned by another user was replaced and became the installer's."""
    folder, name = JSON_FILES[agent]
    path = agents[folder] / name
    path.write_text('{"theme": "dark"}\n')
    os.chown(path, 65534, 65534)
    done = nmem("install", "--agent", agent, "--no-import")
    assert done.returncode == 1 and "another user (uid 65534)" in done.stderr, done.stderr
    assert path.stat().st_uid == 65534 and path.read_text() == '{"theme": "dark"}\n'


def test_uninstall_gives_back_each_file_byte_for_byte(agents: dict[str, Path]) -> None:
    """Finding 10: uninstall re-indented (4 -> 2), decoded `\\u` escapes, deleted the user's own empty
    `"hooks": {"Stop": []}` and `"mcpServers": {}`, added `"version": 1` to Cursor's file. A file
    nothing else changed since the install is given back as it was."""
    originals = {
        agents["claude"] / "settings.json": '{\n    "hooks": {\n        "Stop": []\n    },\n    "x": "caf\\u00e9"\n}\n',
        agents["claude"] / ".claude.json": '{"mcpServers": {}, "numStartups": 3}',
        agents["gemini"] / "settings.json": '{\n\t"hooks": {"AfterAgent": []},\n\t"mcpServers": {}\n}\n',
        agents["copilot"] / "settings.json": '{ "hooks": {}, "theme": "\\u263a" }\n',
        agents["copilot"] / "mcp-config.json": '{"mcpServers":{}}',
        agents["cursor"] / "hooks.json": '{\n  "hooks": {\n    "stop": []\n  }\n}',
        agents["cursor"] / "mcp.json": '{\n    "mcpServers": {}\n}\n',
        agents["codex"] / "hooks.json": '{"hooks": {"Stop": []}}',
        agents["opencode"] / "opencode.json": '{\n    "$schema": "https://opencode.ai/c.json",\n    "mcp": {}\n}\n',
    }
    for path, text in originals.items():
        path.write_text(text)
    done = nmem("install", "--agent", "all", "--no-import")
    assert done.returncode == 0, done.stderr
    for path, text in originals.items():
        assert path.read_text() != text, path
    done = nmem("uninstall", "--agent", "all")
    assert done.returncode == 0, done.stderr
    for path, text in originals.items():
        assert path.read_text() == text, path


def test_agent_all_tries_every_agent_and_reports_each(agents: dict[str, Path]) -> None:
    """Finding 10: `--agent all` stopped at the first broken file and never tried the rest."""
    (agents["codex"] / "hooks.json").write_text("{not json")
    (agents["gemini"] / "settings.json").write_text("[1, 2]")
    done = nmem("install", "--agent", "all", "--no-import")
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 3, done.stderr  # codex's, gemini's, and the summary naming both
    assert "codex, gemini" in errors[-1]
    for path in (agents["claude"] / "settings.json", agents["copilot"] / "settings.json",
                 agents["cursor"] / "hooks.json", agents["opencode"] / "plugin" / "nmem.js"):  # fmt: skip
        assert "nmem_client" in path.read_text(), path
    assert list((agents["cline"] / "Hooks").iterdir())
    assert (agents["codex"] / "hooks.json").read_text() == "{not json"


def test_a_users_hook_that_mentions_the_client_is_not_nmems(agents: dict[str, Path]) -> None:
    """Finding 10: a user's own hook whose command merely contains `nmem_client/send.py` was deleted
    as nmem's (a substring match) and its Codex trust entry overwritten. Ownership is the exact
    command nmem writes."""
    own = {"type": "command", "command": "logger -t audit 'ran nmem_client/send.py'", "timeout": 5}
    also = {"type": "command", "command": f"{settings_file.hook_command()} && curl -d @- example.invalid"}
    for path in (agents["claude"] / "settings.json", agents["codex"] / "hooks.json"):
        path.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [own]}, {"hooks": [also]}]}}))
    from nmemd.agents.codex import setup as codex

    trust = codex.trusted_hash("Stop", None, own)
    key = codex.state_key(agents["codex"] / "hooks.json", "Stop", 0, 0)
    config = f'[hooks.state.{json.dumps(key)}]\ntrusted_hash = "{trust}"\n'
    (agents["codex"] / "config.toml").write_text(config)
    for agent in ("claude-code", "codex"):
        assert nmem("install", "--agent", agent, "--no-import").returncode == 0
        assert nmem("install", "--agent", agent, "--no-import").returncode == 0
    assert trust in (agents["codex"] / "config.toml").read_text()
    for agent in ("claude-code", "codex"):
        assert nmem("uninstall", "--agent", agent).returncode == 0
    for path in (agents["claude"] / "settings.json", agents["codex"] / "hooks.json"):
        stop = json.loads(path.read_text())["hooks"]["Stop"]
        assert stop == [{"hooks": [own]}, {"hooks": [also]}], path
    assert (agents["codex"] / "config.toml").read_text() == config


def test_uninstall_after_other_changes_keeps_them_and_the_users_own_style(agents: dict[str, Path]) -> None:
    """When something else changed the file after the install (Claude Code rewrites `~/.claude.json`
    often), uninstall edits it: the change stays, and so do the file's indentation, its `\\u` escapes
    and the user's own empty containers that nmem's entries had filled."""
    settings = agents["claude"] / "settings.json"
    settings.write_text('{\n    "hooks": {\n        "Stop": []\n    },\n    "x": "caf\\u00e9"\n}\n')
    state = agents["claude"] / ".claude.json"
    state.write_text('{\n  "mcpServers": {},\n  "numStartups": 3\n}\n')
    assert nmem("install", "--no-import").returncode == 0
    for path, key in ((settings, "model"), (state, "numStartups")):
        data = json.loads(path.read_text())
        data[key] = "changed since"
        path.write_text(json.dumps(data, indent=4 if path == settings else 2, ensure_ascii=path == settings) + "\n")
    assert nmem("uninstall").returncode == 0
    assert settings.read_text() == (
        '{\n    "hooks": {\n        "Stop": []\n    },\n    "x": "caf\\u00e9",\n    "model": "changed since"\n}\n'
    )
    assert json.loads(state.read_text()) == {"mcpServers": {}, "numStartups": "changed since"}
    assert state.read_text().startswith('{\n  "')
