"""`nmem`: the command line for people (rich tables) and programs (--json)."""

from __future__ import annotations

import datetime as dt
import os
import re
import sqlite3
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import msgspec
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from nmemd import config, control, readers, rpc
from nmemd.errors import DaemonError, NmemError, StorageError
from nmemd.model import OBSERVATION_TYPES
from nmemd.project import project_root, short_name
from nmemd.queries import ALL_PROJECTS, MAX_LIMIT, Detail, Hit, SessionRow
from nmemd.status import Status

app = typer.Typer(no_args_is_help=True, add_completion=False, help="nmem: local memory for coding agents.")
daemon_app = typer.Typer(no_args_is_help=True, help="Start, stop or restart the nmemd daemon.")
app.add_typer(daemon_app, name="daemon")
service_app = typer.Typer(
    no_args_is_help=True, help="Run nmemd under systemd (Linux) or launchd (macOS), socket-activated."
)
app.add_typer(service_app, name="service")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of a table.")]
ProjectOpt = Annotated[
    str | None,
    typer.Option("--project", "-p", help="Project root (default: the git top-level of the current directory)."),
]
AllOpt = Annotated[bool, typer.Option("--all", "-a", help="Every project, not only the current one.")]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", min=1, max=MAX_LIMIT, help="At most this many results.")]


def _settings() -> config.Settings:
    try:
        return config.load()
    except NmemError as exc:
        _fail(str(exc))


def _fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr (never wrapped, never read as markup), then exit."""
    line = " ".join(message.split())
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(line)}", highlight=False)
    raise typer.Exit(code)


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _when(ts: float | None) -> str:
    if not ts:
        return "never"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _ago(ts: float | None, now: float) -> str:
    """Age as a person scans it: just now, 5m ago, 2h ago, 3d ago, then the date."""
    if not ts:
        return "-"
    age = now - ts
    if age < 60:
        return "just now"
    if age < 3600:
        return f"{int(age // 60)}m ago"
    if age < 86400:
        return f"{int(age // 3600)}h ago"
    if age < 7 * 86400:
        return f"{int(age // 86400)}d ago"
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d")


def _print_status(st: Status) -> None:
    d, db = st.daemon, st.database
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    state = "[red]not running[/red]"
    if d.running:
        state = f"[green]running[/green] (pid {d.pid}, started by {d.started_by})"
    table.add_row("daemon", state)
    table.add_row("socket", d.socket)
    if d.running:
        table.add_row("since", _when(d.started_at))
        table.add_row("queue", f"{d.queued} queued, {d.connections} connections, {d.committed} stored since start")
        if d.last_error:
            table.add_row("last error", f"[red]{d.last_error}[/red]")
    table.add_row("database", db.path if db.exists else f"{db.path} (not created yet)")
    table.add_row("size", f"{_human_bytes(db.size_bytes)} + WAL {_human_bytes(db.wal_bytes)}")
    table.add_row("stored", f"{db.observations} observations from {db.events} events in {db.sessions} sessions")
    table.add_row("by type", ", ".join(f"{k} {v}" for k, v in db.by_type.items()) or "-")
    table.add_row("last event", _when(db.last_event_at))
    table.add_row("backlog", f"{db.inbox_backlog} in inbox, {db.spool_backlog} spooled")
    if db.jobs:
        lines = (f"{j.name}: {_when(j.last_run)}, {escape(j.outcome or '-')}" for j in db.jobs)
        table.add_row("maintenance", "\n".join(lines))
    Console().print(table)


# --- reading: one path, two transports -------------------------------------------------------------


def _query(method: str, params: dict[str, Any]) -> Any:
    """Ask the daemon when one runs, else run the same `rpc.run_query` on a read-only connection.

    A refusal also falls back to the local run: the hook client's wire reader
    keeps only the error code, and the local run raises the same error with its
    message (an older daemon without the method simply answers locally).
    """
    try:
        return control.ask(method, params)
    except (DaemonError, msgspec.DecodeError):  # DaemonUnavailable included
        pass
    settings = _settings()
    if not os.path.exists(settings.db):
        _fail(f"no database yet at {settings.db}: nothing has been recorded (is the daemon or the hook set up?)")
    try:
        conn = readers.open_readonly(settings.db)
        try:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'observations'").fetchone() is None:
                _fail(f"{settings.db} holds no memory yet: events wait in its inbox until the daemon runs"
                      " (nmem daemon start)")  # fmt: skip
            return msgspec.to_builtins(rpc.run_query(conn, method, params))
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read {settings.db}: {exc}") from exc


def _read(method: str, params: dict[str, Any], result_type: Any) -> Any:
    """`_query`, typed; every NmemError becomes one line on stderr and exit 1."""
    try:
        return msgspec.convert(_query(method, params), result_type)
    except NmemError as exc:
        _fail(str(exc))
    except msgspec.ValidationError as exc:
        _fail(f"unexpected {method} reply: {exc}")


def _arg(text: str) -> str:
    """argv undecodable as UTF-8 arrives as lone surrogates; make it valid text (U+FFFD) before use."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "replace")
    return text


