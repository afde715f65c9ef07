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
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from nmemd.model import CLAUDE_CODE, OBSERVATION_TYPES, stored_agent
from nmemd.store.batches import RowsInsert
from nmemd.team import outgoing
from nmemd.team.identity import to_local

DAY_S: Final = 86400.0
TEXT_MAX: Final = 64 * 1024  # a row's body on the server at most (a search needs its start, not 1 MB of log)

# purge.purge, inside its transaction: a tombstone for every purged row of a shared project that this
# member may delete for the whole team: their own, one they pushed from another machine (same author),
# or, in a team they administer (team_links.admin, from the server), a teammate's.
ENQUEUE_TOMBSTONES: Final = (
    "INSERT INTO team_outbox(op, ref, project) SELECT 'tomb', o.event_id, o.project"
    " FROM observations o JOIN team_projects p ON p.root = o.project"
    " WHERE o.id IN (SELECT id FROM temp.purge_ids) AND (o.author IS NULL OR o.author = p.member"
    " OR EXISTS (SELECT 1 FROM team_links l WHERE l.link = p.team || char(9) || p.dsn AND l.admin))"
)
# ... and every purged teammate's row is hidden here for good: a later pull (a rejoin pulls the history
# again) or a search of the server never brings it back, whether or not the team's copy went too.
HIDE_TEAMMATES_ROWS: Final = (
    "INSERT OR IGNORE INTO team_hidden(event_id, hidden_at) SELECT event_id, ? FROM observations"
    " WHERE id IN (SELECT id FROM temp.purge_ids) AND author IS NOT NULL"
)
# How many of those stay on the server and with teammates (this member may not delete them there).
HIDDEN_HERE_ONLY: Final = (
    "SELECT count(*) FROM observations o LEFT JOIN team_projects p ON p.root = o.project"
    " WHERE o.id IN (SELECT id FROM temp.purge_ids) AND o.author IS NOT NULL AND (p.root IS NULL OR"
    " (o.author != p.member AND NOT EXISTS (SELECT 1 FROM team_links l WHERE l.link = p.team || char(9) || p.dsn"
    " AND l.admin)))"
)


class SharedProject(msgspec.Struct, kw_only=True, frozen=True):
    """One row of `team_projects`: a project this machine shares, and where."""

    root: str
    project_id: str
    team: str
    dsn: str  # without its password (nmemd.team.membership keeps it apart)
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


class LinkStatus(msgspec.Struct, kw_only=True):
    """What `nmem team status` shows of one (server, team) link: the daemon's, or with no daemon the
    same fields probed from the CLI (team.membership.offline_statuses), so `--json` has one shape."""

    team: str
    server: str
    member: str
    projects: list[str]
    roots: list[str]
    state: str = "starting"  # starting, ok, retrying
    error: str | None = None
    schema_version: int | None = None
    outbox: int = 0
    last_push_at: float | None = None
    last_pull_at: float | None = None
    lag: int | None = None  # rows of the team the last pull had not reached yet (at its check)
    pushed: int = 0  # since the daemon started
    pulled: int = 0
    retry_in_s: float | None = None
    transport: str | None = None  # how the DSN reaches the server (team.transport.describe)

    def line(self) -> str:
        if self.error:
            return f"{self.team} on {self.server}: {self.error}"
        return f"{self.team} on {self.server}: {self.state}, outbox {self.outbox}"


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


# --- joining and leaving (writer thread, inside Store.transaction) --------------------------------


