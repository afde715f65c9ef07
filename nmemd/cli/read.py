"""Reading commands: status, search, show, timeline, sessions and context."""

import os
import sys
import time
from typing import Annotated

import msgspec
import typer

from nmem_client import malformed
from nmemd import registry
from nmemd.capture.project import short_name
from nmemd.cli import ui
from nmemd.cli.common import (
    AllOpt,
    Cell,
    Grid,
    JsonOpt,
    LimitOpt,
    ProjectOpt,
    cell,
    clean_arg,
    fail,
    human_bytes,
    json_lines,
    load_lenient,
    load_settings,
    one_line,
    out,
    print_table,
    read_as,
    resolve_scope,
    time_arg,
    unique_prefixes,
    when,
)
from nmemd.control import control
from nmemd.daemon.status import Status, capture_problems
from nmemd.model import CLAUDE_CODE, OBSERVATION_TYPES
from nmemd.recall import snippets
from nmemd.recall.handoff import LABELS, Handoff, refs
from nmemd.recall.queries import ALL_PROJECTS, MAX_LIMIT, Detail, HandoffLine, Hit, SessionRow
from nmemd.recall.vocabulary import try_instead
from nmemd.wording import ago, plural


def _print_status(st: Status) -> None:
    d, db = st.daemon, st.database
    grid = Grid(show_header=False)
    grid.add_column(style="bold")
    grid.add_column()
    state = Cell([("not running", "red")], one_line=False)
    if not d.running and d.note:  # not answering (frozen), or another store's daemon on the socket
        state = Cell([(d.note, "red")], one_line=False)
    if d.running:
        state = Cell([("running", "green"), (f" (pid {d.pid}, started by {d.started_by})", "")], one_line=False)
    grid.add_row("daemon", state)
    grid.add_row("socket", d.socket)
    if d.running:
        grid.add_row("since", when(d.started_at))
        connections = plural(d.connections, "connection")
        grid.add_row("queue", f"{d.queued} queued, {connections}, {d.committed} stored since start")
        if d.worker is not None:
            w = d.worker
            grid.add_row(
                "extraction",
                f"worker pid {w.pid}, {plural(w.extracted, 'event')}, {plural(w.restarts, 'restart')}"
                if w.ready
                else Cell([("in the event loop", "yellow"), (" (the worker is starting)", "")], one_line=False),
            )
        if d.last_error:
            grid.add_row("last error", Cell([(d.last_error, "red")], one_line=False))
        for problem in d.config_problems:
            grid.add_row("config", Cell([(f"left out: {problem}", "red")], one_line=False))
    grid.add_row("database", db.path if db.exists else f"{db.path} (not created yet)")
    grid.add_row("size", f"{human_bytes(db.size_bytes)} + WAL {human_bytes(db.wal_bytes)}")
    stored = [plural(db.observations, "observation"), plural(db.events, "event"), plural(db.sessions, "session")]
    grid.add_row("stored", "{} from {} in {}".format(*stored))
    grid.add_row("by type", ", ".join(f"{k} {v}" for k, v in db.by_type.items()) or "-")
    grid.add_row("last event", when(db.last_event_at))
    grid.add_row("backlog", f"{db.inbox_backlog} in inbox, {db.spool_backlog} spooled")
    if st.malformed_inputs:
        grid.add_row("bad input", f"{plural(st.malformed_inputs, 'hook input')} not usable, last {st.malformed_last}")
    for problem in st.problems:
        grid.add_row("problem", Cell([(problem, "red")], one_line=False))
    if db.jobs:
        grid.add_row("maintenance", "\n".join(f"{j.name}: {when(j.last_run)}, {j.outcome or '-'}" for j in db.jobs))
    grid.print()


AgentOpt = Annotated[
    str | None,
    typer.Option("--agent", help=f"Only this coding agent's: {', '.join(registry.names())} (claude for short)."),
]


def _check_types(values: list[str] | None) -> list[str] | None:
    for value in values or []:
        if value not in OBSERVATION_TYPES:
            raise typer.BadParameter(f"{value!r} is not one of: {', '.join(OBSERVATION_TYPES)}")
    return values


# --- printing -------------------------------------------------------------------------------------


