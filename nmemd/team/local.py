"""The local store's side of team memory: shared projects, the outbox, pulled rows, the window.

Plain functions over `sqlite3.Connection` (read-only connections for what push reads, the daemon's
writer thread for what changes the store), so nothing here imports psycopg. Migration m012 holds
the tables; its triggers fill the outbox in the very transaction that stores a shared project's
own observation or summary, so an outbox row exists exactly when its data was committed.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import msgspec

from nmemd.capture import redact
from nmemd.model import OBSERVATION_TYPES, stored_agent
from nmemd.team.identity import to_local, to_relative

DAY_S: Final = 86400.0
T = TypeVar("T")
TEXT_MAX: Final = 64 * 1024  # a row's body on the server at most (a search needs its start, not 1 MB of log)

# purge.purge, inside its transaction: a tombstone for every purged row of a shared project (one's own
# or, for an admin, a teammate's: the server's row-level security decides, see sync.push).
ENQUEUE_TOMBSTONES: Final = (
    "INSERT INTO team_outbox(op, ref, project) SELECT 'tomb', o.event_id, o.project FROM observations o"
    " WHERE o.id IN (SELECT id FROM temp.purge_ids) AND o.project IN (SELECT root FROM team_projects)"
)


class SharedProject(msgspec.Struct, kw_only=True, frozen=True):
    """One row of `team_projects`: a project this machine shares, and where."""

    root: str
    project_id: str
    team: str
    dsn: str  # without its password (see nmemd.team.credentials)
    member: str
    share_prompts: bool = False
    joined_at: float = 0.0


@dataclass(frozen=True)
class Link:
    """One (server, team) pair this machine syncs with, and the projects it shares there."""

    dsn: str
    team: str
    member: str
    projects: tuple[SharedProject, ...]

    @property
    def key(self) -> str:
        return f"{self.team}\t{self.dsn}"

    @property
    def roots(self) -> dict[str, SharedProject]:
        return {p.root: p for p in self.projects}

    @property
    def by_id(self) -> dict[str, SharedProject]:
        return {p.project_id: p for p in self.projects}


def machine_name() -> str:
    return os.environ.get("NMEM_TEAM_MACHINE") or socket.gethostname() or "unknown"


def has_team_tables(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'team_projects'").fetchone() is not None


def shared_projects(conn: sqlite3.Connection) -> list[SharedProject]:
    if not has_team_tables(conn):
        return []
    rows = conn.execute(
        "SELECT root, project_id, team, dsn, member, share_prompts, joined_at FROM team_projects ORDER BY root"
    ).fetchall()
    return [
        SharedProject(
            root=r[0], project_id=r[1], team=r[2], dsn=r[3], member=r[4], share_prompts=bool(r[5]), joined_at=r[6]
        )
        for r in rows
    ]


def links(projects: Sequence[SharedProject]) -> list[Link]:
    grouped: dict[tuple[str, str], list[SharedProject]] = {}
    for p in projects:
        grouped.setdefault((p.dsn, p.team), []).append(p)
    return [Link(dsn=d, team=t, member=ps[0].member, projects=tuple(ps)) for (d, t), ps in sorted(grouped.items())]


# --- joining and leaving (writer thread) ------------------------------------------------------------


def in_transaction(db: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
    """`fn(db, *args)` between BEGIN IMMEDIATE and COMMIT (ROLLBACK on any error)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = fn(db, *args)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return result


def join(db: sqlite3.Connection, project: SharedProject, window_days: float) -> int:
    """Share `project`: record it, queue its own observations of the window, and pull its team's
    history again (the cursor of a team whose other projects were shared already passed them by).
    Returns how many observations were queued. Runs inside the caller's transaction."""
    db.execute(
        "INSERT INTO team_projects(root, project_id, team, dsn, member, share_prompts, joined_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(root) DO UPDATE SET project_id = excluded.project_id,"
        " team = excluded.team, dsn = excluded.dsn, member = excluded.member, share_prompts = excluded.share_prompts",
        (project.root, project.project_id, project.team, project.dsn, project.member, int(project.share_prompts),
         project.joined_at or time.time()),
    )  # fmt: skip
    since = time.time() - window_days * DAY_S if window_days > 0 else 0.0
    queued = db.execute(
        "INSERT INTO team_outbox(op, ref, project) SELECT 'obs', id, project FROM observations"
        " WHERE project = ? AND author IS NULL AND ts >= ? AND id NOT IN"
        " (SELECT CAST(ref AS INTEGER) FROM team_outbox WHERE op = 'obs' AND project = ?) ORDER BY id",
        (project.root, since, project.root),
    ).rowcount
    db.execute(
        "INSERT INTO team_outbox(op, ref, project) SELECT 'session', session_id, project FROM sessions"
        " WHERE project = ? AND summary IS NOT NULL AND coalesce(last_event_at, 0) >= ?",
        (project.root, since),
    )
    link = Link(project.dsn, project.team, project.member, (project,)).key
    db.execute("DELETE FROM team_cursors WHERE link = ? AND feed IN ('observations', 'sessions')", (link,))
    return int(queued)


