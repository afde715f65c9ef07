"""Issue #28 (findings 1, 8, 11) and #31 (items 2, 3): files a hook meets never stop nmem.

Real FIFOs, symlinks and devices planted where nmem reads; the real daemon, hook client and CLI.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import BIN, Daemon, run_send
from helpers import count, payload, ping, wait_until

CLI_TIMEOUT_S = 20.0
MNT_DETACH = 2


def _unblock(fifo: Path) -> None:
    """Open `fifo` for writing once: a reader stuck in open() (the bug) is released, so a failing
    test ends instead of leaving a frozen daemon behind."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader: nothing was stuck


def _plant(top: Path, kind: str) -> list[Path]:
    """A hostile `.git` at `top` (what another user can leave at /tmp/.git); the FIFOs planted."""
    gitdir = top / "gd"
    gitdir.mkdir()
    (top / ".git").write_text(f"gitdir: {gitdir}\n")
    commondir = gitdir / "commondir"
    if kind == "dotgit-fifo":
        (top / ".git").unlink()
        os.mkfifo(top / ".git")
        return [top / ".git"]
    if kind == "commondir-fifo":
        os.mkfifo(commondir)
        return [commondir]
    if kind == "commondir-devzero":
        commondir.symlink_to("/dev/zero")
    elif kind == "commondir-huge":
        with open(commondir, "wb") as f:
            f.truncate(2 << 30)  # 2 GB, sparse
    return []


@pytest.fixture
def hostile_tree(short_dir: str, request: pytest.FixtureRequest) -> Iterator[tuple[Path, Path]]:
    top = Path(short_dir) / "scratch"
    top.mkdir()
    fifos = _plant(top, request.param)
    work = top / "work"
    work.mkdir()
    yield top, work
    for fifo in fifos:
        _unblock(fifo)


def _roots(cwd: Path) -> list[str]:
    """`project_root(cwd)` twice, in a child process: a walk that blocks fails the test, not the run."""
    done = subprocess.run(
        [sys.executable, "-c", ROOTS, str(cwd)], capture_output=True, timeout=CLI_TIMEOUT_S, check=True
    )
    return list(json.loads(done.stdout))


ROOTS = (
    "import json, sys; from nmemd.capture.project import project_root as r;"
    " print(json.dumps([r(sys.argv[1]), r(sys.argv[1])]))"
)
KINDS = ["commondir-fifo", "dotgit-fifo", "commondir-devzero", "commondir-huge"]


@pytest.mark.parametrize("hostile_tree", KINDS, indirect=True)
def test_a_hostile_dot_git_never_blocks_the_walk(hostile_tree: tuple[Path, Path]) -> None:
    """Finding 1: the cwd's project is found at once; the hostile `.git` names no other checkout."""
    top, work = hostile_tree
    assert _roots(work) == [str(top)] * 2


@pytest.mark.parametrize("hostile_tree", KINDS, indirect=True)
def test_a_hostile_dot_git_does_not_freeze_the_daemon(
    hostile_tree: tuple[Path, Path], daemon: Daemon, nmem_env: dict[str, str]
) -> None:
    """Finding 1: a hook whose cwd is below a planted `.git` (a FIFO as `.git` or `commondir`, a
    link to /dev/zero, a 2 GB file) is stored; later hooks are still acknowledged, `nmem status`
    says running, and a restart that drains the same event from the inbox does not freeze."""
    top, work = hostile_tree
    daemon.start()
    first = run_send(payload("fifofirst", cwd=str(work)), env=nmem_env)
    assert first.returncode == 0 and first.stderr == b""
    later = run_send(payload("fifolater"), env={**nmem_env, "NMEM_AUTOSTART": "0"})
    assert later.returncode == 0 and later.stderr == b""
    wait_until(lambda: count(daemon.db, "events", "session_id IN ('fifofirst', 'fifolater')") == 2, 15, "stored")
    assert count(daemon.db, "inbox") == 0  # both acknowledged on the socket: nothing fell back
    status = subprocess.run(
        [str(BIN / "nmem"), "status", "--json"], env=daemon.env, capture_output=True, timeout=CLI_TIMEOUT_S
    )
    assert status.returncode == 0 and json.loads(status.stdout)["daemon"]["running"] is True
    daemon.stop()

    offline = run_send(payload("fifoinbox", cwd=str(work)), env={**nmem_env, "NMEM_AUTOSTART": "0"})
    assert offline.returncode == 0 and count(daemon.db, "inbox") == 1
    daemon.start()
    wait_until(lambda: count(daemon.db, "events", "session_id = 'fifoinbox'") == 1, 15, "drained")
    assert ping(daemon.socket) is not None


