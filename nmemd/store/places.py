"""Where a session worked besides its project: a session is one piece of work (issue #39).

A session belongs to the project it started in (`sessions.project`: the first event's, or for imported
history the folder the transcript was filed under); each of its rows keeps the project of its own `cwd`.
When the agent `cd`s out of that project (a sibling checkout, a parent folder, another repository), the
rows it stores there are listed here by the session's project, so searching the project it started in
finds them (`recall.lookups`), while the repository they were done in finds them too, by their own project.
A folder under the session's project needs no entry: a project's search takes the folders under it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from typing import Final

# The rows `rows` names (a condition) done outside their session's project (migration m013; a batch's rows:
# `note`). Paths compared as strings: a teammate's or an imported session's folders need not exist here.
FILL: Final = """INSERT OR IGNORE INTO session_places(launch, project, session_id)
SELECT DISTINCT s.project, o.project, o.session_id FROM observations o JOIN sessions s ON s.session_id = o.session_id
WHERE {rows} AND o.author IS NULL AND o.project IS NOT NULL AND s.project IS NOT NULL AND o.project <> s.project
  AND NOT (o.project > rtrim(s.project, '/') || '/' AND o.project < rtrim(s.project, '/') || '0')"""
INSERT: Final = "INSERT OR IGNORE INTO session_places(launch, project, session_id) VALUES (?, ?, ?)"


def outside(launch: str, project: str) -> bool:
    """Whether a row of `project` lies outside its session's `launch` project: FILL's test, in Python (str
    order is code point order, as SQLite's byte order of UTF-8 is)."""
    base = launch.rstrip("/")
    return project != launch and not (base + "/" < project < base + "0")


def note(db: sqlite3.Connection, rows: Iterable[tuple[str, str | None]], launches: Mapping[str, str | None]) -> None:
    """List the places of a batch's rows ((session id, project) each) outside their session's project, in
    the batch's transaction. `launches`: each session's project as the batch's upsert left it (its
    RETURNING), so no row's session is looked up again (at a million observations a lookup per batch
    cost ingest a quarter of its rate, issue #40); most batches have no such row and write nothing."""
    found = {
        (launch, project, sid)
        for sid, project in rows
        if project is not None and (launch := launches.get(sid)) is not None and outside(launch, project)
    }
    if found:
        db.executemany(INSERT, sorted(found))
