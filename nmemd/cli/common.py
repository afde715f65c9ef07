"""What every `nmem` command shares: settings, errors, options, formatting and the read transport."""

import datetime as dt
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

import msgspec
import typer

from nmemd import config
from nmemd.capture.project import project_root
from nmemd.cli import ui
from nmemd.control import control
from nmemd.errors import NmemError, QueryError
from nmemd.recall import queries
from nmemd.recall.queries import ALL_PROJECTS, MAX_LIMIT

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for programs instead of a table.")]
ProjectOpt = Annotated[
    str | None,
    typer.Option(
        "--project",
        "-p",
        help="A project's folder, name or path suffix (default: the git top-level of the current directory).",
    ),
]
AllOpt = Annotated[bool, typer.Option("--all", "-a", help="Every project, not only the current one.")]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", min=1, max=MAX_LIMIT, help="At most this many results.")]


def load_settings(*, lenient: bool = False) -> config.Settings:
    if lenient:
        return load_lenient()[0]
    try:
        return config.load()
    except NmemError as exc:
        fail(str(exc))


def load_lenient() -> tuple[config.Settings, list[str]]:
    """The settings for commands that must work whatever the config holds (status, daemon stop,
    doctor, config show): what cannot be used is left out, and said on stderr (issue #31, item 3)."""
    checked = config.load_checked()
    err = ui.Console(stderr=True, soft_wrap=True)
    for problem in checked.problems:
        err.print(f"[yellow]warning:[/yellow] {ui.escape(' '.join(problem.split()))}", highlight=False)
    return checked.settings, checked.problems


def fail(message: str, code: int = 1) -> NoReturn:
    """One line on stderr (never wrapped, never read as markup), then exit."""
    from nmemd.printable import printable_line

    line = printable_line(message)
    ui.Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {ui.escape(line)}", highlight=False)
    raise typer.Exit(code)


def confirmed(question: str, yes: bool, what: str) -> None:
    """Go on when `--yes` was given, or when a person at a terminal says yes; else say why not and exit 1.
    Without a terminal there is nobody to ask: `--yes` is needed (a script says what it means)."""
    if yes:
        return
    if not sys.stdin.isatty():
        fail(f"not confirmed (no terminal): pass --yes to {what}; nothing changed")
    if not typer.confirm(question, default=False):
        fail("not confirmed; nothing changed")


def observation_id(value: str) -> int | None:
    """An observation id as typed (`42` or `#42`, as search prints it); None when it is not one."""
    try:
        n = int(value.removeprefix("#"))
    except ValueError:
        return None
    return n if 1 <= n <= 2**63 - 1 else None


def bad_id(value: str) -> str:
    return f"{value!r} is not an observation id (a positive integer, as search prints it)"


def ids_arg(values: list[str] | None, hint: str) -> list[int]:
    """Observation ids as typed; a bad one is one line and exit 2, not a usage box."""
    ids = []
    for value in values or []:
        n = observation_id(value)
        if n is None:
            fail(f"{hint}: {bad_id(value)}", 2)
        ids.append(n)
    return ids


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _local(ts: float, fmt: str) -> str:
    """`ts` as local time; a time datetime cannot show (year 1 or 10000, NaN) as `?`, never a traceback."""
    try:
        return dt.datetime.fromtimestamp(ts).strftime(fmt)
    except (ValueError, OverflowError, OSError):
        return "?"


def when(ts: float | None) -> str:
    if not ts:
        return "never"
    return _local(ts, "%Y-%m-%d %H:%M:%S")


# --- reading: one path, two transports -------------------------------------------------------------


def query(method: str, params: dict[str, Any]) -> Any:
    """`control.read`: the daemon's answer, or the same query run on a read-only connection; every
    string without control characters (a teammate's row never drives the terminal)."""
    from nmemd.printable import deep

    return deep(control.read(load_settings(), method, params))


def read_as(method: str, params: dict[str, Any], result_type: Any) -> Any:
    """`query`, typed; every NmemError becomes one line on stderr and exit 1."""
    try:
        return msgspec.convert(query(method, params), result_type)
    except NmemError as exc:
        fail(str(exc))
    except msgspec.ValidationError as exc:
        fail(f"unexpected {method} reply: {exc}")


def clean_arg(text: str) -> str:
    """argv undecodable as UTF-8 arrives as lone surrogates; make it valid text (U+FFFD) before use."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "replace")
    return text


def resolve_scope(project: str | None, all_projects: bool) -> str | None:
    """The project filter: --all, --project (a directory maps to its git top-level), else the cwd's project."""
    if all_projects and project:
        raise typer.BadParameter("use either --project or --all, not both", param_hint="'--all'")
    if all_projects:
        return ALL_PROJECTS
    if project:
        project = clean_arg(project)
        if project.strip() == ALL_PROJECTS:
            return ALL_PROJECTS
        if os.path.isdir(project) or os.path.isabs(project):
            return project_root(os.path.abspath(project))
        found: dict[str, str] = read_as("project", {"name": project}, dict[str, str])  # a name, or a suffix
        return found["project"]
    try:
        return project_root(os.getcwd())
    except OSError:  # the current directory was removed
        return None


