"""Small inconsistencies a user meets once and remembers (issue #37, 4): search's agent, marks in a pipe,
a misspelt setting, where config.toml lives, what `install --project` writes, where backups go. The real
CLI, with a real daemon where a read needs one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.helpers import claude_bash, nmem

pytestmark = pytest.mark.daemon


def test_search_json_gives_the_agent_as_show_does_and_a_pipe_gets_plain_text(daemon: Daemon) -> None:
    daemon.start()
    ran = claude_bash("s-kestrel", "/tmp/nmem-test-project", "make check", "ok: 12 passed\nkestrelmark ready\n")
    assert run_send(json.dumps(ran).encode()).returncode == 0
    found = nmem("search", "kestrelmark", "--all", "--json")
    hit = json.loads(found.stdout.splitlines()[0])
    shown = json.loads(nmem("show", str(hit["id"]), "--json").stdout)
    assert hit["agent"] == shown["agent"] == "claude-code", (hit, shown)
    piped = nmem("search", "kestrelmark", "--all")
    assert "kestrelmark" in piped.stdout and "⟦" not in piped.stdout, piped.stdout
    assert "⟦kestrelmark⟧" in nmem("search", "kestrelmark", "--all", "--marks").stdout


def test_config_lives_under_xdg_the_old_place_is_read_and_a_typo_gets_a_suggestion(
    nmem_env: dict[str, str],
) -> None:
    old = Path(nmem_env["NMEM_HOME"]) / "config.toml"
    old.parent.mkdir(parents=True)
    old.write_text("context_budget = 1234\n")
    shown = nmem("config", "show", "--json")
    assert json.loads(shown.stdout)["context_budget"] == {"value": 1234, "source": str(old)}
    assert "old place" in shown.stderr and "nmem/config.toml" in shown.stderr, shown.stderr

    new = Path(nmem_env["XDG_CONFIG_HOME"]) / "nmem" / "config.toml"
    new.parent.mkdir(parents=True)
    new.write_text("prompt_recal = true\n")
    typo = nmem("config", "show", "--json")
    assert typo.returncode == 1 and "did you mean 'prompt_recall'" in typo.stderr, typo.stderr
    new.write_text("context_budget = 4321\n")
    assert json.loads(nmem("config", "show", "--json").stdout)["context_budget"] == {"value": 4321, "source": str(new)}


def test_install_says_what_it_writes_and_where_backups_go(tmp_path: Path) -> None:
    assert "settings.local.json" in nmem("install", "--help").stdout
    claude = tmp_path / "claude"
    claude.mkdir()
    settings = claude / "settings.json"
    settings.write_text('{"model": "opus"}\n')
    env = {"CLAUDE_CONFIG_DIR": str(claude)}
    said = []
    for _ in range(3):
        for command in ("install", "uninstall"):
            done = nmem(command, "--no-import", env=env) if command == "install" else nmem(command, "--yes", env=env)
            assert done.returncode == 0, done.stderr
            said.append(done.stdout)
    assert all("backups (0600" in s and str(claude) in s for s in said), said
    assert settings.read_text() == '{"model": "opus"}\n'
    kept = list(claude.glob("settings.json.nmem-backup-*"))
    assert len(kept) <= 2, kept  # the file before the install, and with nmem's hooks: nothing more is useful
