"""`nmem`: the command line for people (rich tables) and programs (--json)."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Annotated, NoReturn

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from nmemd import config, control
from nmemd.errors import NmemError
from nmemd.status import Status

app = typer.Typer(no_args_is_help=True, add_completion=False, help="nmem: local memory for coding agents.")
daemon_app = typer.Typer(no_args_is_help=True, help="Start, stop or restart the nmemd daemon.")
app.add_typer(daemon_app, name="daemon")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of a table.")]


def _settings() -> config.Settings:
    try:
        return config.load()
    except NmemError as exc:
        _fail(str(exc))


def _fail(message: str, code: int = 1) -> NoReturn:
    Console(stderr=True).print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _when(ts: float | None) -> str:
    if not ts:
        return "never"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _print_status(st: Status) -> None:
    d, db = st.daemon, st.database
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    state = "[red]not running[/red]"
    if d.running:
        state = f"[green]running[/green] (pid {d.pid}, started by {d.started_by})"
    table.add_row("daemon", state)
    table.add_row("socket", d.socket)
    if d.running:
        table.add_row("since", _when(d.started_at))
        table.add_row("queue", f"{d.queued} queued, {d.connections} connections, {d.committed} stored since start")
        if d.last_error:
            table.add_row("last error", f"[red]{d.last_error}[/red]")
    table.add_row("database", db.path if db.exists else f"{db.path} (not created yet)")
    table.add_row("size", f"{_human_bytes(db.size_bytes)} + WAL {_human_bytes(db.wal_bytes)}")
    table.add_row("stored", f"{db.observations} observations from {db.events} events in {db.sessions} sessions")
    table.add_row("by type", ", ".join(f"{k} {v}" for k, v in db.by_type.items()) or "-")
    table.add_row("last event", _when(db.last_event_at))
    table.add_row("backlog", f"{db.inbox_backlog} in inbox, {db.spool_backlog} spooled")
    Console().print(table)


@app.command()
def status(json_out: JsonOpt = False) -> None:
    """Show whether the daemon runs, where the data is and what it holds."""
    st = control.status(_settings())
    if json_out:
        sys.stdout.write(msgspec.json.encode(st).decode() + "\n")
    else:
        _print_status(st)


@daemon_app.command("start")
def daemon_start() -> None:
    """Start nmemd in the background (no-op when it already runs)."""
    settings = _settings()
    try:
        facts = control.start(settings)
    except NmemError as exc:
        _fail(str(exc))
    Console().print(f"nmemd running (pid {facts.pid}) on {facts.socket}", highlight=False)


@daemon_app.command("stop")
def daemon_stop() -> None:
    """Stop nmemd after it commits everything it received."""
    settings = _settings()
    try:
        pid = control.stop(settings)
    except NmemError as exc:
        _fail(str(exc))
    Console().print("nmemd was not running" if pid is None else f"nmemd (pid {pid}) stopped", highlight=False)


@daemon_app.command("restart")
def daemon_restart() -> None:
    """Stop nmemd, then start it again."""
    settings = _settings()
    try:
        control.stop(settings)
        facts = control.start(settings)
    except NmemError as exc:
        _fail(str(exc))
    Console().print(f"nmemd restarted (pid {facts.pid})", highlight=False)
