"""nmem as a Claude Code plugin: the files of `claude-plugin/` and the marketplace that lists it.

The plugin is the other way in (issue #15): Claude Code installs, enables and removes it
(`claude plugin marketplace add`, `claude plugin install nmem@nmem`, `/plugin`), where
`nmem install` writes the same hooks and MCP server into the user's settings itself. Its hooks
are `settings.HOOKS`, the same events, matchers, timeouts and async flags; as a plugin cannot
know where nmem is installed, they run `nmem-send` and `nmem-mcp` from PATH. The files in the
repository are rendered here (`python -m nmemd.agents.claude_code.plugin` writes them; a test checks they
match), so the two ways never drift apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

from nmem_client import paths
from nmemd import __version__
from nmemd.agents.claude_code import settings
from nmemd.setup import files, settings_file

NAME: Final = "nmem"
FOLDER: Final = "claude-plugin"  # the plugin, in the repository
DESCRIPTION: Final = (
    "Local, deterministic memory for Claude Code: every hook event stored by a per-user daemon in"
    " SQLite/FTS5, a compact context of past work at session start, and MCP tools to search it."
    " Needs nmem installed (pipx install nmem-agent-memory, or uv tool install nmem-agent-memory):"
    " nmem-send and nmem-mcp on PATH."
)
# The hook client from PATH, with SIGTERM ignored from before Python starts (settings_file.hook_command);
# nothing, silently, once nmem is uninstalled and the plugin is not (`command -v` is a builtin).
HOOK_COMMAND: Final = "trap '' TERM; command -v nmem-send >/dev/null 2>&1 || exec cat >/dev/null; exec nmem-send"
MCP_COMMAND: Final = "nmem-mcp"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2) + "\n"


def plugin_files() -> dict[str, str]:
    """The plugin folder's files, by path relative to it."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for spec in settings.HOOKS:
        group: dict[str, Any] = {"hooks": [settings_file.handler(spec, HOOK_COMMAND)]}
        if spec.matcher:
            group = {"matcher": spec.matcher, **group}
        hooks.setdefault(spec.event, []).append(group)
    manifest = {
        "name": NAME,
        "version": __version__.split(".dev")[0],
        "description": DESCRIPTION,
        "author": {"name": "nmem"},
        "license": "MIT",
        "keywords": ["memory", "hooks", "mcp", "sqlite"],
    }
    return {
        ".claude-plugin/plugin.json": _json(manifest),
        "hooks/hooks.json": _json({"description": "nmem: every event to the local daemon", "hooks": hooks}),
        ".mcp.json": _json({"mcpServers": {settings_file.MCP_NAME: {"command": MCP_COMMAND, "args": []}}}),
    }


def marketplace_file() -> str:
    """`.claude-plugin/marketplace.json` at the repository's root: a marketplace of one plugin."""
    entry = {"name": NAME, "source": f"./{FOLDER}", "description": DESCRIPTION}
    return _json(
        {"name": NAME, "owner": {"name": "nmem"}, "description": "nmem's Claude Code plugin", "plugins": [entry]}
    )


def rendered(root: Path) -> dict[Path, str]:
    """Every file the plugin and its marketplace are, by path under the repository's `root`."""
    out = {root / FOLDER / rel: text for rel, text in plugin_files().items()}
    out[root / ".claude-plugin" / "marketplace.json"] = marketplace_file()
    return out


def write(root: Path) -> list[Path]:
    """Write the plugin and its marketplace under `root` (the repository); the paths written."""
    written = []
    for path, text in rendered(root).items():
        paths.make_dirs(str(path.parent), 0o755)
        files.replace(path, text.encode("utf-8"), 0o644)
        written.append(path)
    return written


if __name__ == "__main__":  # a maintainer regenerating claude-plugin/ after a change to settings.HOOKS
    for written_path in write(Path(sys.argv[1]) if len(sys.argv) > 1 else settings_file.install_root()):
        print(written_path)  # noqa: T201
