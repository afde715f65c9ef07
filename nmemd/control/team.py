"""Team memory's links as `nmem team status`, `nmem doctor` and the viewer's Status page see them:
the daemon's (live) when it runs, else each server probed from here (team.membership)."""

from __future__ import annotations

from typing import Any

from nmemd.config import Settings
from nmemd.control import control
from nmemd.errors import DaemonUnavailable, NmemError
from nmemd.printable import deep


def statuses(settings: Settings) -> list[dict[str, Any]]:
    """Each (server, team) link's status: the daemon's (live) when it runs, else probed from here;
    without control characters (a server's error text is not to drive the terminal)."""
    try:
        got: list[dict[str, Any]] = control.ask("team_status", {}, timeout=10.0)
    except DaemonUnavailable:
        from nmemd.team import membership  # psycopg only now

        got = membership.offline_statuses(settings)
    if any("transport" not in st for st in got):
        known = _transports(settings)
        for st in got:
            st.setdefault("transport", known.get((str(st.get("team")), str(st.get("server")))))
    return [deep(st) for st in got]


def _transports(settings: Settings) -> dict[tuple[str, str], str]:
    """(team, server label) -> how its DSN reaches the server, from the store's shared projects."""
    import sqlite3

    from nmemd.store import readers
    from nmemd.team import local, pg, transport

    try:
        conn = readers.open_readonly(settings.db)
    except (OSError, sqlite3.Error, NmemError):
        return {}
    try:
        return {
            (link.team, pg.server_label(link.dsn)): transport.describe(link.dsn)
            for link in local.links(local.shared_projects(conn))
        }
    except sqlite3.Error:
        return {}
    finally:
        conn.close()
