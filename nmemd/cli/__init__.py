"""`nmem`: the command line for people (rich tables) and programs (--json).

A command's module is imported when that command runs: `nmem search` loads `read` and
`common`, not the import, setup and maintenance commands (~5 ms each), and typer turns only
its parameters into click options (~50 ms for all of them). `nmem --help` builds the whole app.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

if TYPE_CHECKING:
    app: typer.Typer

__all__ = ["app", "main"]

HELP: Final = "nmem: local memory for coding agents."
# (command, module in nmemd.cli, attribute), in the order `nmem --help` lists them.
COMMANDS: Final = (
    ("status", "read", "status"),
    ("search", "read", "search"),
    ("show", "read", "show"),
    ("timeline", "read", "timeline"),
    ("sessions", "read", "sessions"),
    ("context", "read", "context"),
    ("maintain", "write", "maintain"),
    ("purge", "write", "purge"),
    ("forget", "write", "forget"),
    ("pin", "write", "pin"),
    ("export", "data", "export"),
    ("import-transcripts", "backfill", "import_transcripts"),
    ("install", "setup", "install"),
    ("uninstall", "setup", "uninstall"),
    ("doctor", "data", "doctor"),
    ("import", "data", "import_"),  # `import` is a keyword: named explicitly
)
GROUPS: Final = (
    ("daemon", "setup", "daemon_app"),
    ("service", "setup", "service_app"),
    ("config", "setup", "config_app"),
)
NAMES: Final = frozenset(name for name, _, _ in (*COMMANDS, *GROUPS))


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
    for name, module, attr in COMMANDS:
        if only in (None, name):
            app.command(name=name)(_attr(module, attr))
    for name, module, attr in GROUPS:
        if only in (None, name):
            app.add_typer(_attr(module, attr), name=name)
    return app


def main() -> None:
    """The `nmem` entry point: a command line that names its command gets an app holding that
    command only. Anything else (`nmem`, `--help`, `--version`, a mistyped name) gets the whole
    app, with its list and its suggestions."""
    first = sys.argv[1] if len(sys.argv) > 1 else ""
    build(first if first in NAMES else None)()


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole app, for tests and `python -c 'from nmemd.cli import app'`
        app = globals()["app"] = build()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
