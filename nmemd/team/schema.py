"""The team server's schema: versioned migrations of schema `nmem` in a PostgreSQL database.

Access control is PostgreSQL's own. Every member is a LOGIN role in the group role `nmem_member`;
every table has row-level security ENABLEd and FORCEd. A member reads the rows of the teams they
belong to, inserts rows only as themselves (`author` defaults to `session_user`, has no INSERT
privilege, and a policy checks it), and deletes only their own rows, or any row of a team they
administer. Membership is looked up through SECURITY DEFINER functions (`nmem.my_teams()`,
`nmem.my_admin_teams()`, each returning text[]) so policies do not recurse into `nmem.members`.
The operator who runs `nmem team init` is granted the group role `nmem_admin`, whose policies
allow everything (the table owner is under FORCEd RLS too).

`session_user`, not `current_user`: a member may `SET ROLE nmem_member`, which changes
`current_user` but never `session_user` (only a superuser can), so neither the author nor the
membership can be borrowed from a group role.

Since v2 (sql/m002_deletes_and_order.sql, whose header says why each part is there): every row
of observations, sessions and tombstones takes its `seq` in a BEFORE trigger that checks the writer
is in the team, locks the team's row of `nmem.feeds` (no member can lock it otherwise) and draws
from the team's own sequence: one team's writers commit one at a time, in seq order, so a reader's
`seq > cursor` never skips a row that commits later with a lower seq, whatever the client does, and
no other team's writes show in the gaps. Since v8 (sql/m008) a push's observations take that lock
once a batch and their seqs in one statement (nmem.push_observations); the trigger still orders
every raw INSERT, which arrives without a seq. A tombstone (`kind` 'observation' or 'session') is judged
and applied by the server after that lock: only for an event it holds, in the project named, from
its author or a team admin; a tombstoned event of that author is never inserted again. Members
delete only through tombstones. Wake-ups go to the team's own channel (named in `nmem.feeds`), renamed when
a member is removed (listeners of the old name hear 'rotated'). Rows are bounded in bytes
(ROW_MAX_BYTES) and times clamped to [1970, now()]. A v1 client still works (compatible_since 1).

Migrations are plain SQL files in `nmemd/team/sql/`, applied in order by `migrate` in one
transaction and recorded in the ledger `nmem.migrations`. To add one:

1. Write `sql/mNNN_what.sql` (NNN = the last version + 1): plain SQL, every nmem name qualified
   (`nmem.observations`), role names spelled out (`nmem_member`, `nmem_admin`); it runs once, with
   `search_path` = the schema of pg_trgm, pg_catalog. Make it safe on a live server: members push
   while it waits for its locks (`LOCK_TIMEOUT`), and `ADD CONSTRAINT ... NOT VALID` where a check of
   every row would be long.
2. Append `Migration(NNN, "mNNN_what", compatible_since, "what it does")` to MIGRATIONS. Keep
   `compatible_since` at the previous migration's value when a client of that version still works
   against the new schema (it may not use what is new, but nothing it does fails or loses data);
   raise it to NNN only when older clients must stop (they then say `server schema vNNN is newer
   than this nmem (vK): upgrade nmem`). Raise NEEDS_SERVER when this nmem's client needs the new
   schema (a member's daemon then says the server must be upgraded, and keeps capturing meanwhile).
3. A test in tests/daemon/test_team_server.py that upgrades a server from the previous version.

Never edit a migration that has shipped, never renumber one: append.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from typing import TYPE_CHECKING, Final

from nmemd.errors import TeamError, TeamSchemaError

if TYPE_CHECKING:
    import psycopg

SCHEMA: Final = "nmem"
MEMBER_ROLE: Final = "nmem_member"
ADMIN_ROLE: Final = "nmem_admin"


@dataclass(frozen=True)
class Migration:
    """One step of the server's schema: `sql/<name>.sql`, applied once, in `version` order.

    `compatible_since` is the oldest client schema version that still works once this migration is
    applied: a client that knows version N uses a server whose newest migration has
    `compatible_since <= N`, even when that server is newer than N (it just does not use what is new)."""

    version: int
    name: str
    compatible_since: int
    what: str

    @property
    def sql(self) -> str:
        return _sql(self.name)


def _sql(name: str) -> str:
    return (files("nmemd.team") / "sql" / f"{name}.sql").read_text(encoding="utf-8")


MIGRATIONS: Final = (
    Migration(1, "m001_base", 1, "teams, members, observations, sessions, tombstones; roles, grants, RLS, search"),
    Migration(2, "m002_deletes_and_order", 1, "tombstones checked and kept, per-team order and channels, limits"),
    Migration(3, "m003_pull_window", 1, "an index of each project's rows by creation: a join reads its window only"),
    Migration(4, "m004_clamp_stored_times", 1, "times stored before v2 clamped to [1970, when the row arrived]"),
    Migration(5, "m005_members_by_oid", 1, "membership keyed by role OID: a new role of an old name is no member"),
    Migration(6, "m006_bounded_search", 1, "search bounded in every scope: the scope inside its indexes (btree_gin)"),
    Migration(7, "m007_search_reads_once", 1, "search reads and ranks each row once, names and wide scopes bounded"),
    Migration(8, "m008_push_in_one_statement", 1, "a push takes its lock once and its seqs in one statement"),
    Migration(9, "m009_search_walks_less", 1, "search walks the newest rows only as far as the query needs"),
    Migration(10, "m010_push_owned_with_the_feeds", 1, "the push function owned by the teams' feeds' owner"),
    Migration(11, "m011_search_titles_hold_names", 1, "search finds the titles holding a name whose words are common"),
    Migration(12, "m012_names_looked_up_whole", 1, "search looks a name up whole: an index of the rows' names"),
    Migration(13, "m013_names_not_scanned_twice", 1, "search asks the trigrams only for names the names index lacks"),
    Migration(14, "m014_names_split_without_an_executor", 1, "the rows' names taken without a query: pushes cheaper"),
)
SCHEMA_VERSION: Final = MIGRATIONS[-1].version  # the newest server schema this nmem knows (client and admin)
NEEDS_SERVER: Final = 1  # the oldest server schema this nmem's client can sync with
LOCK_TIMEOUT: Final = "60s"  # how long `init` waits for another admin or for running pushes
# v2: the largest feed row the server stores (sql/m002: title 8 KiB, body or summary 256 KiB, files
# 64 KiB, six short columns 1 KiB each): what a pull page bounded by bytes counts on.
ROW_MAX_BYTES: Final = 8192 + 262_144 + 65_536 + 6 * 1024


@dataclass(frozen=True)
class ServerVersion:
    """What a server says of its schema: its version and the oldest client schema that may use it."""

    version: int
    compatible_since: int


# Whether the server has the ledger (v2 on); then the version, its compatible_since and v1's row.
LEDGER_VISIBLE: Final = (
    "CASE WHEN to_regclass('nmem.migrations') IS NULL THEN false"
    " ELSE has_table_privilege('nmem.migrations', 'SELECT') END"
)
LEDGER_SQL: Final = (
    "SELECT (SELECT max(version) FROM nmem.migrations),"
    " (SELECT compatible_since FROM nmem.migrations ORDER BY version DESC LIMIT 1),"
    " (SELECT max(version) FROM nmem.schema_version)"
)
V1_SQL: Final = "SELECT NULL::int, NULL::int, max(version) FROM nmem.schema_version"


def version_sql(has_ledger: bool) -> str:
    return LEDGER_SQL if has_ledger else V1_SQL


def read_version(row: tuple[object, ...] | None) -> ServerVersion | None:
    """The answer to `version_sql(...)`: None when the server has no version at all. A ledger wins;
    v1's single row counts too (as the floor an edit or an older nmem left), never lowering it."""
    if row is None:
        return None
    ledger, since, single = (int(v) if v is not None else None for v in row[:3])  # type: ignore[call-overload]
    if ledger is None and single is None:
        return None
    version = max(v for v in (ledger, single) if v is not None)
    floor = max(v for v in (since, single) if v is not None)
    return ServerVersion(version, floor)


