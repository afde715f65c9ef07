"""The docs stay true: the CLI reference is the app's, the README's commands are the CI's, every agent
is in the README and in docs/agents.md, every link between the documents leads somewhere, and every
file of the repository they name exists."""

from __future__ import annotations

import re
from pathlib import Path

from nmemd import registry
from nmemd.cli import reference

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# A repository path as the documents write it, in backticks, a link's text or prose: `nmemd/x.py`,
# tests/unit/test_x.py::test_y (the test id is left out); not part of a longer path or URL.
REPO_PATH = re.compile(r"(?<![\w./~-])((?:nmemd|nmem_client|tests|bench|docs|\.ci)/[\w./*-]*[\w*/])")
# Named on purpose though absent from a clone: each with its reason.
NOT_IN_THE_REPOSITORY = {
    ".ci/claude-code": "where .ci/run installs Claude Code (ignored by git)",
    ".ci/codex": "where .ci/run installs Codex CLI (ignored by git)",
    "bench/out/reliability-long.txt": "a benchmark's output (bench/out is ignored by git)",
    "nmemd/team/sql/mNNN_*.sql": "the migrations' naming pattern",
    "tests/ws_test.py": "a file of a user's project, in an example of a recall line",
}
# The benchmark journal names each file as it was at the commit of its run: history, not a guide.
JOURNAL = REPO / "docs" / "benchmarks-history.md"


def test_the_cli_reference_is_the_apps_own() -> None:
    """docs/cli.md is what `python -m nmemd.cli.reference` prints: it cannot drift from `--help`."""
    assert (REPO / "docs" / "cli.md").read_text() == reference.render(), (
        "docs/cli.md differs from the app: run `python -m nmemd.cli.reference > docs/cli.md`"
    )


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    command = ".venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest -q -m 'not slow'\n"
    assert command in ci
    assert "python3 -m venv .venv && " + command.replace(" -q -e", " -e", 1) in README
    assert "\n.venv/bin/pytest -q -m slow\n" in ci  # what the README's command leaves out still runs in CI


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


def _unreleased() -> str:
    changelog = (REPO / "CHANGELOG.md").read_text()
    section = changelog.split("## [Unreleased]", 1)[1]
    following = re.search(r"^## ", section, re.MULTILINE)
    return section[: following.start()] if following else section


def test_every_file_the_documents_name_exists() -> None:
    """Issue #38: a document naming a file that moved sends its reader nowhere; fix the document."""
    documents = [REPO / "README.md", REPO / "RELIABILITY.md", REPO / "BENCHMARKS.md", *DOCS]
    texts = [(doc.name, doc.read_text()) for doc in documents if doc != JOURNAL]
    missing = sorted(
        f"{name}: {path}"
        for name, text in [*texts, ("CHANGELOG.md (Unreleased)", _unreleased())]
        for path in {found.rstrip("./") for found in REPO_PATH.findall(text)}
        if path not in NOT_IN_THE_REPOSITORY and not (REPO / path).exists() and not any(REPO.glob(path))
    )
    assert not missing, "named but absent (moved?):\n" + "\n".join(missing)
