"""Talking to the team's PostgreSQL server: connect, check, push a batch, pull a page.

The sync protocol (docs/team.md): a push is one transaction per batch, holding the team's lock (so
rows become visible in `seq` order and a reader's cursor never skips one that commits later with a
lower seq: v1's advisory lock, taken by the client; from v2 the server's, taken by its triggers, from
v8 once a batch by nmem.push_observations), `INSERT ... ON CONFLICT DO NOTHING`, a wake-up, COMMIT;
the outbox row is deleted only after COMMIT returned. A pull reads each feed's rows with
`seq > cursor` in pages. Every failure becomes a `TeamError` with one line that says what is wrong.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from nmemd.errors import TeamError
from nmemd.team import schema
from nmemd.team.local import InObservation, InSession, InTombstone, OutRow, Page, Skipped
from nmemd.team.pg_errors import translate

if TYPE_CHECKING:
    import psycopg

CONNECT_TIMEOUT_S: Final = 5
# libpq's own: a dead peer (a stalled proxy, a laptop that slept) is noticed within ~25 s even
# when no statement runs; each statement is also bounded by the caller (sync.OP_TIMEOUT_S).
KEEPALIVES: Final = {"keepalives": "1", "keepalives_idle": "10", "keepalives_interval": "5", "keepalives_count": "3"}
CHANNEL: Final = "nmem_feed"


def server_label(dsn: str) -> str:
    """`user@host:port/db` of a DSN, for messages (never its password)."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        d = conninfo_to_dict(dsn)
    except Exception:
        return "the team server"
    host = str(d.get("host") or d.get("hostaddr") or "localhost")
    port = str(d.get("port") or "5432")
    return f"{d.get('user') or '?'}@{host}:{port}/{d.get('dbname') or d.get('user') or '?'}"


def describe(exc: BaseException, dsn: str = "") -> str:
    """One line for any failure talking to the server (team.pg_errors.translate)."""
    return str(translate(exc, server_label(dsn) if dsn else ""))


