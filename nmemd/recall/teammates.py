"""The SessionStart context's teammates section: what teammates did in this project lately.

Team memory keeps teammates' recent rows in the local store (with their `author`) and their session
summaries in `team_sessions`, so this is a read of the local store like the rest of the context:
offline, deterministic, bounded. One line per teammate's session, newest first:
"kim, with Codex, 3 h ago: fixed the flaky websocket test: edited tests/ws_test.py; `pytest -k ws` ok".
"""

from __future__ import annotations

import sqlite3
from typing import Final

from nmemd import registry
from nmemd.recall.text import clip, command_kind, command_line, rel, short_path
from nmemd.wording import ago

HEADING: Final = "## What teammates did here lately (newest first)"
MAX_SESSIONS: Final = 6
RECENT_DAYS: Final = 14.0
LINE_MAX: Final = 300


def lines(conn: sqlite3.Connection, project: str, now: float) -> list[str]:
    """The section's lines ([] on a store without team memory or without teammates here)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'team_sessions'").fetchone():
        return []
    sessions = conn.execute(
        """SELECT author, session_id, max(ts), max(agent) FROM observations
           WHERE author IS NOT NULL AND ts >= ? AND +project = ?
           GROUP BY author, session_id ORDER BY max(ts) DESC LIMIT ?""",
        (now - RECENT_DAYS * 86400, project, MAX_SESSIONS),
    ).fetchall()
    out: list[str] = []
    for author, session_id, last, agent in sessions:
        line = _line(conn, project, author, session_id, last, agent, now)
        if line is not None:  # a session that says nothing ("- kim, 5 min ago") is no line
            out.append(clip(" ".join(line.split()), LINE_MAX))
    return out


def _line(
    conn: sqlite3.Connection, project: str, author: str, session_id: str, last: float, agent: str | None, now: float
) -> str | None:
    who = f"{author}, with {registry.label(agent)}" if agent else author
    head = f"- {who}, {ago(last, now)}"
    row = conn.execute(
        "SELECT summary FROM team_sessions WHERE session_id = ? AND author = ?", (session_id, author)
    ).fetchone()
    what = _what(row[0]) if row and row[0] else None
    if what is None:
        prompt = conn.execute(
            "SELECT title FROM observations WHERE session_id = ? AND author = ? AND type = 'prompt'"
            " ORDER BY id LIMIT 1",
            (session_id, author),
        ).fetchone()
        what = f'"{clip(prompt[0], 100)}"' if prompt else None
    files = [
        short_path(rel(r[0], project), 60)
        for r in conn.execute(
            "SELECT file_path FROM observations WHERE session_id = ? AND author = ? AND type IN ('edit', 'write')"
            " AND file_path IS NOT NULL GROUP BY file_path ORDER BY max(id) DESC LIMIT 3",
            (session_id, author),
        )
    ]
    # Each command's latest outcome: a failure not run again with success since is open, and said
    # whatever the command; a success only for build and test commands.
    latest: dict[str, tuple[str, str]] = {}
    for command, kind in conn.execute(
        "SELECT command, type FROM observations WHERE session_id = ? AND author = ? AND command IS NOT NULL"
        " AND type IN ('command', 'error') ORDER BY id DESC LIMIT 200",
        (session_id, author),
    ):
        text = command_line(command, 60)
        if text and text not in latest:
            latest[text] = (command, "ok" if kind == "command" else "failed (open)")
    failed = [f"`{c}` {o}" for c, (_cmd, o) in latest.items() if o != "ok"][:2]
    passed = [f"`{c}` ok" for c, (cmd, o) in latest.items() if o == "ok" and command_kind(cmd)]
    parts = [f"edited {', '.join(files)}"] if files else []
    parts += failed + passed[: max(0, 2 - len(failed))]
    if not what and not parts:
        return None
    text = head + (f": {what}" if what else "")
    return text + (f": {'; '.join(parts)}" if parts else "")


def _what(summary: str) -> str | None:
    """What a teammate's session was about, from its summary: its prompt, else its first line."""
    for line in summary.splitlines():
        for label in ("Asked: ", "Prompt: ", "Fixed: ", "Concluded: "):
            if line.startswith(label):
                return clip(line[len(label) :], 120)
    first = next((line for line in summary.splitlines() if line.strip()), "")
    return clip(first, 120) or None
