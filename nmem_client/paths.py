"""Where nmem keeps its state, resolved from the environment the same way everywhere."""

from __future__ import annotations

import os


def home() -> str:
    """`NMEM_HOME`, else `${XDG_DATA_HOME:-~/.local/share}/nmem`."""
    env = os.environ.get("NMEM_HOME")
    if env:
        return env
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "nmem")


def socket_path() -> str:
    """`NMEM_SOCKET`, else `$XDG_RUNTIME_DIR/nmem/nmemd.sock`, else `$NMEM_HOME/run/nmemd.sock`."""
    env = os.environ.get("NMEM_SOCKET")
    if env:
        return env
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "nmem", "nmemd.sock")
    return os.path.join(home(), "run", "nmemd.sock")


def lock_path(sock: str) -> str:
    """The single-instance lock lives beside the socket it guards."""
    return os.path.join(os.path.dirname(sock), "nmemd.lock")


def db_path() -> str:
    return os.path.join(home(), "nmem.db")


def spool_dir() -> str:
    """Last-resort files for events that could reach neither the daemon nor SQLite."""
    return os.path.join(home(), "spool")