def with_keepalives(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    d = conninfo_to_dict(dsn)
    extra = {k: v for k, v in KEEPALIVES.items() if k not in d}
    if "connect_timeout" not in d:
        extra["connect_timeout"] = str(CONNECT_TIMEOUT_S)
    return make_conninfo(dsn, **extra, application_name="nmemd")


async def connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    import psycopg

    return await psycopg.AsyncConnection.connect(with_keepalives(dsn), autocommit=True)


def connect_blocking(dsn: str) -> psycopg.Connection[Any]:
    """A blocking connection, for a worker thread (team.threaded): what pushes and pulls."""
    import psycopg

    return psycopg.Connection.connect(with_keepalives(dsn), autocommit=True)


# A pull's page read in seq order through an index, whatever the statistics say. A table just filled (a
# teammate's push of thousands of rows, a project new to the server, autoanalyze not run yet) is estimated
# at a row or two, and PostgreSQL read each page through a bitmap of the project's every row (a GIN index
# that starts with team and project), sorted for the next 1,000: 30-35 ms of the server's CPU a page of a
# 20,000-row project, every page, instead of 5 ms through the (team, project, seq) index; on a machine that
# also runs the server, a hook arriving meanwhile waited for a core (bench_team_pull.py, issue #40). The
# pull's other statements (window_start, waiting, admins) read through btree indexes too.
PULL_SESSION: Final = "SET enable_bitmapscan = off"


def for_pulls(conn: psycopg.Connection[Any]) -> None:
    """Set the puller's connection up (PULL_SESSION): once, after it connects."""
    conn.execute(PULL_SESSION)


SEARCH_POOL_MAX: Final = 4  # team searches at once per server; one more waits for a free connection


async def search_pool(dsn: str) -> Any:
    """An open pool of search connections (autocommit): opened lazily, each checked before use,
    broken ones discarded and closed by the pool; the caller closes it (stop, relink)."""
    from psycopg_pool import AsyncConnectionPool

    pool: Any = AsyncConnectionPool(
        with_keepalives(dsn), min_size=0, max_size=SEARCH_POOL_MAX, kwargs={"autocommit": True},
        check=AsyncConnectionPool.check_connection, open=False, name="nmem-search",
    )  # fmt: skip
    await pool.open(wait=False)
    return pool


class ServerFacts(msgspec.Struct, kw_only=True):
    member: str
    schema_version: int
    teams: list[str]
    admin_of: list[str]


async def check(conn: psycopg.AsyncConnection[Any], team: str | None = None) -> ServerFacts:
    """Who we are there, the schema's version and our teams; TeamError when the schema is missing or
    newer than this nmem, or when `team` is given and we are not in it."""
    import psycopg.errors as pe

    dsn = conn.info.dsn
    try:
        cur = await conn.execute(f"SELECT session_user, {schema.LEDGER_VISIBLE}")
        who = await cur.fetchone()
        assert who is not None
        cur = await conn.execute(schema.version_sql(bool(who[1])))
        found = schema.read_version(await cur.fetchone())
    except (pe.UndefinedTable, pe.InvalidSchemaName) as exc:
        raise TeamError(describe(exc, dsn)) from None
    except pe.InsufficientPrivilege as exc:
        raise TeamError(f"{server_label(dsn)}: not a team member here ({describe(exc, dsn)})") from None
    member = str(who[0])
    if found is None:
        raise TeamError(f"{server_label(dsn)}: the nmem schema has no version row: run `nmem team init` again")
    version = schema.usable(found).version
    cur = await conn.execute("SELECT team, is_admin FROM nmem.members WHERE member = session_user ORDER BY team")
    rows = await cur.fetchall()
    facts = ServerFacts(
        member=member,
        schema_version=version,
        teams=[str(r[0]) for r in rows],
        admin_of=[str(r[0]) for r in rows if r[1]],
    )
    if team is not None and team not in facts.teams:
        raise TeamError(f"{server_label(dsn)}: {member} is not a member of team {team!r} (removed?)")
    return facts


# --- push ------------------------------------------------------------------------------------------

_PUSH_OBS: Final = """
INSERT INTO nmem.observations (team, project, event_id, ordinal, machine, agent, session_id, kind, title, body,
                               files, created_at)
SELECT %(team)s, u.project, u.event_id, 0, %(machine)s, u.agent, u.session_id, u.kind, u.title, u.body,
       CASE WHEN u.file IS NULL THEN '{}'::text[] ELSE ARRAY[u.file] END, to_timestamp(u.created_at)
FROM json_to_recordset(%(rows)s::json)
     AS u(project text, event_id text, agent text, session_id text, kind text, title text, body text, file text,
          created_at float8)
ON CONFLICT DO NOTHING
"""
_PUSH_SESSION: Final = """
INSERT INTO nmem.sessions AS s (team, project, session_id, machine, agent, started_at, ended_at, summary)
VALUES (%s, %s, %s, %s, %s, to_timestamp(coalesce(%s, %s, extract(epoch FROM now()))), to_timestamp(%s), %s)
ON CONFLICT (team, session_id, author) DO UPDATE
SET summary = excluded.summary, ended_at = excluded.ended_at
WHERE s.summary IS DISTINCT FROM excluded.summary
"""
_PUSH_TOMB: Final = "INSERT INTO nmem.tombstones (team, event_id) VALUES (%s, %s) ON CONFLICT DO NOTHING"
# Schema v2 on: a tombstone names its kind and project, and the server judges and applies it.
_PUSH_TOMB_V2: Final = (
    "INSERT INTO nmem.tombstones (team, event_id, kind, project) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
DELETES_SINCE: Final = 2  # the server schema whose tombstones carry kind and project, and whose feed lock is its own
# Schema v8 on: the server draws a batch's seqs in one statement under the team's lock, taken once
# (sql/m008), where the INSERT above runs its per-row trigger for each row.
_PUSH_OBS_V8: Final = "SELECT nmem.push_observations(%(team)s, %(machine)s, %(rows)s::json)"
ONE_STATEMENT_SINCE: Final = 8


def push(conn: psycopg.Connection[Any], team: str, machine: str, rows: Sequence[OutRow], version: int = 1) -> list[str]:
    """One batch in one transaction (see the module docstring). Returns the event ids of tombstones
    the server refused (another member's row, and we are not the team's admin): they are dropped.
    A v1 server orders pushes by an advisory lock the client takes too and hears `nmem_feed`; from
    v2 its triggers order and announce them (a lock no login can hold, a channel of the team's).
    Blocking: run on a worker thread (team.threaded), so the batch's send never holds the event loop."""
    obs = [r for r in rows if r.op == "obs"]
    refused: list[str] = []
    v2 = version >= DELETES_SINCE
    if version >= ONE_STATEMENT_SINCE and obs and len(obs) == len(rows) and conn.autocommit:
        # Observations only: one statement, its own transaction (one round trip instead of three: a
        # paced push's slices are small, sync.PACE_SHARE).
        conn.execute(_PUSH_OBS_V8, {"team": team, "machine": machine, "rows": _obs_json(obs)})
        return refused
    with conn.transaction():
        if not v2:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('nmem:' || %s))", (team,))
        if obs:
            sql = _PUSH_OBS_V8 if version >= ONE_STATEMENT_SINCE else _PUSH_OBS
            conn.execute(sql, {"team": team, "machine": machine, "rows": _obs_json(obs)})
        for r in rows:
            if r.op == "session" and r.gone and v2:
                _tombstone(conn, refused, _PUSH_TOMB_V2, (team, r.session_id, "session", r.project_id))
            elif r.op == "session":
                conn.execute(
                    _PUSH_SESSION,
                    (
                        team,
                        r.project_id,
                        r.session_id,
                        machine,
                        r.agent,
                        r.started_at,
                        r.ended_at,
                        r.ended_at,
                        r.summary,
                    ),
                )
            elif r.op == "tomb" and v2:
                _tombstone(conn, refused, _PUSH_TOMB_V2, (team, r.event_id, "observation", r.project_id))
            elif r.op == "tomb":
                _tombstone(conn, refused, _PUSH_TOMB, (team, r.event_id))
        if not v2:
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, team))
    return refused


