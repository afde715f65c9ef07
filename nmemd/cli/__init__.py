"""`nmem`: the command line for people (rich tables) and programs (--json)."""

from __future__ import annotations

from typing import Annotated

import typer

from nmemd.cli import backfill, data, read, setup, write

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help="nmem: local memory for coding agents.")


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
for command in (
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
):
    app.command()(command)
app.command(name="import")(data.import_)  # `import` is a keyword: named explicitly
app.add_typer(setup.daemon_app, name="daemon")
app.add_typer(setup.service_app, name="service")
app.add_typer(setup.config_app, name="config")
