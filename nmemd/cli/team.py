"""`nmem team`: share a project's memory through PostgreSQL.

The admin's commands (init, add-member, remove-member) are here; the member's (join, leave,
status) register on the same `team_app`, from their own module or this one.
"""

from pathlib import Path
from typing import Annotated

import typer

from nmemd.cli.common import fail
from nmemd.errors import NmemError

team_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Share a project's memory with your machines and teammates through PostgreSQL.",
)

AdminDsn = Annotated[
    str,
    typer.Argument(
        metavar="ADMIN_DSN",
        help="libpq DSN or URI of a role that may create roles (CREATEROLE); its password from ~/.pgpass or"
        " PGPASSFILE is best (use sslmode=verify-full across a network).",
    ),
]
TeamOpt = Annotated[str, typer.Option("--team", "-t", help="The team's name.")]
Member = Annotated[str, typer.Argument(metavar="MEMBER", help="The member's PostgreSQL role name.")]
Insecure = Annotated[
    bool,
    typer.Option(
        "--insecure",
        help="Allow a server on another machine without verified TLS (sslmode=verify-full, channel_binding=require).",
    ),
]


@team_app.command("init")
def init(dsn: AdminDsn, team: TeamOpt, insecure: Insecure = False) -> None:
    """Create or upgrade nmem's schema on a PostgreSQL server and create a team (idempotent)."""
    from nmemd.team import admin

    try:
        done = admin.init(dsn, team, insecure=insecure)
    except NmemError as exc:
        fail(str(exc))
    if done.version_before == 0:
        typer.echo(f"schema nmem v{done.version} created")
    elif done.version_before < done.version:
        typer.echo(f"schema nmem upgraded from v{done.version_before} to v{done.version}")
    else:
        typer.echo(f"schema nmem v{done.version} already there")
    typer.echo(f"team {team} {'created' if done.team_created else 'already exists'}")


@team_app.command("add-member")
def add_member(
    dsn: AdminDsn,
    team: TeamOpt,
    member: Member,
    is_admin: Annotated[
        bool, typer.Option("--admin", help="The member may remove anyone's rows in this team.")
    ] = False,
    password_file: Annotated[
        Path | None,
        typer.Option("--password-file", help="Read the member's password from this file (default: a generated one)."),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="The server's address as members reach it (default: ADMIN_DSN's).")
    ] = None,
    insecure: Insecure = False,
) -> None:
    """Create a member's PostgreSQL login and add it to a team; print, once, the DSN they join with."""
    from nmemd.team import admin

    password = None
    if password_file is not None:
        try:
            password = password_file.read_text(encoding="utf-8").splitlines()[0] if password_file.stat().st_size else ""
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"cannot read the password file {password_file}: {exc.strerror if isinstance(exc, OSError) else exc}")
    try:
        added = admin.add_member(dsn, team, member, is_admin=is_admin, password=password, host=host, insecure=insecure)
    except NmemError as exc:
        fail(str(exc))
    role = "created" if added.role_created else "already existed"
    typer.echo(f"member {member} added to team {team} (role {role}{', team admin' if is_admin else ''})", err=True)
    if added.password_set and password is None:
        typer.echo("give them this DSN (shown once; it holds their generated password):", err=True)
    elif not added.password_set:
        typer.echo("their existing password stands; give them this DSN and the password:", err=True)
    typer.echo(added.dsn)


@team_app.command("remove-member")
def remove_member(dsn: AdminDsn, team: TeamOpt, member: Member, insecure: Insecure = False) -> None:
    """Remove a member from a team (access ends at once); drop their login when in no other team."""
    from nmemd.team import admin

    try:
        removed = admin.remove_member(dsn, team, member, insecure=insecure)
    except NmemError as exc:
        fail(str(exc))
    if not removed.was_member:
        typer.echo(f"{member} was not a member of team {team}")
    else:
        typer.echo(f"{member} removed from team {team}")
    if removed.role_dropped:
        typer.echo(f"role {member} dropped (in no other team): its login and open connections are gone")
    elif removed.kept_for:
        typer.echo(f"role {member} kept: nmem database {', '.join(removed.kept_for)} of this cluster uses it")


# The member's commands: join, leave, status (nmemd/cli/team_member.py).
from nmemd.cli import team_member  # noqa: E402

team_member.register(team_app)