class _ObsRow(msgspec.Struct):
    """One observation of a push, as `json_to_recordset` reads it (`_PUSH_OBS`)."""

    project: str
    event_id: str
    agent: str
    session_id: str
    kind: str
    title: str
    body: str
    file: str | None
    created_at: float


_OBS_JSON: Final = msgspec.json.Encoder()


def _obs_json(obs: Sequence[OutRow]) -> str:
    """The batch as one JSON document: encoded in C, where nine text[] parameters are dumped element by
    element in Python (a fifth of a push's CPU in the daemon)."""
    rows = [
        _ObsRow(r.project_id, r.event_id, r.agent, r.session_id, r.kind, r.title, r.body,
                r.files[0] if r.files else None, r.created_at)
        for r in obs
    ]  # fmt: skip
    return _OBS_JSON.encode(rows).decode()


def _tombstone(conn: psycopg.Connection[Any], refused: list[str], sql: str, params: tuple[Any, ...]) -> None:
    import psycopg.errors as pe

    try:
        with conn.transaction():  # a savepoint: a refused tombstone does not undo the batch
            conn.execute(sql, params)
    except pe.InsufficientPrivilege:
        refused.append(str(params[1]))


async def listen(conn: psycopg.AsyncConnection[Any], team: str, version: int = 1) -> str:
    """LISTEN where the team's pushes are announced: `nmem_feed` on a v1 server, the team's own
    channel (nmem.feeds, readable by its members only) from v2; returns the channel."""
    channel = CHANNEL
    if version >= DELETES_SINCE:
        cur = await conn.execute("SELECT channel FROM nmem.feeds WHERE team = %s", (team,))
        row = await cur.fetchone()
        if row is None:
            raise TeamError(f"{server_label(conn.info.dsn)}: the server has no feed for team {team!r}")
        channel = str(row[0])
    from psycopg import sql

    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    return channel


# --- pull ------------------------------------------------------------------------------------------

FEEDS: Final = ("observations", "sessions", "tombstones")
PAGE_ROWS: Final = 1000  # a pull page's rows at most ...
PAGE_BYTES: Final = 1 << 20  # ... and its text at most (the first row always: a page moves the cursor)
ROW_MAX_BYTES: Final = 1 << 20  # a row larger than this (no nmem push makes one) is skipped, with a word
# Each project's sessions in seq order, merged: a pull reads the rows of the shared projects only, never
# the team's other projects' (whose rows it would discard). Observations: `_pull_observations` below.
_PROJECT_ROWS: Final = """
    FROM unnest(%(projects)s::text[]) AS p(project) CROSS JOIN LATERAL (
        SELECT {columns} FROM nmem.{table} o WHERE o.team = %(team)s AND o.project = p.project AND o.seq > %(after)s
        AND NOT (o.author = session_user AND o.machine = %(machine)s) ORDER BY o.seq LIMIT %(limit)s) o"""
