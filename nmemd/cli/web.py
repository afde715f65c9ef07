"""`nmem ui`: the memory viewer in a browser, served by this command until Ctrl-C.

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
import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from nmemd.cli.common import fail, load_settings
from nmemd.daemon import control
from nmemd.errors import NmemError


def ui(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 (default: a free one).", min=0, max=65535)] = 0,
    no_open: Annotated[bool, typer.Option("--no-open", help="Print the URL; do not open a browser.")] = False,
) -> None:
    """Open the memory viewer in your browser (this machine and this user only).

    It serves the viewer until Ctrl-C.
    """
    from nmemd.web.app import create_app
    from nmemd.web.guard import new_key, new_secret
    from nmemd.web.server import serve

    settings = load_settings()
    try:
        control.start(settings, on_demand=True)  # the viewer reads and changes through it
    except NmemError as exc:
        fail(str(exc))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}")
    listener.listen(128)
    port = listener.getsockname()[1]
    secret, key = new_secret(), new_key()
    url = f"http://127.0.0.1:{port}/{key}/?token={secret}"
    sys.stdout.write(f"nmem ui: {url}\n")
    sys.stdout.flush()
    sys.stderr.write("Only this URL opens it (it holds this run's secret). Ctrl-C stops it.\n")
    opener = None
    if not no_open:
        try:
            opener = open_file(settings.home, port, url)
        except OSError as exc:
            sys.stderr.write(f"nmem ui: could not write the page that opens the viewer ({exc}); open the URL above\n")
        else:
            webbrowser.open(opener.as_uri())  # the browser's command line names the file, not the secret
    app = create_app(settings, secret=secret, key=key, port=port)
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


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def open_file(home: str, port: int, url: str) -> Path:
    """A 0600 page in a 0700 folder that sends the browser to `url` (as notebook servers do): a
    browser started with the URL itself would show the secret to every user in `ps`."""
    from nmemd.daemon.instance import ensure_private_dir

    folder = Path(home) / "ui"
    ensure_private_dir(str(folder))
    path = folder / f"open-{port}.html"
    path.unlink(missing_ok=True)
    target = html.escape(url)
    page = (
        f'<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={target}">'
        f'<title>nmem</title></head><body><p><a href="{target}">Open the nmem viewer</a></p></body></html>\n'
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(page)
    return path
