"""Issue #16: safe on a shared machine and under faults (findings 2, 4, 5, 9, 10)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.env import BIN, remove_fallbacks
from support.helpers import count, log_text, ping, prompt_event, wait_until

from nmemd.agents.claude_code.history import decode_line

SPOOL_ONE = "import sys; from nmem_client import inbox; inbox.spool(sys.argv[1], sys.stdin.buffer.read())"

# A prompt cut inside an emoji: Python's json writes the lone high surrogate as an escape.
CUT = "cut here \ud83d end"


def _cut_payload(marker: str) -> bytes:
    event = prompt_event(marker)
    event["prompt"] = f"{CUT} {marker}"
    return json.dumps(event).encode()  # ensure_ascii: b'\\ud83d', what a hook could send


def test_a_lone_surrogate_is_stored_replaced_on_every_path(daemon: Daemon, nmem_env: dict[str, str]) -> None:
    """Finding 5: socket, inbox drain and spool drain each store the event with U+FFFD, none refuses it."""
    no_start = {**nmem_env, "NMEM_AUTOSTART": "0"}
    done = run_send(_cut_payload("surrinbox"), env=no_start)  # no daemon: the client writes the inbox
    assert done.returncode == 0 and done.stderr == b""
    spool = subprocess.run(  # the client's own spool writer, as it runs when the inbox is unavailable
        [sys.executable, "-c", SPOOL_ONE, "0" * 24 + "surrspool"],
        input=_cut_payload("surrspool"), env={**nmem_env}, capture_output=True, timeout=20, check=True,
    )  # fmt: skip
    assert spool.stderr == b""
    daemon.start()
    done = run_send(_cut_payload("surrsock"), env=nmem_env)
    assert done.returncode == 0 and done.stderr == b""
    markers = ("surrinbox", "surrspool", "surrsock")
    wait_until(lambda: count(daemon.db, "events", "session_id IN (?, ?, ?)", markers) == 3, 15, "3 events stored")
    wait_until(lambda: count(daemon.db, "inbox") == 0, 15, "inbox drained")
    for marker in markers:
        rows = db_rows(daemon.db, "SELECT content FROM observations WHERE content LIKE ?", (f"%{marker}%",))
        assert rows and all("cut here \ufffd end" in str(r[0]) for r in rows), (marker, rows)
    assert "refused event" not in log_text(daemon.home) and "dropping invalid" not in log_text(daemon.home)
    integrity_ok(daemon.db)


def test_a_transcript_line_with_a_lone_surrogate_is_read() -> None:
    """Finding 5, import path: the line is read with U+FFFD, not skipped as invalid JSON."""
    line = json.dumps({"type": "user", "message": {"role": "user", "content": CUT}}).encode()
    decoded = decode_line(line)
    assert isinstance(decoded, dict)
    assert "\ufffd" in json.dumps(decoded, ensure_ascii=False)


def test_the_drain_removes_stale_spool_temp_files_only(daemon: Daemon, nmem_env: dict[str, str]) -> None:
    """Finding 4: a `.tmp` left by a client that died mid-write (possibly holding an unredacted
    secret) is removed by the drain; one a live client may still be writing is left alone."""
    spool = Path(nmem_env["NMEM_HOME"], "spool")
    spool.mkdir(parents=True, mode=0o700, exist_ok=True)
    stale = spool / ("1" * 24 + ".event.tmp")
    fresh = spool / ("2" * 24 + ".event.tmp")
    stale.write_bytes(b'{"prompt": "AKIAIOSFODNN7EXAMPLE half writ')
    fresh.write_bytes(b'{"prompt": "being written')
    old = time.time() - 3600  # an hour: no live client writes that long
    os.utime(stale, (old, old))
    daemon.start()
    wait_until(lambda: not stale.exists(), 15, "stale temp file removed")
    assert fresh.exists()
    assert ping(daemon.socket) is not None


def _transcript_line(ts: str, text: str, session: str, cwd: str, n: int) -> str:
    return json.dumps(
        {"type": "user", "message": {"role": "user", "content": text}, "timestamp": ts, "sessionId": session,
         "cwd": cwd, "uuid": f"u{n}", "parentUuid": None, "isSidechain": False, "userType": "external"}
    )  # fmt: skip


def test_out_of_range_transcript_times_do_not_break_the_readers(daemon: Daemon, tmp_path: Path) -> None:
    """Finding 10: lines dated year 1 and 9999 are imported with a usable time, and `nmem sessions`
    and `nmem search` keep working (a year-1 row used to break both with a traceback, for good)."""
    cwd = str(tmp_path / "proj")
    Path(cwd).mkdir()
    session = "yearone-session"
    lines = [
        _transcript_line("0001-01-01T00:00:00Z", "yearone prompt zebrafish", session, cwd, 1),
        _transcript_line("9999-12-31T23:59:59Z", "yearnine prompt zebrafish", session, cwd, 2),
        _transcript_line("2026-02-10T21:12:02.480Z", "normal prompt zebrafish", session, cwd, 3),
    ]
    transcript = tmp_path / f"{session}.jsonl"
    transcript.write_text("\n".join(lines) + "\n")
    daemon.start()
    env = {**daemon.env}
    done = subprocess.run(
        [str(BIN / "nmem"), "import-transcripts", "--json", str(transcript)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    wait_until(lambda: count(daemon.db, "observations", "content LIKE '%zebrafish%'") == 3, 15, "3 prompts")
    times = [r[0] for r in db_rows(daemon.db, "SELECT received_at FROM events WHERE session_id = ?", (session,))]
    assert times and all(946_684_800 <= t < 4_102_444_800 for t in times), times  # 2000 <= t < 2100
    for args in (["sessions", "--project", cwd], ["search", "zebrafish", "--project", cwd]):
        out = subprocess.run([str(BIN / "nmem"), *args], capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 0 and "Traceback" not in out.stderr, (args, out.stderr)


def test_readers_survive_rows_stored_with_impossible_times(daemon: Daemon, tmp_path: Path) -> None:
    """Finding 10, readers: rows an older version stored with a year-1 time
    are listed and searched (time shown as ?), never a traceback."""
    cwd = str(tmp_path / "proj")
    Path(cwd).mkdir()
    daemon.start()
    event = prompt_event("impossibletimes", cwd=cwd)
    event["prompt"] = "impossible times narwhal"
    assert run_send(json.dumps(event).encode(), env=daemon.env).returncode == 0
    wait_until(lambda: count(daemon.db, "observations", "content LIKE '%narwhal%'") == 1, 15, "stored")
    assert daemon.stop() == 0
    conn = sqlite3.connect(daemon.db)
    try:
        for table in ("events", "sessions", "observations"):
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            for col, value in zip(
                [c for c in cols if c.endswith(("_at", "_ts")) and c != "imported_at"],
                [-62135596800.0] * 9,  # year 1 (in New York local time: year 0)
                strict=False,
            ):
                conn.execute(f"UPDATE {table} SET {col} = ?", (value,))
        conn.commit()
    finally:
        conn.close()
    env = {**daemon.env, "NMEM_AUTOSTART": "0", "TZ": "America/New_York"}  # year 1 local: year 0
    for args in (["sessions", "--project", cwd], ["search", "narwhal", "--project", cwd]):
        out = subprocess.run([str(BIN / "nmem"), *args], capture_output=True, text=True, timeout=60, env=env)
        assert "Traceback" not in out.stderr, (args, out.stderr)
        assert out.returncode == 0, (args, out.stdout, out.stderr)


def test_under_umask_000_the_folders_nmem_creates_are_not_writable_by_others() -> None:
    """Finding 9: `os.makedirs` gave the parents it made (`~/.local`, `~/.local/share`) 0777 less
    the umask: 0777 under umask 000. Parents nmem creates are 0755 at most, its own folders 0700;
    folders that already exist are left as they are."""
    import shutil
    import tempfile

    home = tempfile.mkdtemp(dir="/tmp", prefix="nmu")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMEM_", "XDG_"))}
    env["HOME"] = home
    nmem = [str(BIN / "nmem")]
    try:
        done = subprocess.run([*nmem, "daemon", "start"], env=env, umask=0, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        modes = {
            p.relative_to(home).as_posix(): p.stat().st_mode & 0o777
            for p in [Path(home, ".local"), *Path(home, ".local").rglob("*")]
            if p.is_dir()
        }
        assert modes[".local"] == modes[".local/share"] == 0o755, modes
        assert modes[".local/share/nmem"] == modes[".local/share/nmem/run"] == 0o700, modes
        assert not any(mode & 0o022 for mode in modes.values()), modes
    finally:
        subprocess.run([*nmem, "daemon", "stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)


LISTENER = """
import os, socket, sys
path, record = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(8)
while True:
    conn, _ = srv.accept()
    data = conn.recv(65536)
    with open(record, "ab") as f:
        f.write(data)
    conn.sendall(b"OK 0\\n")
    conn.close()
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a listener as another user (uid 65534)")
def test_the_client_talks_only_to_a_socket_and_a_home_of_its_own_user(nmem_env: dict[str, str]) -> None:
    """Finding 8: with a socket folder (or NMEM_HOME) another user made first, nmem-send sent the raw
    payload, secret included, to that user's listener and wrote into that user's database. Now the
    client refuses a socket it does not own in a folder it does not control, and a home of another
    user's: it exits 0, silent, and sends and writes nothing there."""
    import shutil
    import tempfile

    base = tempfile.mkdtemp(dir="/tmp", prefix="nm8")
    os.chmod(base, 0o755)
    theirs = os.path.join(base, "theirs")
    os.mkdir(theirs)
    os.chown(theirs, 65534, 65534)
    record = os.path.join(theirs, "got")
    sock = os.path.join(theirs, "nmemd.sock")
    python = "/usr/bin/python3"  # one the other user may run (this venv may live under /root)
    if not os.access(python, os.X_OK):
        pytest.skip("no /usr/bin/python3 to run the other user's listener with")
    listener = subprocess.Popen([python, "-c", LISTENER, sock, record], user=65534, group=65534)
    secret = "AKIA" + "Z" * 16
    body = json.dumps({**prompt_event(f"deploy with {secret}"), "cwd": "/tmp"}).encode()
    try:
        wait_until(lambda: os.path.exists(sock), timeout=15.0, message="the other user's listener")
        env = {**os.environ, **nmem_env, "NMEM_SOCKET": sock, "NMEM_AUTOSTART": "0"}
        done = subprocess.run([str(BIN / "nmem-send")], input=body, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0 and done.stdout == b"" and done.stderr == b"", done
        assert not os.path.exists(record), "the payload went to another user's listener"
        assert count(Path(nmem_env["NMEM_HOME"]) / "nmem.db", "inbox") == 1  # kept in our own inbox

        their_home = os.path.join(theirs, "home")
        os.mkdir(their_home, 0o777)
        os.chmod(their_home, 0o777)
        os.chown(their_home, 65534, 65534)
        env = {**env, "NMEM_HOME": their_home, "NMEM_SOCKET": os.path.join(base, "none.sock")}
        done = subprocess.run([str(BIN / "nmem-send")], input=body, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0 and done.stdout == b"" and done.stderr == b"", done
        assert os.listdir(their_home) == [], "wrote into another user's NMEM_HOME"
    finally:
        listener.kill()
        listener.wait()
        shutil.rmtree(base, ignore_errors=True)
        remove_fallbacks(os.path.join(base, "theirs", "home"))  # where the client kept the event instead


def _stored_by_a_started_daemon(env: dict[str, str], marker: str, db: Path) -> None:
    """A hook with no daemon running: the client starts one, which stores the event from the inbox."""
    body = json.dumps({**prompt_event(marker), "cwd": "/tmp"}).encode()
    try:
        done = subprocess.run([str(BIN / "nmem-send")], input=body, env=env, capture_output=True, timeout=60)
        assert done.returncode == 0 and done.stderr == b"", done
        wait_until(lambda: count(db, "observations", "content LIKE ?", (f"%{marker}%",)) == 1, 30, "event stored")
        wait_until(lambda: count(db, "inbox") == 0, 30, "inbox drained")
    finally:
        subprocess.run([str(BIN / "nmem"), "daemon", "stop"], env=env, capture_output=True, timeout=60)


def test_a_symlinked_home_is_used_by_the_client_and_the_daemon_alike(short_dir: str) -> None:
    """Finding 7: the client followed a symlinked NMEM_HOME, the daemon refused it and exited: every
    hook wrote the raw event to the inbox and started a daemon that exited, and nothing drained. Both
    now apply one rule (a symlink of ours to a folder of ours is fine), so the event is stored."""
    real = Path(short_dir, "real")
    real.mkdir(mode=0o700)
    link = Path(short_dir, "home")
    link.symlink_to(real)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMEM_", "XDG_"))}
    env |= {"NMEM_HOME": str(link), "NMEM_SOCKET": os.path.join(short_dir, "s.sock")}
    _stored_by_a_started_daemon(env, "viasymlinkedhome", real / "nmem.db")
    assert "startup failed" not in log_text(real)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder of another user (uid 65534)")
def test_an_xdg_runtime_dir_of_another_user_is_not_where_the_socket_goes(short_dir: str) -> None:
    """Finding 7: with XDG_RUNTIME_DIR of another user (an `su` shell), the client aimed at a socket
    folder the daemon could not create. Both now skip a runtime folder that is not ours, as the XDG
    spec asks, and use `$NMEM_HOME/run`."""
    runtime = Path(short_dir, "rt")
    runtime.mkdir(mode=0o700)
    os.chown(runtime, 65534, 65534)
    home = Path(short_dir, "home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMEM_", "XDG_"))}
    env |= {"NMEM_HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    _stored_by_a_started_daemon(env, "besidetheirruntime", home / "nmem.db")
    assert (home / "run" / "nmemd.lock").exists()


def test_a_daemon_that_cannot_start_says_why(short_dir: str) -> None:
    """Finding 7: `nmem daemon start` waited 10 s and pointed at an empty log, and `nmem doctor` said
    ok, while every hook started a daemon that refused NMEM_HOME. Both now name the path and why."""
    home = Path(short_dir, "home")
    home.write_text("a file, not a folder\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NMEM_", "XDG_"))}
    env |= {"NMEM_HOME": str(home), "NMEM_SOCKET": os.path.join(short_dir, "s.sock")}
    started = time.monotonic()
    done = subprocess.run([str(BIN / "nmem"), "daemon", "start"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"cannot start: {home} is not a directory" in done.stderr, done.stderr
    assert time.monotonic() - started < 10, "it waited for a daemon that could not start"
    doctor = subprocess.run([str(BIN / "nmem"), "doctor"], env=env, capture_output=True, text=True, timeout=60)
    assert doctor.returncode != 0 and "Traceback" not in doctor.stderr
    line = next(x for x in doctor.stdout.splitlines() if " daemon " in x)
    assert line.startswith("FAIL") and "is not a directory" in line, doctor.stdout
    body = json.dumps({**prompt_event("nowhere"), "cwd": "/tmp"}).encode()
    sent = subprocess.run([str(BIN / "nmem-send")], input=body, env=env, capture_output=True, timeout=60)
    assert sent.returncode == 0 and sent.stdout == b"" and sent.stderr == b""  # the agent sees nothing
    assert home.read_text() == "a file, not a folder\n"


def test_a_wall_clock_leap_is_not_stamped_on_what_is_stored() -> None:
    """Finding 12: with the wall clock 400 days ahead, events were stored 400 days in the future. The
    daemon's clock stamps the time elapsed (CLOCK_BOOTTIME) while the wall clock has leapt, takes a
    leap that lasts an hour for a correction, and follows a clock that goes back at once."""
    from nmemd.capture.clock import LEAP_HOLD_S, Clock

    wall, elapsed = [1_700_000_000.0], [100.0]
    clock = Clock(wall=lambda: wall[0], elapsed=lambda: elapsed[0])
    assert clock.now() == wall[0]
    wall[0] += 60.0
    elapsed[0] += 60.0
    assert clock.now() == 1_700_000_060.0  # ordinary time
    wall[0] += 400 * 86400.0  # the leap
    assert clock.now() == 1_700_000_060.0
    elapsed[0] += 30.0
    wall[0] += 30.0
    assert clock.now() == 1_700_000_090.0  # still the elapsed time
    wall[0] -= 400 * 86400.0  # put right
    assert clock.now() == 1_700_000_090.0 == wall[0]
    wall[0] += 30 * 86400.0  # a correction ahead: after an hour it is the time
    assert clock.now() == 1_700_000_090.0
    elapsed[0] += LEAP_HOLD_S
    wall[0] += LEAP_HOLD_S
    assert clock.now() == wall[0]
    wall[0] -= 7200.0  # a clock that goes back is followed at once
    assert clock.now() == wall[0]