_FEED_ROWS: Final = {
    "sessions": _PROJECT_ROWS.format(
        table="sessions",
        columns="o.seq, o.project, o.session_id, o.author, o.machine, o.agent, o.started_at, o.ended_at, o.summary,"
        " octet_length(o.summary) + octet_length(o.session_id) + octet_length(o.agent) AS size",
    ),
    "tombstones": """
    FROM (SELECT o.seq, o.event_id, o.author, octet_length(o.event_id) AS size FROM nmem.tombstones o
          WHERE o.team = %(team)s AND o.seq > %(after)s ORDER BY o.seq LIMIT %(limit)s) o""",
    "tombstones_v2": """
    FROM (SELECT o.seq, o.event_id, o.author, o.kind, o.project, o.target,
                 octet_length(o.event_id) + coalesce(octet_length(o.project), 0) AS size FROM nmem.tombstones o
          WHERE o.team = %(team)s AND o.seq > %(after)s ORDER BY o.seq LIMIT %(limit)s) o""",
}
_FEED_COLUMNS: Final = {
    "observations": "seq, project, {fit}event_id{end}, ordinal, author::text, machine, {fit}agent{end},"
    " {fit}session_id{end}, kind, {fit}title{end}, {fit}body{end}, CASE WHEN size <= %(row_max)s THEN files END,"
    " extract(epoch FROM created_at)::float8",
    "sessions": "seq, project, {fit}session_id{end}, author::text, machine, {fit}agent{end},"
    " extract(epoch FROM started_at)::float8, extract(epoch FROM ended_at)::float8, {fit}summary{end}",
    "tombstones": "seq, {fit}event_id{end}, author::text",
    "tombstones_v2": "seq, {fit}event_id{end}, author::text, kind, {fit}project{end}, target::text",
}
# Sized by bytes: the rows whose running total of text stays under the page's budget (measured from
# the stored sizes, without reading a large value), and a row past ROW_MAX_BYTES without its text.
_PULL: Final = {
    feed: "SELECT "
    + _FEED_COLUMNS[feed].format(fit="CASE WHEN size <= %(row_max)s THEN ", end=" END")
    + ", size, fetched FROM (SELECT c.*, sum(c.size) OVER (ORDER BY c.seq) AS running, count(*) OVER () AS fetched"
    + " FROM (SELECT o.*"
    + rows
    + " ORDER BY o.seq LIMIT %(limit)s) c) w WHERE running - size < %(budget)s ORDER BY seq"
    for feed, rows in _FEED_ROWS.items()
}
# Observations are pulled by their own statement, built for the link's projects, that leaves PostgreSQL
# no plan to choose badly: each project's seqs after the cursor from the (team, project, seq) index alone
# (the row comparison: a bound only that index takes), merged in seq order, then each row by its seq
# until the page has `limit` rows of others; every step stops as soon as the page is full. Given
# `project = p AND seq > cursor ORDER BY seq`, PostgreSQL walked the primary key (or the (team, seq)
# index) from the cursor and discarded the other projects' rows, taking them for spread evenly where a
# project pushed at once lies in one run of seqs: 18-55 ms of the server's CPU a page. A member's own
# rows (its author and machine) are never sent, yet the cursor moves past them: a pull that only filtered
# them kept its cursor before them, and every page walked them all again. A page walks at most `walk`
# (OWN_WALK pages') rows; one not cut by its limit or its bytes moves the cursor to the last row it walked
# (`_walked`). A member that pushed 20,000 rows after a join (whose pull starts at the window again)
# pulled its teammates' rows in pages of 50 that each took 34 ms of the server's CPU, 56 % of a core
# beside the hooks of a machine that also runs the server (bench_team_pull.py, push after pull, issue #40).
OWN_WALK: Final = 10
_PULL_PAGE: Final = (
    "SELECT c.*, sum(c.size) OVER (ORDER BY c.seq) AS running, count(*) OVER () AS fetched FROM ("
    " SELECT o.* FROM ({walk}) k CROSS JOIN LATERAL ("
    " SELECT o.seq, o.project, o.event_id, o.ordinal, o.author, o.machine, o.agent, o.session_id, o.kind, o.title,"
    " o.body, o.files, o.created_at, octet_length(o.title) + octet_length(o.body) + octet_length(o.event_id)"
    " + octet_length(o.session_id) + octet_length(o.agent) + coalesce(octet_length(nmem.files_text(o.files)), 0)"
    " AS size FROM nmem.observations o WHERE o.seq = k.s"
    " AND NOT (o.author = session_user AND o.machine = %(machine)s)) o ORDER BY k.s LIMIT %(limit)s) c"
)


