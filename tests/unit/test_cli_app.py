"""The `nmem` app itself, in process: every command has its help, `nmem --help` lists the commands from
summaries that are their own, and a grid prints the same in a pipe as rich draws it (the commands as
processes: tests/daemon/test_cli.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from nmemd.cli import app


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command and sub-command (typer bundles its own click, so duck-typed)."""
    for name, cmd in group.commands.items():
        yield (*path, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))


def test_every_command_has_help_and_help_works() -> None:
    commands = dict(_commands(typer.main.get_command(app)))
    assert {("status",), ("search",), ("show",), ("timeline",), ("sessions",), ("daemon", "start")} <= commands.keys()
    runner = CliRunner()
    assert runner.invoke(app, ["--help"]).exit_code == 0
    for path, cmd in commands.items():
        assert (cmd.help or "").strip(), f"`nmem {' '.join(path)}` has no help text"
        for param in cmd.params:
            if param.name != "help":
                assert getattr(param, "help", None), f"`nmem {' '.join(path)}` {param.name} has no help text"
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output


def test_a_grid_prints_outside_a_terminal_what_rich_prints_there(capsys: pytest.CaptureFixture[str]) -> None:
    """`Grid` skips rich in a pipe (issue #17, item 10): its lines are those `print_table` makes of the
    same rows drawn as a rich table, header, alignment, multi-line cells and brackets included."""
    import io

    from rich.console import Console

    from nmemd.cli.common import Cell, Grid, one_line, print_table

    grid = Grid(header_style="bold")
    for name in ("id", "when", "title", "path"):
        grid.add_column(name)
    title = one_line("Edit   src/[x]/auth.ts", style="bold")
    title.append(" (x3)", style="dim")
    title.append("\nthe [matched] words in context", style="dim")
    grid.add_row("12", "3 h ago", title, one_line("/a/" + "very-long-folder/" * 5 + "auth.ts"))
    grid.add_row("7", "just now", Cell([("running", "green"), (" (pid 4)", "")], one_line=False), "")
    grid.print()
    plain = capsys.readouterr().out
    drawn = io.StringIO()
    print_table(grid.table(), Console(file=drawn, soft_wrap=True, no_color=True, highlight=False))
    assert plain == drawn.getvalue()
    assert "src/[x]/auth.ts (x3) · the [matched] words in context" in plain


def test_the_command_list_is_drawn_from_summaries_that_are_the_commands_own() -> None:
    """`nmem --help` lists the commands without importing them (`nmemd.cli.listing`, issue #17,
    item 10): each summary is the first paragraph of its command's help, and the list is the one
    the whole app prints."""
    import importlib
    import inspect

    from nmemd import cli

    for name, module, attr, summary in cli.COMMANDS:
        doc = inspect.getdoc(getattr(importlib.import_module(f"nmemd.cli.{module}"), attr)) or ""
        assert summary == doc.split("\n\n")[0].replace("\n", " "), name
    for name, module, attr, summary in cli.GROUPS:
        assert summary == getattr(importlib.import_module(f"nmemd.cli.{module}"), attr).info.help, name
    listed = CliRunner().invoke(cli.listing(), ["--help"], prog_name="nmem")
    whole = CliRunner().invoke(cli.build(), ["--help"], prog_name="nmem")
    assert listed.exit_code == whole.exit_code == 0 and listed.output == whole.output
