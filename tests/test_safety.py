"""Issue #16: safe on a shared machine and under faults (findings 2, 4, 5, 9, 10)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import Daemon, db_rows, integrity_ok, run_send
from helpers import count, log_text, ping, prompt_event, wait_until

from nmemd.history.transcripts import decode_line

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
