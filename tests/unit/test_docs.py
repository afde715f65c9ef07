"""The docs stay true: the CLI reference is the app's, the README's commands are the CI's, every agent
is in the README and in docs/agents.md, and every link between the documents leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

from nmemd.agents import registry
from nmemd.cli import reference

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_cli_reference_is_the_apps_own() -> None:
    """docs/cli.md is what `python -m nmemd.cli.reference` prints: it cannot drift from `--help`."""
    assert (REPO / "docs" / "cli.md").read_text() == reference.render(), (
        "docs/cli.md differs from the app: run `python -m nmemd.cli.reference > docs/cli.md`"
    )


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert ".venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest -q" in ci
    assert "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest -q" in README


def test_ci_runs_the_static_checks_before_the_tests() -> None:
    """Issue #38: ruff, ruff format and mypy --strict gate CI, ahead of the tests (docs/development.md)."""
    ci = (REPO / ".ci" / "run").read_text()
    tests = ci.index(".venv/bin/pytest -q")
    for check in (".venv/bin/ruff check .", ".venv/bin/ruff format --check .", ".venv/bin/mypy nmemd nmem_client"):
        assert -1 < ci.find(check) < tests, check


def test_the_readme_is_short_and_names_every_agent() -> None:
    """Issue #31: a README a newcomer reads in five minutes; the details are in docs/."""
    assert len(README.splitlines()) <= 120
    agents = (REPO / "docs" / "agents.md").read_text()
    for agent in registry.names():
        command = "nmem install" if agent == "claude-code" else f"nmem install --agent {agent}"
        assert f"`{command}`" in README and f"`{agent}`" in agents, agent


def test_every_link_between_the_documents_leads_somewhere() -> None:
    for doc in [REPO / "README.md", REPO / "RELIABILITY.md", *DOCS]:
        for target in LINK.findall(doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name}: {target}"


def test_changelog_has_an_unreleased_section() -> None:
    assert "## Unreleased" in (REPO / "CHANGELOG.md").read_text()