def join(db: sqlite3.Connection, project: SharedProject, window_days: float) -> int:
    """Share `project`: record it, queue its own observations of the window, and pull its team's rows of
    the window. A link that pulls already keeps its cursor: the project's rows before it are pulled
    from a cursor of the project's own (`behind`), never the other shared projects' again.
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
    pulling = db.execute("SELECT 1 FROM team_cursors WHERE link = ? AND feed = 'observations'", (link,)).fetchone()
    if pulling:  # the project's window start is found by the next pull (-1: not yet)
        db.execute(
            "INSERT INTO team_cursors(link, feed, seq) VALUES (?, ?, -1)"
            " ON CONFLICT(link, feed) DO UPDATE SET seq = -1",
            (link, BEHIND + project.project_id),
        )
        db.execute("DELETE FROM team_cursors WHERE link = ? AND feed = 'sessions'", (link,))
    else:
        db.execute("DELETE FROM team_cursors WHERE link = ? AND feed IN ('observations', 'sessions')", (link,))
    return int(queued)


def leave(db: sqlite3.Connection, root: str) -> bool:
    """Stop sharing `root`: its observations not pushed yet stay here (a rejoin queues the window
    again); teammates' rows stay until the window. Deletes already queued (tombstones, removed
    summaries) stay queued: a rejoin sends them, so a forget before a leave is never undone by it."""
    gone = db.execute("DELETE FROM team_projects WHERE root = ?", (root,)).rowcount
    db.execute("DELETE FROM team_outbox WHERE project = ? AND op = 'obs'", (root,))
    return bool(gone)


# --- push: what leaves the machine (read-only connection) -------------------------------------------


class OutRow(msgspec.Struct, kw_only=True):
    outbox_id: int
    op: str  # obs, session, tomb
    project_id: str
    event_id: str = ""
    session_id: str = ""
    agent: str = CLAUDE_CODE
    kind: str = ""
    title: str = ""
    body: str = ""
    files: list[str] = []
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    summary: str = ""
    gone: bool = False  # a session purged here: its summary removed, and on v2 servers a session tombstone


def bounded(text: str, limit: int = TEXT_MAX) -> str:
    """A column as PostgreSQL may hold it: no NUL (its text holds none), valid UTF-8, at most `limit`
    characters. Redaction is `outgoing.shareable`'s, run once before this."""
    if not text:
        return ""
    return text.replace("\0", "").encode("utf-8", "replace").decode("utf-8")[:limit]


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


GIVE_WAY_ROWS: Final = 16  # rows redacted (~0.3 ms of CPU) between two calls of read_outbox's `give_way`


def read_outbox(
    conn: sqlite3.Connection, link: Link, limit: int, after: int = 0, give_way: Callable[[], None] | None = None
) -> tuple[list[OutRow], list[int]]:
    """The oldest outbox rows of `link`'s projects as they will be pushed, and the outbox ids of rows
    that push nothing (their observation was forgotten since, or a prompt not shared): acked as sent.
    `give_way()` is called every GIVE_WAY_ROWS rows (team.threaded.give_way: hooks first)."""
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
    prompts = _prompts_of(conn, {o[2] for o in observations.values()} | {r[2] for r in rows if r[1] == "session"})
    out: list[OutRow] = []
    skipped: list[int] = []
    for n, (outbox_id, op, ref, root) in enumerate(rows):
        project = roots[root]
        if give_way is not None and n % GIVE_WAY_ROWS == 0:
            give_way()

        if op == "obs":
            o = observations.get(int(ref))
            if o is None or o[10] is not None or (o[3] == "prompt" and not project.share_prompts):
                skipped.append(outbox_id)
                continue
            body = o[5] or ""
            if o[7] and o[7] not in body:
                body = f"$ {o[7]}\n{body}" if body else f"$ {o[7]}"
            rel = outgoing.shareable_file(o[6], root)
            out.append(
                OutRow(
                    outbox_id=outbox_id, op=op, project_id=project.project_id, event_id=o[1], session_id=o[2],
                    agent=o[9] or CLAUDE_CODE, kind=o[3],
                    title=_shareable(o[4], 1000, project, prompts.get(o[2], [])),
                    body=_shareable(body, TEXT_MAX, project, prompts.get(o[2], [])),
                    files=[rel] if rel else [], created_at=float(o[8]),
                )
            )  # fmt: skip
        elif op == "session":
            s = sessions.get(ref)
            if s is None or not s[3]:  # purged, or its summary removed: an empty summary replaces it everywhere
                out.append(OutRow(outbox_id=outbox_id, op=op, project_id=project.project_id, session_id=ref,
                                  agent=(s[4] if s else None) or CLAUDE_CODE, gone=s is None))  # fmt: skip
                continue
            out.append(
                OutRow(
                    outbox_id=outbox_id, op=op, project_id=project.project_id, session_id=ref,
                    started_at=s[1], ended_at=s[2],
                    summary=_shareable(shareable_summary(s[3], project.share_prompts), TEXT_MAX, project,
                                       prompts.get(ref, [])),
                    agent=s[4] or CLAUDE_CODE,
                )
            )  # fmt: skip
        else:
            out.append(OutRow(outbox_id=outbox_id, op="tomb", project_id=project.project_id, event_id=ref))
    return out, skipped