@functools.lru_cache(maxsize=16)
def _pull_observations(projects: int) -> str:
    """The statement for `projects` projects (parameters p0, p1, ... and each one's cursor a0, a1, ...):
    the page's rows, each with the last seq walked and how many, asked of the walk again only when the
    page is not full."""
    walk = (
        "SELECT u.s FROM ("
        + " UNION ALL ".join(
            f"(SELECT o.seq AS s FROM nmem.observations o WHERE o.team = %(team)s AND o.project = %(p{i})s"
            f" AND o.seq > %(a{i})s AND (o.team, o.project, o.seq) > (%(team)s, %(p{i})s, %(a{i})s)"
            " ORDER BY o.seq LIMIT %(walk)s)"
            for i in range(projects)
        )
        + ") u ORDER BY u.s LIMIT %(walk)s"
    )
    return (
        "SELECT "
        + _FEED_COLUMNS["observations"].format(fit="CASE WHEN size <= %(row_max)s THEN ", end=" END")
        + ", size, fetched, CASE WHEN coalesce(fetched, 0) < %(limit)s THEN"
        f" (SELECT ARRAY[max(w.s), count(*)] FROM ({walk}) w) END"
        f" FROM (SELECT 1) one LEFT JOIN ({_PULL_PAGE.format(walk=walk)}) page"
        " ON page.running - page.size < %(budget)s ORDER BY page.seq"
    )


# The first row of the window a member keeps (team_window_days): a join starts there instead of
# reading the project's whole history to keep its last weeks: the window's rows alone, through the
# (team, project, created_at) index of M003 (OFFSET 0 keeps min() from becoming a walk of the seq index).
_WINDOW_START: Final = """
SELECT coalesce(min(w.first) - 1, max(w.newest), 0) FROM unnest(%(projects)s::text[]) AS p(project) CROSS JOIN LATERAL (
    SELECT (SELECT min(r.seq) FROM (SELECT o.seq FROM nmem.observations o WHERE o.team = %(team)s
            AND o.project = p.project AND o.created_at >= to_timestamp(%(since)s) OFFSET 0) r) AS first,
           (SELECT o.seq FROM nmem.observations o WHERE o.team = %(team)s AND o.project = p.project
            ORDER BY o.seq DESC LIMIT 1) AS newest
) w"""


_AUTHOR_AT: Final = {
    "observations": 4,
    "sessions": 3,
    "tombstones": 2,
    "tombstones_v2": 2,
}  # the author's column in a pulled row


def window_start(conn: psycopg.Connection[Any], team: str, projects: Sequence[str], since: float) -> int:
    """The observations cursor a member without one starts from: just before the window it keeps."""
    cur = conn.execute(_WINDOW_START, {"team": team, "projects": list(projects), "since": since})
    row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def admins(conn: psycopg.Connection[Any], team: str) -> list[str]:
    """The team's admins (whose tombstones may remove any member's rows)."""
    cur = conn.execute("SELECT member::text FROM nmem.members WHERE team = %s AND is_admin", (team,))
    return [str(r[0]) for r in cur.fetchall()]