def usable(found: ServerVersion | None, *, needs: int = NEEDS_SERVER) -> ServerVersion:
    """The server's schema, when this nmem can use it; TeamSchemaError, in words, otherwise: no
    schema, a newer one that older clients cannot use, or one older than this nmem needs."""
    if found is None:
        raise TeamSchemaError("the server has no nmem schema: an admin runs `nmem team init ADMIN_DSN --team NAME`")
    if found.compatible_since > SCHEMA_VERSION:
        raise TeamSchemaError(
            f"server schema v{found.version} is newer than this nmem (v{SCHEMA_VERSION}): upgrade nmem"
        )
    if found.version < needs:
        raise TeamSchemaError(
            f"server schema v{found.version} is older than this nmem needs (v{needs}):"
            " an admin upgrades it with `nmem team init ADMIN_DSN --team NAME`"
        )
    return found


def server_version(conn: psycopg.Connection[tuple[object, ...]]) -> ServerVersion | None:
    """The schema on the server, None when it has no nmem schema (or none visible)."""
    row = conn.execute(
        "SELECT CASE WHEN to_regclass('nmem.schema_version') IS NULL THEN false"
        f" ELSE has_table_privilege('nmem.schema_version', 'SELECT') END, {LEDGER_VISIBLE}"
    ).fetchone()
    if not row or not row[0]:
        return None
    return read_version(conn.execute(version_sql(bool(row[1]))).fetchone())


