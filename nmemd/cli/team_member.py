"""`nmem team join/leave/status`: a member's side of team memory (the admin's commands are in team.py).

Thin: nmemd.team.membership checks the server and moves the password into the libpq password file;
the daemon records the shared project and syncs it (nmemd.team.sync).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from nmemd.cli.common import JsonOpt, fail, load_settings, out
from nmemd.errors import DaemonUnavailable, NmemError, TeamError
from nmemd.wording import ago

JOIN_TIMEOUT_S = 30.0


def _ask(method: str, params: dict[str, Any]) -> Any:
    """The daemon's answer; a daemon is started when none runs (it is what syncs)."""
    from nmemd.control import control

    try:
        return control.ask(method, params, timeout=JOIN_TIMEOUT_S)
    except DaemonUnavailable:
        control.start(load_settings())
        return control.ask(method, params, timeout=JOIN_TIMEOUT_S)


def _dsn_given(dsn: str | None, dsn_file: Path | None) -> str:
    """The DSN from --dsn-file, stdin or the prompt (a password never on the command line)."""
    from nmemd.team import membership

    if dsn is not None and dsn != "-":
        membership.refuse_password_in_argv(dsn)
        return dsn
    if dsn_file is not None:
        try:
            return membership.read_dsn(dsn_file.read_text(encoding="utf-8", errors="replace"), str(dsn_file))
        except OSError as exc:
            raise TeamError(f"cannot read {dsn_file}: {exc.strerror}") from None
    if dsn is None and sys.stdin.isatty():
        import getpass

        try:
            return membership.read_dsn(getpass.getpass("DSN from `nmem team add-member` (not shown): "), "the prompt")
        except (EOFError, KeyboardInterrupt):
            raise TeamError("no DSN given") from None
    return membership.read_dsn(sys.stdin.read(membership.DSN_MAX_BYTES), "stdin")


def join(
    dsn: Annotated[
        str | None,
        typer.Argument(
            metavar="[DSN]",
            help="Only a DSN without a password (libpq finds it in ~/.pgpass); one with a password comes with"
            " --dsn-file, on stdin, or at the prompt.",
        ),
    ] = None,
    dsn_file: Annotated[
        Path | None, typer.Option("--dsn-file", help="Read the DSN `nmem team add-member` printed from this file.")
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="Allow a server on another machine without verified TLS"
            " (sslmode=verify-full, channel_binding=require).",
        ),
    ] = False,
    project: Annotated[
        str | None, typer.Option("--project", help="The project to share (default: this directory's).")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="The project's name on the server when it has no git remote.")
    ] = None,
    team: Annotated[str | None, typer.Option("--team", help="The team, when the member is in several.")] = None,
    share_prompts: Annotated[
        bool, typer.Option("--share-prompts/--no-share-prompts", help="Share the prompts typed (default: no).")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Share one project with a team: its observations and session summaries are pushed, redacted,
    and teammates' are pulled. Nothing of other projects leaves this machine."""
    from nmemd.team import membership

    settings = load_settings()
    try:
        given = _dsn_given(dsn, dsn_file)
        plan = membership.plan_join(
            settings.home, given, path=project, name=name, team=team, share_prompts=share_prompts, insecure=insecure
        )
        recorded = {k: v for k, v in msgspec.to_builtins(plan).items() if k not in ("schema_version", "transport")}
        machine = membership.ensure_machine_name(settings)
        done = _ask("team_join", recorded)
    except NmemError as exc:
        fail(str(exc))
    if json_out:
        sys.stdout.write(msgspec.json.encode({**msgspec.to_builtins(plan), **done, "machine": machine}).decode() + "\n")
        return
    prompts = "prompts too" if plan.share_prompts else "prompts not shared"
    out().print(
        f"sharing {plan.root} as {plan.project_id} with team {plan.team} as {plan.member}"
        f" ({prompts}; {done.get('queued', 0)} observations of the last {settings.team_window_days:g} days queued)",
        highlight=False,
    )
    out().print(f"transport: {plan.transport}; this machine: {machine} (team_machine in config.toml)", highlight=False)


def leave(
    project: Annotated[
        str | None, typer.Option("--project", help="The project to stop sharing (default: this directory's).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Stop sharing a project: nothing more is pushed or pulled; what teammates already have stays."""
    from nmemd.team import membership

    try:
        root = membership.resolve_root(project)
        done = _ask("team_leave", {"root": root})
    except NmemError as exc:
        fail(str(exc))
    if json_out:
        sys.stdout.write(msgspec.json.encode(done).decode() + "\n")
    elif done.get("left"):
        out().print(f"{root} is no longer shared")
    else:
        fail(f"{root} was not shared")


def status(json_out: JsonOpt = False) -> None:
    """Whether each team server answers, its schema version, the outbox, the last push and pull, the lag."""
    try:
        from nmemd.setup import team_status

        links = team_status.statuses(load_settings())
    except NmemError as exc:
        fail(str(exc))
    if json_out:
        sys.stdout.write(msgspec.json.encode(links).decode() + "\n")
        return
    if not links:
        out().print("no project is shared (nmem team join DSN --project PATH)")
        return
    now = time.time()
    for st in links:
        head = f"{st['team']} on {st['server']} as {st['member']}: "
        head += f"ERROR: {st['error']}" if st.get("error") else str(st.get("state"))
        out().print(head, highlight=False)
        if st.get("transport"):
            out().print(f"  transport: {st['transport']}", highlight=False)
        out().print(f"  projects: {', '.join(f'{p} ({r})' for p, r in zip(st['projects'], st['roots'], strict=False))}")
        lag = st.get("lag")
        out().print(
            f"  schema v{st.get('schema_version') or '?'}, outbox {st.get('outbox', 0)},"
            f" last push {ago(st.get('last_push_at'), now) if st.get('last_push_at') else 'never'},"
            f" last pull {ago(st.get('last_pull_at'), now) if st.get('last_pull_at') else 'never'}"
            + (f", lag {lag} rows" if lag is not None else ""),
            highlight=False,
        )
    if any(st.get("error") for st in links):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the member's commands to the `nmem team` group."""
    app.command(name="join")(join)
    app.command(name="leave")(leave)
    app.command(name="status")(status)
