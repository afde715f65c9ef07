"""The WAL is checkpointed in the background while the daemon runs, never inside a commit."""

from __future__ import annotations

import os

from conftest import Daemon, db_rows
from helpers import new_id, payload, wait_until

from nmem_client import protocol
from nmem_client.send import deliver


def test_wal_is_copied_into_the_database_while_events_keep_coming(daemon: Daemon) -> None:
    daemon.env["NMEM_MAINTENANCE_CHECKPOINT_INTERVAL_S"] = "0"  # the scheduled job is not what we test
    daemon.start()
    assert db_rows(daemon.db, "PRAGMA wal_autocheckpoint") == [(1000,)]  # readers keep SQLite's default
    empty = os.stat(daemon.db).st_size
    for i in range(300):
        status, _ = deliver(protocol.KIND_HOOK, new_id().encode(), payload(f"ckpt-{i:04d}"), 5.0)
        assert status == b"OK"
    # Only a checkpoint moves pages into the main file: it grows while the daemon still runs.
    wait_until(lambda: os.stat(daemon.db).st_size > empty, 10, "a background checkpoint")
    assert daemon.stop() == 0
    assert db_rows(daemon.db, "SELECT count(*) FROM events") == [(300,)]
    assert os.stat(str(daemon.db) + "-wal").st_size == 0  # TRUNCATE at shutdown