def leave(db: sqlite3.Connection, root: str) -> bool:
    """Stop sharing `root`: what was not pushed yet stays here; teammates' rows stay until the window."""
    gone = db.execute("DELETE FROM team_projects WHERE root = ?", (root,)).rowcount
    db.execute("DELETE FROM team_outbox WHERE project = ?", (root,))
    return bool(gone)


# --- push: what leaves the machine (read-only connection) -------------------------------------------


class OutRow(msgspec.Struct, kw_only=True):
    outbox_id: int
    op: str  # obs, session, tomb
    project_id: str
    event_id: str = ""
    session_id: str = ""
    agent: str = "claude-code"
    kind: str = ""
    title: str = ""
    body: str = ""
    files: list[str] = []
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    summary: str = ""


def clean(text: str | None, limit: int = TEXT_MAX) -> str:
    """Today's rules again before anything leaves: `<private>` blocks out, secrets redacted; no NUL
    (PostgreSQL text holds none), valid UTF-8, bounded."""
    if not text:
        return ""
    text = redact.redact(redact.strip_private(text[: limit * 2]))
    text = text.replace("\0", "").encode("utf-8", "replace").decode("utf-8")
    return text[:limit]


_PROMPT_LINES: Final = ("Asked:", "Then asked:", "Prompt:")  # a summary's lines that quote what was typed
_LOCAL_IDS: Final = re.compile(r" \((?:#\d+|…)(?: (?:#\d+|…))*\)$")  # "(#12 #15)": this store's ids


def shareable_summary(summary: str, share_prompts: bool) -> str:
    """A session summary as it may leave: without the prompts it quotes unless they are shared, and
    without this store's observation ids (meaningless elsewhere)."""
    lines = []
    for line in summary.splitlines():
        if not share_prompts and line.lstrip().startswith(_PROMPT_LINES):
            continue
        lines.append(_LOCAL_IDS.sub("", line))
    return "\n".join(lines)


def outbox_depth(conn: sqlite3.Connection, roots: Sequence[str] | None = None) -> int:
    if not has_team_tables(conn):
        return 0
    if roots is None:
        return int(conn.execute("SELECT count(*) FROM team_outbox").fetchone()[0])
    return int(
        conn.execute(
            "SELECT count(*) FROM team_outbox WHERE project IN (SELECT value FROM json_each(?))", (json.dumps(roots),)
        ).fetchone()[0]
    )


def _by_key(conn: sqlite3.Connection, sql: str, keys: list[Any]) -> dict[Any, Any]:
    """The rows `sql` reads for `keys` (its one parameter, a JSON list), by their first column."""
    return {r[0]: r for r in conn.execute(sql, (json.dumps(keys),))}


def read_outbox(conn: sqlite3.Connection, link: Link, limit: int, after: int = 0) -> tuple[list[OutRow], list[int]]:
    """The oldest outbox rows of `link`'s projects as they will be pushed, and the outbox ids of rows
    that push nothing (their observation was forgotten since, or a prompt not shared): acked as sent."""
    roots = link.roots
    rows = conn.execute(
        "SELECT id, op, ref, project FROM team_outbox WHERE id > ? AND project IN (SELECT value FROM json_each(?))"
        " ORDER BY id LIMIT ?",
        (after, json.dumps(list(roots)), limit),
    ).fetchall()
    observations = _by_key(
        conn,
        "SELECT id, event_id, session_id, type, title, content, file_path, command, ts, agent, author"
        " FROM observations WHERE id IN (SELECT value FROM json_each(?))",
        [int(r[2]) for r in rows if r[1] == "obs"],
    )
    sessions = _by_key(
        conn,
        "SELECT session_id, started_at, ended_at, summary, agent FROM sessions"
        " WHERE session_id IN (SELECT value FROM json_each(?))",
        [r[2] for r in rows if r[1] == "session"],
    )
    out: list[OutRow] = []
    skipped: list[int] = []
    for outbox_id, op, ref, root in rows:
        project = roots[root]
        if op == "obs":
            o = observations.get(int(ref))
            if o is None or o[10] is not None or (o[3] == "prompt" and not project.share_prompts):
                skipped.append(outbox_id)
                continue
            body = o[5] or ""
            if o[7] and o[7] not in body:
                body = f"$ {o[7]}\n{body}" if body else f"$ {o[7]}"
            rel = to_relative(o[6], root)
            out.append(
                OutRow(
                    outbox_id=outbox_id, op=op, project_id=project.project_id, event_id=o[1], session_id=o[2],
                    agent=o[9] or "claude-code", kind=o[3], title=clean(o[4], 1000), body=clean(body),
                    files=[rel] if rel else [], created_at=float(o[8]),
                )
            )  # fmt: skip
        elif op == "session":
            s = sessions.get(ref)
            if s is None or not s[3]:
                skipped.append(outbox_id)
                continue
            out.append(
                OutRow(
                    outbox_id=outbox_id, op=op, project_id=project.project_id, session_id=ref,
                    started_at=s[1], ended_at=s[2], summary=clean(shareable_summary(s[3], project.share_prompts)),
                    agent=s[4] or "claude-code",
                )
            )  # fmt: skip
        else:
            out.append(OutRow(outbox_id=outbox_id, op="tomb", project_id=project.project_id, event_id=ref))
    return out, skipped


