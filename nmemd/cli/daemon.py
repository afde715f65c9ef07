"""`nmem daemon` (start, stop, restart nmemd by hand) and `nmem service` (nmemd run by systemd or launchd,
socket-activated)."""

import sys

import msgspec
import typer

from nmemd.cli import ui
from nmemd.cli.common import JsonOpt, fail, load_settings, out, print_table
from nmemd.control import control
from nmemd.errors import NmemError

daemon_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Start, stop or restart the nmemd daemon.")
service_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Run nmemd under systemd (Linux) or launchd (macOS), socket-activated.",
)


@daemon_app.command("start")
def daemon_start() -> None:
    """Start nmemd in the background (no-op when it already runs)."""
    settings = load_settings(lenient=True)
    try:
        facts = control.start(settings)
    except NmemError as exc:
        fail(str(exc))
    out().print(f"nmemd running (pid {facts.pid}) on {facts.socket}", highlight=False)


@daemon_app.command("stop")
def daemon_stop() -> None:
    """Stop nmemd after it commits everything it received."""
    settings = load_settings(lenient=True)
    try:
        pid = control.stop(settings)
    except NmemError as exc:
        fail(str(exc))
    out().print("nmemd was not running" if pid is None else f"nmemd (pid {pid}) stopped", highlight=False)


@daemon_app.command("restart")
def daemon_restart() -> None:
    """Stop nmemd, then start it again."""
    settings = load_settings(lenient=True)
    try:
        control.stop(settings)
        facts = control.start(settings)
    except NmemError as exc:
        fail(str(exc))
    out().print(f"nmemd restarted (pid {facts.pid})", highlight=False)


@service_app.command("install")
def service_install() -> None:
    """Install and enable the user service so the OS starts nmemd on the first connection."""
    from nmemd.setup import service

    try:
        done = service.install()
    except NmemError as exc:
        fail(str(exc))
    console = out()
    if done.stopped_pid is not None:
        console.print(f"stopped the hand-started nmemd (pid {done.stopped_pid})", highlight=False)
    for path in done.files:
        console.print(f"wrote {path}", highlight=False)
    console.print(f"{done.manager} listens on {done.socket} and starts {done.nmemd} on demand", highlight=False)


@service_app.command("uninstall")
def service_uninstall() -> None:
    """Stop and disable the user service and remove the files `nmem service install` wrote."""
    from nmemd.setup import service

    try:
        done = service.uninstall()
    except NmemError as exc:
        fail(str(exc))
    console = out()
    for path in done.removed:
        console.print(f"removed {path}", highlight=False)
    console.print(f"{done.manager}: nmem service uninstalled", highlight=False)


@service_app.command("status")
def service_status(json_out: JsonOpt = False) -> None:
    """Show whether the user service is installed, enabled, listening and running."""
    from nmemd.setup import service

    try:
        st = service.status()
    except NmemError as exc:
        fail(str(exc))
    if json_out:
        sys.stdout.write(msgspec.json.encode(st).decode() + "\n")
        return
    table = ui.Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("manager", st.manager)
    table.add_row("installed", ", ".join(st.files) if st.installed else "no")
    table.add_row("enabled", st.enabled)
    table.add_row("socket", f"{st.socket} ({st.socket_state})")
    table.add_row("daemon", st.daemon_state)
    print_table(table)
