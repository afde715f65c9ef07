"""What a team server's admin does: create or upgrade the schema, create a team, add and remove
members. Each member is a PostgreSQL LOGIN role in `nmem_member`; the password is hashed (SCRAM)
here, so it never reaches the server, its logs or `pg_stat_activity` in clear.

Every failure is a TeamError whose message is one line and never holds a password.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final
from urllib.parse import quote, urlencode

from nmemd.errors import TeamError
from nmemd.team import needs_psycopg, roles, schema, transport
from nmemd.team.pg_errors import translate

if TYPE_CHECKING:
    import psycopg

TEAM_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
MEMBER_NAME: Final = re.compile(r"[a-z_][a-z0-9_.-]{0,62}")
RESERVED_PREFIXES: Final = ("pg_", "nmem_")
# libpq options that say where and how to connect, carried from the admin's DSN into a member's.
CARRIED: Final = (
    "host", "hostaddr", "port", "dbname", "sslmode", "sslrootcert", "sslcrl", "channel_binding", "target_session_attrs",
)  # fmt: skip


def one_line(text: str) -> str:
    return " ".join(text.split())


def check_team(team: str) -> str:
    if not TEAM_NAME.fullmatch(team):
        raise TeamError(
            f"invalid team name {team!r}: letters, digits, '_', '.', '-' (up to 63, a letter or digit first)"
        )
    return team


def check_member(member: str) -> str:
    if not MEMBER_NAME.fullmatch(member) or member.startswith(RESERVED_PREFIXES):
        raise TeamError(
            f"invalid member name {member!r}: lower-case letters, digits, '_', '.', '-' (up to 63),"
            " not starting with a digit, 'pg_' or 'nmem_'"
        )
    return member


def _server_error(exc: Exception) -> TeamError:
    """A psycopg error as one line, in words an admin acts on."""
    return translate(exc, admin=True)


@contextmanager
def connect(dsn: str, insecure: bool = False) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A connection to the server (over verified TLS unless it is on this machine or `insecure`:
    team.transport), every psycopg failure turned into a one-line TeamError."""
    try:
        import psycopg
    except ImportError as exc:
        raise TeamError(needs_psycopg()) from exc
    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise TeamError(f"invalid DSN: {one_line(str(exc))}") from None
    dsn = transport.secured(dsn, insecure)
    try:
        if "connect_timeout" in given:
            conn = psycopg.connect(dsn)
        else:
            conn = psycopg.connect(dsn, connect_timeout=10)
    except psycopg.Error as exc:
        raise _server_error(exc) from None
    try:
        with conn:
            yield conn
    except psycopg.Error as exc:
        raise _server_error(exc) from None


@dataclass(frozen=True)
class Initialized:
    version_before: int
    version: int
    team_created: bool


@dataclass(frozen=True)
class Added:
    member: str
    dsn: str  # what the member joins with: holds the password when one was set here
    role_created: bool
    password_set: bool


@dataclass(frozen=True)
class Removed:
    member: str
    was_member: bool
    role_dropped: bool
    kept_for: list[str] = field(default_factory=list)  # other nmem databases of the cluster that use the role


def init(dsn: str, team: str, *, insecure: bool = False) -> Initialized:
    """Create or upgrade the schema, then create `team` (idempotent)."""
    check_team(team)
    with connect(dsn, insecure) as conn:
        before, after = schema.migrate(conn)
        with conn.transaction():
            schema.hold_schema_lock(conn)  # two admins' init at once: one CREATE ROLE of the marker
            roles.ensure_marker(conn)  # the members already here, from before markers
            row = conn.execute(
                "INSERT INTO nmem.teams (name) VALUES (%s) ON CONFLICT DO NOTHING RETURNING name", (team,)
            ).fetchone()
    return Initialized(before, after, row is not None)


def _ready(conn: psycopg.Connection[tuple[object, ...]], team: str) -> None:
    """This role administers the server, which has this nmem's schema and the team."""
    schema.check_operator(conn)
    schema.usable(schema.server_version(conn))  # what a member needs (an admin may manage an older server)
    if conn.execute("SELECT 1 FROM nmem.teams WHERE name = %s", (team,)).fetchone() is None:
        raise TeamError(f"no team {team!r} on this server: run `nmem team init ADMIN_DSN --team {team}` first")