def _shareable(text: str | None, limit: int, project: SharedProject, prompts: list[str]) -> str:
    """What may leave of one text column (team.outgoing), then `bounded`."""
    kept = outgoing.shareable(
        (text or "")[: limit * 2], root=project.root, prompts=prompts, share_prompts=project.share_prompts
    )
    return bounded(kept, limit)


def _prompts_of(conn: sqlite3.Connection, sessions: set[str]) -> dict[str, list[str]]:
    """Each session's prompts as typed (title and text): what a quote of one is hidden by."""
    found: dict[str, list[str]] = {}
    if sessions:
        for sid, title, content in conn.execute(
            "SELECT session_id, title, content FROM observations WHERE type = 'prompt'"
            " AND session_id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted(sessions)),),
        ):
            found.setdefault(sid, []).extend(t for t in (title, content) if t)
    return found


def ack(db: sqlite3.Connection, link_key: str, outbox_ids: Sequence[int], pushed: int, now: float) -> None:
    """After the server's COMMIT: the pushed rows leave the outbox (inside Store.transaction)."""
    db.execute("DELETE FROM team_outbox WHERE id IN (SELECT value FROM json_each(?))", (json.dumps(outbox_ids),))
    if pushed:
        db.execute(
            "INSERT INTO team_links(link, last_push_at, pushed) VALUES (?, ?, ?) ON CONFLICT(link) DO UPDATE"
            " SET last_push_at = excluded.last_push_at, pushed = pushed + excluded.pushed",
            (link_key, now, pushed),
        )


def note_admin(db: sqlite3.Connection, link_key: str, admin: bool) -> None:
    """Whether this member administers the link's team (the server says so at each connect): a
    forget of a teammate's row then deletes it for the whole team, else it hides it here only."""
    db.execute(
        "INSERT INTO team_links(link, admin) VALUES (?, ?) ON CONFLICT(link) DO UPDATE SET admin = excluded.admin",
        (link_key, int(admin)),
    )


# --- pull: teammates' rows in (inside Store.transaction, a few rows at a time) ----------------------


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
    event_id: str  # an observation's event id, or a session's id (kind "session")
    author: str  # who wrote the tombstone
    kind: str = "observation"  # servers from schema v2 on: "observation" or "session"
    project: str | None = None  # v2: the shared project whose rows it removed
    target: str | None = None  # v2: the author whose rows it removed


class Skipped(msgspec.Struct, array_like=True):
    """A row the server holds that is too large to pull: its cursor passes it, a log line names it."""

    seq: int
    author: str
    size: int


@dataclass
class Page:
    observations: list[InObservation]
    sessions: list[InSession]
    tombstones: list[InTombstone]
    cursors: dict[str, int]  # feed -> the highest seq read (stored with the rows)
    skipped: list[Skipped] = field(default_factory=list)


# A project joined to a link that pulls already: its own observations cursor (feed BEHIND + project id),
# from the row before its window up to the link's; -1 until the pull has found that row. Passed by the
# link's cursor, it is done (`move_cursors` drops it).
BEHIND: Final = "behind "


def behind(after: dict[str, int], projects: Sequence[str]) -> dict[str, int]:
    """The projects still pulled from a cursor of their own (`BEHIND`), and that cursor."""
    main = after.get("observations")
    if main is None:
        return {}
    return {p: seq for p in projects if (seq := after.get(BEHIND + p, main)) < main}


def cursors(conn: sqlite3.Connection, link_key: str) -> dict[str, int]:
    rows = conn.execute("SELECT feed, seq FROM team_cursors WHERE link = ?", (link_key,)).fetchall()
    return {str(feed): int(seq) for feed, seq in rows}


