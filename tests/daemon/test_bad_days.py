"""Honest answers on bad days (issue #37, 3): a frozen daemon is "not answering", a full disk is "disk full"
with what to free, and the hook input doctor counts points at a record that says what it was. A real
daemon, the real hook client and the real CLI."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.helpers import nmem, payload, prompt_event

pytestmark = pytest.mark.daemon
MNT_DETACH = 2


@pytest.mark.slow
def test_a_frozen_daemon_is_not_answering(daemon: Daemon) -> None:
    """SIGSTOP: status says "not answering", not "not running" after its 10 s RPC timeout; search says
    so too, and answers from the database; doctor says the daemon does not answer."""
    daemon.start()
    assert run_send(json.dumps(prompt_event("frozenmark")).encode()).returncode == 0
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        status = nmem("status")
        found = nmem("search", "frozenmark", "--all")
        doctor = nmem("doctor")
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert "not answering" in status.stdout and "not running" not in status.stdout, status.stdout
    assert "not answering" in found.stderr, found.stderr
    assert found.returncode == 0  # answered from the database (what its index holds yet)
    assert "does not answer" in doctor.stdout or "not answering" in doctor.stdout, doctor.stdout


@pytest.fixture
def small_disk(short_dir: str, nmem_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """NMEM_HOME on a 2 MB tmpfs of its own (root only: mount(2))."""
    if os.geteuid() != 0:
        pytest.skip("a small tmpfs for NMEM_HOME needs root (mount)")
    mnt = Path(short_dir) / "disk"
    mnt.mkdir()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", str(mnt).encode(), b"tmpfs", 0, b"size=2m") != 0:
        pytest.skip(f"mount(tmpfs) failed: {os.strerror(ctypes.get_errno())}")
    home = mnt / "home"
    monkeypatch.setenv("NMEM_HOME", str(home))
    nmem_env["NMEM_HOME"] = str(home)
    try:
        yield mnt
    finally:
        libc.umount2(str(mnt).encode(), MNT_DETACH)


def _fill(mnt: Path) -> None:
    with open(mnt / "filler", "wb", buffering=0) as f:  # nothing left to flush (and fail) at close
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass


def test_a_full_disk_says_disk_full_and_what_to_free(small_disk: Path, daemon: Daemon) -> None:
    """The store's disk full under a running daemon: the events it can no longer take, and that neither
    its inbox nor its spool can, are kept elsewhere; the SessionStart notice, status and doctor say
    "disk full" and what to free, never "cannot be created" or "a folder of yours"."""
    daemon.start()
    assert run_send(payload("fullfirst")).returncode == 0
    # The WAL file emptied first: a write that fits in the room it had kept (the migrations' frames)
    # would not need the disk, and a small inbox row could still land there.
    conn = sqlite3.connect(small_disk / "home" / "nmem.db", timeout=10)
    try:
        assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    finally:
        conn.close()
    _fill(small_disk)
    for n in range(15):  # past what the WAL file already holds (each indexes 3,000 new words)
        words = " ".join(os.urandom(8).hex() for _ in range(3000))
        big = json.dumps({**prompt_event(f"fullbig{n}"), "prompt": words}).encode()
        assert run_send(big).returncode == 0
    start = {"hook_event_name": "SessionStart", "session_id": "fullstart", "cwd": "/tmp", "source": "startup"}
    # The notice's words are under test, not the hook's 500 ms wait: a daemon writing fifteen 3,000-word
    # prompts onto a full disk may answer later than that on a loaded machine (CI saw no reply once).
    started = run_send(json.dumps(start).encode(), env={"NMEM_TIMEOUT_MS": "10000"})
    assert started.returncode == 0 and started.stderr == b""
    notice = json.loads(started.stdout)["systemMessage"]
    assert "disk full" in notice and "cannot be created" not in notice, notice
    status = nmem("status")
    assert "disk full" in status.stdout, status.stdout
    doctor = nmem("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    said = " ".join(f"{c['detail']} {c.get('fix') or ''}" for c in checks.values())
    assert "disk full" in said and "free" in said, said
    assert "folder of yours" not in said and "cannot be created" not in said, said


def test_unusable_hook_input_points_at_what_it_was(daemon: Daemon, nmem_env: dict[str, str]) -> None:
    """Doctor's "N hook inputs not usable" names a file, and that file says what each input was and which
    hook sent it (the daemon's log never heard of an empty input)."""
    daemon.start()
    assert run_send(b"").returncode == 0
    assert run_send(b"not json at all").returncode == 0
    doctor = nmem("doctor", "--json")
    capture = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}["capture"]
    assert capture["status"] == "warn" and "2 hook inputs" in capture["detail"]
    named = [w.strip("(),`") for w in (capture.get("fix") or "").split() if w.startswith("/")]
    assert named, capture
    told = " ".join(Path(p).read_text(errors="replace") for p in named if Path(p).is_file())
    assert "empty hook input from" in told and "refused event" in told and "not" in told, told
