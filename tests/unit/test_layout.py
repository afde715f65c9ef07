"""The package's folders depend on each other in one direction only (docs/how-it-works.md: Where the code lives).

Every `import` of every module is read, the lazy ones inside functions and the
ones under TYPE_CHECKING too, so a cycle cannot hide behind either.
"""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "nmemd"

# Top to bottom. A folder may import its own modules and any folder on a lower line;
# folders on one line are independent of each other. "" is the package's own modules
# (config, model, errors, the agents' registry), which everything may use.
LAYERS: list[tuple[str, ...]] = [
    ("cli", "__main__"),
    ("agents",),  # each agent's folder (nmemd/agents/<name>/): its code uses capture, history and setup
    ("setup", "web"),
    ("control",),
    ("daemon",),
    ("jobs", "mcp"),
    ("history",),  # the history import, export/import and purge: retention (jobs) removes through purge
    ("team",),
    ("recall",),
    ("capture",),
    ("store",),
    ("",),
]
RANK = {folder: rank for rank, line in enumerate(LAYERS) for folder in line}
# Code run in a child process, named in a string (`python -c "from nmemd.x import ..."`, `-m nmemd.x`,
# `importlib.import_module("nmemd.x...")`), is read as an import too. The edges that point up on purpose:
PROCESS_EDGES: dict[tuple[str, str], str] = {
    ("jobs/maintenance.py", "nmemd.cli"): "the scheduled history job runs `nmem import-transcripts --json` as a child",
    ("web/service.py", "nmemd.cli"): "`nmem ui --background` starts the lasting viewer, `nmem ui --serve-background`",
}

# The edges that point up on purpose, reached only when first called (never imported at module level):
# (module, target) as `fnmatch` patterns.
LAZY_EDGES: dict[tuple[str, str], str] = {
    ("registry.py", "nmemd.agents"): "the registry imports the built-in agents' specs when first read"
    " (nmemd/registry.py says why)",
    ("agent_spec.py", "nmemd.setup.agent_setup"): "the type of `AgentSpec.setup`, for the type checker only",
    ("agent_spec.py", "nmemd.history.sources"): "the type of `AgentSpec.history`, for the type checker only",
}


def _folder(module: str) -> str:
    """`nmemd.store.database` -> `store`; `nmemd.config` and `nmemd` -> ``."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] == "__main__":
        return "__main__"
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("nmemd")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("nmemd"):
            base = node.module or ""
            if base == "nmemd":  # `from nmemd import store` names a folder or a module
                found += [(node.lineno, f"nmemd.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, base))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, m) for m in _CODE_IMPORT.findall(node.value)]  # `python -c "from nmemd.x import"`
        elif isinstance(node, ast.List | ast.Tuple):  # `[python, "-m", "nmemd.x"]`
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            found += [
                (node.lineno, str(b)) for a, b in zip(words, words[1:], strict=False) if a == "-m" and _is_nmemd(b)
            ]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) == "Lazy" and node.args:  # `Lazy("nmemd.x", ...)`
            if isinstance(node.args[0], ast.Constant) and _is_nmemd(node.args[0].value):
                found.append((node.lineno, str(node.args[0].value)))
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module"):
            arg = node.args[0] if node.args else None  # `import_module(f"nmemd.x.{name}")`
            first = arg.values[0] if isinstance(arg, ast.JoinedStr) and arg.values else arg
            if isinstance(first, ast.Constant) and _is_nmemd(first.value):
                found.append((node.lineno, first.value.rstrip(".")))
    return found


_CODE_IMPORT = re.compile(r"\bfrom (nmemd(?:\.\w+)+) import\b")


def _is_nmemd(name: object) -> bool:
    return isinstance(name, str) and (name == "nmemd" or name.startswith("nmemd."))


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_folder_has_a_place_in_the_layers() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(RANK), f"add {sorted(folders - set(RANK))} to LAYERS"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    here = _folder("nmemd." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
    wrong = []
    for line, target in _imports(path):
        there = _folder(target)
        if (str(path.relative_to(PACKAGE)), target) in PROCESS_EDGES or _lazy_edge(path, target):
            continue
        if there != here and RANK[there] <= RANK[here]:
            wrong.append(f"line {line}: {target} ({there or 'nmemd'}) is not below {here or 'nmemd'}")
    assert not wrong, "\n".join(wrong)


def test_the_process_edges_named_are_there() -> None:
    """An edge that went away leaves PROCESS_EDGES too (so the list stays the truth)."""
    for (module, target), why in PROCESS_EDGES.items():
        assert target in {t for _, t in _imports(PACKAGE / module)}, f"{module} no longer runs {target} ({why})"


def _lazy_edge(path: Path, target: str) -> str | None:
    module = str(path.relative_to(PACKAGE))
    return next((why for (m, t), why in LAZY_EDGES.items() if fnmatch(module, m) and fnmatch(target, t)), None)


def _top_level_imports(path: Path) -> set[str]:
    body = ast.parse(path.read_text()).body
    return {n.module for n in body if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in body if isinstance(n, ast.Import) for a in n.names
    }


def test_the_lazy_edges_are_lazy() -> None:
    """An upward edge is reached when first called, never imported at module level (no cycle at import)."""
    for (pattern, target), why in LAZY_EDGES.items():
        modules = [p for p in _modules() if fnmatch(str(p.relative_to(PACKAGE)), pattern)]
        assert modules, f"no module is {pattern} ({why})"
        for path in modules:
            top = [t for t in _top_level_imports(path) if fnmatch(t, target)]
            assert not top, f"{path.relative_to(PACKAGE)} imports {top[0]} at load"


def test_an_agents_spec_names_only_its_own_folders_code() -> None:
    """`nmemd/agents/<name>/__init__.py` reaches `nmemd.agents.<name>.*` and nothing of another agent's."""
    for init in sorted(PACKAGE.glob("agents/*/__init__.py")):
        own = f"nmemd.agents.{init.parent.name}"
        for line, target in _imports(init):
            if target.startswith("nmemd.agents.") and target.count(".") > 2:
                assert target.startswith(own + "."), f"{init.relative_to(PACKAGE)}:{line} reaches {target}"


