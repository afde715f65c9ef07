"""What the CLI's client side assumes of the daemon's methods (nmemd.control)."""

from __future__ import annotations

import socket
from pathlib import Path

from nmemd import config
from nmemd.control import control
from nmemd.recall.methods import QUERIES


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
    assert "up to id 100001 of 1000001" in said and "inbox" in said, said
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
