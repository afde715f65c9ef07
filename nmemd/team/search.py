"""Search with the team: local hits first, then the team server for what the local window lacks.

Teammates' recent rows are in the local store (found by the ordinary search, with their author);
when a search of a shared project finds fewer hits than asked, the server's full text is asked
(team-server's `search_team`) within what is left of the search's time budget, and its hits that
the local store does not hold are added after the local ones. An unreachable server costs the
budget at most and leaves a one-line note.
"""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
import time
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from nmemd.capture.host import Host
from nmemd.model import CLAUDE_CODE
from nmemd.recall.methods import SearchParams
from nmemd.recall.queries import ALL_PROJECTS, Hit
from nmemd.store import readers
from nmemd.team.identity import to_local

if TYPE_CHECKING:
    from nmemd.team.sync import TeamSync

SERVER_BUDGET_S: Final = 1.0  # the search's own budget (recall.search.TIME_BUDGET_S)
MIN_SERVER_S: Final = 0.2


class TeamHost(Host, Protocol):
    """The daemon as team memory sees it (team sits below the daemon: tests/unit/test_layout.py)."""

    team: TeamSync


def _held(conn: sqlite3.Connection, event_ids: list[str]) -> set[str]:
    rows = conn.execute(
        "SELECT event_id FROM observations WHERE event_id IN (SELECT value FROM json_each(?))", (json.dumps(event_ids),)
    ).fetchall()
    return {str(r[0]) for r in rows}


def _ts(value: Any) -> float:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    return float(value or 0.0)


async def with_server(daemon: TeamHost, p: SearchParams, reply: dict[str, Any], started: float) -> dict[str, Any]:
    """`reply` ({"hits", "notes"}) with the server's hits added when the local ones fall short."""
    sync = daemon.team
    hits: list[Any] = reply["hits"]
    if not sync.links or len(hits) >= p.limit or p.mine or p.session_id:
        return reply
    root = None if p.project in (None, ALL_PROJECTS) else p.project
    if root is not None and all(root not in link.roots for link in sync.links.values()):
        return reply
    left = max(MIN_SERVER_S, SERVER_BUDGET_S - (time.monotonic() - started))
    found, notes = await sync.search(root, p.query, p.limit, p.author, left)
    wanted = [str(h.event_id) for _, h in found]
    held = await readers.run(daemon.settings.db, _held, wanted) if wanted else set()
    extra: list[Hit] = []
    for project, h in found:
        if h.event_id in held or len(hits) + len(extra) >= p.limit:
            continue
        held.add(h.event_id)
        files = list(h.files or [])
        extra.append(
            Hit(
                id=0, type=h.kind, project=project.root, session_id=h.session_id, ts=_ts(h.created_at), title=h.title,
                file_path=to_local(files[0] if files else None, project.root), snippet=h.snippet, author=h.author,
                agent=h.agent, seq=h.seq,
            )
        )  # fmt: skip
    return {"hits": [*hits, *extra], "notes": [*reply.get("notes", []), *notes]}


async def mcp_lines(daemon: Any, text: str, query: str, project: str | None, limit: int, started: float) -> str:
    """The MCP search tool's text with the server's hits added (one line each, `server` where the id
    is) when the local ones fall short; a note line when the server could not be asked."""
    from nmemd.recall.text import clip, rel
    from nmemd.wording import ago

    shown = sum(1 for line in text.splitlines() if line.startswith("#"))
    roots = {root for link in daemon.team.links.values() for root in link.roots}
    if shown >= limit or not project or project not in roots:
        return text
    p = SearchParams(query=query, project=project, limit=limit - shown)
    extra = await with_server(cast("TeamHost", daemon), p, {"hits": [], "notes": []}, started)
    now = time.time()
    lines = []
    for h in extra["hits"]:
        who = f"by {h.author}" + (f" with {h.agent}" if h.agent and h.agent != CLAUDE_CODE else "")
        parts = [f"server {h.type}", ago(h.ts, now), who, clip(h.title, 120)]
        if h.file_path:
            parts.append(rel(h.file_path, h.project))
        lines.append(" · ".join(parts))
    if lines and not shown:
        text = f"{len(lines)} matches for {query!r} on the team server, best first:"
    return "\n".join([text, *lines, *extra["notes"]])