def test_folders_say_what_they_hold() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 40, f"{init.relative_to(PACKAGE)} needs a docstring saying what the folder holds"


def test_every_module_imports_on_its_own() -> None:
    """Annotations of names imported only for type checking must not be evaluated at import time."""
    import subprocess
    import sys

    names = [".".join(("nmemd", *p.relative_to(PACKAGE).with_suffix("").parts)) for p in _modules()]
    names = [n.removesuffix(".__init__") for n in names if not n.endswith("__main__")]
    code = "import importlib, sys\nfor n in sys.argv[1:]: importlib.import_module(n)"
    done = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_every_package_imported_is_declared() -> None:
    """A package nmem imports by name is in pyproject's dependencies (or an extra), not only there
    because another dependency brings it today."""
    import re
    import sys
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    reqs = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    declared = {re.split(r"[<>=!~\[;\s]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}
    dists = packages_distributions()
    undeclared: dict[str, str] = {}
    for path in [*_modules(), *sorted((PACKAGE.parent / "nmem_client").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for top in {name.split(".")[0] for name in names} - set(sys.stdlib_module_names) - {"nmemd", "nmem_client"}:
                if not {d.lower().replace("_", "-") for d in dists.get(top, [top])} & declared:
                    undeclared.setdefault(top, f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not undeclared, f"imported, not in pyproject: {undeclared}"


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_a_leading_underscore_means_private() -> None:
    """No module takes another's `_name` (`from nmemd.x import _name`, or `x._name` of an imported
    module): what other modules use is public and named for what it does."""
    paths = [*_modules(), *sorted((PACKAGE.parent / "nmem_client").glob("*.py"))]
    modules = {_module_name(p) for p in paths}
    wrong = []
    for path in paths:
        here = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        aliases: dict[str, str] = {}  # a local name -> the nmem module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules | {"nmemd"}:
                for alias in node.names:
                    if node.module != here and _private(alias.name):
                        wrong.append(
                            f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: from {node.module} import {alias.name}"
                        )
                    if f"{node.module}.{alias.name}" in modules:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in modules and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
                there = aliases.get(node.value.id)
                if there is not None and there != here:
                    wrong.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def _loaded_imports(path: Path) -> list[tuple[int, str]]:
    """The nmemd modules `path` imports when it is itself imported: its module-level `import`s, inside an
    `if`, `try` or `with` too, but not those under `if TYPE_CHECKING:` nor those inside a function."""
    found: list[tuple[int, str]] = []

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for part in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                    visit(part)
            elif isinstance(node, ast.With):
                visit(node.body)
            elif isinstance(node, ast.Import):
                found.extend((node.lineno, a.name) for a in node.names if _is_nmemd(a.name))
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_nmemd(node.module):
                if node.module == "nmemd":  # `from nmemd import store` names a folder or a module
                    found.extend((node.lineno, f"nmemd.{a.name}") for a in node.names)
                else:
                    found.append((node.lineno, str(node.module)))

    visit(ast.parse(path.read_text(), str(path)).body)
    return found


def _top_folder(module: str) -> str:
    """`nmemd.agents.codex.setup` -> `agents`; a module of the package itself (`nmemd.config`) -> ``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else ""


def test_no_import_cycle_between_folders() -> None:
    """What a folder imports at load never imports that folder back, through any number of folders: two
    folders that need each other are one, and the first import of either would depend on the order
    (issue #38). Lazy imports inside functions and TYPE_CHECKING ones are left out: they run later."""
    edges: dict[str, dict[str, str]] = {}  # folder -> folder it imports -> the first such import
    for path in _modules():
        here = _top_folder(_module_name(path))
        for line, target in _loaded_imports(path):
            there = _top_folder(target)
            if here and there and there != here:
                edges.setdefault(here, {}).setdefault(there, f"{path.relative_to(PACKAGE)}:{line} imports {target}")

    def cycle_from(start: str) -> list[str] | None:
        """The folders of a way from `start` back to itself (depth first), or None."""
        trail, seen = [start], set()

        def walk(folder: str) -> bool:
            for there in sorted(edges.get(folder, {})):
                if there == start:
                    return True
                if there not in seen:
                    seen.add(there)
                    trail.append(there)
                    if walk(there):
                        return True
                    trail.pop()
            return False

        return trail if walk(start) else None

    for start in sorted(edges):
        cycle = cycle_from(start)
        if cycle:
            ring = [*cycle, start]
            steps = [edges[a][b] for a, b in zip(ring, ring[1:], strict=False)]
            pytest.fail("import cycle " + " -> ".join(ring) + ":\n" + "\n".join(steps))