def ack(db: sqlite3.Connection, link_key: str, outbox_ids: Sequence[int], pushed: int, now: float) -> None:
    """After the server's COMMIT: the pushed rows leave the outbox (writer thread, one transaction)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("DELETE FROM team_outbox WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(outbox_ids),))
        if pushed:
            db.execute(
                "INSERT INTO team_links(link, last_push_at, pushed) VALUES (?, ?, ?) ON CONFLICT(link) DO UPDATE"
                " SET last_push_at = excluded.last_push_at, pushed = pushed + excluded.pushed",
                (link_key, now, pushed),
            )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


# --- pull: teammates' rows in (writer thread) ------------------------------------------------------


class InObservation(msgspec.Struct, array_like=True):
    seq: int
    project: str
    event_id: str
    ordinal: int
    author: str
    machine: str
    agent: str
    session_id: str
    kind: str
    title: str
    body: str
    files: list[str]
    created_at: float


class InSession(msgspec.Struct, array_like=True):
    seq: int
    project: str
    session_id: str
    author: str
    machine: str
    agent: str
    started_at: float | None
    ended_at: float | None
    summary: str


class InTombstone(msgspec.Struct, array_like=True):
    seq: int
    event_id: str
    author: str


@dataclass
class Page:
    observations: list[InObservation]
    sessions: list[InSession]
    tombstones: list[InTombstone]
    cursors: dict[str, int]  # feed -> the highest seq read (stored with the rows)


def cursors(conn: sqlite3.Connection, link_key: str) -> dict[str, int]:
    rows = conn.execute("SELECT feed, seq FROM team_cursors WHERE link = ?", (link_key,)).fetchall()
    return {str(feed): int(seq) for feed, seq in rows}


_INSERT_OBS: Final = (
    "INSERT OR IGNORE INTO observations(id, event_id, session_id, project, ts, last_ts, hook_event, type, title,"
    " content, file_path, command, agent, author, machine, team_seq)"
    " VALUES (?, ?, ?, ?, ?, ?, 'Team', ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _command_of(o: InObservation) -> str | None:
    """The command a pushed command or error row carries on its body's first line (`read_outbox`)."""
    if o.body.startswith("$ "):
        return o.body[2:].split("\n", 1)[0] or None
    return None


def local_event_id(event_id: str, ordinal: int) -> str:
    return event_id if not ordinal else f"{event_id}:{ordinal}"


