"""One daemon per socket: the flock, stale files after kill -9, permissions, the peer-uid check."""

from __future__ import annotations

import gc
import json
import logging
import os
import re
import signal
import socket
import stat
import subprocess
import time
import warnings
from functools import partial
from pathlib import Path

import anyio
import pytest
from support.daemon import Daemon
from support.db import integrity_ok
from support.env import BIN
from support.helpers import (
    connect,
    count,
    lock_path,
    lock_pid,
    log_text,
    new_id,
    payload,
    ping,
    raw_hook_exchange,
    send_hook,
    wait_until,
)

from nmem_client import protocol
from nmemd import config
from nmemd.daemon.server import serve

ALREADY_RUNNING = re.compile(rb"\Anmemd: nmemd is already running \(pid (\d+)\); lock (\S+)\n\Z")


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_second_daemon_exits_4_and_the_first_keeps_serving(daemon: Daemon) -> None:
    first = daemon.start()
    before = os.lstat(daemon.socket)
    started = time.monotonic()
    second = subprocess.run([str(BIN / "nmemd")], env=daemon.env, capture_output=True, timeout=30)
    assert second.returncode == 4, second.stderr
    assert time.monotonic() - started < 10
    match = ALREADY_RUNNING.match(second.stderr)
    assert match, second.stderr
    assert int(match.group(1)) == first.pid
    assert match.group(2).decode() == lock_path(daemon.socket)
    assert second.stdout == b""

    # The loser touched nothing: same socket inode, same lock holder, still serving.
    after = os.lstat(daemon.socket)
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)
    assert lock_pid(daemon.socket) == first.pid
    assert first.poll() is None
    facts = ping(daemon.socket)
    assert facts is not None and facts["pid"] == first.pid
    marker = f"inst-{new_id()[:12]}"
    assert send_hook(daemon.socket, new_id(), payload(marker))[0] == b"OK"
    assert count(daemon.db, "events", "session_id = ?", (marker,)) == 1

    # The same with the socket given on the command line.
    third = subprocess.run(
        [str(BIN / "nmemd"), "--socket", daemon.socket], env=daemon.env, capture_output=True, timeout=30
    )
    assert third.returncode == 4 and ALREADY_RUNNING.match(third.stderr), third.stderr
    assert daemon.stop() == 0


@pytest.mark.reliability(scenario=7)
def test_stale_socket_and_lock_after_kill9_are_recovered(daemon: Daemon) -> None:
    daemon.start()
    marker = f"stale-{new_id()[:12]}"
    assert send_hook(daemon.socket, new_id(), payload(marker))[0] == b"OK"
    old_pid = daemon.proc.pid if daemon.proc else None
    daemon.kill()

    # kill -9 leaves both files behind, but the kernel dropped the flock.
    assert stat.S_ISSOCK(os.lstat(daemon.socket).st_mode)
    assert os.path.exists(lock_path(daemon.socket))
    assert lock_pid(daemon.socket) is None
    with pytest.raises(ConnectionRefusedError):
        connect(daemon.socket).close()

    new = daemon.start()
    assert new.pid != old_pid
    assert lock_pid(daemon.socket) == new.pid
    with open(lock_path(daemon.socket)) as f:
        assert int(f.read().strip()) == new.pid
    assert "removing stale socket" in log_text(daemon.home)
    facts = ping(daemon.socket)
    assert facts is not None and facts["pid"] == new.pid
    marker2 = f"stale-{new_id()[:12]}"
    assert send_hook(daemon.socket, new_id(), payload(marker2))[0] == b"OK"
    assert count(daemon.db, "events", "session_id IN (?, ?)", (marker, marker2)) == 2
    assert daemon.stop() == 0
    assert not os.path.exists(daemon.socket)
    integrity_ok(daemon.db)


def test_socket_is_0600_and_its_directory_0700(daemon: Daemon) -> None:
    run_dir = os.path.dirname(daemon.socket)  # nmem creates it: 0700
    old_umask = os.umask(0)  # and it must not depend on the umask it inherits
    try:
        daemon.start()
    finally:
        os.umask(old_umask)
    assert stat.S_ISSOCK(os.lstat(daemon.socket).st_mode)
    assert _mode(daemon.socket) == 0o600
    assert _mode(run_dir) == 0o700
    assert _mode(lock_path(daemon.socket)) == 0o600
    assert _mode(daemon.home) == 0o700
    assert _mode(daemon.db) == 0o600
    assert _mode(daemon.home / "logs" / "nmemd.log") == 0o600
    assert daemon.stop() == 0


