"""`nmem import-transcripts`: backfill memory from every agent's session history (the registry's
`AgentSpec.history`), with progress people can watch."""

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Annotated, Any, Final

import msgspec
import typer

from nmem_client import paths
from nmemd import registry
from nmemd.cli import ui
from nmemd.cli.common import clean_arg, fail, human_bytes, load_settings
from nmemd.control import control
from nmemd.errors import NmemError
from nmemd.wording import plural

if TYPE_CHECKING:  # the importer's modules load when a command runs, not with `nmem --help`
    from nmemd.history.importer import Progress, Summary

PLAIN_EVERY_S = 5.0  # a progress line this often when stderr is not a terminal
EXIT_INTERRUPTED = 130


def _ask(method: str, params: dict[str, Any], timeout: float) -> Any:
    return control.ask(method, params, timeout=timeout)


def _rate(p: "Progress") -> str:
    elapsed = max(time.monotonic() - p.started, 1e-6)
    return f"{p.bytes_done / elapsed / 1e6:.1f} MB/s"


class _Display:
    """A rich progress bar on a terminal, a plain line every few seconds otherwise; both on stderr."""

    def __init__(self, progress: "Progress", tty: bool):
        self.progress = progress
        self.tty = tty
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="nmem-import-progress", daemon=True)

    def __enter__(self) -> "_Display":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(2.0)

    def _run(self) -> None:
        if self.tty:
            self._bar()
        else:
            while not self.done.wait(PLAIN_EVERY_S):
                p = self.progress
                sys.stderr.write(
                    f"import: {p.files_done}/{plural(p.files_total, 'file')}, {human_bytes(p.bytes_done)}"
                    f" of {human_bytes(p.bytes_total)}, {plural(p.events, 'event')}, {_rate(p)}\n"
                )
                sys.stderr.flush()

    def _bar(self) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        p = self.progress
        columns = (
            TextColumn("importing"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
            TextColumn("{task.fields[files]} files, {task.fields[events]} events, {task.fields[rate]}"),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=ui.Console(stderr=True), transient=True) as bar:
            task = bar.add_task("import", total=max(p.bytes_total, 1), files="", events=0, rate="")
            while True:
                stop = self.done.wait(0.2)
                bar.update(
                    task,
                    total=max(p.bytes_total, 1),
                    completed=p.bytes_done,
                    files=f"{p.files_done}/{p.files_total}",
                    events=f"{p.events:,}",
                    rate=_rate(p),
                )
                if stop:
                    return


def _report(summary: "Summary", json_out: bool) -> None:
    if json_out:
        sys.stdout.write(msgspec.json.encode(summary).decode() + "\n")
        sys.stdout.flush()
        return
    s = summary
    rate = s.bytes / max(s.seconds, 1e-6) / 1e6
    console = ui.Console(soft_wrap=True, highlight=False)
    head = "interrupted: " if s.interrupted else ""
    console.print(
        f"{head}{plural(s.events_new, 'new event', grouped=True)} ({s.events_sent:,} sent:"
        f" {plural(s.prompts, 'prompt', grouped=True)}, {plural(s.tool_calls, 'tool call', grouped=True)},"
        f" {plural(s.errors, 'error', grouped=True)}, {plural(s.compactions, 'compaction', grouped=True)},"
        f" {plural(s.replies, 'reply', 'replies', grouped=True)}, {plural(s.said, 'passage', grouped=True)} of"
        f" the agent's own words) from {s.files_read} of {plural(s.files, 'file')}"
        f" ({s.files_unchanged} unchanged), {human_bytes(s.bytes)} in {s.seconds:.1f} s ({rate:.1f} MB/s)"
    )
    for bad in s.bad_files:
        console.print(f"  {ui.escape(bad['path'])}: {ui.escape(bad['reason'])}")
    if s.interrupted:
        console.print("what was committed is recorded; run the command again to resume")


def run_import(paths: list[str] | None, *, json_out: bool = False) -> int:
    """Import `paths` (default: every agent's history on this machine, `importer.default_roots`); return
    the exit code."""
    from nmemd.history.importer import Importer, Progress, Summary, default_roots

    settings = load_settings()
    if paths:
        missing = [p for p in paths if not os.path.lexists(p)]
        if missing:
            fail(f"{missing[0]}: no such file or directory", 2)
        targets = [os.path.abspath(p) for p in paths]
    else:
        targets = default_roots()
        if not targets:
            if json_out:
                _report(Summary(), json_out)
            else:
                sources = [(s.label, s.history()) for s in registry.AGENTS.values() if s.history is not None]
                looked = ", ".join(f"{label}'s" + (f" at {h.where()}" if h.where else "") for label, h in sources)
                ui.Console(stderr=True, highlight=False).print(
                    f"no history found ({ui.escape(looked)}): nothing to import"
                )
            return 0
    try:
        control.start(settings, on_demand=True)
    except NmemError as exc:
        fail(str(exc))
    progress = Progress()
    importer = Importer(_ask, progress)
    error: NmemError | None = None
    try:
        with _Display(progress, sys.stderr.isatty()):
            summary = importer.run(targets)
    except NmemError as exc:
        summary, error = importer.summary, exc
    except KeyboardInterrupt:  # before the first batch (finding files, loading their state)
        summary = importer.summary
        summary.interrupted = True
    _report(summary, json_out)
    if error is not None:
        fail(f"import stopped: {error}")
    return EXIT_INTERRUPTED if summary.interrupted else 0


# The agents whose history it reads, in the registry's order (the built-in ones: the help is written once).
_HISTORIES: Final = [spec for spec in registry.AGENTS.values() if spec.history is not None]


def _labels() -> str:
    labels = [spec.label for spec in _HISTORIES]
    return ", ".join(labels[:-1]) + " and " + labels[-1] if len(labels) > 1 else "".join(labels)


def import_transcripts(
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[PATH]...",
            help="Transcript files or folders (default: every agent's history here: "
            + ", ".join(spec.history_at for spec in _HISTORIES if spec.history_at)
            + ").",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON summary at the end.")] = False,
) -> None:
    """Import every coding agent's past sessions into memory; a second run imports only what is new.

    It reads the history of AGENTS.

    \b
    Example:
        nmem import-transcripts                      # every agent's history on this machine
        nmem import-transcripts ~/.claude/projects/-home-me-app --json
    """
    code = run_import([clean_arg(p) for p in paths] if paths else None, json_out=json_out)
    if code:
        raise typer.Exit(code)


import_transcripts.__doc__ = (import_transcripts.__doc__ or "").replace("AGENTS", _labels(), 1)


OFFERED_MARKER = "import-offered"  # in NMEM_HOME: `nmem install` asks about the import once


def offer_import(wanted: bool | None) -> None:
    """After `nmem install`: import on --import, ask once on a terminal, else say how."""
    if wanted is False:
        return
    from nmemd.agents.claude_code.history import projects_root

    console = ui.Console(soft_wrap=True, highlight=False)
    root = projects_root()
    if not os.path.isdir(root):
        if wanted:
            console.print(f"no Claude Code history at {ui.escape(root)}: nothing to import")
        return
    if wanted is None:
        marker = os.path.join(load_settings().home, OFFERED_MARKER)
        if os.path.exists(marker):
            return
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            console.print("import your existing Claude Code history with: nmem import-transcripts")
            return
        paths.make_dirs(os.path.dirname(marker))
        with open(marker, "w"):
            pass
        if not typer.confirm(f"Import your existing Claude Code history ({root}) now?", default=True):
            console.print("later: nmem import-transcripts")
            return
    code = run_import(None)
    if code:
        raise typer.Exit(code)