def apply_page(db: sqlite3.Connection, link: Link, page: Page, next_id: int, window_days: float, now: float) -> int:
    """Store one pulled page and its cursors in ONE transaction (BEGIN IMMEDIATE to COMMIT); return
    the next free observation id. Rows older than the window are skipped (the cursor passes them),
    one's own rows (same event id) are already here, tombstones delete the local copies."""
    by_id = link.by_id
    since = now - window_days * DAY_S if window_days > 0 else 0.0
    rows: list[tuple[Any, ...]] = []
    for o in page.observations:
        project = by_id.get(o.project)
        if project is None or o.created_at < since:
            continue
        kind = o.kind if o.kind in OBSERVATION_TYPES else "event"
        command = _command_of(o) if kind in ("command", "error") else None
        rows.append(
            (
                next_id, local_event_id(o.event_id, o.ordinal), o.session_id, project.root, o.created_at, o.created_at,
                kind, o.title, o.body, to_local(o.files[0] if o.files else None, project.root), command,
                stored_agent(o.agent), o.author, o.machine, o.seq,
            )
        )  # fmt: skip
        next_id += 1
    sessions = [
        (link.team, s.session_id, s.author, s.machine, stored_agent(s.agent), by_id[s.project].root, s.started_at,
         s.ended_at, s.summary, s.seq)
        for s in page.sessions
        if s.project in by_id and (s.ended_at or s.started_at or now) >= since
    ]  # fmt: skip
    db.execute("BEGIN IMMEDIATE")
    try:
        if rows:
            db.executemany(_INSERT_OBS, rows)
        if sessions:
            db.executemany(
                "INSERT INTO team_sessions(team, session_id, author, machine, agent, project, started_at, ended_at,"
                " summary, team_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(team, session_id, author)"
                " DO UPDATE SET summary = excluded.summary, ended_at = excluded.ended_at, team_seq = excluded.team_seq",
                sessions,
            )
        if page.tombstones:
            _delete_events(db, [t.event_id for t in page.tombstones])
        pulled = len(rows) + len(sessions) + len(page.tombstones)
        for feed, seq in page.cursors.items():
            db.execute(
                "INSERT INTO team_cursors(link, feed, seq) VALUES (?, ?, ?)"
                " ON CONFLICT(link, feed) DO UPDATE SET seq = max(seq, excluded.seq)",
                (link.key, feed, seq),
            )
        db.execute(
            "INSERT INTO team_links(link, last_pull_at, pulled) VALUES (?, ?, ?) ON CONFLICT(link) DO UPDATE"
            " SET last_pull_at = excluded.last_pull_at, pulled = pulled + excluded.pulled",
            (link.key, now, pulled),
        )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return next_id


def _delete_events(db: sqlite3.Connection, event_ids: list[str]) -> None:
    """Delete the observations these tombstones name, as purge deletes (FTS entries and prompts too)."""
    db.execute("CREATE TEMP TABLE IF NOT EXISTS purge_ids (id INTEGER PRIMARY KEY)")
    db.execute("DELETE FROM temp.purge_ids")
    db.execute(
        "INSERT OR IGNORE INTO temp.purge_ids(id) SELECT id FROM observations"
        " WHERE event_id IN (SELECT value FROM json_each(?))",
        (json.dumps(event_ids),),
    )
    db.execute("UPDATE events SET observation_id = NULL WHERE observation_id IN (SELECT id FROM temp.purge_ids)")
    db.execute("DELETE FROM prompts WHERE observation_id IN (SELECT id FROM temp.purge_ids)")
    db.execute("DELETE FROM team_outbox WHERE op = 'obs' AND CAST(ref AS INTEGER) IN (SELECT id FROM temp.purge_ids)")
    db.execute("DELETE FROM observations WHERE id IN (SELECT id FROM temp.purge_ids)")
    db.execute("DELETE FROM temp.purge_ids")


# --- the window: teammates' rows older than team_window_days go (maintenance) ----------------------


def prune_step(db: sqlite3.Connection, window_days: float, now: float, batch: int) -> int:
    """Delete up to `batch` teammates' observations older than the window (and their sessions);
    one short transaction. Returns how many observations went."""
    if window_days <= 0:
        return 0
    before = now - window_days * DAY_S
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute("CREATE TEMP TABLE IF NOT EXISTS purge_ids (id INTEGER PRIMARY KEY)")
        db.execute("DELETE FROM temp.purge_ids")
        db.execute(
            "INSERT INTO temp.purge_ids(id) SELECT id FROM observations WHERE author IS NOT NULL AND ts < ?"
            " ORDER BY author, ts LIMIT ?",
            (before, batch),
        )
        gone = int(db.execute("SELECT count(*) FROM temp.purge_ids").fetchone()[0])
        db.execute("DELETE FROM prompts WHERE observation_id IN (SELECT id FROM temp.purge_ids)")
        db.execute("DELETE FROM observations WHERE id IN (SELECT id FROM temp.purge_ids)")
        db.execute("DELETE FROM temp.purge_ids")
        if gone < batch:
            db.execute("DELETE FROM team_sessions WHERE coalesce(ended_at, started_at, 0) < ?", (before,))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return gone


def teammate_rows(conn: sqlite3.Connection) -> int:
    if not has_team_tables(conn):
        return 0
    return int(conn.execute("SELECT count(*) FROM observations WHERE author IS NOT NULL").fetchone()[0])
