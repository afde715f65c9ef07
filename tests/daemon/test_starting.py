"""While the daemon opens its store (a migration indexing it again), hooks are told `busy starting` at
once and their events go to the spool; other requests wait and are served (nmemd/daemon/starting.py).

The store's opening is held back for real: another connection holds the write lock that the daemon's
migration (m016, on a store of version 15) needs, until the test lets it go."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from support.daemon import Daemon, run_send
from support.earlier_stores import build_v15
from support.env import SEND_SCRIPT
from support.helpers import connect, count, log_text, payload, read_reply, send_hook, wait_until
from support.mcp_client import bridge_params, mcp_session, ok

from nmem_client import protocol


def _connectable(path: str) -> socket.socket | None:
    try:
        return connect(path, timeout=20.0)
    except OSError:
        return None


def _listening(path: str) -> bool:
    conn = _connectable(path)
    if conn is None:
        return False
    conn.close()  # the daemon holds it unread, then serves an empty connection
    return True


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
        bad = connect(sock_path, timeout=20.0)
        bad.sendall(b"NMEM1 hook not!an!id 5\nhello")  # malformed: left for the daemon to refuse
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
    with bad:
        status, reply = read_reply(bad)
    assert (status, reply.split(b" ")[0]) == (b"ERR", protocol.ERR_INVALID), reply
    wait_until(lambda: _prompts(daemon.db, "starting-hook-client") == 1, 20, "the spooled event stored")
    # its file is removed once the commit that stored it is done (drain.py): a moment later
    wait_until(lambda: not [n for n in os.listdir(spool) if n.endswith(".event")], 20, "the spool file removed")
    assert _prompts(daemon.db, "starting-raw-frame") == 0  # a raw frame told busy is not stored: its client keeps it
    status, _ = send_hook(sock_path, "f" * 32, payload("after-start"))
    assert status == b"OK"
    wait_until(lambda: "told 2 hook(s) that the daemon was starting" in log_text(daemon.home), 10, "the log says")
    assert daemon.stop() == 0


@pytest.mark.timeout(60)
def test_a_session_start_while_the_store_opens_gets_its_context_once_it_is_open(
    daemon: Daemon, nmem_env: dict[str, str]
) -> None:
    """A session that starts as the daemon opens its store (a service's daemon socket-activated by that
    very SessionStart) is told `busy starting` too: its client spools the event, asks again until the
    store is open, within the ack's own timeout as before the responder, and prints the context."""
    markers = build_v15(daemon.home)
    holder = sqlite3.connect(daemon.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    spool = daemon.home / "spool"
    try:
        daemon.start(wait=False)
        wait_until(lambda: _listening(nmem_env["NMEM_SOCKET"]), 20, "the daemon's socket bound")
        start = {"session_id": "next-session", "hook_event_name": "SessionStart", "source": "startup",
                 "cwd": "/tmp/nmem-test-project"}  # fmt: skip
        client = subprocess.Popen(
            [sys.executable, "-I", "-S", str(SEND_SCRIPT)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, **nmem_env, "NMEM_TIMEOUT_MS": "20000"},  # a bound no load reaches
        )  # fmt: skip
        assert client.stdin is not None
        client.stdin.write(json.dumps(start).encode())
        client.stdin.close()
        wait_until(lambda: spool.exists() and any(n.endswith(".event") for n in os.listdir(spool)), 20, "spooled")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert client.wait(timeout=40) == 0
    assert client.stdout is not None and client.stderr is not None
    out, err = client.stdout.read(), client.stderr.read()  # a few KB: the pipes never filled
    client.stdout.close()
    client.stderr.close()
    assert err == b""
    assert any(m in out.decode() for m in markers), out  # the project's context
    wait_until(lambda: count(daemon.db, "events", "session_id = 'next-session'") == 1, 20, "stored once")
    wait_until(lambda: not [n for n in os.listdir(spool) if n.endswith(".event")], 20, "the spool drained")
    assert count(daemon.db, "events", "session_id = 'next-session'") == 1
    assert daemon.stop() == 0


MCP_WAITED = "an MCP session waited"


@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_an_mcp_session_asks_again_while_the_store_opens_and_is_served_once_it_is_open(
    daemon: Daemon, nmem_env: dict[str, str], tmp_path: Path
) -> None:
    """An agent's MCP server started while the daemon indexes its store again is not lost to the bridge's
    60 s handshake: the daemon tells a session it held MCP_HOLD_S (0.2 s here) `busy starting`, the bridge
    asks again, and the agent's tool call is answered once the store is open."""
    build_v15(daemon.home)
    daemon.env["NMEM_TUNE_STARTING_MCP_HOLD_S"] = "0.2"
    holder = sqlite3.connect(daemon.db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    project = tmp_path / "project"
    project.mkdir()
    try:
        daemon.start(wait=False)
        wait_until(lambda: _listening(nmem_env["NMEM_SOCKET"]), 20, "the daemon's socket bound")
        async with mcp_session(bridge_params(nmem_env, str(project)), tmp_path / "bridge.err") as session:
            # the bridge answered the handshake itself; its session was held, told busy and asked for again
            told_twice = lambda: log_text(daemon.home).count(MCP_WAITED) >= 2  # noqa: E731
            await anyio.to_thread.run_sync(wait_until, told_twice, 30, "the bridge told busy twice")
            holder.execute("ROLLBACK")
            reply = await ok(session, "search", {"query": "anything"})
            assert reply
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
    assert (tmp_path / "bridge.err").read_text() == ""
    assert daemon.stop() == 0
