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
from support.daemon import Daemon, run_send
from support.env import BIN
from support.helpers import count, kill_all, log_text, payload, ping, wait_until

from nmem_client import fallback

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
    assert "is not known after 0.2 s" in log_text(daemon.home)  # said, not silent


def _nmem(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "nmem"), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )


def _session_start(marker: str) -> bytes:
    return json.dumps(
        {"session_id": marker, "cwd": "/tmp", "hook_event_name": "SessionStart", "source": "startup"}
    ).encode()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a second uid (chown)")
def test_a_logs_symlink_in_another_users_home_gets_nothing(short_dir: str, nmem_env: dict[str, str]) -> None:
    """Finding 11: NMEM_HOME is checked before the log is opened: a `logs` link planted in a home of
    another user (uid 65534) makes the daemon refuse with one line, and write nothing where it points."""
    home, elsewhere = Path(short_dir) / "shared", Path(short_dir) / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    (home / "logs").symlink_to(elsewhere)
    for path in (home, home / "logs", elsewhere):
        os.lchown(path, 65534, 65534)
    done = subprocess.run(
        [str(BIN / "nmemd")],
        env={**os.environ, **nmem_env, "NMEM_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert done.returncode == 3 and "owned by uid 65534" in done.stderr and done.stderr.count("\n") == 1
    assert list(elsewhere.iterdir()) == []


CORRUPT = {
    "syntax": ('dedup_window_s = 30\nskip_tools = ["Read",\nsynchronous = "FULL"\n', "line 3, column 1"),
    "value": ('dedup_window_s = 30\nmax_connections = "many"\n', "(line 2)"),
    "fifo": (None, "not a regular file"),
    "devzero": ("/dev/zero", "not a regular file"),
}


@pytest.fixture
def corrupt_config(nmem_env: dict[str, str], request: pytest.FixtureRequest) -> Iterator[tuple[Path, str]]:
    home = Path(nmem_env["NMEM_HOME"])
    home.mkdir(parents=True, mode=0o700)
    path = home / "config.toml"
    text, expected = CORRUPT[request.param]
    if request.param == "fifo":
        os.mkfifo(path, 0o600)
    elif request.param == "devzero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text(str(text))
    yield path, expected
    if request.param == "fifo":
        _unblock(path)
    kill_all(home)  # a daemon the hook started, left by a failed test


@pytest.mark.parametrize("corrupt_config", list(CORRUPT), indirect=True)
def test_a_corrupt_config_stops_nothing_and_is_said_everywhere(
    corrupt_config: tuple[Path, str], daemon: Daemon, nmem_env: dict[str, str]
) -> None:
    """Finding 8 / issue #31 item 3: with a config.toml that is corrupt, holds a bad value, is a FIFO or
    a link to /dev/zero: a SessionStart starts the daemon, which runs without what it cannot use and
    says so in its log, in its SessionStart reply (systemMessage naming nmem doctor) and in status;
    status, doctor and config show point at the problem (exit 1); daemon stop stops it."""
    path, expected = corrupt_config
    env = {**os.environ, **nmem_env}
    started = run_send(_session_start("cfgstart"), env=nmem_env)
    assert started.returncode == 0 and started.stderr == b""
    reply = json.loads(started.stdout)
    assert expected in reply["systemMessage"] and "nmem doctor" in reply["systemMessage"], reply
    later = run_send(payload("cfglater"), env={**nmem_env, "NMEM_AUTOSTART": "0"})
    assert later.returncode == 0
    wait_until(lambda: count(daemon.db, "events", "session_id IN ('cfgstart', 'cfglater')") == 2, 15, "stored")
    assert count(daemon.db, "inbox") == 0
    log = (daemon.home / "logs" / "nmemd.log").read_text()
    assert "ERROR nmemd: config:" in log and expected in log and "retention sweep off" in log
    status = _nmem("status", env=env)
    assert status.returncode == 1 and "running" in status.stdout and expected in status.stderr + status.stdout
    doctor = _nmem("doctor", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert doctor.returncode == 1 and checks["config"]["status"] == "fail" and expected in checks["config"]["detail"]
    shown = _nmem("config", "show", env=env)
    assert shown.returncode == 1 and expected in shown.stderr and "dedup_window_s" in shown.stdout
    stop = _nmem("daemon", "stop", env=env)
    assert stop.returncode == 0 and "stopped" in stop.stdout, stop.stderr
    assert path.exists() or path.is_symlink()


def _fallback_events(home: str) -> list[Path]:
    return [p for folder in fallback.candidates(home) for p in sorted(Path(folder).glob("*.event"))]


@pytest.fixture
def unusable_home(nmem_env: dict[str, str], request: pytest.FixtureRequest) -> Iterator[str]:
    """NMEM_HOME as a regular file, a folder of uid 65534, or a path that cannot be made."""
    home = nmem_env["NMEM_HOME"]
    if request.param == "file":
        Path(home).write_text("not a folder\n")
    elif request.param == "foreign":
        if os.geteuid() != 0:
            pytest.skip("needs a second uid (chown)")
        Path(home).mkdir(mode=0o700)
        os.chown(home, 65534, 65534)
    else:
        home = f"/proc/nope-{os.urandom(4).hex()}"
        nmem_env["NMEM_HOME"] = home
    yield home
    for event in _fallback_events(home):
        event.unlink()


@pytest.mark.parametrize("unusable_home", ["file", "foreign", "proc"], indirect=True)
def test_an_unusable_home_loses_no_event_and_says_so(
    unusable_home: str, nmem_env: dict[str, str], short_dir: str
) -> None:
    """Issue #31 item 2: with NMEM_HOME a file, another user's folder or `/proc/nope`, the hook client
    keeps the event in a private spool outside it, the SessionStart reply says so (systemMessage naming
    nmem doctor), no daemon is started; status and doctor fail with the reason; `nmem daemon start`
    fails at once naming it, not a log. Once the home works, the daemon stores every event once."""
    home = unusable_home
    env = {**os.environ, **nmem_env}
    started = run_send(_session_start("homestart"), env=nmem_env)
    assert started.returncode == 0 and started.stderr == b""
    notice = json.loads(started.stdout)["systemMessage"]
    assert home in notice and "nmem doctor" in notice, notice
    prompt = run_send(payload("homeprompt"), env=nmem_env)
    assert prompt.returncode == 0 and prompt.stderr == b"" and prompt.stdout == b""
    kept = _fallback_events(home)
    assert len(kept) == 2
    folder = kept[0].parent
    assert folder.stat().st_mode & 0o777 == 0o700 and folder.parent.stat().st_mode & 0o777 == 0o700
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in kept)
    status = _nmem("status", env=env)
    assert status.returncode == 1 and "2 events wait in" in status.stdout, status.stdout
    doctor = _nmem("doctor", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert doctor.returncode == 1 and checks["capture"]["status"] == "fail"
    start = _nmem("daemon", "start", env=env)
    assert start.returncode == 1 and home in start.stderr and "log" not in start.stderr, start.stderr
    if home.startswith("/proc/"):
        return  # nothing can make it work: the events stay where status and doctor point
    if Path(home).is_file():
        Path(home).unlink()
    else:
        os.chown(home, os.geteuid(), os.getegid())
    daemon = Daemon(nmem_env, short_dir)
    daemon.start()
    try:
        wait_until(lambda: count(daemon.db, "events", "session_id IN ('homestart', 'homeprompt')") == 2, 15, "stored")
        drained = lambda: not _fallback_events(home) and not (folder / fallback.REASON).exists()  # noqa: E731
        wait_until(drained, 15, "fallback drained, its reason removed")
        assert _nmem("status", env=env).returncode == 0
    finally:
        daemon.stop()


def test_malformed_hook_input_is_counted(daemon: Daemon, nmem_env: dict[str, str]) -> None:
    """Issue #31 item 2: empty and non-JSON hook input is counted; status and doctor show it."""
    daemon.start()
    for body in (b"", b"   \n", b"not json at all", b'{"cut": '):
        done = run_send(body, env=nmem_env)
        assert done.returncode == 0 and done.stderr == b"" and done.stdout == b""
    env = {**os.environ, **nmem_env}
    status = _nmem("status", "--json", env=env)
    facts = json.loads(status.stdout)
    assert status.returncode == 0 and facts["malformed_inputs"] == 4, facts
    assert "4 hook inputs not usable" in _nmem("status", env=env).stdout
    doctor = _nmem("doctor", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["capture"]["status"] == "warn" and "4 hook inputs" in checks["capture"]["detail"]


def test_a_daemon_that_cannot_start_is_said_at_session_start(nmem_env: dict[str, str]) -> None:
    """Issue #31 item 3: a SessionStart whose daemon cannot start (a database that is not one) stops
    waiting when the daemon says why, and the reply names it and nmem doctor; the daemon's log has
    the line, and the event waits in the spool (not lost). `nmem daemon start` stops waiting too."""
    home = Path(nmem_env["NMEM_HOME"])
    home.mkdir(mode=0o700)
    (home / "nmem.db").write_bytes(b"this is not a database, " * 400)
    (home / "nmem.db").chmod(0o600)
    started = run_send(_session_start("deadstart"), env=nmem_env)
    assert started.returncode == 0 and started.stderr == b""
    notice = json.loads(started.stdout)["systemMessage"]
    assert "cannot start: file is not a database" in notice and "nmem doctor" in notice, notice
    assert "startup failed: file is not a database" in (home / "logs" / "nmemd.log").read_text()
    assert len(list((home / "spool").glob("*.event"))) == 1
    start = _nmem("daemon", "start", env={**os.environ, **nmem_env})  # fails as soon as the daemon says why
    assert start.returncode == 1 and "nmemd cannot start: file is not a database" in start.stderr, start.stderr