def pull(
    conn: psycopg.Connection[Any],
    team: str,
    projects: Sequence[str],
    machine: str,
    after: dict[str, int],
    limit: int = PAGE_ROWS,
    budget: int = PAGE_BYTES,
    version: int = 1,
    behind: dict[str, int] | None = None,
) -> tuple[Page, bool]:
    """The next page of each feed after its cursor, at most `limit` rows and about `budget` bytes of
    text each; and whether any feed may hold more. A row too large to pull is in `Page.skipped`.
    `behind`: projects whose observations start before the feed's cursor (a project joined to a link
    that pulls already: its window's rows up to the cursor), each from its own seq.
    Blocking: run on a worker thread (team.threaded), so the page is fetched and decoded off the loop."""
    got: dict[str, list[Any]] = {}
    more = False
    cursors: dict[str, int] = {}
    skipped: list[Skipped] = []
    queries = []
    for feed in FEEDS:
        params = {
            "team": team, "projects": list(projects), "machine": machine, "after": after.get(feed, 0), "limit": limit,
            "budget": budget, "row_max": ROW_MAX_BYTES,
        }  # fmt: skip
        if feed == "observations":
            floors, last = behind or {}, after.get(feed, 0)
            each: dict[str, object] = {f"p{i}": p for i, p in enumerate(projects)}
            each |= {f"a{i}": min(floors.get(p, last), last) for i, p in enumerate(projects)}
            queries.append((_pull_observations(len(projects)), {**params, **each, "walk": limit * OWN_WALK}))
            continue
        queries.append((_PULL["tombstones_v2" if feed == "tombstones" and version >= DELETES_SINCE else feed], params))
    for feed, rows in zip(FEEDS, _fetch_all(conn, queries), strict=True):
        if feed == "observations":
            rows, cursor, walked_on = _walked(rows, limit, limit * OWN_WALK)
            if cursor is not None:
                cursors[feed] = cursor
            more = more or walked_on
        elif rows:
            cursors[feed] = int(rows[-1][0])
            more = more or int(rows[0][-1]) >= limit or len(rows) < int(rows[0][-1])
        kept = []
        for r in rows:
            if int(r[-2]) > ROW_MAX_BYTES:
                skipped.append(Skipped(int(r[0]), str(r[_AUTHOR_AT[feed]]), int(r[-2])))
            else:
                kept.append(r)
        got[feed] = kept
    page = Page(
        observations=[
            InObservation(
                int(r[0]), r[1], r[2], int(r[3]), r[4], r[5], r[6], r[7], r[8], r[9], r[10], list(r[11]), float(r[12])
            )
            for r in got["observations"]
        ],  # fmt: skip
        sessions=[InSession(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in got["sessions"]],
        tombstones=[
            InTombstone(int(r[0]), r[1], r[2], *r[3:6]) if len(r) > 5 else InTombstone(int(r[0]), r[1], r[2])
            for r in got["tombstones"]
        ],  # fmt: skip
        cursors=cursors,
        skipped=skipped,
    )
    return page, more


def _walked(rows: list[Any], limit: int, walk: int) -> tuple[list[Any], int | None, bool]:
    """A page of observations (`_pull_observations`): its rows (without the walk's column), the cursor
    it reaches and whether more may follow. Cut by its limit or its bytes: the last row it holds; else
    every row of others in its walk came: the last row walked, and more when the walk was whole."""
    page = [r[:-1] for r in rows if r[0] is not None]
    walked = rows[0][-1] if rows else None  # [last seq, how many], on each row; asked only of a page not full
    if page and (int(page[0][-1]) >= limit or len(page) < int(page[0][-1])):
        return page, int(page[-1][0]), True
    if not walked or not walked[1]:
        return page, None, False
    return page, int(walked[0]), int(walked[1]) >= walk


def _fetch_all(conn: psycopg.Connection[Any], queries: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    """Each query's rows, the queries sent at once where libpq can (its pipeline mode): a page's feeds in
    one round trip instead of one each; fewer wake-ups of the server's backend and of the puller's thread,
    each of which may wait for a core on a loaded machine (issue #40)."""
    import psycopg

    if not psycopg.Pipeline.is_supported():
        return [conn.execute(sql, params).fetchall() for sql, params in queries]
    with conn.pipeline():
        curs = [conn.execute(sql, params) for sql, params in queries]
    return [cur.fetchall() for cur in curs]


def waiting(
    conn: psycopg.Connection[Any],
    team: str,
    projects: Sequence[str],
    machine: str,
    after: dict[str, int],
    behind: dict[str, int] | None = None,
) -> int:
    """Rows of the feeds a pull would still bring (at most 10,001 counted each): `nmem team status`'s
    lag. `behind`: projects joined later, still pulled from their own cursor up to the link's (`pull`)."""
    obs = after.get("observations", 0)
    late = {p: max(seq, 0) for p, seq in (behind or {}).items()}  # -1: its start not found yet
    cur = conn.execute(
        "SELECT (SELECT count(*) FROM (SELECT 1 FROM nmem.observations WHERE team = %(team)s"
        " AND project = ANY(%(projects)s) AND seq > %(obs)s AND NOT (author = session_user AND machine = %(machine)s)"
        " LIMIT 10001) o) + (SELECT count(*) FROM (SELECT 1 FROM unnest(%(late)s::text[], %(floors)s::bigint[])"
        " AS b(project, floor) CROSS JOIN LATERAL (SELECT 1 FROM nmem.observations o WHERE o.team = %(team)s"
        " AND o.project = b.project AND o.seq > b.floor AND o.seq <= %(obs)s"
        " AND NOT (o.author = session_user AND o.machine = %(machine)s) LIMIT 10001) r LIMIT 10001) c)"
        " + (SELECT count(*) FROM (SELECT 1 FROM nmem.tombstones WHERE team = %(team)s"
        " AND seq > %(tomb)s LIMIT 10001) t)",
        {
            "team": team,
            "projects": list(projects),
            "machine": machine,
            "obs": obs,
            "late": list(late),
            "floors": list(late.values()),
            "tomb": after.get("tombstones", 0),
        },  # fmt: skip
    )
    row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0
