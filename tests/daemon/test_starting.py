"""While the daemon opens its store (a migration indexing it again), hooks are told `busy starting` at
once and their events go to the spool; other requests wait and are served (nmemd/daemon/starting.py).

The store's opening is held back for real: another connection holds the write lock that the daemon's
migration (m016, on a store of version 15) needs, until the test lets it go."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.earlier_stores import build_v15
from support.helpers import connect, count, log_text, payload, read_reply, send_hook, wait_until

from nmem_client import protocol


def _connectable(path: str) -> socket.socket | None:
    try:
        return connect(path, timeout=20.0)
    except OSError:
        return None


def _prompts(db: Path, marker: str) -> int:
    return count(db, "observations", "type = 'prompt' AND title LIKE ?", (f"%{marker}%",))


@pytest.mark.timeout(60)
def test_hooks_are_told_busy_and_spooled_while_the_store_opens(daemon: Daemon, nmem_env: dict[str, str]) -> None:
    build_v15(daemon.home)
    holder = sqlite3.connect(daemon.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another program writing: the daemon's migration waits for it
    sock_path = nmem_env["NMEM_SOCKET"]
    try:
        daemon.start(wait=False)
        early = wait_until(lambda: _connectable(sock_path), 20, "the daemon's socket bound")
        early.sendall(protocol.encode_request(protocol.KIND_PING, protocol.NO_EVENT_ID, b""))  # waits, unrefused
        status, reply = send_hook(sock_path, "e" * 32, payload("starting-raw-frame"))
        assert (status, reply.split(b":")[0]) == (b"ERR", protocol.BUSY_STARTING)
        sent = run_send(payload("starting-hook-client"), env=nmem_env)
        assert (sent.returncode, sent.stdout, sent.stderr) == (0, b"", b"")
        spool = daemon.home / "spool"
        assert len([n for n in os.listdir(spool) if n.endswith(".event")]) == 1  # not the locked inbox
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with early:
        early.settimeout(20)
        status, body = read_reply(early)  # served once the store is open
    assert status == b"OK" and json.loads(body)["running"] is True
    wait_until(lambda: _prompts(daemon.db, "starting-hook-client") == 1, 20, "the spooled event stored")
    # its file is removed once the commit that stored it is done (drain.py): a moment later
    wait_until(lambda: not [n for n in os.listdir(spool) if n.endswith(".event")], 20, "the spool file removed")
    assert _prompts(daemon.db, "starting-raw-frame") == 0  # a raw frame told busy is not stored: its client keeps it
    status, _ = send_hook(sock_path, "f" * 32, payload("after-start"))
    assert status == b"OK"
    wait_until(lambda: "told 2 hook(s) that the daemon was starting" in log_text(daemon.home), 10, "the log says")
    assert daemon.stop() == 0
