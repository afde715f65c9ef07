"""A member's login role across the cluster: which nmem databases use it, and how it ends.

Roles are cluster-wide in PostgreSQL, memberships are each database's own. So each nmem database
has a marker role, `nmem_db_<database oid>`, granted to every member of one of its teams (by
`add-member`, and to the members already there by `init`): a removal in one database reads
`pg_auth_members` (visible cluster-wide) and never drops a role another nmem database still uses.

Ending a role (`end_role`) really ends access: NOLOGIN first (no new connection), then its open
connections are terminated, then what it owns in every database (large objects any role may
create, tables) is dropped and its grants revoked, then DROP ROLE. A CREATEROLE admin that is no
superuser gets the privileges of the member's role for this (GRANT role TO itself: what
`pg_terminate_backend` and `DROP OWNED` ask); where even that is refused, the error says what the
admin needs. Each step can run again: a removal that stopped half-way is finished by the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from nmemd.errors import TeamError

if TYPE_CHECKING:
    import psycopg

MARKER_PREFIX: Final = "nmem_db_"
END_WAIT_S: Final = 10.0  # how long the member's terminated connections are waited for


def marker(conn: psycopg.Connection[Any]) -> str:
    """This database's marker role's name."""
    row = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    assert row is not None
    return f"{MARKER_PREFIX}{row[0]}"


def ensure_marker(conn: psycopg.Connection[Any], members: list[str] | None = None) -> str:
    """Create this database's marker role if missing and grant it to `members` (default: every
    existing role named in nmem.members). Inside the caller's transaction."""
    from psycopg import sql

    name = marker(conn)
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone() is None:
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    if members is None:
        rows = conn.execute(
            "SELECT DISTINCT m.member FROM nmem.members m JOIN pg_roles r ON r.rolname = m.member"
            " WHERE NOT pg_has_role(r.oid, %s, 'MEMBER')",
            (name,),
        ).fetchall()
        members = [str(r[0]) for r in rows]
    for member in members:
        conn.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(name), sql.Identifier(member)))
    return name


def used_elsewhere(conn: psycopg.Connection[Any], member: str) -> list[str]:
    """The other databases of the cluster whose nmem teams hold `member` (by their markers)."""
    rows = conn.execute(
        "SELECT d.datname FROM pg_auth_members am JOIN pg_roles g ON g.oid = am.roleid"
        " JOIN pg_roles r ON r.oid = am.member JOIN pg_database d ON g.rolname = %s || d.oid::text"
        " WHERE r.rolname = %s AND d.datname <> current_database() ORDER BY 1",
        (MARKER_PREFIX, member),
    ).fetchall()
    return [str(r[0]) for r in rows]


@dataclass
class Ended:
    """What `end_role` did; `blocked` says, in words an admin acts on, what stopped it."""

    dropped: bool = False
    terminated: int = 0
    blocked: list[str] = field(default_factory=list)


def end_role(conn: psycopg.Connection[Any], dsn: str, member: str) -> Ended:
    """NOLOGIN, terminate, drop what it owns in every database, DROP ROLE (see the module docstring).
    `conn` is the admin's, in autocommit-free mode: each step is its own transaction."""
    import psycopg
    from psycopg import sql

    ident = sql.Identifier(member)
    done = Ended()
    with conn.transaction():
        conn.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(ident))
    borrowed = _borrow(conn, member, done)
    try:
        done.terminated = _terminate(conn, member, done)
        for dbname in _databases_with_objects(conn, member):
            _drop_owned(conn, dsn, dbname, member, done)
        try:
            with conn.transaction():
                conn.execute(sql.SQL("DROP ROLE {}").format(ident))
            done.dropped = True
            borrowed = False  # the grant went with the role
        except psycopg.errors.DependentObjectsStillExist as exc:
            detail = " ".join(str(getattr(exc.diag, "message_detail", "") or "").split())
            done.blocked.append(f"role {member} still owns objects ({detail}): DROP OWNED BY {member} there")
        except psycopg.Error as exc:
            done.blocked.append(f"DROP ROLE {member} refused: {_primary(exc)}")
    finally:
        if borrowed:
            try:
                with conn.transaction():
                    conn.execute(sql.SQL("REVOKE {} FROM CURRENT_USER").format(ident))
            except psycopg.Error:
                pass
    return done


