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
from typing import Final

# The rows of a batch (ids in [?1, ?2), or `rows` a condition) done outside their session's project. Paths
# compared as strings: a teammate's or an imported session's folders need not exist on this machine.
FILL: Final = """INSERT OR IGNORE INTO session_places(launch, project, session_id)
SELECT DISTINCT s.project, o.project, o.session_id FROM observations o JOIN sessions s ON s.session_id = o.session_id
WHERE {rows} AND o.author IS NULL AND o.project IS NOT NULL AND s.project IS NOT NULL AND o.project <> s.project
  AND NOT (o.project > rtrim(s.project, '/') || '/' AND o.project < rtrim(s.project, '/') || '0')"""
# The same for a batch's rows, each row's session looked up by its primary key. Not a join: once statistics
# are taken, the planner expects a range of ids to hold many rows and reads every session into a Bloom filter
# first (7-15 ms a batch at a million observations, three quarters of its cost: ingest 0.3x an empty
# store's, issue #40); a scalar subquery is one lookup per row stored, whatever the statistics say.
_FILL_RANGE: Final = """INSERT OR IGNORE INTO session_places(launch, project, session_id)
SELECT DISTINCT launch, project, session_id FROM (
    SELECT (SELECT s.project FROM sessions s WHERE s.session_id = o.session_id) AS launch, o.project AS project,
           o.session_id AS session_id
    FROM observations o WHERE o.id >= ? AND o.id < ? AND o.author IS NULL AND o.project IS NOT NULL)
WHERE launch IS NOT NULL AND project <> launch
  AND NOT (project > rtrim(launch, '/') || '/' AND project < rtrim(launch, '/') || '0')"""


def note(db: sqlite3.Connection, first_id: int, next_id: int) -> None:
    """List the places of the rows just stored (ids first_id up to next_id), in the batch's transaction."""
    db.execute(_FILL_RANGE, (first_id, next_id))