def team_session_id(author: str, session_id: str) -> str:
    """A teammate's session as this store keeps it: its own id space, apart from every session of this
    user, so a teammate's row never joins one of mine whatever session id it carries (m014)."""
    return f"team/{author}/{session_id}"


# Rows in one statement each 32 (RowsInsert): a pulled row per statement took the GIL back once a row on
# the writer thread, each time after the event loop's turn (issue #40).
_INSERT_OBS: Final = RowsInsert(
    "INSERT OR IGNORE INTO observations(id, event_id, session_id, project, ts, last_ts, hook_event, type, title,"
    " content, file_path, command, agent, author, machine, team_seq)",
    16,
)


def _command_of(o: InObservation) -> str | None:
    """The command a pushed command or error row carries on its body's first line: `$ cmd`, which
    `read_outbox` adds, or `command: cmd`, a failed call's own first line (every agent's capture
    writes it so), which it keeps as it is. Without it a teammate's open failure is no failure here."""
    first = o.body.split("\n", 1)[0]
    for prefix in ("$ ", "command: "):
        if first.startswith(prefix):
            return first[len(prefix) :] or None
    return None


def local_event_id(event_id: str, ordinal: int) -> str:
    return event_id if not ordinal else f"{event_id}:{ordinal}"


def hidden_among(conn: sqlite3.Connection, event_ids: Sequence[str]) -> set[str]:
    """Which of these event ids this user forgot or a tombstone removed here (never stored again)."""
    if not event_ids or not has_team_tables(conn):
        return set()
    rows = conn.execute(
        "SELECT event_id FROM team_hidden WHERE event_id IN (SELECT value FROM json_each(?))",
        (json.dumps(list(event_ids)),),
    )
    return {str(r[0]) for r in rows}


def store_observations(
    db: sqlite3.Connection,
    link: Link,
    observations: Sequence[InObservation],
    next_id: int,
    window_days: float,
    now: float,
) -> int:
    """Store pulled observations (one's own are not pulled; a repeat is ignored by its event id);
    return the next free observation id. Rows older than the window are skipped, and rows this user
    forgot (`team_hidden`). Each keeps its author and lives in its author's session space."""
    by_id = link.by_id
    since = now - window_days * DAY_S if window_days > 0 else 0.0
    hidden = hidden_among(db, [local_event_id(o.event_id, o.ordinal) for o in observations])
    rows: list[tuple[Any, ...]] = []
    for o in observations:
        project = by_id.get(o.project)
        event_id = local_event_id(o.event_id, o.ordinal)
        if project is None or o.created_at < since or event_id in hidden:
            continue
        kind = o.kind if o.kind in OBSERVATION_TYPES else "event"
        command = _command_of(o) if kind in ("command", "error") else None
        rows.append(
            (
                next_id, event_id, team_session_id(o.author, o.session_id), project.root, o.created_at,
                o.created_at, "Team", kind, o.title, o.body, to_local(o.files[0] if o.files else None, project.root),
                command, stored_agent(o.agent), o.author, o.machine, o.seq,
            )
        )  # fmt: skip
        next_id += 1
    if rows:
        _INSERT_OBS.run(db, rows)
    return next_id


def store_sessions(
    db: sqlite3.Connection, link: Link, sessions: Sequence[InSession], window_days: float, now: float
) -> None:
    """Store pulled session summaries; an empty one is a summary removed (a purge on its machine)."""
    by_id = link.by_id
    since = now - window_days * DAY_S if window_days > 0 else 0.0
    keep, gone = [], []
    for s in sessions:
        if s.project not in by_id:
            continue
        local_id = team_session_id(s.author, s.session_id)
        if not s.summary:
            gone.append((link.team, local_id, s.author))
        elif (s.ended_at or s.started_at or now) >= since:
            keep.append(
                (link.team, local_id, s.author, s.machine, stored_agent(s.agent), by_id[s.project].root, s.started_at,
                 s.ended_at, s.summary, s.seq)
            )  # fmt: skip
    if keep:
        db.executemany(
            "INSERT INTO team_sessions(team, session_id, author, machine, agent, project, started_at, ended_at,"
            " summary, team_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(team, session_id, author)"
            " DO UPDATE SET summary = excluded.summary, ended_at = excluded.ended_at, team_seq = excluded.team_seq",
            keep,
        )
    if gone:
        db.executemany("DELETE FROM team_sessions WHERE team = ? AND session_id = ? AND author = ?", gone)


