"""Data commands: export and import (JSON lines), and doctor."""

import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import typer

from nmemd.cli import ui
from nmemd.cli.common import JsonOpt, ProjectOpt, fail, load_settings, out, resolve_scope
from nmemd.config import Settings
from nmemd.control import control
from nmemd.errors import AlreadyRunning, DaemonUnavailable, NmemError
from nmemd.recall.queries import ALL_PROJECTS
from nmemd.wording import plural

if TYPE_CHECKING:  # export/import load the store's write path when they run, not with `nmem --help`
    from nmemd.history import transfer

IMPORT_TIMEOUT_S = 120.0  # one chunk; redaction and the FTS index make big chunks take a while


def export(project: ProjectOpt = None) -> None:
    """Write every observation and session (or one project's) to stdout as JSON lines.

    Example:

    \b
        nmem export > nmem-backup.jsonl
        nmem export --project ~/src/app > app.jsonl
    """
    from nmemd.history import transfer

    settings = load_settings()
    scope = resolve_scope(project, False) if project else None
    if not os.path.exists(settings.db):
        fail(f"no database yet at {settings.db}: nothing to export")
    out = sys.stdout.buffer
    try:
        from nmemd.store import readers  # the CLI's start does not pay for anyio's threads

        conn = readers.open_readonly(settings.db)
        try:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'observations'").fetchone() is None:
                fail(f"{settings.db} holds no memory yet: nothing to export")
            for line in transfer.export_lines(conn, None if scope in (None, ALL_PROJECTS) else scope):
                out.write(line + b"\n")
            out.flush()
        finally:
            conn.close()
    except BrokenPipeError:  # `nmem export | head` is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except sqlite3.Error as exc:
        fail(f"cannot read {settings.db}: {exc}")


@contextmanager
def _local_store(settings: Settings) -> "Iterator[Callable[[list[transfer.Restorable]], transfer.Imported]]":
    """No daemon: hold its instance lock (so none starts beside us) and import into the store ourselves."""
    import anyio

    from nmemd.daemon.instance import InstanceLock, ensure_socket_dir
    from nmemd.history import transfer
    from nmemd.store.database import open_store

    lock = InstanceLock(settings.lock)
    try:
        ensure_socket_dir(settings.socket, settings.home)
        lock.acquire()
    except AlreadyRunning:
        fail("nmemd is running but did not answer; try again (nmem status)")
    except (NmemError, OSError) as exc:
        fail(str(exc))

    def run_all(chunks: "list[list[transfer.Restorable]]") -> "transfer.Imported":
        async def go() -> transfer.Imported:
            total = transfer.Imported()
            from nmemd.capture.redact import redact  # the store sits below capture: it is given the redactor

            async with open_store(settings, redact=redact) as store:
                for chunk in chunks:
                    total.add(await transfer.import_records(store, chunk))
            return total

        return anyio.run(go)

    try:
        yield lambda records: run_all([records[i : i + transfer.CHUNK] for i in range(0, len(records), transfer.CHUNK)])
    finally:
        lock.release()


def _import_via_daemon(records: "list[transfer.Restorable]") -> "transfer.Imported | None":
    """Send the records chunk by chunk; None when no daemon answers the first one."""
    from nmemd.history import transfer

    total = transfer.Imported()
    for n, start in enumerate(range(0, len(records), transfer.CHUNK)):
        chunk = records[start : start + transfer.CHUNK]
        try:
            reply = control.ask("import", {"records": chunk}, timeout=IMPORT_TIMEOUT_S)
        except DaemonUnavailable:
            if n == 0:
                return None
            fail(f"the daemon went away after {start} records; run the import again (it skips what is stored)")
        except NmemError as exc:
            fail(str(exc))
        try:
            total.add(msgspec.convert(reply, transfer.Imported))
        except msgspec.ValidationError as exc:
            fail(f"unexpected import reply: {exc}")
    return total


def import_(
    path: Annotated[str, typer.Argument(metavar="FILE", help="A file written by nmem export (- for stdin).")],
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Import the good lines even when some are bad (they are listed).")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Restore observations and sessions from `nmem export` output; what is already stored is skipped.

    Example:

    \b
        nmem import nmem-backup.jsonl
    """
    from nmemd.history import transfer

    settings = load_settings()
    try:
        parsed = transfer.read_file(path)
    except NmemError as exc:
        fail(str(exc))
    err = ui.Console(stderr=True, soft_wrap=True)
    if parsed.bad:
        if not skip_bad:
            fail(f"{path}: {transfer.describe_bad(parsed.bad)}; nothing imported (--skip-bad imports the rest)")
        err.print(ui.Text(f"skipped {transfer.describe_bad(parsed.bad)}"))
    records = parsed.records
    total = _import_via_daemon(records) if records else transfer.Imported()
    if total is None:
        try:
            with _local_store(settings) as run:
                total = run(records)
        except NmemError as exc:
            fail(str(exc))
    summary: dict[str, Any] = {**msgspec.to_builtins(total), "bad_lines": [b.line for b in parsed.bad]}
    if json_out:
        sys.stdout.write(msgspec.json.encode(summary).decode() + "\n")
    else:
        out().print(
            ui.Text(
                f"imported {plural(total.observations, 'observation')} and {plural(total.sessions, 'session')};"
                f" {total.present} already stored"
            )
        )


def doctor(json_out: JsonOpt = False) -> None:
    """Check the install end to end and print, for each problem, the command that fixes it.

    Exit status 1 when a check failed (warnings alone exit 0).
    """

    from nmemd.setup import doctor as doc

    report = doc.run()
    if json_out:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        console = ui.Console(soft_wrap=True, highlight=False)
        marks = {"ok": "[green]ok  [/green]", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]"}
        width = max(len(c.name) for c in report.checks)
        for c in report.checks:
            console.print(f"{marks[c.status]}  {c.name:<{width}}  {ui.escape(c.detail)}")
            if c.fix and c.status != "ok":
                console.print(f"      {'':<{width}}  fix: [bold]{ui.escape(c.fix)}[/bold]")
    failed = [c.name for c in report.checks if c.status == "fail"]
    if failed:
        fail(f"{plural(len(failed), 'check')} failed: {', '.join(failed)}")