def member_dsn(admin_dsn: str, member: str, password: str | None, host: str | None = None) -> str:
    """The DSN a member joins with: where the admin connects (or `host`), as the member."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    given = conninfo_to_dict(admin_dsn)
    params = {k: str(given[k]) for k in CARRIED if given.get(k) not in (None, "")}
    if host:
        params["host"] = host
        params.pop("hostaddr", None)
    if not transport.is_local(make_conninfo(**params)):  # the network is hostile: verified TLS, whatever the admin's
        params.update(transport.VERIFIED)
    where = params.pop("host", "")
    port = params.pop("port", "")
    dbname = params.pop("dbname", "")
    netloc = quote(member, safe="")
    if password is not None:
        netloc += ":" + quote(password, safe="")
    if where and not where.startswith("/"):
        netloc += "@" + (f"[{where}]" if ":" in where else where) + (f":{port}" if port else "")
    else:
        netloc += "@"
        if where:
            params["host"] = where
        if port:
            params["port"] = port
    query = urlencode(params)
    return f"postgresql://{netloc}/{quote(dbname, safe='')}" + (f"?{query}" if query else "")


def add_member(
    dsn: str,
    team: str,
    member: str,
    *,
    is_admin: bool = False,
    password: str | None = None,
    host: str | None = None,
    insecure: bool = False,
) -> Added:
    """Create `member`'s LOGIN role (a generated password unless given) when it does not exist, put
    it in `nmem_member` and in `team`. An existing role keeps its password unless one is given."""
    from psycopg import sql

    check_team(team)
    check_member(member)
    if password is not None and (not password or "\n" in password or "\0" in password):
        raise TeamError("the password is empty or holds a newline or NUL")
    with connect(dsn, insecure) as conn, conn.transaction():
        _ready(conn, team)
        role = conn.execute(
            "SELECT r.rolsuper OR r.rolcreaterole OR r.rolbypassrls,"
            " pg_has_role(r.oid, %s, 'MEMBER') FROM pg_roles r WHERE r.rolname = %s",
            (schema.MEMBER_ROLE, member),
        ).fetchone()
        created = role is None
        if role is not None and (role[0] or not role[1]):
            raise TeamError(f"a role {member!r} already exists and is not an nmem member: choose another name")
        secret = password if password is not None else (secrets.token_urlsafe(24) if created else None)
        ident = sql.Identifier(member)
        if secret is not None:
            hashed = conn.pgconn.encrypt_password(secret.encode(), member.encode(), b"scram-sha-256").decode()
            verb = "CREATE ROLE {} LOGIN PASSWORD {}" if created else "ALTER ROLE {} PASSWORD {}"
            conn.execute(sql.SQL(verb).format(ident, sql.Literal(hashed)))
        if created:
            conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(schema.MEMBER_ROLE), ident))
        else:
            conn.execute(sql.SQL("ALTER ROLE {} LOGIN").format(ident))  # a member removed half-way comes back
        roles.ensure_marker(conn, [member])
        conn.execute(
            "INSERT INTO nmem.members (team, member, is_admin) VALUES (%s, %s, %s)"
            " ON CONFLICT (team, member) DO UPDATE SET is_admin = excluded.is_admin",
            (team, member, is_admin),
        )
    return Added(member, member_dsn(dsn, member, secret, host), created, secret is not None)


def remove_member(dsn: str, team: str, member: str, *, insecure: bool = False) -> Removed:
    """Take `member` out of `team` (their access ends with their next statement). When they are in
    no other team here and no other nmem database of the cluster uses the role, end the role:
    NOLOGIN, their connections terminated, what they own dropped, DROP ROLE (team.roles). Running
    it again finishes what a refused step left. Their rows stay (an admin purges them with tombstones)."""
    from psycopg import sql

    check_team(team)
    check_member(member)
    with connect(dsn, insecure) as conn:
        with conn.transaction():
            _ready(conn, team)
            gone = conn.execute(
                "DELETE FROM nmem.members WHERE team = %s AND member = %s RETURNING 1", (team, member)
            ).fetchone()
            left = conn.execute("SELECT count(*) FROM nmem.members WHERE member = %s", (member,)).fetchone()
            is_nmem = conn.execute(
                "SELECT pg_has_role(oid, %s, 'MEMBER') AND NOT rolsuper FROM pg_roles WHERE rolname = %s",
                (schema.MEMBER_ROLE, member),
            ).fetchone()
            in_no_team = bool(left is not None and left[0] == 0)
            if in_no_team and is_nmem:
                here = roles.ensure_marker(conn, [])
                conn.execute(sql.SQL("REVOKE {} FROM {}").format(sql.Identifier(here), sql.Identifier(member)))
            elsewhere = roles.used_elsewhere(conn, member) if is_nmem else []
        if not (is_nmem and is_nmem[0] and in_no_team) or elsewhere:
            return Removed(member, gone is not None, False, elsewhere)
        ended = roles.end_role(conn, dsn, member)
    if ended.blocked:
        raise roles.describe_blocked(member, ended.blocked)
    return Removed(member, gone is not None, ended.dropped)
