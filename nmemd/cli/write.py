"""Writing commands: maintain, purge, forget and pin."""

import os
import sys
from typing import Annotated, Any

import msgspec
import typer

from nmemd.cli import ui
from nmemd.cli.common import (
    JsonOpt,
    ProjectOpt,
    clean_arg,
    confirmed,
    fail,
    ids_arg,
    json_lines,
    load_settings,
    out,
    print_table,
    resolve_scope,
    time_arg,
)
from nmemd.control import control
from nmemd.errors import NmemError
from nmemd.model import OBSERVATION_TYPES
from nmemd.recall.queries import ALL_PROJECTS
from nmemd.wording import plural

MAINTAIN_TIMEOUT_S = 600.0
LISTED_ROWS = 50  # nmemd.history.purge.LISTED_ROWS: a purge names this many of its observations


def _maintain_locally(job: str | None) -> Any:
    """No daemon: open the store ourselves, holding the daemon's lock so none starts meanwhile."""
    import anyio

    from nmemd.daemon.instance import InstanceLock, ensure_socket_dir, lock_holder
    from nmemd.jobs import scheduler
    from nmemd.store.database import open_store

    settings = load_settings()
    holder = lock_holder(settings.lock)
    if holder is not None:
        who = f" (pid {holder})" if holder > 0 else ""
        fail(f"nmemd{who} holds {settings.lock} but does not answer; retry, or stop it with nmem daemon stop")
    if not os.path.exists(settings.db):
        fail(f"no database yet at {settings.db}: nothing to maintain")
    lock = InstanceLock(settings.lock)
    try:
        ensure_socket_dir(settings.socket, settings.home)
        lock.acquire()
    except (NmemError, OSError) as exc:
        fail(str(exc))

    async def run() -> list[scheduler.JobResult]:
        async with open_store(settings) as store:
            return await scheduler.run_jobs(store, job)

    try:
        return msgspec.to_builtins(anyio.run(run))
    except NmemError as exc:
        fail(str(exc))
    finally:
        lock.release()


