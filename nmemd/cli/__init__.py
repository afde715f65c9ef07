"""`nmem`: the command line for people (rich tables) and programs (--json).

A command's module is imported when that command runs: `nmem search` loads `read` and
`common`, not the import, setup and maintenance commands (~5 ms each), and typer turns only
its parameters into click options (~50 ms for all of them). `nmem --help` builds the whole app.
"""

import importlib
import sys
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

if TYPE_CHECKING:
    app: typer.Typer

__all__ = ["app", "main"]

HELP: Final = "nmem: local memory for coding agents."
# (command, module in nmemd.cli, attribute, the first paragraph of its help), in the order
# `nmem --help` lists them. The list is drawn from these summaries without importing a command's
# module (tests/unit/test_cli_app.py checks that they are the commands' own).
COMMANDS: Final = (
    ("status", "read", "status", "Show whether the daemon runs, where the data is and what it holds."),
    ("search", "read", "search", "Find observations by words, identifiers, paths, error text or commands, best first."),
    ("show", "read", "show", "Print everything stored about the given observations, or a session's handoff."),
    ("timeline", "read", "timeline", "Show what happened in the same session just before and after one observation."),
    (
        "sessions",
        "read",
        "sessions",
        "List recent sessions with their agent and first prompt, newest first (--handoff: with their handoffs).",
    ),
    (
        "context",
        "read",
        "context",
        "Print the context SessionStart would inject for a project (default: this directory's).",
    ),
    (
        "maintain",
        "write",
        "maintain",
        "Run database maintenance now (the daemon also runs it on a schedule) and print what each job did.",
    ),
    ("purge", "write", "purge", "Delete matching observations (pinned too) and every copy of their text, for good."),
    ("forget", "write", "forget", "Delete these observations (pinned too) and every copy of their text."),
    ("pin", "write", "pin", "Keep observations when retention cleans up (purge and forget still remove them)."),
    ("ui", "web", "ui", "Open the memory viewer in your browser (this machine and this user only)."),
    ("export", "data", "export", "Write every observation and session (or one project's) to stdout as JSON lines."),
    (
        "import-transcripts",
        "import_transcripts",
        "import_transcripts",
        "Import every coding agent's past sessions into memory; a second run imports only what is new.",
    ),
    (
        "install",
        "setup",
        "install",
        "Add nmem's hooks to a coding agent's settings and register the nmem MCP server (idempotent).",
    ),
    ("uninstall", "setup", "uninstall", "Remove exactly the hooks and MCP registration that `nmem install` added."),
    (
        "doctor",
        "data",
        "doctor",
        "Check the install end to end and print, for each problem, the command that fixes it.",
    ),
    (
        "import",
        "data",
        "import_",
        "Restore observations and sessions from `nmem export` output; what is already stored is skipped.",
    ),
)
GROUPS: Final = (
    ("daemon", "daemon", "daemon_app", "Start, stop or restart the nmemd daemon."),
    ("service", "daemon", "service_app", "Run nmemd under systemd (Linux) or launchd (macOS), socket-activated."),
    ("config", "configuration", "config_app", "Inspect nmem's configuration."),
    ("team", "team", "team_app", "Share a project's memory with your machines and teammates through PostgreSQL."),
)
NAMES: Final = frozenset(name for name, *_ in (*COMMANDS, *GROUPS))


def _version(value: bool) -> None:
    if value:
        from nmemd import __version__

        typer.echo(f"nmem {__version__}")
        raise typer.Exit()


def _main(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """nmem: local memory for coding agents."""


def _attr(module: str, name: str) -> Any:
    return getattr(importlib.import_module(f"nmemd.cli.{module}"), name)


def build(only: str | None = None) -> typer.Typer:
    """The `nmem` app with every command, or with the one named `only`."""
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None, help=HELP)
    app.callback()(_main)
    for name, module, attr, _ in COMMANDS:
        if only in (None, name):
            app.command(name=name)(_attr(module, attr))
    for name, module, attr, _ in GROUPS:
        if only in (None, name):
            app.add_typer(_attr(module, attr), name=name)
    return app


def listing() -> typer.Typer:
    """The app as `nmem --help` shows it: every command's name and summary, none of its module."""
    app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None, help=HELP)
    app.callback()(_main)
    for name, _, _, summary in (*COMMANDS, *GROUPS):
        app.command(name=name, help=summary)(_listed)
    return app


def _listed() -> None:
    """Never runs: `listing` serves `nmem` and `nmem --help` only."""


def main() -> None:
    """The `nmem` entry point: a command line that names its command gets an app holding that
    command only; `nmem` and `nmem --help` get the list. Anything else (`--version`, a mistyped
    name) gets the whole app, with its suggestions."""
    args = sys.argv[1:]
    if args in ([], ["--help"]):
        listing()()
    else:
        build(args[0] if args and args[0] in NAMES else None)()


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, for tests and `python -c 'from nmemd.cli import app'`
        app = globals()["app"] = build()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