def test_a_socket_directory_nmem_is_given_is_used_as_it_is(daemon: Daemon, short_dir: str) -> None:
    """NMEM_SOCKET=/tmp/x.sock must not chmod /tmp (it did: 0700, everyone else locked out): a folder
    nmem did not create is left as it is when safe, and refused when others could replace the socket."""
    shared = os.path.join(short_dir, "shared")
    os.makedirs(shared)
    for mode in (0o755, 0o1777):  # an ordinary folder; a /tmp-like one (others write, sticky bit)
        os.chmod(shared, mode)
        daemon.socket = daemon.env["NMEM_SOCKET"] = os.path.join(shared, "nmemd.sock")
        daemon.start()
        assert _mode(daemon.socket) == 0o600
        assert daemon.stop() == 0
        assert stat.S_IMODE(os.lstat(shared).st_mode) == mode  # untouched
    os.chmod(shared, 0o777)  # others may write and no sticky bit: they could swap the socket
    proc = daemon.start(wait=False)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3 and b"no sticky bit" in err, err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a symlink to another user (uid 65534)")
def test_a_socket_directory_symlinked_by_another_user_is_refused(daemon: Daemon, short_dir: str) -> None:
    """A symlink of ours to a folder of ours is used (the hook client follows it too: issue #16,
    finding 7); one another user owns could be re-pointed anywhere after the check."""
    real = os.path.join(short_dir, "elsewhere")
    os.makedirs(real, mode=0o700)
    os.symlink(real, os.path.dirname(daemon.socket))
    os.lchown(os.path.dirname(daemon.socket), 65534, 65534)
    proc = daemon.start(wait=False)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
    assert b"is a symlink owned by uid 65534" in err
    assert os.listdir(real) == []


@pytest.mark.reliability(scenario=8)
@pytest.mark.anyio
async def test_connection_from_another_uid_is_refused(
    nmem_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="nmemd")
    settings = config.load()
    seen: list[int | None] = []

    def nobody_allowed(uid: int | None) -> bool:
        seen.append(uid)
        return False

    eid = new_id()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            daemon = await tg.start(partial(serve, settings, uid_allowed=nobody_allowed))
            data = await anyio.to_thread.run_sync(raw_hook_exchange, settings.socket, eid, payload("other-uid"))
            assert not data.startswith(b"OK"), data
            assert data == b""  # closed without a word
            assert seen == [os.geteuid()]  # the check saw the real peer uid (SO_PEERCRED)
            assert daemon.refused_peers == 1
            assert daemon.ingestor.committed == 0
            daemon.stop_requested.set()  # serve() returns; the task group then exits
    db = Path(settings.db)
    assert count(db, "events") == 0
    assert count(db, "inbox") == 0
    refused = [
        r for r in caplog.records if r.levelno == logging.WARNING and "refused a connection from uid" in r.getMessage()
    ]
    assert len(refused) == 1 and str(os.geteuid()) in refused[0].getMessage()
    assert not await anyio.Path(settings.socket).exists()
    assert lock_pid(settings.socket) is None


@pytest.mark.anyio
async def test_connection_from_the_same_uid_is_served(nmem_env: dict[str, str]) -> None:
    """The control for the test above: the default check lets our own uid in."""
    settings = config.load()
    eid = new_id()
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            daemon = await tg.start(serve, settings)
            data = await anyio.to_thread.run_sync(_raw_hook_exchange_one, settings.socket, eid, payload("same-uid"))
            assert data.startswith(b"OK "), data
            assert daemon.refused_peers == 0
            daemon.stop_requested.set()
    assert count(Path(settings.db), "events", "event_id = ?", (eid,)) == 1


def _raw_hook_exchange_one(sock_path: str, event_id: str, body: bytes) -> bytes:
    with connect(sock_path, timeout=5) as s:
        s.sendall(protocol.encode_request(protocol.KIND_HOOK, event_id.encode(), body))
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return data


@pytest.mark.anyio
async def test_serve_cancelled_from_outside_releases_everything(nmem_env: dict[str, str]) -> None:
    """Cancelling the task group that runs serve() (how an embedding program stops it) must close
    the listening socket and the ingest queue, not leave them to the garbage collector."""
    settings = config.load()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                await tg.start(serve, settings)
                tg.cancel_scope.cancel()
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []
    assert not await anyio.Path(settings.socket).exists()
    assert lock_pid(settings.socket) is None