def _rel(path: str | None, project: str | None) -> str:
    if not path:
        return ""
    if project and path.startswith(project.rstrip("/") + "/"):
        return path[len(project.rstrip("/")) + 1 :]
    return path


def _tail(text: str, width: int) -> str:
    """The end of a long path is the part that tells files apart."""
    return text if len(text) <= width else "…" + text[-(width - 1) :]


def _snippet_into(cell: Cell, hit: Hit, bold: bool, marks: bool) -> None:
    """The hit's snippet on a line of its own: matched words in bold on a terminal with colour; with
    `marks` (`--marks`) marked ⟦word⟧, a ⟦ or ⟧ of the text itself doubled, so stored text never reads as
    a mark; elsewhere (a pipe, a file) plain text, as `rg` and `ls --color=auto` give it."""
    text = hit.snippet or ""
    if not bold:
        cell.append("\n" + (snippets.marked(text, hit.spans) if marks else text), style="dim")
        return
    cell.append("\n", style="dim")
    for piece, matched in snippets.parts(text, hit.spans):
        cell.append(piece, style="bold" if matched else "dim")


def _hits_grid(hits: list[Hit], *, show_project: bool, anchor: int | None = None, marks: bool = False) -> Grid:
    now = time.time()
    # On a terminal the title gets what the path leaves; elsewhere every cell is printed whole.
    path_width = max(16, ui.Console().width // 4) if sys.stdout.isatty() else 100_000
    bold = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    marks = (marks or sys.stdout.isatty()) and not bold  # a terminal without colour (NO_COLOR) shows them so
    plain = snippets.escaped if marks else str  # where matches are ⟦marked⟧, a stored ⟦ is doubled everywhere
    grid = Grid(header_style="bold")
    grid.add_column("id", justify="right", style="cyan", no_wrap=True)
    grid.add_column("when", no_wrap=True)
    grid.add_column("type", no_wrap=True)
    if show_project:
        grid.add_column("project", max_width=max(12, path_width // 2))
    by_team = any(hit.author for hit in hits)
    if by_team:
        grid.add_column("by", no_wrap=True)
    grid.add_column("title", min_width=20)  # cells are one-line Texts: the column shrinks, text ends in …
    grid.add_column("path", max_width=path_width)
    for hit in hits:
        title = one_line(plain(hit.title), style="bold" if hit.id == anchor else "")
        if hit.count > 1:
            title.append(f" (x{hit.count})", style="dim")
        if hit.similar:
            title.append(f" (+{hit.similar} similar)", style="dim")
        if hit.snippet and hit.snippet.strip("… ") not in hit.title:
            _snippet_into(title, hit, bold, marks)
        row: list[str | Cell] = [str(hit.id) if hit.id else "server", ago(hit.ts, now), hit.type]
        if show_project:
            row.append(one_line(short_name(hit.project) if hit.project else "-"))
        if by_team:
            row.append(
                f"{hit.author}{f' ({hit.agent})' if hit.agent and hit.agent != CLAUDE_CODE else ''}"
                if hit.author
                else "you"
            )
        row += [title, one_line(plain(_tail(_rel(hit.file_path, hit.project), path_width)))]
        grid.add_row(*row)
    return grid


def _print_detail(d: Detail, console: "ui.Console") -> None:
    head = ui.Text(f"#{d.id} ", style="bold cyan")
    head.append(f"{d.type}  {when(d.ts)} ({ago(d.ts, time.time())})", style="dim")
    console.print(head)
    console.print(ui.Text(d.title, style="bold"))
    facts = ui.Table(show_header=False, box=None, pad_edge=False)
    facts.add_column(style="dim", no_wrap=True)
    facts.add_column(overflow="fold")
    for label, value in (
        ("project", d.project),
        ("session", d.session_id),
        ("event", d.hook_event),
        ("tool", d.tool_name),
        ("file", d.file_path),
        ("command", None if d.command and d.command in d.title else d.command),  # a command's title is `$ cmd`
        ("agent", d.agent),
        ("subagent", d.agent_id),
        ("count", f"{d.count} (last {when(d.last_ts)})" if d.count > 1 else None),
    ):
        if value:
            facts.add_row(label, ui.Text(value))
    print_table(facts, console)
    if d.content:
        console.print(ui.Text(d.content))
    console.print()


# --- commands -------------------------------------------------------------------------------------


def status(json_out: JsonOpt = False) -> None:
    """Show whether the daemon runs, where the data is and what it holds."""
    settings, problems = load_lenient()  # a corrupt config must not hide whether the daemon runs
    st = control.status(settings)
    st.problems = capture_problems(settings.home, settings.socket)
    st.malformed_inputs, last = malformed.counted(settings.home)
    st.malformed_last = last or None
    if json_out:
        sys.stdout.write(msgspec.json.encode(st).decode() + "\n")
    else:
        _print_status(st)
    if problems or st.daemon.config_problems or st.problems:
        raise typer.Exit(1)


def search(
    query: Annotated[
        list[str],
        typer.Argument(
            metavar="QUERY",
            help='Words to find: a row needs one of them, rows holding more of them come first; "an exact phrase";'
            " prefix*.",
        ),
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
    agent: AgentOpt = None,
    author: Annotated[
        str | None, typer.Option("--author", help="Only this teammate's (team memory; your own name: yours).")
    ] = None,
    mine: Annotated[bool, typer.Option("--mine", help="Only your own, no teammate's (team memory).")] = False,
    limit: LimitOpt = 20,
    json_out: JsonOpt = False,
    marks: Annotated[
        bool,
        typer.Option(
            "--marks",
            help="Where the output is not a terminal, mark the matched words ⟦like this⟧ (a pipe or file gets"
            " plain text; a terminal gets them in bold).",
        ),
    ] = False,
) -> None:
    """Find observations by words, identifiers, paths, error text or commands, best first."""
    scope = resolve_scope(project, all_projects)
    params = {
        "query": clean_arg(" ".join(query)),
        "project": scope,
        "types": types or [],
        "session_id": clean_arg(session) if session else None,
        "file": clean_arg(file) if file else None,
        "since": time_arg(since, "'--since'"),
        "until": time_arg(until, "'--until'"),
        "agent": clean_arg(agent) if agent else None,
        "author": clean_arg(author) if author else None,
        "mine": mine,
        "limit": limit,
        "team": True,
    }
    found = read_as("search", params, _TeamHits)
    hits: list[Hit] = found.hits
    for note in found.notes:
        sys.stderr.write(note + "\n")
    if json_out:
        json_lines(hits)
    elif hits:
        _hits_grid(hits, show_project=scope in (None, ALL_PROJECTS), marks=marks).print()
    else:
        every = scope in (None, ALL_PROJECTS)
        tip = try_instead(scoped=not every, typed=bool(types))
        sys.stderr.write(f"nothing found in {'any project' if every else scope}; {tip}\n")


class _TeamHits(msgspec.Struct):
    hits: list[Hit]
    notes: list[str] = []


def show(
    ids: Annotated[
        list[str],
        typer.Argument(
            metavar="ID...",
            help="One or more observation ids, as search prints them; or a session id or its prefix"
            " (s:ab12cd34): its handoff.",
        ),
    ],
    json_out: JsonOpt = False,
) -> None:
    """Print everything stored about the given observations, or a session's handoff."""
    numbers = [int(i) for i in ids if i.strip().isdigit()]
    sessions = [clean_arg(i.strip().removeprefix("s:")) for i in ids if not i.strip().isdigit()]
    if any(n < 1 for n in numbers):
        raise typer.BadParameter("an observation id is 1 or more", param_hint="'ID'")
    handoffs: list[Handoff] = [read_as("handoff", {"session_id": sid}, Handoff) for sid in sessions]
    details: list[Detail] = read_as("show", {"ids": numbers}, list[Detail]) if numbers else []
    if json_out:
        json_lines([*handoffs, *details])
    else:
        console = out()
        for h in handoffs:
            _print_handoff(h, console)
        for d in details:
            _print_detail(d, console)
    missing = [i for i in dict.fromkeys(numbers) if i not in {d.id for d in details}]
    if missing:
        fail(f"no observation with id {', '.join(map(str, missing))}")


def _print_handoff(h: Handoff, console: "ui.Console") -> None:
    head = ui.Text(f"session {h.session_id} ", style="bold cyan")
    head.append(f"{h.agent}  {h.project or 'no project'}", style="dim")
    console.print(head)
    for line in h.lines or [HandoffLine(kind="none", text="nothing recorded worth handing on", ids=[])]:
        _print_handoff_line(line, console)
    console.print()


def _print_handoff_line(line: HandoffLine, console: "ui.Console", indent: str = "") -> None:
    text = ui.Text(indent + LABELS.get(line.kind, line.kind.capitalize()) + ": ", style="bold")
    text.append(line.text)
    if line.ids:
        text.append(f" ({refs(line.ids)})", style="cyan")
    console.print(text, soft_wrap=not console.is_terminal)


def timeline(
    anchor: Annotated[int, typer.Argument(metavar="ID", min=1, help="The observation to center on.")],
    before: Annotated[int, typer.Option("--before", "-B", min=0, max=MAX_LIMIT, help="Observations before.")] = 5,
    after: Annotated[int, typer.Option("--after", "-A", min=0, max=MAX_LIMIT, help="Observations after.")] = 5,
    json_out: JsonOpt = False,
) -> None:
    """Show what happened in the same session just before and after one observation."""
    hits: list[Hit] = read_as("timeline", {"id": anchor, "before": before, "after": after}, list[Hit])
    if json_out:
        json_lines(hits)
    else:
        _hits_grid(hits, show_project=False, anchor=anchor).print()


def sessions(
    project: ProjectOpt = None,
    all_projects: AllOpt = False,
    agent: AgentOpt = None,
    limit: LimitOpt = 10,
    handoff: Annotated[
        bool, typer.Option("--handoff", "-H", help="Each session's handoff under it (asked, changed, fixed, left).")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """List recent sessions with their agent and first prompt, newest first (--handoff: with their handoffs)."""
    scope = resolve_scope(project, all_projects)
    params = {"project": scope, "limit": limit, "agent": clean_arg(agent) if agent else None,
              "handoff": handoff or json_out}  # fmt: skip
    rows: list[SessionRow] = read_as("sessions", params, list[SessionRow])
    if json_out:
        json_lines(rows)
        return
    if handoff:
        console = out()
        for r in rows:
            _print_handoff(Handoff(session_id=r.session_id, project=r.project, agent=r.agent, lines=r.handoff), console)
        return
    now = time.time()
    table = ui.Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("session", style="cyan", no_wrap=True)
    table.add_column("last", no_wrap=True)
    if scope in (None, ALL_PROJECTS):
        table.add_column("project", max_width=20)
    table.add_column("agent", no_wrap=True)
    table.add_column("events", justify="right")
    table.add_column("about", min_width=20)
    short = unique_prefixes([r.session_id for r in rows]) if ui.Console().is_terminal else {}
    for r in rows:
        row: list[ui.Text | str] = [
            ui.Text(short.get(r.session_id, r.session_id)),
            ago(r.last_event_at, now, unknown="-"),
        ]
        if scope in (None, ALL_PROJECTS):
            row.append(cell(short_name(r.project) if r.project else "-"))
        about = r.first_prompt or (r.summary or "").strip().split("\n", 1)[0]
        quiet = "(started, no activity)" if r.event_count <= 2 else "(no prompt)"  # SessionStart, SessionEnd
        row += [r.agent, str(r.event_count), cell(about) if about.strip() else cell(quiet, style="dim")]
        table.add_row(*row)
    print_table(table)


def context(project: ProjectOpt = None, json_out: JsonOpt = False) -> None:
    """Print the context SessionStart would inject for a project (default: this directory's)."""
    scope = resolve_scope(project, False)
    if not scope:
        fail("no project: run inside a project directory or pass --project")
    budget = load_settings().context_budget
    reply = read_as("context", {"project": scope, "budget": budget}, dict[str, str])
    if json_out:
        sys.stdout.write(msgspec.json.encode(reply).decode() + "\n")
    elif reply["context"]:
        sys.stdout.write(reply["context"] + "\n")
    else:
        ui.Console(stderr=True).print(f"nothing recorded yet for {reply['project']}", highlight=False)