def _scope(project: str | None, all_projects: bool) -> str | None:
    """The project filter: --all, --project (a directory maps to its git top-level), else the cwd's project."""
    if all_projects and project:
        raise typer.BadParameter("use either --project or --all, not both", param_hint="'--all'")
    if all_projects:
        return ALL_PROJECTS
    if project:
        project = _arg(project)
        return project_root(os.path.abspath(project)) if os.path.isdir(project) else project
    try:
        return project_root(os.getcwd())
    except OSError:  # the current directory was removed
        return None


_SPAN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_SPAN_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _time_arg(value: str | None, hint: str) -> float | None:
    """`30m`, `2h`, `7d`, `1w` ago, or an ISO date/time (local time)."""
    if value is None:
        return None
    span = _SPAN.match(value)
    if span:
        return time.time() - float(span.group(1)) * _SPAN_S[span.group(2)]
    try:
        return dt.datetime.fromisoformat(value.strip()).timestamp()
    except (ValueError, OverflowError, OSError):  # not a date, or one the platform cannot convert
        raise typer.BadParameter(
            f"{value!r} is neither a span (30m, 2h, 7d) nor a date (2026-02-01)", param_hint=hint
        ) from None


def _check_types(values: list[str] | None) -> list[str] | None:
    for value in values or []:
        if value not in OBSERVATION_TYPES:
            raise typer.BadParameter(f"{value!r} is not one of: {', '.join(OBSERVATION_TYPES)}")
    return values


# --- printing -------------------------------------------------------------------------------------


def _json_lines(items: Iterable[msgspec.Struct]) -> None:
    """One JSON object per line; a reader that stops early (`| head`) is not an error."""
    try:
        for item in items:
            sys.stdout.buffer.write(msgspec.json.encode(item) + b"\n")
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _rel(path: str | None, project: str | None) -> str:
    if not path:
        return ""
    if project and path.startswith(project.rstrip("/") + "/"):
        return path[len(project.rstrip("/")) + 1 :]
    return path


def _tail(text: str, width: int) -> str:
    """The end of a long path is the part that tells files apart."""
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def _cell(text: str, style: str = "") -> Text:
    """A table cell that stays on one line and ends in … when the column is narrower."""
    return Text(" ".join(text.split()), style=style, no_wrap=True, overflow="ellipsis")


