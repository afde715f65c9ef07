"""nmem_client is stdlib-only and cheap: a checked property, not a promise."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.env import SEND_SCRIPT

FORBIDDEN = ("nmemd", "anyio", "aiosqlite", "msgspec", "typer", "mcp", "pydantic", "rich")


def _modules_after(code: str, *flags: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-I", *flags, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return set(out.stdout.split())


def test_client_package_imports_no_third_party_module() -> None:
    mods = _modules_after("import nmem_client.send, nmem_client.inbox, nmem_client.bridge, nmem_client.paths")
    leaked = {m for m in mods if m.split(".")[0] in FORBIDDEN}
    assert not leaked


# Running send.py as hooks do must not load json, socket, re or sqlite3 when the daemon answers;
# nmem-mcp starts beside Claude Code's own start and its SessionStart hook, on the same cores.
_LEAN_STARTS = [
    ("send", ("os", "json", "socket", "re", "sqlite3", "subprocess", "selectors", "enum")),
    ("bridge", ("json", "socket", "threading", "re", "enum", "selectors", "sqlite3", "subprocess")),
]


@pytest.mark.parametrize(("module", "heavy"), _LEAN_STARTS, ids=[m for m, _ in _LEAN_STARTS])
def test_the_client_and_the_mcp_bridge_start_on_builtins(module: str, heavy: tuple[str, ...]) -> None:
    code = (
        f"import sys; sys.argv=['{module}.py']; "
        f"sys.path.insert(0, {str(SEND_SCRIPT.parent.parent)!r}); import nmem_client.{module}"
    )
    mods = _modules_after(code, "-S")
    assert not set(heavy) & mods, set(heavy) & mods


def test_the_script_hooks_run_is_a_stub_whose_code_comes_from_bytecode() -> None:
    """Python compiles the file it runs on every run (~1.5 ms of CPU for the client's code, per hook);
    an imported module comes from __pycache__. So send.py defines nothing: nmem_client.hook does."""
    tree = ast.parse(SEND_SCRIPT.read_text())
    defined = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    assert not defined, [n.name for n in defined]
    code = (
        "import sys; sys.argv=['send.py']; "
        f"sys.path.insert(0, {str(SEND_SCRIPT.parent.parent)!r}); import nmem_client.send as s; "
        "assert s.main.__module__ == 'nmem_client.hook'"
    )
    _modules_after(code, "-S")


def test_send_script_exits_zero_silently_on_empty_stdin() -> None:
    done = subprocess.run([sys.executable, "-I", "-S", str(SEND_SCRIPT)], input=b"", capture_output=True, timeout=30)
    assert done.returncode == 0
    assert done.stderr == b"" and done.stdout == b""


def _cli_modules(*argv: str) -> set[str]:
    """The modules `nmem ARGV` has loaded when it exits (printed from an atexit hook)."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('MODULES ' + ' '.join(sorted(sys.modules))))\n"
        f"sys.argv = ['nmem', *{list(argv)!r}]\n"
        "from nmemd.cli import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(done.stderr.rsplit("MODULES ", 1)[1].split())


def test_the_cli_starts_without_the_daemons_or_the_servers_libraries() -> None:
    """`nmem --help`, `--version` and a command's help load no pydantic (typer >= 0.29 did: +120 ms),
    no rich (its help is plain), no aiosqlite, mcp or anyio (issue #17, item 10: the CLI's start)."""
    for argv in (["--help"], ["--version"], ["search", "--help"], ["daemon", "--help"]):
        loaded = {m.split(".")[0] for m in _cli_modules(*argv)}
        assert not loaded & {"pydantic", "rich", "aiosqlite", "mcp", "anyio", "starlette"}, (argv, loaded)


@given(st.one_of(st.none(), st.text()))
def test_the_bridges_request_body_is_the_json_of_its_project(project: str | None) -> None:
    from nmem_client.bridge import request_body

    body = request_body(project)
    try:
        (project or "").encode("utf-8")
    except UnicodeEncodeError:  # not a path a project can have: the daemon serves every project
        assert json.loads(body) == {"project": None}
        return
    assert json.loads(body) == {"project": project}
