"""`nmem ui`: the memory viewer in a browser, served by this command until Ctrl-C.

Why not inside the daemon: the daemon serves hooks and stays small (uvicorn and starlette would
cost its memory and start for every user, viewer or not); the viewer is one more client of the
daemon, like the CLI, and lives as long as someone looks.
"""

from __future__ import annotations

import socket
import sys
import webbrowser
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
    import uvicorn

    from nmemd.web.app import create_app
    from nmemd.web.guard import new_secret

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
    listener.listen(64)
    port = listener.getsockname()[1]
    secret = new_secret()
    url = f"http://127.0.0.1:{port}/?token={secret}"
    sys.stdout.write(f"nmem ui: {url}\n")
    sys.stdout.flush()
    sys.stderr.write("Only this URL opens it (it holds this run's secret). Ctrl-C stops it.\n")
    if not no_open:
        webbrowser.open(url)
    app = create_app(settings, secret=secret, port=port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False))
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:
        pass
