"""Team memory's links as `nmem team status` and `nmem doctor` see them: the daemon's (live) when
it runs, else each server probed from here (team.membership)."""

from __future__ import annotations

from typing import Any

from nmemd.client import control
from nmemd.config import Settings
from nmemd.errors import DaemonUnavailable
from nmemd.printable import deep
from nmemd.setup.checks import Check, ok, warn


def statuses(settings: Settings) -> list[dict[str, Any]]:
    """Each (server, team) link's status: the daemon's (live) when it runs, else probed from here;
    without control characters (a server's error text is not to drive the terminal)."""
    try:
        got: list[dict[str, Any]] = control.ask("team_status", {}, timeout=10.0)
    except DaemonUnavailable:
        from nmemd.team import membership  # psycopg only now

        got = membership.offline_statuses(settings)
    return [deep(st) for st in got]


def health(settings: Settings) -> list[Check]:
    """`nmem doctor`'s team lines: one per link, what is wrong in one line."""
    out = []  # no line at all when no project is shared
    for st in statuses(settings):
        where = f"{st['team']} on {st['server']}"
        if st.get("error"):
            out.append(warn("team", f"{where}: {st['error']}", "nmem team status"))
        else:
            out.append(ok("team", f"{where}: {st.get('state')}, outbox {st.get('outbox', 0)}"))
    return out