@pytest.mark.parametrize("hostile_tree", ["commondir-fifo", "dotgit-fifo"], indirect=True)
@pytest.mark.parametrize("command", [["status"], ["search", "anything"], ["recent"]])
def test_cli_below_a_hostile_dot_git_does_not_hang(
    hostile_tree: tuple[Path, Path], command: list[str], nmem_env: dict[str, str]
) -> None:
    """Finding 1: nmem commands run in a folder below the planted `.git` end (no daemon needed)."""
    _, work = hostile_tree
    done = subprocess.run(
        [str(BIN / "nmem"), *command],
        cwd=work,
        env={**os.environ, **nmem_env, "NMEM_AUTOSTART": "0"},
        capture_output=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert b"Traceback" not in done.stderr


@pytest.fixture
def unanswered_mount(short_dir: str) -> Iterator[tuple[Path, Path]]:
    """`<top>/.git` as a FUSE folder whose server never answers (what an unprivileged user can
    mount with fusermount): stat() of it waits until the connection goes. Root and /dev/fuse only."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("mounting FUSE needs root and /dev/fuse")
    top = Path(short_dir) / "scratch"
    (top / ".git").mkdir(parents=True)
    (top / "work").mkdir()
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"nmemtest", str(top / ".git").encode(), b"fuse", 0, opts) != 0:
        os.close(fd)
        pytest.skip(f"mount(fuse) failed: {os.strerror(ctypes.get_errno())}")
    try:
        yield top, top / "work"
    finally:
        os.close(fd)  # the connection ends: every stat() still waiting fails (ENOTCONN)
        libc.umount2(str(top / ".git").encode(), MNT_DETACH)


def test_a_walk_that_never_ends_leaves_the_cwd_as_the_project(unanswered_mount: tuple[Path, Path]) -> None:
    """Finding 1 (principle): a stat() that never returns costs a bounded wait, then cwd is the project
    (the second call finds the first walk still waiting and does not start another)."""
    _, work = unanswered_mount
    assert _roots(work) == [str(work)] * 2


def test_an_unanswered_mount_does_not_freeze_the_daemon_or_the_cli(
    unanswered_mount: tuple[Path, Path], daemon: Daemon, nmem_env: dict[str, str]
) -> None:
    """Finding 1 (principle): a hook below a FUSE `.git` that never answers is stored, later hooks
    are acknowledged, `nmem status` says running, and `nmem search` run there ends."""
    _, work = unanswered_mount
    daemon.start()
    for marker in ("fusefirst", "fusesecond"):
        done = run_send(payload(marker, cwd=str(work)), env=nmem_env)
        assert done.returncode == 0 and done.stderr == b""
    later = run_send(payload("fuselater"), env={**nmem_env, "NMEM_AUTOSTART": "0"})
    assert later.returncode == 0 and later.stderr == b""
    markers = "session_id IN ('fusefirst', 'fusesecond', 'fuselater')"
    wait_until(lambda: count(daemon.db, "events", markers) == 3, 15, "stored")
    assert count(daemon.db, "inbox") == 0
    status = subprocess.run(
        [str(BIN / "nmem"), "status", "--json"], env=daemon.env, capture_output=True, timeout=CLI_TIMEOUT_S
    )
    assert status.returncode == 0 and json.loads(status.stdout)["daemon"]["running"] is True
    search = subprocess.run(
        [str(BIN / "nmem"), "search", "marker"], cwd=work, env=daemon.env, capture_output=True, timeout=CLI_TIMEOUT_S
    )
    assert search.returncode == 0, search.stderr
