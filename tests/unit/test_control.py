"""What the CLI's client side assumes of the daemon's methods (nmemd.control)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nmemd import config
from nmemd.config import Settings
from nmemd.control import control
from nmemd.daemon.instance import InstanceLock
from nmemd.errors import StorageError
from nmemd.recall.methods import QUERIES
from nmemd.setup import doctor


def test_reads_are_exactly_the_read_methods() -> None:
    """`ask` sends a read's request beside its ping, and a frozen daemon may run it after the ping timed
    out: only methods that change nothing may go that way, and every one of them should."""
    assert control.READS == set(QUERIES)


def test_a_start_that_outlasts_the_wait_says_the_store_is_indexed_again() -> None:
    """A migration that builds the full-text index again (m016: ~40 s at a million observations) keeps a
    new daemon from answering within `nmem daemon start`'s wait: the error says so, from the log's last
    line, and what happens to hooks' events meanwhile; a startup failure's reason is passed on as before."""
    settings = config.load()
    log = Path(settings.log_dir) / "nmemd.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "2026-11-29 18:48:34,325 INFO nmemd.store: applied migrations: m016_newest_first_index",
        "2026-11-29 18:48:34,327 INFO nmemd.store: indexing observations below id 1000001 again for full-text"
        " search (a migration's new index)",
    ]
    log.write_text("\n".join(lines) + "\n")
    assert "indexing the store again" in control._why_not_yet(control._last_log_line(settings))
    log.write_text("\n".join([*lines, "2026-11-29 18:48:37,420 INFO nmemd.store: indexed observations up to id"
                              " 100001 of 1000001 (3.1 s)"]) + "\n")  # fmt: skip
    said = control._why_not_yet(control._last_log_line(settings))
    assert "up to id 100001 of 1000001" in said and "spool" in said, said
    log.write_text("2026-11-29 18:48:37,420 ERROR nmemd: startup failed: file is not a database\n")
    assert control._why_not_yet(control._last_log_line(settings)) == ": file is not a database"
    log.write_text(lines[0] + "\n")
    assert control._why_not_yet(control._last_log_line(settings)) == ""


def test_status_while_a_migration_indexes_the_store_says_so_not_frozen() -> None:
    """A daemon that holds its socket but does not answer yet because m016's index is being built again
    is reported as starting, with the progress line, not as "stopped or frozen"."""
    settings = config.load()
    log = Path(settings.log_dir) / "nmemd.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(
        "2026-11-29 18:48:37,420 INFO nmemd.store: indexed observations up to id 100001 of 1000001 (3.1 s)\n"
    )
    Path(settings.socket).parent.mkdir(parents=True, exist_ok=True)
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # accepts (the backlog), never answers
    try:
        held.bind(settings.socket)
        held.listen(8)
        note = control.status(settings).daemon.note or ""
    finally:
        held.close()
    assert note.startswith("not answering yet: it is still starting") and "100001 of 1000001" in note, note


@contextmanager
def _indexing_again(settings: Settings) -> Iterator[None]:
    """A daemon as a migration's first start leaves it: it holds the lock and the socket (whose listen queue
    accepts) but answers nothing yet, and its log's last line is the index's progress."""
    log = Path(settings.log_dir) / "nmemd.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(
        "2026-11-29 18:48:37,420 INFO nmemd.store: indexed observations up to id 100001 of 1000001 (3.1 s)\n"
    )
    Path(settings.socket).parent.mkdir(parents=True, exist_ok=True)
    lock = InstanceLock(settings.lock)
    lock.acquire()
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        held.bind(settings.socket)
        held.listen(8)
        yield
    finally:
        held.close()
        lock.release()


def test_a_read_while_a_migration_indexes_the_store_says_so_not_frozen(capsys: pytest.CaptureFixture[str]) -> None:
    """`nmem search` meanwhile reads the file itself, and says the daemon is starting, not "frozen?"."""
    settings = config.load()
    with _indexing_again(settings), pytest.raises(StorageError, match="no database yet"):
        control.read(settings, "search", {"query": "hello"})
    said = capsys.readouterr().err
    assert said.startswith("nmem: the daemon does not answer yet: it is still starting") and "100001" in said, said
    assert "frozen" not in said


def test_doctor_while_a_migration_indexes_the_store_warns_rather_than_advise_a_restart() -> None:
    """A restart would only start the migration's index over from its last chunk: doctor says to wait."""
    settings = config.load()
    with _indexing_again(settings):
        check = doctor.check_daemon(settings)
    assert check.status == "warn" and "still starting" in check.detail and "restart" not in (check.fix or ""), check
