"""`nmem config`: the effective configuration and where each value came from."""

import sys

import msgspec
import typer

from nmemd import config
from nmemd.cli import ui
from nmemd.cli.common import JsonOpt, cell, print_table

config_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Inspect nmem's configuration.")


@config_app.command("show")
def config_show(json_out: JsonOpt = False) -> None:
    """Print the effective configuration and where each value came from."""
    settings, sources, problems = config.load_checked()
    for problem in problems:  # what is shown is what the daemon runs on: the rest at its default
        ui.Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {ui.escape(problem)}", highlight=False)
    for note in config.retired_notes(settings.home):  # ignored: a warning, not a failure
        ui.Console(stderr=True, soft_wrap=True).print(f"[yellow]warning:[/yellow] {ui.escape(note)}", highlight=False)
    ui.Console(stderr=True, soft_wrap=True).print(config.config_note(settings.home), highlight=False)
    values = msgspec.to_builtins(settings)
    if json_out:
        rows = {k: {"value": v, "source": sources.get(k, "default")} for k, v in values.items()}
        sys.stdout.write(msgspec.json.encode(rows).decode() + "\n")
        raise typer.Exit(1 if problems else 0)
    table = ui.Table(box=None, pad_edge=False, header_style="bold")
    for column in ("setting", "value", "source"):
        table.add_column(column)
    for key, value in values.items():
        table.add_row(key, cell(str(value)), sources.get(key, "default"))
    print_table(table)
    if problems:
        raise typer.Exit(1)