def time_arg(value: str | None, hint: str) -> float | None:
    """`30m`, `2h`, `7d`, `1w` ago, or an ISO date/time (local time): `queries.when`, as a usage error."""
    if value is None:
        return None
    try:
        return queries.when(value)
    except QueryError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from None


# --- printing -------------------------------------------------------------------------------------


def json_lines(items: Iterable[msgspec.Struct]) -> None:
    """One JSON object per line; a reader that stops early (`| head`) is not an error."""
    try:
        for item in items:
            sys.stdout.buffer.write(msgspec.json.encode(item) + b"\n")
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def out() -> "ui.Console":
    """Standard output: rich on a terminal; in a pipe or a file, lines are never wrapped (a path stays
    whole) and carry no colour codes."""
    console = ui.Console()
    return console if console.is_terminal else ui.Console(soft_wrap=True, no_color=True, highlight=False)


PLAIN_PAD_MAX = 40


def print_table(table: "ui.Table", console: "ui.Console | None" = None) -> None:
    """A table on a terminal; elsewhere its rows as plain lines, every cell whole, columns aligned."""
    console = console or out()
    if console.is_terminal:
        console.print(table)
        return
    columns = [[_plain(c) for c in column.cells] for column in table.columns]
    rows = [list(r) for r in zip(*columns, strict=True)]
    if table.show_header:
        rows.insert(0, [_plain(column.header) for column in table.columns])
    for line in _aligned(rows):
        console.out(line, highlight=False)


def _aligned(rows: list[list[str]]) -> list[str]:
    """Rows of plain cells as lines; aligned up to a point: one long cell (a path, a list) must not
    push every other row far right."""
    if not rows:
        return []
    widths = [min(max(len(r[i]) for r in rows), PLAIN_PAD_MAX) for i in range(len(rows[0]) - 1)]
    return ["  ".join([c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]).rstrip() for r in rows]


@dataclass
class Cell:
    """Text in parts, each with a rich style; `one_line`: never wrapped, cut with … on a terminal."""

    parts: list[tuple[str, str]]
    one_line: bool = True

    def append(self, text: str, style: str = "") -> None:
        self.parts.append((text, style))

    @property
    def plain(self) -> str:
        return "".join(text for text, _ in self.parts)


class Grid:
    """A table kept as plain text with styles: rich draws it on a terminal; in a pipe or a file it
    is printed as aligned lines (as `print_table` prints a rich table there) without importing rich,
    most of a command's start outside a terminal (~40 ms)."""

    def __init__(self, *, show_header: bool = True, header_style: str = "") -> None:
        self.show_header = show_header
        self.header_style = header_style
        self.columns: list[tuple[str, dict[str, Any]]] = []
        self.rows: list[tuple[str | Cell, ...]] = []

    def add_column(self, header: str = "", **options: Any) -> None:
        """`options`: rich's Table.add_column (style, justify, no_wrap, max_width, ...)."""
        self.columns.append((header, options))

    def add_row(self, *cells: str | Cell) -> None:
        """Cells: plain text (never read as markup) or a `Cell`."""
        self.rows.append(cells)

    def print(self) -> None:
        if sys.stdout.isatty():
            print_table(self.table())
            return
        rows = [[_plain_cell(c) for c in row] for row in self.rows]
        if self.show_header:
            rows.insert(0, [header for header, _ in self.columns])
        try:
            sys.stdout.write("".join(line + "\n" for line in _aligned(rows)))
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    def table(self) -> "ui.Table":
        table = ui.Table(show_header=self.show_header, box=None, pad_edge=False, header_style=self.header_style)
        for header, options in self.columns:
            table.add_column(header, **options)
        for row in self.rows:
            table.add_row(*(_rich_cell(c) for c in row))
        return table


def one_line(text: str, style: str = "") -> Cell:
    """`cell` for a `Grid`: whitespace folded, one line, … at the end when the column is narrower."""
    return Cell([(" ".join(text.split()), style)])


def _plain_cell(value: str | Cell) -> str:
    text = value.plain if isinstance(value, Cell) else value
    return " · ".join(part.strip() for part in text.split("\n") if part.strip())


def _rich_cell(value: str | Cell) -> "ui.Text":
    if isinstance(value, str):
        return ui.Text(value)
    text = ui.Text(no_wrap=value.one_line, overflow="ellipsis" if value.one_line else "fold")
    for part, style in value.parts:
        text.append(part, style=style)
    return text


def _plain(value: object) -> str:
    text = (
        value.plain
        if isinstance(value, ui.Text)
        else ui.Text.from_markup(value).plain
        if isinstance(value, str)
        else ""
    )
    return " · ".join(part.strip() for part in text.split("\n") if part.strip())


def unique_prefixes(ids: list[str], shortest: int = 8) -> dict[str, str]:
    """Each id cut to the fewest characters (at least `shortest`) that still tell it from the others."""
    out: dict[str, str] = {}
    for i in ids:
        n = min(shortest, len(i))
        while n < len(i) and any(o != i and o.startswith(i[:n]) for o in ids):
            n += 1
        out[i] = i[:n]
    return out


def cell(text: str, style: str = "") -> "ui.Text":
    """A table cell that stays on one line and ends in … when the column is narrower."""
    return ui.Text(" ".join(text.split()), style=style, no_wrap=True, overflow="ellipsis")
