"""A daemon is tied to its store (issue #37, 1): the hook client that means one NMEM_HOME never hands an
event to a daemon serving another, whatever socket its environment, a stale `store.lock` or a stale socket
file points it at. Two homes, a real daemon for the first, the real hook client for the second."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.env import REPO
from support.helpers import count, kill_all, nmem, prompt_event, wait_until

pytestmark = pytest.mark.daemon


@pytest.fixture
def two_homes(
    nmem_env: dict[str, str], short_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Daemon, dict[str, str]]]:
    """Home A served by a real daemon on the socket its environment names by default (no NMEM_SOCKET:
    `$XDG_RUNTIME_DIR/nmem/`), and the environment of a second home B on the same runtime folder."""
    runtime = os.path.join(short_dir, "rt")
    os.mkdir(runtime, 0o700)
    monkeypatch.delenv("NMEM_SOCKET")  # the processes these tests start see what a user's shell would
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    env_a = {k: v for k, v in nmem_env.items() if k != "NMEM_SOCKET"} | {"NMEM_HOME": str(tmp_path / "a")}
    env_b = {**env_a, "NMEM_HOME": str(tmp_path / "altstore")}
    daemon = Daemon(env_a, short_dir)
    daemon.start()
    yield daemon, env_b
    daemon.stop()
    kill_all(env_b["NMEM_HOME"])


def _prompt(marker: str) -> bytes:
    return json.dumps(prompt_event(marker)).encode()


def _stored(home: str | Path, marker: str) -> int:
    return count(Path(home) / "nmem.db", "observations", "session_id = ?", (marker,))


def _held(home: str | Path, marker: str) -> int:
    """The event, stored or waiting in the home's inbox."""
    waiting = count(Path(home) / "nmem.db", "inbox", "CAST(payload AS TEXT) LIKE ?", (f"%{marker}%",))
    return _stored(home, marker) + waiting


def test_each_home_has_its_own_socket_and_daemon(two_homes: tuple[Daemon, dict[str, str]]) -> None:
    daemon, env_b = two_homes
    done = run_send(_prompt("mark-alt-1"), env=env_b)
    assert done.returncode == 0 and done.stderr == b""
    wait_until(lambda: _stored(env_b["NMEM_HOME"], "mark-alt-1"), 30, "altstore's own daemon to store the event")
    assert _stored(daemon.home, "mark-alt-1") == 0
    status = nmem("status", "--json", env=env_b)
    facts = json.loads(status.stdout)
    assert facts["database"]["path"] == os.path.join(env_b["NMEM_HOME"], "nmem.db")
    assert facts["daemon"]["home"] == env_b["NMEM_HOME"]


def test_a_shared_socket_refuses_another_store(two_homes: tuple[Daemon, dict[str, str]]) -> None:
    """NMEM_SOCKET of home A's daemon in home B's environment: the daemon refuses B's event, which waits
    in B's inbox; status, daemon start and doctor of B say whose daemon that is."""
    daemon, env_b = two_homes
    a_socket = json.loads(nmem("status", "--json", env={"NMEM_HOME": str(daemon.home)}).stdout)["daemon"]["socket"]
    shared = {**env_b, "NMEM_SOCKET": a_socket, "NMEM_AUTOSTART": "0"}
    done = run_send(_prompt("mark-shared-2"), env=shared)
    assert done.returncode == 0 and done.stderr == b""
    assert _held(env_b["NMEM_HOME"], "mark-shared-2") == 1
    assert _stored(daemon.home, "mark-shared-2") == 0

    status = nmem("status", env=shared)
    assert "serves another store" in status.stdout and str(daemon.home) in status.stdout
    started = nmem("daemon", "start", env=shared)
    assert started.returncode == 1 and "serves another store" in started.stderr, started
    doctor = nmem("doctor", env=shared)
    assert "serves another store" in doctor.stdout, doctor.stdout


def test_a_stale_store_lock_naming_another_daemon(two_homes: tuple[Daemon, dict[str, str]]) -> None:
    """B's store.lock names A's socket (B's daemon ran there once); B's own socket is a stale file. The
    client skips neither safety: A refuses, the event goes to B's inbox and B's own daemon stores it."""
    daemon, env_b = two_homes
    a_socket = json.loads(nmem("status", "--json", env={"NMEM_HOME": str(daemon.home)}).stdout)["daemon"]["socket"]
    home_b = Path(env_b["NMEM_HOME"])
    home_b.mkdir(mode=0o700)
    (home_b / "store.lock").write_text(f"999999\n{a_socket}\n")
    b_socket = json.loads(nmem("status", "--json", env=env_b).stdout)["daemon"]["socket"]
    assert b_socket != a_socket
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(b_socket)  # bound, never listening: a socket file its daemon left behind
    stale.close()

    bridge = [sys.executable, "-I", "-S", str(REPO / "nmem_client" / "bridge.py")]
    bridged = subprocess.run(
        bridge, stdin=subprocess.DEVNULL, env={**os.environ, **env_b}, capture_output=True, timeout=60
    )
    assert bridged.returncode == 0 and bridged.stderr == b"", bridged  # the MCP bridge opened B's own session
    done = run_send(_prompt("mark-stale-3"), env=env_b)
    assert done.returncode == 0 and done.stderr == b""
    wait_until(lambda: _stored(home_b, "mark-stale-3"), 30, "altstore's own daemon to store the event")
    assert _stored(daemon.home, "mark-stale-3") == 0