@pytest.mark.reliability(scenario=7)
@pytest.mark.timeout(90)
def test_twenty_daemons_started_at_once_one_serves(nmem_env: dict[str, str], short_dir: str) -> None:
    sock_path = nmem_env["NMEM_SOCKET"]
    assert not os.path.exists(os.path.dirname(sock_path))  # a fresh socket directory
    notify_path = os.path.join(short_dir, "notify20")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(30)
    env = {**os.environ, "NOTIFY_SOCKET": notify_path}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        started = time.monotonic()
        for _ in range(20):
            procs.append(
                subprocess.Popen([str(BIN / "nmemd")], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            )
        while b"READY=1" not in notify.recv(4096):
            pass
        # Everyone but the winner exits 4, and quickly.
        wait_until(lambda: sum(p.poll() is not None for p in procs) >= 19, 45, "19 daemons to exit")
        losers_done = time.monotonic() - started
        alive = [p for p in procs if p.poll() is None]
        assert len(alive) == 1, [p.returncode for p in procs]
        winner = alive[0]
        losers = [p for p in procs if p is not winner]
        assert [p.returncode for p in losers] == [4] * 19
        for p in losers:
            assert p.stderr is not None
            err = p.stderr.read()
            assert ALREADY_RUNNING.match(err), err
        assert losers_done < 30
        assert lock_pid(sock_path) == winner.pid
        facts = ping(sock_path)
        assert facts is not None and facts["pid"] == winner.pid
        marker = f"twenty-{new_id()[:12]}"
        assert send_hook(sock_path, new_id(), payload(marker))[0] == b"OK"
        winner.send_signal(signal.SIGTERM)
        assert winner.wait(timeout=30) == 0
        db = Path(nmem_env["NMEM_HOME"]) / "nmem.db"
        assert count(db, "events", "session_id = ?", (marker,)) == 1
        integrity_ok(db)
    finally:
        notify.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
            if p.stderr is not None:
                p.stderr.close()


def test_one_store_has_one_daemon_whatever_socket_its_starter_names(daemon: Daemon, short_dir: str) -> None:
    """Issue #16, finding 1: the lock beside the socket let a daemon started with another socket (a
    terminal without XDG_RUNTIME_DIR, an MCP client that passes few variables) run on the same store;
    it failed every event on UNIQUE constraints and its events stranded. The store has its own lock
    now, which names the socket that serves it: a second daemon exits 4 naming it, and every client
    whose environment names another socket (the hook client, the CLI) finds that daemon."""
    daemon.start()
    other_dir = os.path.join(short_dir, "elsewhere")
    os.makedirs(other_dir, mode=0o700)
    other = {**daemon.env, "NMEM_SOCKET": os.path.join(other_dir, "nmemd.sock"), "NMEM_AUTOSTART": "1"}
    second = subprocess.run([str(BIN / "nmemd")], env=other, capture_output=True, text=True, timeout=60)
    assert second.returncode == 4, second
    assert f"already serves this store on {daemon.socket}" in second.stderr, second.stderr
    started = subprocess.run([str(BIN / "nmem"), "daemon", "start"], env=other, capture_output=True, text=True,
                             timeout=60)  # fmt: skip
    assert started.returncode == 0 and daemon.socket in started.stdout, started
    project = os.path.join(short_dir, "proj")
    os.makedirs(project)
    prompt = {"session_id": "s-other", "hook_event_name": "UserPromptSubmit", "prompt": "wombat elsewhere",
              "cwd": project}  # fmt: skip
    sent = subprocess.run([str(BIN / "nmem-send")], input=json.dumps(prompt).encode(), env=other,
                          capture_output=True, timeout=60)  # fmt: skip
    assert sent.returncode == 0 and sent.stderr == b""
    start = {"session_id": "s-next", "hook_event_name": "SessionStart", "source": "startup", "cwd": project}
    context = subprocess.run([str(BIN / "nmem-send")], input=json.dumps(start).encode(), env=other,
                             capture_output=True, timeout=60)  # fmt: skip
    assert b"additionalContext" in context.stdout and b"wombat elsewhere" in context.stdout, context  # delivered
    found = subprocess.run([str(BIN / "nmem"), "search", "wombat", "--all", "--json"], env=other,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "wombat elsewhere" in found.stdout, found
    assert daemon.stop() == 0
    integrity_ok(daemon.db)
    log = (daemon.home / "logs" / "nmemd.log").read_text(errors="replace")
    assert "UNIQUE constraint" not in log
