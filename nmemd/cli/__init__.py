"""`nmem`: the command line for people (rich tables) and programs (--json)."""

from __future__ import annotations

import sys
from typing import Annotated, Final

import typer

from nmemd.cli import backfill, data, read, setup, write

__all__ = ["app", "main"]

app = typer.Typer(
    no_args_is_help=True, add_completion=False, rich_markup_mode=None, help="nmem: local memory for coding agents."
)


def _version(value: bool) -> None:
    if value:
        from nmemd import __version__

        typer.echo(f"nmem {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """nmem: local memory for coding agents."""


# Registration order is the order `nmem --help` lists the commands in.
COMMANDS: Final = (
    read.status,
    read.search,
    read.show,
    read.timeline,
    read.sessions,
    read.context,
    write.maintain,
    write.purge,
    write.forget,
    write.pin,
    data.export,
    backfill.import_transcripts,
    setup.install,
    setup.uninstall,
    data.doctor,
)
GROUPS: Final = {"daemon": setup.daemon_app, "service": setup.service_app, "config": setup.config_app}


def _register(target: typer.Typer, only: str | None = None) -> typer.Typer:
    """Put the commands (all, or the one named `only`) on `target`."""
    for command in COMMANDS:
        if only in (None, _name(command.__name__)):
            target.command()(command)
    if only in (None, "import"):
        target.command(name="import")(data.import_)  # `import` is a keyword: named explicitly
    for name, group in GROUPS.items():
        if only in (None, name):
            target.add_typer(group, name=name)
    return target


def _name(function: str) -> str:
    return function.replace("_", "-")  # typer's own naming: import_transcripts -> import-transcripts


_register(app)
NAMES: Final = frozenset({*(_name(c.__name__) for c in COMMANDS), "import", *GROUPS})


def main() -> None:
    """The `nmem` entry point. Typer turns the parameters of every command it holds into click
    options before it runs one (~50 ms for all of them): a command line that names its command
    gets an app holding that command only. Anything else (`nmem`, `--help`, `--version`, a
    mistyped name) gets the whole app, with its list and its suggestions."""
    first = sys.argv[1] if len(sys.argv) > 1 else ""
    if first not in NAMES:
        app()
        return
    only = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None, help=app.info.help)
    only.callback()(_main)
    _register(only, first)()