def _trgm_schema(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    """The schema holding pg_trgm, created in `nmem` when absent (a trusted extension since 13)."""
    import psycopg

    row = conn.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
    ).fetchone()
    if row:
        return str(row[0])
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION pg_trgm WITH SCHEMA nmem")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise TeamError(
            "this role cannot create the pg_trgm extension; a superuser runs `CREATE EXTENSION pg_trgm` once"
        ) from exc
    except psycopg.errors.UndefinedFile as exc:
        raise TeamError("the server has no pg_trgm extension (PostgreSQL's contrib package)") from exc
    return SCHEMA


def check_operator(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Where the schema exists, only a superuser or a member of `nmem_admin` may administer it."""
    row = conn.execute(
        "SELECT current_user, to_regnamespace('nmem') IS NULL"
        " OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        " OR (EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s) AND pg_has_role(current_user, %s, 'USAGE'))",
        (ADMIN_ROLE, ADMIN_ROLE),
    ).fetchone()
    if row and not row[1]:
        raise TeamError(
            f"{row[0]} is not an admin of this nmem server: an admin runs `GRANT {ADMIN_ROLE} TO {row[0]}` first"
        )


def hold_schema_lock(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """In the caller's transaction: one admin at a time changes the schema or the cluster's roles
    (`init`'s CREATE ROLE of two admins at once would collide), waiting at most LOCK_TIMEOUT."""
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (LOCK_TIMEOUT,))
    conn.execute("SELECT pg_advisory_xact_lock(hashtext('nmem:schema'))")


def migrate(conn: psycopg.Connection[tuple[object, ...]], upto: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Create or upgrade schema `nmem` in one transaction; returns (version before, after).

    Idempotent: a server already at `upto` (or past it) is left as it is. Two admins at once are
    serialised (a transaction-scoped lock, then the ledger is read); every lock is waited for at most
    LOCK_TIMEOUT. Each pending migration's SQL runs in order with `search_path` set to the schema of
    pg_trgm and pg_catalog (every nmem name in the files is qualified), then the ledger records it
    and `schema_version` takes the newest `compatible_since` (what v1 clients read)."""
    import psycopg

    try:
        with conn.transaction():
            hold_schema_lock(conn)
            check_operator(conn)
            conn.execute(_sql("bootstrap").encode())
            found = read_version(conn.execute(LEDGER_SQL).fetchone())
            before = found.version if found else 0
            if found is not None and found.compatible_since > SCHEMA_VERSION:
                usable(found)
            pending = [m for m in MIGRATIONS if before < m.version <= upto]
            if not pending:
                return before, before
            trgm = _trgm_schema(conn)
            conn.execute("SELECT set_config('search_path', quote_ident(%s) || ', pg_catalog', true)", (trgm,))
            for migration in pending:
                conn.execute(migration.sql.encode())
            conn.execute(_sql("ledger").encode())
            for migration in MIGRATIONS:
                if migration.version <= pending[-1].version:
                    conn.execute(
                        "INSERT INTO nmem.migrations (version, name, compatible_since) VALUES (%s, %s, %s)"
                        " ON CONFLICT (version) DO NOTHING",
                        (migration.version, migration.name, migration.compatible_since),
                    )
            conn.execute("DELETE FROM nmem.schema_version")
            conn.execute("INSERT INTO nmem.schema_version (version) VALUES (%s)", (pending[-1].compatible_since,))
    except psycopg.errors.LockNotAvailable:
        raise TeamError(
            f"the schema stayed locked for {LOCK_TIMEOUT} (another admin's upgrade, or a long transaction): try again"
        ) from None
    return before, pending[-1].version
