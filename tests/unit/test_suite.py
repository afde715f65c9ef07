"""The test suite's own rules: each layer holds what its name says, test modules share code through the
`support` package only, and every fault-injection scenario of RELIABILITY.md keeps a test marked with it."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
LAYERS = ("unit", "daemon", "e2e")
# What starts a daemon, or runs our entry points (the hook client, `nmem`) as processes.
PROCESS_HELPERS = {"Daemon", "run_send", "SEND_SCRIPT", "BIN", "nmem", "nmem_bytes"}


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _modules(layer: str) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted((TESTS / layer).glob("*.py")):
        yield path, _tree(path)


def _imports(tree: ast.Module) -> Iterator[tuple[str, list[str]]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []


def _scenarios(tree: ast.Module) -> Iterator[int]:
    """N of every `@pytest.mark.reliability(scenario=N)` in the module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.reliability":
            for keyword in node.keywords:
                if keyword.arg == "scenario" and isinstance(keyword.value, ast.Constant):
                    yield int(keyword.value.value)


def test_every_test_is_marked_with_its_layer(request: pytest.FixtureRequest) -> None:
    """conftest.py marks each test by its folder: `pytest -m unit` is `pytest tests/unit`."""
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("daemon") is None


def test_every_test_module_lives_in_a_layer() -> None:
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []
    assert {p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in ("data", "__pycache__")} == {
        *LAYERS,
        "support",
    }


def test_no_two_test_modules_share_a_name() -> None:
    """pytest imports test modules by their bare name (no packages): two layers with the same file name
    stop the whole suite at collection."""
    seen: dict[str, str] = {}
    clashes = []
    for layer in LAYERS:
        for path in sorted((TESTS / layer).glob("test_*.py")):
            if path.name in seen:
                clashes.append(f"{seen[path.name]}/{path.name} and {layer}/{path.name}")
            seen[path.name] = layer
    assert not clashes, f"rename one of each: {clashes}"


def test_a_unit_test_starts_no_daemon_and_runs_no_entry_point() -> None:
    for path, tree in _modules("unit"):
        for module, names in _imports(tree):
            assert not (module.startswith("support") and PROCESS_HELPERS & set(names)), (path.name, module, names)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                assert "daemon" not in [a.arg for a in node.args.args], (path.name, node.name)


def test_test_modules_share_code_through_support_only() -> None:
    """No `from conftest import`, and no test module imports another (`pytest tests/unit` alone would not
    find one of another layer; what two modules share belongs in support)."""
    for layer in LAYERS:
        for path, tree in _modules(layer):
            for module, _ in _imports(tree):
                assert module != "conftest", path.name
                assert not module.startswith("test_"), f"{layer}/{path.name} imports {module}"


def test_every_scenario_of_reliability_md_has_a_test_marked_with_it() -> None:
    """`pytest -m reliability` runs a bounded version of each scenario in RELIABILITY.md's table."""
    table = (TESTS.parent / "RELIABILITY.md").read_text()
    scenarios = {int(n) for n in re.findall(r"^\| (\d+) \| ", table, re.M)}
    assert len(scenarios) == 12
    marked = {n for layer in LAYERS for _, tree in _modules(layer) for n in _scenarios(tree)}
    assert scenarios <= marked, sorted(scenarios - marked)


def test_the_development_guide_says_what_each_layer_holds_and_how_to_run_it() -> None:
    guide = (TESTS.parent / "docs" / "development.md").read_text()
    for layer in LAYERS:
        assert f"| `tests/{layer}` |" in guide and f"`.venv/bin/pytest -q tests/{layer}`" in guide, layer
