"""nmem_client is stdlib-only and cheap: a checked property, not a promise."""

from __future__ import annotations

import subprocess
import sys

from conftest import SEND_SCRIPT

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


def test_hot_path_imports_only_builtins() -> None:
    """Running send.py as hooks do must not load json, socket, re or sqlite3 when the daemon answers."""
    code = (
        "import sys; sys.argv=['send.py']; "
        f"sys.path.insert(0, {str(SEND_SCRIPT.parent.parent)!r}); import nmem_client.send"
    )
    mods = _modules_after(code, "-S")
    for heavy in ("os", "json", "socket", "re", "sqlite3", "subprocess", "selectors", "enum"):
        assert heavy not in mods, heavy


def test_send_script_exits_zero_silently_on_empty_stdin() -> None:
    done = subprocess.run([sys.executable, "-I", "-S", str(SEND_SCRIPT)], input=b"", capture_output=True, timeout=30)
    assert done.returncode == 0
    assert done.stderr == b"" and done.stdout == b""