def _hits_table(hits: list[Hit], *, show_project: bool, anchor: int | None = None) -> Table:
    now = time.time()
    path_width = max(16, Console().width // 4)  # the title gets what is left
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("id", justify="right", style="cyan", no_wrap=True)
    table.add_column("when", no_wrap=True)
    table.add_column("type", no_wrap=True)
    if show_project:
        table.add_column("project", max_width=max(12, path_width // 2))
    table.add_column("title", min_width=20)  # cells are one-line Texts: the column shrinks, text ends in …
    table.add_column("path", max_width=path_width)
    for hit in hits:
        title = _cell(hit.title, style="bold" if hit.id == anchor else "")
        if hit.count > 1:
            title.append(f" (x{hit.count})", style="dim")
        if hit.snippet and hit.snippet not in hit.title:
            title.append("\n" + " ".join(hit.snippet.split()), style="dim")
        row: list[Text | str] = [str(hit.id), _ago(hit.ts, now), hit.type]
        if show_project:
            row.append(_cell(short_name(hit.project) if hit.project else "-"))
        row += [title, _cell(_tail(_rel(hit.file_path, hit.project), path_width))]
        table.add_row(*row)
    return table


def _print_detail(d: Detail, console: Console) -> None:
    head = Text(f"#{d.id} ", style="bold cyan")
    head.append(f"{d.type}  {_when(d.ts)} ({_ago(d.ts, time.time())})", style="dim")
    console.print(head)
    console.print(Text(d.title, style="bold"))
    facts = Table(show_header=False, box=None, pad_edge=False)
    facts.add_column(style="dim", no_wrap=True)
    facts.add_column(overflow="fold")
    for label, value in (
        ("project", d.project),
        ("session", d.session_id),
        ("event", d.hook_event),
        ("tool", d.tool_name),
        ("file", d.file_path),
        ("command", d.command),
        ("agent", d.agent_id),
        ("count", f"{d.count} (last {_when(d.last_ts)})" if d.count > 1 else None),
    ):
        if value:
            facts.add_row(label, Text(value))
    console.print(facts)
    if d.content:
        console.print(Text(d.content))
    console.print()


# --- commands -------------------------------------------------------------------------------------


@app.command()
def status(json_out: JsonOpt = False) -> None:
    """Show whether the daemon runs, where the data is and what it holds."""
    st = control.status(_settings())
    if json_out:
        sys.stdout.write(msgspec.json.encode(st).decode() + "\n")
    else:
        _print_status(st)


@app.command()
def search(
    query: Annotated[
        list[str], typer.Argument(metavar="QUERY", help='Words to find (all must match); "an exact phrase"; prefix*.')
    ],
    project: ProjectOpt = None,
    all_projects: AllOpt = False,
    types: Annotated[
        list[str] | None,
        typer.Option(
            "--type", "-t", callback=_check_types, help=f"Only this type (repeatable): {', '.join(OBSERVATION_TYPES)}."
        ),
    ] = None,
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session id.")] = None,
    file: Annotated[str | None, typer.Option("--file", "-f", help="Only this path (or a path ending with it).")] = None,
    since: Annotated[str | None, typer.Option(help="Only newer: 30m, 2h, 7d, or a date like 2026-02-01.")] = None,
    until: Annotated[str | None, typer.Option(help="Only older: 30m, 2h, 7d, or a date like 2026-02-01.")] = None,
    limit: LimitOpt = 20,
    json_out: JsonOpt = False,
) -> None:
    """Find observations by words, identifiers, paths, error text or commands, best first."""
    scope = _scope(project, all_projects)
    params = {
        "query": _arg(" ".join(query)),
        "project": scope,
        "types": types or [],
        "session_id": _arg(session) if session else None,
        "file": _arg(file) if file else None,
        "since": _time_arg(since, "'--since'"),
        "until": _time_arg(until, "'--until'"),
        "limit": limit,
    }
    hits: list[Hit] = _read("search", params, list[Hit])
    if json_out:
        _json_lines(hits)
    elif hits:
        Console().print(_hits_table(hits, show_project=scope in (None, ALL_PROJECTS)))
    else:
        where = "any project" if scope in (None, ALL_PROJECTS) else f"{scope} (try --all)"
        Console(stderr=True, soft_wrap=True).print(Text(f"nothing found in {where}"))


@app.command()
def show(
    ids: Annotated[list[int], typer.Argument(metavar="ID", min=1, help="Observation ids, as search prints them.")],
    json_out: JsonOpt = False,
) -> None:
    """Print everything stored about the given observations."""
    details: list[Detail] = _read("show", {"ids": ids}, list[Detail])
    if json_out:
        _json_lines(details)
    else:
        console = Console()
        for d in details:
            _print_detail(d, console)
    missing = [i for i in dict.fromkeys(ids) if i not in {d.id for d in details}]
    if missing:
        _fail(f"no observation with id {', '.join(map(str, missing))}")


@app.command()
def timeline(
    anchor: Annotated[int, typer.Argument(metavar="ID", min=1, help="The observation to center on.")],
    before: Annotated[int, typer.Option("--before", "-B", min=0, max=MAX_LIMIT, help="Observations before.")] = 5,
    after: Annotated[int, typer.Option("--after", "-A", min=0, max=MAX_LIMIT, help="Observations after.")] = 5,
    json_out: JsonOpt = False,
) -> None:
    """Show what happened in the same session just before and after one observation."""
    hits: list[Hit] = _read("timeline", {"id": anchor, "before": before, "after": after}, list[Hit])
    if json_out:
        _json_lines(hits)
    else:
        Console().print(_hits_table(hits, show_project=False, anchor=anchor))


@app.command()
def sessions(
    project: ProjectOpt = None, all_projects: AllOpt = False, limit: LimitOpt = 10, json_out: JsonOpt = False
) -> None:
    """List recent sessions with their first prompt or summary, newest first."""
    scope = _scope(project, all_projects)
    rows: list[SessionRow] = _read("sessions", {"project": scope, "limit": limit}, list[SessionRow])
    if json_out:
        _json_lines(rows)
        return
    now = time.time()
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("session", style="cyan", no_wrap=True)
    table.add_column("last", no_wrap=True)
    if scope in (None, ALL_PROJECTS):
        table.add_column("project", max_width=20)
    table.add_column("events", justify="right")
    table.add_column("about", min_width=20)
    for r in rows:
        row: list[Text | str] = [Text(r.session_id[:8]), _ago(r.last_event_at, now)]
        if scope in (None, ALL_PROJECTS):
            row.append(_cell(short_name(r.project) if r.project else "-"))
        about = r.first_prompt or (r.summary or "").strip().split("\n", 1)[0]
        row += [str(r.event_count), _cell(about)]
        table.add_row(*row)
    Console().print(table)


@app.command()
def context(project: ProjectOpt = None, json_out: JsonOpt = False) -> None:
    """Print the context SessionStart would inject for a project (default: this directory's)."""
    scope = _scope(project, False)
    if not scope:
        _fail("no project: run inside a project directory or pass --project")
    budget = _settings().context_budget
    reply = _read("context", {"project": scope, "budget": budget}, dict[str, str])
    if json_out:
        sys.stdout.write(msgspec.json.encode(reply).decode() + "\n")
    elif reply["context"]:
        sys.stdout.write(reply["context"] + "\n")
    else:
        Console(stderr=True).print(f"nothing recorded yet for {reply['project']}", highlight=False)


MAINTAIN_TIMEOUT_S = 600.0


def _maintain_locally(job: str | None) -> Any:
    """No daemon: open the store ourselves, holding the daemon's lock so none starts meanwhile."""
    import anyio

    from nmemd import maintenance
    from nmemd.instance import InstanceLock, ensure_private_dir, lock_holder
    from nmemd.store import open_store

    settings = _settings()
    holder = lock_holder(settings.lock)
    if holder is not None:
        who = f" (pid {holder})" if holder > 0 else ""
        _fail(f"nmemd{who} holds {settings.lock} but does not answer; retry, or stop it with nmem daemon stop")
    if not os.path.exists(settings.db):
        _fail(f"no database yet at {settings.db}: nothing to maintain")
    lock = InstanceLock(settings.lock)
    try:
        ensure_private_dir(os.path.dirname(settings.socket))
        lock.acquire()
    except (NmemError, OSError) as exc:
        _fail(str(exc))

    async def run() -> list[maintenance.JobResult]:
        async with open_store(settings) as store:
            return await maintenance.run_jobs(store, job)

    try:
        return msgspec.to_builtins(anyio.run(run))
    except NmemError as exc:
        _fail(str(exc))
    finally:
        lock.release()


@app.command()
def maintain(
    job: Annotated[
        str | None,
        typer.Option("--job", "-j", help="Only this job: fts_merge, vacuum, optimize, integrity or checkpoint."),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Run database maintenance now (the daemon also runs it on a schedule) and print what each job did."""
    from nmemd import maintenance
    from nmemd.errors import DaemonUnavailable

    if job is not None and job not in maintenance.JOBS:
        _fail(f"unknown job {job!r} (known: {', '.join(maintenance.JOBS)})")
    params = {"job": job} if job else {}
    try:
        raw = control.ask("maintain", params, timeout=MAINTAIN_TIMEOUT_S)
    except DaemonUnavailable:
        raw = _maintain_locally(job)
    except (DaemonError, msgspec.DecodeError) as exc:
        _fail(str(exc))
    try:
        results = msgspec.convert(raw, list[maintenance.JobResult])
    except msgspec.ValidationError as exc:
        _fail(f"unexpected maintain reply: {exc}")
    if json_out:
        _json_lines(results)
    else:
        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("job", "result", "took", "what it did"):
            table.add_column(column)
        for r in results:
            result = "[green]ok[/green]" if r.ok else "[red]failed[/red]"
            table.add_row(r.name, result, f"{r.duration_ms:.0f} ms", escape(r.outcome))
        Console().print(table)
    failed = [r.name for r in results if not r.ok]
    if failed:
        _fail(f"maintenance failed: {', '.join(failed)}")


# --- forgetting -----------------------------------------------------------------------------------

WRITE_TIMEOUT_S = 300.0  # a purge rebuilds the full-text index: large stores take a while


def _write(method: str, params: dict[str, Any]) -> Any:
    """Run a write method on the daemon; when none runs, on the store opened here.

    Without a daemon we take its instance lock ourselves, so none can start and
    write beside us while the store is open.
    """
    from nmemd import purge
    from nmemd.errors import AlreadyRunning, DaemonUnavailable

    try:
        purge.parse(method, params)  # a bad param is reported here, with its message
        if method == "purge":
            purge.validate(msgspec.convert(params["filter"], purge.PurgeFilter))
    except NmemError as exc:
        _fail(str(exc), 2)
    try:
        return control.ask(method, params, timeout=WRITE_TIMEOUT_S)
    except DaemonUnavailable:
        pass
    except NmemError as exc:
        _fail(str(exc))
    settings = _settings()
    if not os.path.exists(settings.db):
        _fail(f"no database yet at {settings.db}: nothing has been recorded")
    import anyio

    from nmemd.instance import InstanceLock, ensure_private_dir
    from nmemd.store import open_store

    async def run() -> Any:
        async with open_store(settings) as store:
            return await purge.call(store, method, params)

    try:
        ensure_private_dir(os.path.dirname(settings.lock))
        lock = InstanceLock(settings.lock)
        lock.acquire()
    except AlreadyRunning:
        _fail("nmemd is running but did not answer; try again (nmem status)")
    except (NmemError, OSError) as exc:
        _fail(str(exc))
    try:
        return anyio.run(run)
    except NmemError as exc:
        _fail(str(exc))
    finally:
        lock.release()


def _counts_line(c: dict[str, Any]) -> str:
    line = f"{c['observations']} observations"
    if c["pinned"]:
        line += f" ({c['pinned']} pinned)"
    line += f", {c['sessions']} sessions, {c['inbox']} waiting raw events"
    if c["events"]:
        line += f"; {c['events']} ledger entries kept, unlinked (they hold no content)"
    return line


def _ids_arg(values: list[str] | None, hint: str) -> list[int]:
    """Ids as typed; a bad one is one line and exit 2, not a usage box."""
    ids = []
    for value in values or []:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if not 1 <= n <= 2**63 - 1:
            _fail(f"{hint}: {value!r} is not an observation id (a positive integer)", 2)
        ids.append(n)
    return ids


@app.command()
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
        _fail("use either --project or --all-projects, not both", 2)
    id_list = _ids_arg(ids, "--id")
    for value in types or []:
        if value not in OBSERVATION_TYPES:
            _fail(f"--type: {value!r} is not one of: {', '.join(OBSERVATION_TYPES)}", 2)
    try:
        since_ts, until_ts = _time_arg(since, "--since"), _time_arg(until, "--until")
    except typer.BadParameter as exc:
        _fail(f"{exc.param_hint}: {exc.message}", 2)
    if all_projects:
        scope: str | None = ALL_PROJECTS
    elif project:
        scope = _scope(project, False)
    elif id_list or session:
        scope = ALL_PROJECTS  # ids and sessions name exactly what to remove
    else:
        scope = _scope(None, False)
    criteria = any([project, session, types, since_ts is not None, until_ts is not None, id_list, query])
    if not criteria:
        _fail("purge needs a filter: --project, --session, --type, --since, --until, --id or --query", 2)
    flt = {"project": scope, "session_id": _arg(session) if session else None, "types": types or [],
           "since": since_ts, "until": until_ts, "ids": id_list, "query": _arg(query) if query else None}  # fmt: skip
    counts = _write("purge", {"filter": flt, "dry_run": True})
    where = "every project" if scope in (None, ALL_PROJECTS) else scope
    err = Console(stderr=True, soft_wrap=True)
    total = counts["observations"] + counts["sessions"] + counts["inbox"]
    if dry_run or not total:
        if json_out:
            sys.stdout.write(msgspec.json.encode(counts).decode() + "\n")
        else:
            Console(soft_wrap=True).print(Text(f"would delete in {where}: {_counts_line(counts)}"))
        if not total and not dry_run:
            err.print(Text("nothing matches; nothing changed"))
        return
    if not yes:
        err.print(Text(f"will delete in {where}: {_counts_line(counts)}"))
        if not sys.stdin.isatty():
            _fail("not confirmed (no terminal): pass --yes to purge; nothing changed")
        if not typer.confirm("Delete them for good?", default=False):
            _fail("not confirmed; nothing changed")
    done = _write("purge", {"filter": flt, "dry_run": False})
    if json_out:
        sys.stdout.write(msgspec.json.encode(done).decode() + "\n")
    else:
        Console(soft_wrap=True).print(Text(f"deleted in {where}: {_counts_line(done)}"))
    if not done.get("checkpointed", True):
        _fail("deleted, but a reader kept the WAL from being truncated: run the purge again to clear it")


@app.command()
def forget(
    ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Observation ids, as search prints them.")],
    json_out: JsonOpt = False,
) -> None:
    """Delete these observations (pinned too) and every copy of their text."""
    id_list = list(dict.fromkeys(_ids_arg(ids, "ID")))
    done = _write("forget", {"ids": id_list})
    if json_out:
        sys.stdout.write(msgspec.json.encode(done).decode() + "\n")
    else:
        Console(soft_wrap=True).print(Text(f"forgot {_counts_line(done)}"))
    if done["observations"] < len(id_list):
        _fail(f"{len(id_list) - done['observations']} of the ids did not exist")


@app.command()
def pin(
    ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Observation ids, as search prints them.")],
    unpin: Annotated[bool, typer.Option("--unpin", help="Let retention remove them again.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Keep observations when retention cleans up (purge and forget still remove them)."""
    id_list = list(dict.fromkeys(_ids_arg(ids, "ID")))
    done = _write("pin", {"ids": id_list, "unpin": unpin})
    if json_out:
        sys.stdout.write(msgspec.json.encode(done).decode() + "\n")
    else:
        verb = "unpinned" if unpin else "pinned"
        Console(soft_wrap=True).print(Text(f"{verb} {len(id_list) - len(done['missing'])} observations"))
    if done["missing"]:
        _fail(f"no observation with id {', '.join(map(str, done['missing']))}")


def _settings_target(project_scope: bool) -> Path:
    from nmemd import install as inst

    if not project_scope:
        return inst.user_settings_path()
    root = project_root(os.getcwd()) or os.getcwd()
    return Path(root) / ".claude" / "settings.json"


ProjectScopeOpt = Annotated[
    bool, typer.Option("--project", help="Use this project's .claude/settings.json instead of the user's.")
]
NoMcpOpt = Annotated[bool, typer.Option("--no-mcp", help="Leave the MCP server registration alone.")]


@app.command()
def install(
    project_scope: ProjectScopeOpt = False,
    print_only: Annotated[bool, typer.Option("--print", help="Show what would be written; change nothing.")] = False,
    no_mcp: NoMcpOpt = False,
) -> None:
    """Add nmem's hooks to Claude Code's settings and register the nmem MCP server (idempotent)."""
    from nmemd import install as inst

    target = _settings_target(project_scope)
    try:
        settings = inst.with_hooks(inst.load(target), target, inst.hook_command())
        state_path = inst.user_state_path()
        state = None if no_mcp else inst.with_mcp(inst.load(state_path), state_path, inst.mcp_command())
        if print_only:
            sys.stdout.write(f"# {target}\n{inst.render(settings)}")
            if state is not None:
                sys.stdout.write(f"# {state_path}: mcpServers.{inst.MCP_NAME}\n")
                sys.stdout.write(inst.render({"mcpServers": {inst.MCP_NAME: state["mcpServers"][inst.MCP_NAME]}}))
            return
        hooks_written = inst.write(target, settings)
        mcp_written = inst.write(state_path, state) if state is not None else None
    except NmemError as exc:
        _fail(str(exc))

    def outcome(w: inst.Written) -> str:
        if not w.changed:
            return "already up to date"
        return f"updated, backup {w.backup.name}" if w.backup else "created"

    console = Console()
    console.print(f"hooks: {target} ({outcome(hooks_written)})", highlight=False)
    if mcp_written is not None:
        console.print(f"MCP server '{inst.MCP_NAME}': {state_path} ({outcome(mcp_written)})", highlight=False)


@app.command()
def uninstall(project_scope: ProjectScopeOpt = False, no_mcp: NoMcpOpt = False) -> None:
    """Remove exactly the hooks and MCP registration that `nmem install` added."""
    from nmemd import install as inst

    target = _settings_target(project_scope)
    try:
        removed = target.exists() and inst.write(target, inst.without_hooks(inst.load(target), target)).changed
        state_path = inst.user_state_path()
        if not no_mcp and state_path.exists():
            inst.write(state_path, inst.without_mcp(inst.load(state_path), state_path))
    except NmemError as exc:
        _fail(str(exc))
    Console().print(f"hooks removed from {target}" if removed else f"no nmem hooks in {target}", highlight=False)


config_app = typer.Typer(no_args_is_help=True, help="Inspect nmem's configuration.")
app.add_typer(config_app, name="config")


@config_app.command("show")
def config_show(json_out: JsonOpt = False) -> None:
    """Print the effective configuration and where each value came from."""
    try:
        settings, sources = config.load_with_sources()
    except NmemError as exc:
        _fail(str(exc))
    values = msgspec.to_builtins(settings)
    if json_out:
        rows = {k: {"value": v, "source": sources.get(k, "default")} for k, v in values.items()}
        sys.stdout.write(msgspec.json.encode(rows).decode() + "\n")
        return
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("setting", "value", "source"):
        table.add_column(column)
    for key, value in values.items():
        table.add_row(key, _cell(str(value)), sources.get(key, "default"))
    Console().print(table)


@daemon_app.command("start")
def daemon_start() -> None:
    """Start nmemd in the background (no-op when it already runs)."""
    settings = _settings()
    try:
        facts = control.start(settings)
    except NmemError as exc:
        _fail(str(exc))
    Console().print(f"nmemd running (pid {facts.pid}) on {facts.socket}", highlight=False)


@daemon_app.command("stop")
def daemon_stop() -> None:
    """Stop nmemd after it commits everything it received."""
    settings = _settings()
    try:
        pid = control.stop(settings)
    except NmemError as exc:
        _fail(str(exc))
    Console().print("nmemd was not running" if pid is None else f"nmemd (pid {pid}) stopped", highlight=False)


@daemon_app.command("restart")
def daemon_restart() -> None:
    """Stop nmemd, then start it again."""
    settings = _settings()
    try:
        control.stop(settings)
        facts = control.start(settings)
    except NmemError as exc:
        _fail(str(exc))
    Console().print(f"nmemd restarted (pid {facts.pid})", highlight=False)


@service_app.command("install")
def service_install() -> None:
    """Install and enable the user service so the OS starts nmemd on the first connection."""
    from nmemd import service

    try:
        done = service.install()
    except NmemError as exc:
        _fail(str(exc))
    console = Console()
    if done.stopped_pid is not None:
        console.print(f"stopped the hand-started nmemd (pid {done.stopped_pid})", highlight=False)
    for path in done.files:
        console.print(f"wrote {path}", highlight=False)
    console.print(f"{done.manager} listens on {done.socket} and starts {done.nmemd} on demand", highlight=False)


@service_app.command("uninstall")
def service_uninstall() -> None:
    """Stop and disable the user service and remove the files `nmem service install` wrote."""
    from nmemd import service

    try:
        done = service.uninstall()
    except NmemError as exc:
        _fail(str(exc))
    console = Console()
    for path in done.removed:
        console.print(f"removed {path}", highlight=False)
    console.print(f"{done.manager}: nmem service uninstalled", highlight=False)


@service_app.command("status")
def service_status(json_out: JsonOpt = False) -> None:
    """Show whether the user service is installed, enabled, listening and running."""
    from nmemd import service

    try:
        st = service.status()
    except NmemError as exc:
        _fail(str(exc))
    if json_out:
        sys.stdout.write(msgspec.json.encode(st).decode() + "\n")
        return
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("manager", st.manager)
    table.add_row("installed", ", ".join(st.files) if st.installed else "no")
    table.add_row("enabled", st.enabled)
    table.add_row("socket", f"{st.socket} ({st.socket_state})")
    table.add_row("daemon", st.daemon_state)
    Console().print(table)
