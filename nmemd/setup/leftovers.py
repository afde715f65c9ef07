"""What `nmem uninstall` leaves in place, and the two things it can end on request (issue #37, 2).

Taking the hooks out of an agent's settings leaves the daemon running (a hook of an agent still set up
starts it again), the store, the service units, projects shared with a team (still pushed and pulled
while a daemon runs) and the program itself. Uninstall says each, with the command that removes it,
and offers to stop the daemon and to stop sharing.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field

from nmemd.config import Settings


@dataclass
class Leftovers:
    daemon_pid: int | None = None
    service_files: list[str] = field(default_factory=list)
    store_bytes: int = 0
    shared_roots: list[str] = field(default_factory=list)


def find(settings: Settings) -> Leftovers:
    from nmemd.daemon.instance import lock_holder

    found = Leftovers()
    pid = lock_holder(settings.lock)
    found.daemon_pid = pid if pid is not None and pid > 0 else (0 if pid is not None else None)
    from nmemd.setup import service

    units = [service.systemd_user_dir() / n for n in (service.SERVICE_UNIT, service.SOCKET_UNIT)]
    found.service_files = [str(p) for p in [*units, service.launchd_plist_path()] if p.exists()]
    for suffix in ("", "-wal"):
        try:
            found.store_bytes += os.stat(settings.db + suffix).st_size
        except OSError:
            pass
    found.shared_roots = _shared_roots(settings.db)
    return found


def _shared_roots(db: str) -> list[str]:
    if not os.path.exists(db):
        return []
    from nmemd.store import readers
    from nmemd.team import local

    try:
        conn = readers.open_readonly(db)
        try:
            return [p.root for p in local.shared_projects(conn)]
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def lines(settings: Settings, left: Leftovers) -> list[str]:
    """One line per thing left in place, with the command that removes it."""
    out = ["left in place:"]
    if left.daemon_pid is not None:
        who = f"pid {left.daemon_pid}" if left.daemon_pid else "running"
        out.append(f"  the daemon ({who}): a hook of an agent still set up starts it again; stop it: nmem daemon stop")
    if left.service_files:
        out.append(f"  its service ({', '.join(left.service_files)}): nmem service uninstall")
    if left.shared_roots:
        roots = ", ".join(left.shared_roots)
        out.append(f"  team shares ({roots}): still pushed and pulled while a daemon runs;"
                   f" stop: nmem team leave --project PATH")  # fmt: skip
    size = f"{left.store_bytes / 1048576:.1f} MB" if left.store_bytes else "empty"
    out.append(
        f"  your memory stays in {settings.home} ({size}): delete it with nmem daemon stop && rm -r {settings.home}"
    )
    out.append("  the program: pipx uninstall nmem-agent-memory (or uv tool uninstall, or pip uninstall), after this")
    return out