def maintain(
    job: Annotated[
        str | None,
        typer.Option(
            "--job", "-j", help="Only this job: retention, checkpoint, vacuum, fts_merge, optimize or integrity."
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Run database maintenance now (the daemon also runs it on a schedule) and print what each job did."""
    from nmemd.errors import DaemonUnavailable
    from nmemd.jobs import scheduler

    if job is not None and job not in scheduler.JOBS:
        fail(f"unknown job {job!r} (known: {', '.join(scheduler.JOBS)})")
    params = {"job": job} if job else {}
    try:
        raw = control.ask("maintain", params, timeout=MAINTAIN_TIMEOUT_S)
    except DaemonUnavailable:
        raw = _maintain_locally(job)
    except (NmemError, msgspec.DecodeError) as exc:
        fail(str(exc))
    try:
        results = msgspec.convert(raw, list[scheduler.JobResult])
    except msgspec.ValidationError as exc:
        fail(f"unexpected maintain reply: {exc}")
    if json_out:
        json_lines(results)
    else:
        table = ui.Table(box=None, pad_edge=False, header_style="bold")
        for column in ("job", "result", "took", "what it did"):
            table.add_column(column)
        for r in results:
            result = "[green]ok[/green]" if r.ok else "[red]failed[/red]"
            table.add_row(r.name, result, f"{r.duration_ms:.0f} ms", ui.escape(r.outcome))
        print_table(table)
    failed = [r.name for r in results if not r.ok]
    if failed:
        fail(f"maintenance failed: {', '.join(failed)}")


# --- forgetting -----------------------------------------------------------------------------------

WRITE_TIMEOUT_S = 300.0  # a purge rebuilds the full-text index: large stores take a while


def _write(method: str, params: dict[str, Any]) -> Any:
    """Run a write method on the daemon; when none runs, on the store opened here.

    Without a daemon we take its instance lock ourselves, so none can start and
    write beside us while the store is open.
    """
    from nmemd.errors import AlreadyRunning, DaemonUnavailable
    from nmemd.history import purge

    try:
        purge.parse(method, params)  # a bad param is reported here, with its message
        if method == "purge":
            purge.validate(msgspec.convert(params["filter"], purge.PurgeFilter))
    except NmemError as exc:
        fail(str(exc), 2)
    try:
        return control.ask(method, params, timeout=WRITE_TIMEOUT_S)
    except DaemonUnavailable:
        pass
    except NmemError as exc:
        fail(str(exc))
    settings = load_settings()
    if not os.path.exists(settings.db):
        fail(f"no database yet at {settings.db}: nothing has been recorded")
    import anyio

    from nmemd.daemon.instance import InstanceLock, ensure_socket_dir
    from nmemd.store.database import open_store

    async def run() -> Any:
        async with open_store(settings) as store:
            return await purge.call(store, method, params)

    try:
        ensure_socket_dir(settings.socket, settings.home)
        lock = InstanceLock(settings.lock)
        lock.acquire()
    except AlreadyRunning:
        fail("nmemd is running but did not answer; try again (nmem status)")
    except (NmemError, OSError) as exc:
        fail(str(exc))
    try:
        return anyio.run(run)
    except NmemError as exc:
        fail(str(exc))
    finally:
        lock.release()


def _counts_line(c: dict[str, Any]) -> str:
    line = plural(c["observations"], "observation") + (f" ({c['pinned']} pinned)" if c["pinned"] else "")
    if c["sessions"]:
        line += ", " + plural(c["sessions"], "session") + " left empty"
    if c["inbox"]:
        line += ", " + plural(c["inbox"], "event") + " waiting to be stored"
    if c.get("hidden_here_only"):
        n = c["hidden_here_only"]
        line += (
            "; " + plural(n, "teammate's observation", "teammates' observations") + " hidden on this machine only,"
            " the team keeps it (only the author or a team admin can delete it for the whole team)"
        )
    return line


def _print_rows(c: dict[str, Any], console: "ui.Console") -> None:
    """The observations a purge touches: id, project, type, title; the first LISTED_ROWS, then how many more."""
    from nmemd.capture.project import short_name

    rows = c.get("rows") or []
    for r in rows:
        project = short_name(r["project"]) if r.get("project") else "-"
        console.print(ui.Text(f"  #{r['id']}  {project}  {r['type']}  {' '.join(str(r['title']).split())}"))
    if c["observations"] > len(rows):
        console.print(ui.Text(f"  … and {plural(c['observations'] - len(rows), 'more observation')}"))


def _print_done(done: dict[str, Any], said: str, json_out: bool) -> None:
    """What a purge or forget deleted: its counts as JSON, or `said` with the counts and the rows."""
    if json_out:
        sys.stdout.write(msgspec.json.encode(done).decode() + "\n")
        return
    console = out()
    console.print(ui.Text(f"{said} {_counts_line(done)}"))
    _print_rows(done, console)


def purge(
    project: ProjectOpt = None,
    all_projects: Annotated[
        bool, typer.Option("--all-projects", help="Every project (a scope, not a filter).")
    ] = False,
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session id.")] = None,
    types: Annotated[
        list[str] | None,
        typer.Option("--type", "-t", help=f"Only this type (repeatable): {', '.join(OBSERVATION_TYPES)}."),
    ] = None,
    since: Annotated[str | None, typer.Option(help="Only newer: 30m, 2h, 7d, or a date like 2026-02-01.")] = None,
    until: Annotated[str | None, typer.Option(help="Only older: 30m, 2h, 7d, or a date like 2026-02-01.")] = None,
    ids: Annotated[list[str] | None, typer.Option("--id", help="Only this observation id (repeatable).")] = None,
    query: Annotated[str | None, typer.Option("--query", "-q", help="Only observations matching these words.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only count; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Delete matching observations (pinned too) and every copy of their text, for good."""
    if all_projects and project:
        fail("use either --project or --all-projects, not both", 2)
    id_list = ids_arg(ids, "--id")
    for value in types or []:
        if value not in OBSERVATION_TYPES:
            fail(f"--type: {value!r} is not one of: {', '.join(OBSERVATION_TYPES)}", 2)
    try:
        since_ts, until_ts = time_arg(since, "--since"), time_arg(until, "--until")
    except typer.BadParameter as exc:
        fail(f"{exc.param_hint}: {exc.message}", 2)
    if all_projects:
        scope: str | None = ALL_PROJECTS
    elif project:
        scope = resolve_scope(project, False)
    elif id_list or session:
        scope = ALL_PROJECTS  # ids and sessions name exactly what to remove
    else:
        scope = resolve_scope(None, False)
    criteria = any([project, session, types, since_ts is not None, until_ts is not None, id_list, query])
    if not criteria:
        fail("purge needs a filter: --project, --session, --type, --since, --until, --id or --query", 2)
    flt = {
        "project": scope,
        "session_id": clean_arg(session) if session else None,
        "types": types or [],
        "since": since_ts,
        "until": until_ts,
        "ids": id_list,
        "query": clean_arg(query) if query else None,
    }
    counts = _write("purge", {"filter": flt, "dry_run": True})
    where = "every project" if scope in (None, ALL_PROJECTS) else scope
    err = ui.Console(stderr=True, soft_wrap=True)
    total = counts["observations"] + counts["sessions"] + counts["inbox"]
    if dry_run or not total:
        if json_out:
            sys.stdout.write(msgspec.json.encode(counts).decode() + "\n")
        elif total:
            console = out()
            console.print(ui.Text(f"would delete in {where}: {_counts_line(counts)}"))
            _print_rows(counts, console)
        if not total:
            err.print(ui.Text("nothing matches; nothing changed"))
        return
    if not yes:
        err.print(ui.Text(f"will delete in {where}: {_counts_line(counts)}"))
        _print_rows(counts, err)
    confirmed("Delete them for good?", yes, "purge")
    done = _write("purge", {"filter": flt, "dry_run": False})
    _print_done(done, f"deleted in {where}:", json_out)
    if not done.get("checkpointed", True):
        fail("deleted, but a reader kept the WAL from being truncated: run the purge again to clear it")


def forget(
    ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Observation ids, as search prints them.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Delete these observations (pinned too) and every copy of their text.

    On a terminal it lists them and asks first (--yes does not ask)."""
    id_list = list(dict.fromkeys(ids_arg(ids, "ID")))
    flt = {"project": ALL_PROJECTS, "ids": id_list}
    counts = _write("purge", {"filter": flt, "dry_run": True})
    found = {r["id"] for r in counts["rows"]} if len(id_list) <= LISTED_ROWS else set(id_list)
    missing = [i for i in id_list if i not in found] if counts["observations"] < len(id_list) else []
    if not counts["observations"]:
        fail(f"no observation with id {', '.join(map(str, missing or id_list))}; nothing changed")
    if not yes and sys.stdin.isatty():
        err = ui.Console(stderr=True, soft_wrap=True)
        err.print(ui.Text(f"will forget {_counts_line(counts)}:"))
        _print_rows(counts, err)
    confirmed("Forget them for good?", yes or not sys.stdin.isatty(), "forget")
    done = _write("forget", {"ids": [i for i in id_list if i not in missing]})
    _print_done(done, "forgot", json_out)
    if missing:
        fail(f"no observation with id {', '.join(map(str, missing))}")
    if done["observations"] < len(id_list):  # more ids than the dry run named
        fail(f"{len(id_list) - done['observations']} of the ids did not exist")


def pin(
    ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Observation ids, as search prints them.")],
    unpin: Annotated[bool, typer.Option("--unpin", help="Let retention remove them again.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Keep observations when retention cleans up (purge and forget still remove them)."""
    id_list = list(dict.fromkeys(ids_arg(ids, "ID")))
    done = _write("pin", {"ids": id_list, "unpin": unpin})
    pinned = len(id_list) - len(done["missing"])
    if json_out:
        sys.stdout.write(msgspec.json.encode(done).decode() + "\n")
    elif pinned:
        verb = "unpinned" if unpin else "pinned"
        out().print(ui.Text(f"{verb} {plural(pinned, 'observation')}"))
    if done["missing"]:
        fail(f"no observation with id {', '.join(map(str, done['missing']))}" + ("" if pinned else "; nothing changed"))
