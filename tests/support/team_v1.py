"""The team protocol as a v1 nmem speaks it (nmemd/team/client.py, now pg.py, at 9486dd6, its statements
verbatim), for the server tests: a member's raw SQL, a re-push after a crash, and an older client
against a newer server. Synchronous psycopg, one transaction per push, as v1 did."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

PROJECT = "github.com/acme/api"

PUSH_OBS = """
INSERT INTO nmem.observations (team, project, event_id, ordinal, machine, agent, session_id, kind, title, body,
                               files, created_at)
SELECT %(team)s, u.project, u.event_id, 0, %(machine)s, u.agent, u.session_id, u.kind, u.title, u.body,
       CASE WHEN u.file IS NULL THEN '{}'::text[] ELSE ARRAY[u.file] END, to_timestamp(u.created_at)
FROM unnest(%(project)s::text[], %(event_id)s::text[], %(agent)s::text[], %(session_id)s::text[], %(kind)s::text[],
            %(title)s::text[], %(body)s::text[], %(file)s::text[], %(created_at)s::float8[])
     AS u(project, event_id, agent, session_id, kind, title, body, file, created_at)
ON CONFLICT DO NOTHING
"""
PUSH_SESSION = """
INSERT INTO nmem.sessions AS s (team, project, session_id, machine, agent, started_at, ended_at, summary)
VALUES (%s, %s, %s, %s, %s, to_timestamp(coalesce(%s, %s, extract(epoch FROM now()))), to_timestamp(%s), %s)
ON CONFLICT (team, session_id, author) DO UPDATE
SET summary = excluded.summary, ended_at = excluded.ended_at
WHERE s.summary IS DISTINCT FROM excluded.summary
"""
PUSH_TOMB = "INSERT INTO nmem.tombstones (team, event_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
LOCK = "SELECT pg_advisory_xact_lock(hashtext('nmem:' || %s))"
PULL_OBS = """
SELECT seq, project, event_id, ordinal, author::text, machine, agent, session_id, kind, title, body, files,
       extract(epoch FROM created_at)::float8
FROM nmem.observations WHERE team = %(team)s AND project = ANY(%(projects)s) AND seq > %(after)s
AND NOT (author = session_user AND machine = %(machine)s) ORDER BY seq LIMIT %(limit)s"""
PULL_TOMBS = """
SELECT seq, event_id, author::text FROM nmem.tombstones
WHERE team = %(team)s AND seq > %(after)s ORDER BY seq LIMIT %(limit)s"""
VERSION = "SELECT session_user, (SELECT max(version) FROM nmem.schema_version)"


@dataclass
class Op:
    """One outbox row: an observation (`op="obs"`), a tombstone (`"tomb"`) or a summary (`"session"`)."""

    op: str
    event_id: str
    title: str = ""
    session_id: str = "s1"
    summary: str = ""
    created_at: float = field(default_factory=time.time)


def obs(event_id: str, title: str = "", **kw: Any) -> Op:
    return Op("obs", event_id, title or f"title of {event_id}", **kw)


def tomb(event_id: str) -> Op:
    return Op("tomb", event_id)


def push(conn: psycopg.Connection[Any], team: str, ops: Sequence[Op], machine: str = "laptop") -> list[str]:
    """One v1 push transaction; the event ids of the tombstones the server refused."""
    refused: list[str] = []
    rows = [r for r in ops if r.op == "obs"]
    with conn.transaction():
        conn.execute(LOCK, (team,))
        if rows:
            conn.execute(
                PUSH_OBS,
                {
                    "team": team, "machine": machine, "project": [PROJECT] * len(rows),
                    "event_id": [r.event_id for r in rows], "agent": ["codex"] * len(rows),
                    "session_id": [r.session_id for r in rows], "kind": ["edit"] * len(rows),
                    "title": [r.title for r in rows], "body": [f"body of {r.title}" for r in rows],
                    "file": ["src/app.py"] * len(rows), "created_at": [r.created_at for r in rows],
                },
            )  # fmt: skip
        for r in ops:
            if r.op == "session":
                conn.execute(
                    PUSH_SESSION,
                    (team, PROJECT, r.session_id, machine, "codex", r.created_at, None, None, r.summary),
                )
            elif r.op == "tomb":
                try:
                    with conn.transaction():
                        conn.execute(PUSH_TOMB, (team, r.event_id))
                except psycopg.errors.InsufficientPrivilege:
                    refused.append(r.event_id)
        conn.execute("SELECT pg_notify('nmem_feed', %s)", (team,))
    return refused


def pull(conn: psycopg.Connection[Any], team: str, after: int = 0, limit: int = 1000) -> list[tuple[Any, ...]]:
    params = {"team": team, "projects": [PROJECT], "after": after, "machine": "?", "limit": limit}
    return conn.execute(PULL_OBS, params).fetchall()


def create_v1_server(conn: psycopg.Connection[Any]) -> None:
    """Schema `nmem` exactly as `nmem team init` of v1 left it: v1's bootstrap (no ledger), M001 and
    the single version row, in one transaction (pg_trgm's schema on the search path, as M001 needs)."""
    from nmemd.team import schema

    with conn.transaction():
        conn.execute("CREATE SCHEMA nmem; CREATE TABLE nmem.schema_version (version int NOT NULL)")
        trgm = schema._trgm_schema(conn)  # noqa: SLF001 - the same choice v1 made
        conn.execute("SELECT set_config('search_path', quote_ident(%s) || ', pg_catalog', true)", (trgm,))
        conn.execute(schema.MIGRATIONS[0].sql.encode())
        conn.execute("INSERT INTO nmem.schema_version (version) VALUES (1)")