def tombstoned(
    conn: sqlite3.Connection, link: Link, tombstones: Sequence[InTombstone], admins: Sequence[str]
) -> list[int]:
    """The local observations these pulled tombstones may delete: a teammate's row (never one of this
    user's own) of the project the tombstone came from, whose author or a team admin wrote it."""
    if not tombstones:
        return []
    roots = link.roots
    by_id = link.by_id
    ids: list[int] = []
    for t in tombstones:
        if t.kind != "observation":
            continue
        rows = conn.execute(
            "SELECT id, author, project FROM observations WHERE event_id = ? AND author IS NOT NULL", (t.event_id,)
        ).fetchall()
        for oid, author, root in rows:
            if root not in roots:
                continue  # not a project shared through this link
            if t.project is not None and (t.project not in by_id or by_id[t.project].root != root):
                continue  # another project's
            if t.target is not None and t.target != author:
                continue  # another author's row of that event
            if t.author == author or t.author in admins:
                ids.append(int(oid))
    return ids


def drop_sessions(db: sqlite3.Connection, link: Link, tombstones: Sequence[InTombstone], admins: Sequence[str]) -> None:
    """A pulled session tombstone (schema v2) removes that teammate's session summary here, under the
    same rule as an observation's: its author's or a team admin's, of a project shared through `link`."""
    for t in tombstones:
        target = t.target or t.author
        if t.kind != "session" or t.project not in link.by_id or not (t.author == target or t.author in admins):
            continue
        db.execute(
            "DELETE FROM team_sessions WHERE team = ? AND session_id = ? AND author = ? AND project = ?",
            (link.team, team_session_id(target, t.event_id), target, link.by_id[t.project].root),
        )


def move_cursors(db: sqlite3.Connection, link_key: str, moved: dict[str, int], pulled: int, now: float) -> None:
    """The feeds' cursors after what was stored, in the same transaction as it."""
    for feed, seq in moved.items():
        db.execute(
            "INSERT INTO team_cursors(link, feed, seq) VALUES (?, ?, ?)"
            " ON CONFLICT(link, feed) DO UPDATE SET seq = max(seq, excluded.seq)",
            (link_key, feed, seq),
        )
    if moved:  # a joined project's own cursor that the link's has reached: done
        db.execute(
            "DELETE FROM team_cursors WHERE link = ?1 AND feed LIKE ?2 || '%' AND seq >= (SELECT seq FROM"
            " team_cursors WHERE link = ?1 AND feed = 'observations')",
            (link_key, BEHIND),
        )
    db.execute(
        "INSERT INTO team_links(link, last_pull_at, pulled) VALUES (?, ?, ?) ON CONFLICT(link) DO UPDATE"
        " SET last_pull_at = excluded.last_pull_at, pulled = pulled + excluded.pulled",
        (link_key, now, pulled),
    )


def apply_page(db: sqlite3.Connection, link: Link, page: Page, next_id: int, window_days: float, now: float) -> int:
    """A whole pulled page at once (tests and tools; the daemon stores it in small steps, sync.py):
    its observations, sessions and cursors; return the next free observation id. Tombstones are the
    caller's (they delete through purge)."""
    next_id = store_observations(db, link, page.observations, next_id, window_days, now)
    store_sessions(db, link, page.sessions, window_days, now)
    move_cursors(db, link.key, page.cursors, len(page.observations) + len(page.sessions), now)
    return next_id


# --- the window: teammates' rows older than team_window_days go (maintenance) ----------------------


def prune_step(db: sqlite3.Connection, window_days: float, now: float, batch: int) -> int:
    """Delete up to `batch` teammates' observations older than the window (and their sessions);
    inside one short Store.transaction. Returns how many observations went."""
    if window_days <= 0:
        return 0
    before = now - window_days * DAY_S
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
    return gone
