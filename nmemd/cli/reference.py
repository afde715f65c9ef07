"""The CLI reference, docs/cli.md, drawn from the app itself so it cannot drift from `--help`.

    python -m nmemd.cli.reference > docs/cli.md

Each command's section is its `--help`, as click prints it at a fixed width (tests/unit/test_docs.py checks
that docs/cli.md is this module's output).
"""

import sys
from typing import Any, Final

import typer.main

WIDTH: Final = 100
HEAD: Final = """# CLI reference

Generated from the app by `python -m nmemd.cli.reference > docs/cli.md` (a test fails when it
differs): each section is the command's `--help`.

Read commands ask the daemon when it runs and read the database read-only when it does not.
`--json` prints one JSON object per line. Errors are one line on stderr and exit 1 (usage errors
exit 2). `--project` takes a folder, a project's name or a unique end of its path; see
[configuration](configuration.md#projects).

Besides `nmem`, the package installs three programs:

- `nmemd [--idle-timeout S] [--socket PATH] [--log-stderr]`: the daemon in the foreground (systemd,
  launchd, debugging). Exit 0: stopped cleanly; 3: start-up failure (config, paths, database); 4:
  another `nmemd` already serves this socket.
- `nmem-send`: the hook client. The payload on stdin, the hook's reply on stdout, always exit 0.
- `nmem-mcp`: a stdio MCP server for any client, a byte pump to the daemon, which it starts when absent;
  it answers the MCP handshake itself, at once.
"""


def _help(command: Any, path: list[str], parent: Any) -> tuple[str, Any]:
    """The command's `--help` at WIDTH columns, and its context (click's own classes, whichever typer uses)."""
    ctx = command.context_class(command, info_name=path[-1], parent=parent, terminal_width=WIDTH,
                                max_content_width=WIDTH)  # fmt: skip
    return str(command.get_help(ctx)).rstrip() + "\n", ctx


def _sections(command: Any, path: list[str], parent: Any) -> list[str]:
    text, ctx = _help(command, path, parent)
    out = [f"## {' '.join(path)}\n\n```text\n{text}```\n"] if parent is not None else []
    if hasattr(command, "list_commands"):  # a group: its commands, in the order --help lists them
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                out += _sections(sub, [*path, name], ctx)
    return out


def render() -> str:
    """docs/cli.md: the head above, the whole app's help, then every command's and subcommand's."""
    from nmemd.cli import build

    app = typer.main.get_command(build())
    overview, _ = _help(app, ["nmem"], None)
    return "\n".join([HEAD, f"```text\n{overview}```\n", *_sections(app, ["nmem"], None)])


if __name__ == "__main__":
    sys.stdout.write(render())
