"""Joining a team from this machine: what `nmem team join/leave/status` do before asking the daemon.

The DSN's password never reaches config.toml or the store: it moves into a 0600 libpq password
file, `$NMEM_HOME/team.pgpass`, and the DSN kept (in the store's `team_projects`) names that file
(`passfile=`), the libpq way. A DSN without a password uses whatever libpq finds itself
(`~/.pgpass`, a service file, `PGPASSFILE`).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from typing import Any, Final

import anyio
import msgspec

from nmem_client import paths
from nmemd.capture.project import project_root
from nmemd.config import Settings
from nmemd.errors import NmemError, StorageError, TeamError
from nmemd.team import identity, needs_psycopg, pg, transport
from nmemd.team.pg import ServerFacts

PASSFILE: Final = "team.pgpass"


class JoinPlan(msgspec.Struct, kw_only=True):
    """What the daemon records for a joined project (`team_join`)."""

    root: str
    project_id: str
    team: str
    dsn: str  # without its password
    member: str
    share_prompts: bool
    schema_version: int
    transport: str  # how the DSN reaches the server (team.transport.describe)


DSN_MAX_BYTES: Final = 16 * 1024  # a DSN is a line; more is not one


def read_dsn(text: str, where: str) -> str:
    """The DSN in `text` (a file's or stdin's): its first non-empty line."""
    line = next((ln.strip() for ln in text[:DSN_MAX_BYTES].splitlines() if ln.strip()), "")
    if not line:
        raise TeamError(f"no DSN in {where}")
    return line


def refuse_password_in_argv(dsn: str) -> None:
    """A password on the command line is readable by every local user (`ps`, /proc) and stays in
    shell history: the DSN that holds one comes from a file, stdin or the prompt."""
    _parts, password = split_password(dsn)
    if password:
        raise TeamError(
            "refused: the DSN holds a password, and a command line is readable by every local user and"
            " kept in shell history: give it with --dsn-file FILE, on stdin (nmem team join < FILE),"
            " or at the prompt (run nmem team join without it)"
        )


def _conninfo() -> Any:
    try:
        from psycopg import conninfo
    except ImportError:
        raise TeamError(needs_psycopg()) from None
    return conninfo


def split_password(dsn: str) -> tuple[dict[str, str], str | None]:
    """The DSN's parameters without the password, and the password."""
    try:
        parts = {k: str(v) for k, v in _conninfo().conninfo_to_dict(dsn).items() if v is not None}
    except Exception:  # its message may quote the DSN, password and all
        raise TeamError("not a PostgreSQL DSN (key=value pairs, or a postgresql:// URI)") from None
    return {k: v for k, v in parts.items() if k != "password"}, parts.get("password")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def save_password(home: str, parts: dict[str, str], password: str) -> str:
    """Record the password in the 0600 password file (one line per host, port, database and user);
    return the file's path."""
    path = os.path.join(home, PASSFILE)
    key = [_escape(parts.get(k) or "*") for k in ("host", "port", "dbname", "user")]
    if key[1] == "*" and key[0] != "*":
        key[1] = "5432"
    if key[2] == "*" and parts.get("user"):
        key[2] = _escape(parts["user"])  # libpq's default database is the user's name
    line = ":".join([*key, _escape(password)])
    prefix = ":".join(key) + ":"
    kept: list[str] = []
    try:
        with open(path, encoding="utf-8") as fh:
            kept = [ln.rstrip("\n") for ln in fh if ln.strip() and not ln.startswith(prefix)]
    except FileNotFoundError:
        pass
    paths.make_dirs(home)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("\n".join([*kept, line]) + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def stored_dsn(parts: dict[str, str], passfile: str | None) -> str:
    extra = {"passfile": passfile} if passfile else {}
    return str(_conninfo().make_conninfo("", **{**parts, **extra}))


async def probe(dsn: str, team: str | None = None, timeout_s: float = 10.0) -> ServerFacts:
    """Connect and check (schema version, membership); TeamError with one line otherwise."""
    try:
        with anyio.fail_after(timeout_s):
            conn = await pg.connect(dsn)
            try:
                return await pg.check(conn, team)
            finally:
                await conn.close()
    except Exception as exc:
        raise TeamError(pg.describe(exc, dsn)) from None


def resolve_root(path: str | None) -> str:
    where = os.path.abspath(path or os.getcwd())
    if not os.path.isdir(where):
        raise TeamError(f"{where}: not a directory")
    return project_root(where) or where


def plan_join(
    home: str,
    dsn: str,
    *,
    path: str | None,
    name: str | None,
    team: str | None,
    share_prompts: bool,
    insecure: bool = False,
) -> JoinPlan:
    """Check the server and the project, move the password into the password file, and return what
    the daemon records. Nothing is recorded when anything is wrong; a server on another machine
    is reached over verified TLS only, unless `insecure` (team.transport)."""
    dsn = transport.secured(dsn, insecure)
    root = resolve_root(path)
    project_id = identity.project_id(root)
    if name is not None:
        if not identity.valid_name(name):
            raise TeamError(f"{name!r} is not a project name (letters, digits, . _ / @ : + -; no spaces)")
        project_id = project_id or name
    if project_id is None:
        raise TeamError(f"{root} has no git remote to name it by: give --name NAME (the same on every machine)")
    parts, password = split_password(dsn)
    facts = anyio.run(probe, dsn, None)
    if team is None:
        if len(facts.teams) != 1:
            teams = ", ".join(facts.teams) or "none"
            raise TeamError(f"{facts.member} is in {len(facts.teams)} teams ({teams}): give --team NAME")
        team = facts.teams[0]
    elif team not in facts.teams:
        raise TeamError(f"{facts.member} is not a member of team {team!r} (teams: {', '.join(facts.teams) or 'none'})")
    passfile = save_password(home, parts, password) if password else None
    kept = stored_dsn(parts, passfile)
    anyio.run(probe, kept, team)  # the password file works as libpq reads it
    return JoinPlan(
        root=root,
        project_id=project_id,
        team=team,
        dsn=kept,
        member=facts.member,
        share_prompts=share_prompts,
        schema_version=facts.schema_version,
        transport=transport.describe(kept),
    )


def machine_name(settings: Settings) -> str:
    """This machine's name for the team: config.toml's `team_machine` first (one machine, one name,
    whatever environment a process runs in), else the setting (NMEM_TEAM_MACHINE), else the host's."""
    from nmemd import config

    try:
        values, _text = config.read_file(config.config_path(settings.home))
    except NmemError:
        values = {}
    named = values.get("team_machine")
    if isinstance(named, str) and named:
        return named
    return settings.team_machine or socket.gethostname() or "unknown"


def ensure_machine_name(settings: Settings) -> str:
    """This machine's name for the team: config.toml's `team_machine`, written there now when the
    file has none (the name in effect: NMEM_TEAM_MACHINE, else the host name), so the daemon,
    whatever environment starts it, pushes under the same name as every later join."""
    from nmemd import config

    path = config.config_path(settings.home)
    values, text = config.read_file(path)
    if values.get("team_machine"):
        return str(values["team_machine"])
    name = settings.team_machine or socket.gethostname() or "unknown"
    line = f"team_machine = {json.dumps(name)}  # this machine's name on team servers (nmem team join)\n"
    paths.make_dirs(os.path.dirname(path))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(line + text)  # first: a key after a [table] would belong to that table
    os.replace(tmp, path)
    return name


def offline_statuses(settings: Settings) -> list[dict[str, Any]]:
    """No daemon: the store's shared projects, each server probed from here (setup.team_status)."""
    from nmemd.store import readers
    from nmemd.team import local

    if not os.path.exists(settings.db):
        return []
    conn = readers.open_readonly(settings.db)
    try:
        result = []
        for link in local.links(local.shared_projects(conn)):
            roots = [p.root for p in link.projects]
            row = conn.execute(
                "SELECT last_push_at, last_pull_at FROM team_links WHERE link = ?", (link.key,)
            ).fetchone()
            entry = local.LinkStatus(
                team=link.team, server=pg.server_label(link.dsn), member=link.member,
                projects=[p.project_id for p in link.projects], roots=roots, state="daemon not running",
                outbox=local.outbox_depth(conn, roots), last_push_at=row[0] if row else None,
                last_pull_at=row[1] if row else None, transport=transport.describe(link.dsn), pushed=0, pulled=0,
            )  # fmt: skip
            try:
                facts = anyio.run(probe, link.dsn, link.team, 5.0)
                entry.schema_version = facts.schema_version
                entry.state = "reachable (the daemon is not running: nothing syncs)"
            except NmemError as exc:
                entry.error = str(exc)
            result.append(msgspec.to_builtins(entry))
        return result
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {settings.db}: {exc}") from exc
    finally:
        conn.close()