def _read(conn: psycopg.Connection[Any], query: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
    """Rows of one read in a transaction of its own: no step is left inside another's (a rollback
    of one would undo a grant), and catalog views are read afresh each time."""
    with conn.transaction():
        return conn.execute(query, params).fetchall()


def _primary(exc: Exception) -> str:
    diag = getattr(exc, "diag", None)
    return " ".join(str(getattr(diag, "message_primary", None) or exc).split())


def _borrow(conn: psycopg.Connection[Any], member: str, done: Ended) -> bool:
    """The member's privileges for this admin (what terminating and DROP OWNED need); True when
    granted here (and so to be revoked), False when already held or refused."""
    import psycopg
    from psycopg import sql

    rows = _read(
        conn,
        "SELECT rolsuper OR pg_has_role(current_user, %s, 'USAGE') FROM pg_roles WHERE rolname = current_user",
        (member,),
    )
    if rows and rows[0][0]:
        return False
    try:
        with conn.transaction():
            conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(member)))
    except psycopg.Error as exc:
        done.blocked.append(
            f"cannot take the privileges of role {member} ({_primary(exc)}): its open connections and what it"
            f" owns need a superuser, or this admin with ADMIN OPTION on {member} (PostgreSQL 16+) or"
            " pg_signal_backend"
        )
        return False
    return True


def _terminate(conn: psycopg.Connection[Any], member: str, done: Ended) -> int:
    """End the member's open connections in every database; wait (bounded) until they are gone."""
    import time

    import psycopg

    try:
        with conn.transaction():
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity"
                " WHERE usename = %s AND pid <> pg_backend_pid()",
                (int(END_WAIT_S * 1000), member),
            ).fetchall()
    except psycopg.Error as exc:
        done.blocked.append(
            f"cannot end {member}'s open connections ({_primary(exc)}): GRANT pg_signal_backend TO the admin"
            " role, or run remove-member as a superuser"
        )
        return 0
    deadline = time.monotonic() + END_WAIT_S
    while time.monotonic() < deadline:
        left = _read(conn, "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (member,))
        if not left or not left[0][0]:
            break
        time.sleep(0.05)
    return sum(1 for r in rows if r[0])


def _databases_with_objects(conn: psycopg.Connection[Any], member: str) -> list[str]:
    """The databases where the member owns something or holds a grant (pg_shdepend is cluster-wide)."""
    rows = _read(
        conn,
        "SELECT DISTINCT d.datname FROM pg_shdepend s JOIN pg_database d ON d.oid = s.dbid"
        " WHERE s.refclassid = 'pg_authid'::regclass AND s.refobjid = (SELECT oid FROM pg_roles WHERE rolname = %s)"
        " ORDER BY 1",
        (member,),
    )
    return [str(r[0]) for r in rows]


def _drop_owned(conn: psycopg.Connection[Any], dsn: str, dbname: str, member: str, done: Ended) -> None:
    """DROP OWNED BY the member in `dbname` (this connection's database, or one reached with the
    same DSN there)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    statement = sql.SQL("DROP OWNED BY {}").format(sql.Identifier(member))
    try:
        if dbname == conn.info.dbname:
            with conn.transaction():
                conn.execute(statement)
            return
        with psycopg.connect(make_conninfo(dsn, dbname=dbname), connect_timeout=10) as other, other.transaction():
            other.execute(statement)
    except psycopg.Error as exc:
        done.blocked.append(f"cannot drop what {member} owns in database {dbname} ({_primary(exc)})")


def describe_blocked(member: str, blocked: list[str]) -> TeamError:
    return TeamError(
        f"{member} is out of the team and cannot log in (NOLOGIN), but the role stays: " + "; ".join(blocked)
    )
