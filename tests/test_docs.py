"""The docs stay true: every command is documented, the README's commands are the CI's."""

from __future__ import annotations

from pathlib import Path

import typer.main

from nmemd.cli import app

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _commands() -> list[str]:
    group = typer.main.get_command(app)
    names = []
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        sub = getattr(cmd, "commands", None)
        names += [f"{name} {s}" for s in sub] if sub else [name]
    return names


def test_every_cli_command_is_in_the_readme() -> None:
    for name in _commands():
        first = name.split()[0]
        assert f"nmem {first}" in README, name


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert ".venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest -q" in ci
    assert "pip install -e '.[test]' && .venv/bin/pytest -q" in README


def test_changelog_has_an_unreleased_section() -> None:
    assert "## Unreleased" in (REPO / "CHANGELOG.md").read_text()
