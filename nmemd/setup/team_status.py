"""`nmem doctor`'s team lines, from team memory's links (nmemd.control.team)."""

from __future__ import annotations

from nmemd.config import Settings
from nmemd.control.team import statuses
from nmemd.setup.checks import Check, ok, warn

__all__ = ["health", "statuses"]


def health(settings: Settings) -> list[Check]:
    """`nmem doctor`'s team lines: one per link, what is wrong in one line."""
    out = []  # no line at all when no project is shared
    for st in statuses(settings):
        where = f"{st['team']} on {st['server']}"
        if st.get("error"):
            out.append(warn("team", f"{where}: {st['error']}", "nmem team status"))
        else:
            via = f", {st['transport']}" if st.get("transport") else ""
            if "--insecure" in via:
                out.append(warn("team", f"{where}: {st.get('state')}{via}", "join again over TLS: docs/team.md"))
                continue
            out.append(ok("team", f"{where}: {st.get('state')}{via}, outbox {st.get('outbox', 0)}"))
    return out
