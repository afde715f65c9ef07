"""`nmem ui`: the memory viewer in a browser, served by this command until Ctrl-C, or in the
background at an address to come back to (`--background`, nmemd.web.service).

Why not inside the daemon: the daemon serves hooks and stays small (uvicorn and starlette would
cost its memory and start for every user, viewer or not); the viewer is one more client of the
daemon, like the CLI, and lives as long as someone looks.
"""

from __future__ import annotations

import html
import os
import signal
import socket
import sys
import time
import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from nmem_client import paths
from nmemd.cli.common import fail, load_settings
from nmemd.config import Settings
from nmemd.control import control
from nmemd.errors import NmemError

OPENER_KEPT_S = 60.0  # how long the file that opens a running viewer stays


def ui(
    port: Annotated[
        int,
        typer.Option(
            "--port",
            help="Port on 127.0.0.1 (default: a free one; --background: its last one, first 47613).",
            min=0,
            max=65535,
        ),
    ] = 0,
    no_open: Annotated[bool, typer.Option("--no-open", help="Print the URL; do not open a browser.")] = False,
    background: Annotated[
        bool, typer.Option("--background", help="Keep it running after this command, at the same address.")
    ] = False,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the viewer --background started.")] = False,
    serve_background: Annotated[
        bool,
        typer.Option("--serve-background", hidden=True, help="Serve as the viewer --background starts (internal)."),
    ] = False,
) -> None:
    """Open the memory viewer in your browser (this machine and this user only).

    It serves the viewer until Ctrl-C; with --background it keeps running at a fixed address that
    a bookmark opens after the first visit. When one runs, `nmem ui` opens it.
    """  # fmt: skip
    from nmemd.web import service

    settings = load_settings()
    if stop:
        pid = service.stop(settings.home)
        sys.stdout.write(f"nmem ui: stopped the viewer (pid {pid})\n" if pid else "nmem ui: no viewer was running\n")
        return
    if serve_background:
        _serve(settings, service.port_for(settings.home, port), no_open=True, stays=True)
        return
    try:
        control.start(settings, on_demand=True)  # the viewer reads and changes through it
        viewer = service.running(settings.home)
        if viewer is None and background:
            viewer = service.start(settings.home, service.port_for(settings.home, port))
    except (NmemError, OSError) as exc:
        fail(str(exc))
    if viewer is None:
        _serve(settings, port, no_open=no_open, stays=False)
        return
    _announce(viewer.sign_in, f"The viewer runs in the background (pid {viewer.pid}); `nmem ui --stop` stops it.")
    if not no_open:
        opener = _open(settings.home, viewer.port, viewer.sign_in)
        if opener is not None:
            _forget_later(opener)


def _serve(settings: Settings, port: int, *, no_open: bool, stays: bool) -> None:
    """Serve the viewer in this process until SIGINT or SIGTERM (`stays`: as the one that stays,
    at its saved address, its state file naming this process)."""
    from nmemd.web import service
    from nmemd.web.app import create_app
    from nmemd.web.guard import new_key, new_secret
    from nmemd.web.server import serve

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # The port's last connections may linger in TIME_WAIT (a viewer just stopped, or whoever held the
    # port meanwhile): they must not keep the viewer that stays from its address. Linux never lets a
    # second socket listen beside a listening one for this, whatever its options.
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}")
    listener.listen(128)
    port = listener.getsockname()[1]
    if stays:
        state = service.for_port(settings.home, port)
        state.pid = os.getpid()
        service.save(settings.home, state)
        secret, key, max_age = state.secret, state.key, service.COOKIE_DAYS * 86400
    else:
        secret, key, max_age = new_secret(), new_key(), None
    url = f"http://127.0.0.1:{port}/{key}/?token={secret}"
    opener = None
    if not stays:
        _announce(url, "Only this URL opens it (it holds this run's secret). Ctrl-C stops it.")
        if not no_open:
            opener = _open(settings.home, port, url)
    app = create_app(settings, secret=secret, key=key, port=port, max_age=max_age)
    # uvicorn stops on SIGTERM, then raises it again under the handler it found: this one, so that
    # the `finally` below still removes the file holding the secret.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        serve(app, listener)
    except KeyboardInterrupt:
        pass
    finally:
        if opener is not None:
            opener.unlink(missing_ok=True)


def _announce(url: str, note: str) -> None:
    sys.stdout.write(f"nmem ui: {url}\n")
    sys.stdout.flush()
    sys.stderr.write(note + "\n")


def _open(home: str, port: int, url: str) -> Path | None:
    """Start the browser on a 0600 file that forwards it to `url`; the file, or None."""
    try:
        opener = open_file(home, port, url)
    except OSError as exc:
        sys.stderr.write(f"nmem ui: could not write the page that opens the viewer ({exc}); open the URL above\n")
        return None
    webbrowser.open(opener.as_uri())  # the browser's command line names the file, not the secret
    return opener


def _forget_later(opener: Path) -> None:
    """This command ends now and the browser reads the file when it starts: a detached child
    removes it a little later."""
    if os.fork() == 0:
        try:
            os.setsid()
            time.sleep(OPENER_KEPT_S)  # the browser has read it long before
            opener.unlink(missing_ok=True)
        finally:
            os._exit(0)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def open_file(home: str, port: int, url: str) -> Path:
    """A 0600 page in a 0700 folder that sends the browser to `url` (as notebook servers do): a
    browser started with the URL itself would show the secret to every user in `ps`."""
    from nmemd.daemon.instance import ensure_private_dir

    folder = Path(home) / "ui"
    ensure_private_dir(str(folder))
    path = folder / f"open-{port}.html"
    target = html.escape(url)
    page = (
        f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={target}">'
        f'<title>nmem</title></head><body><p><a href="{target}">Open the nmem viewer</a></p></body></html>\n'
    )
    paths.write_private(str(path), page.encode("utf-8"))
    return path
