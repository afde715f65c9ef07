"""Checks several test modules run, over the invented data of tests/data and over the real captures
(tests/daemon/test_shared_captures.py): every payload stored as the observation extraction gives, and the
extraction worker answering byte for byte as the event loop does."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec

from nmemd.capture.extract import extract, extract_event
from nmemd.capture.extract_worker import FAILED, INVALID, OK, REPLY, REQUEST
from nmemd.errors import InvalidEvent
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok


def check_stored_as_observations(daemon: Daemon, payloads: list[bytes]) -> None:
    """Each payload through nmem-send into a new daemon: one ledger row each, pointing at what extract() gives."""
    daemon.start()
    for body in payloads:
        done = run_send(body)
        assert done.returncode == 0 and done.stderr == b""
    daemon.stop()

    # One ledger row per event sent, in order; each points at its observation.
    rows = db_rows(
        daemon.db,
        "SELECT e.session_id, e.hook_event, o.type, o.title, o.file_path, o.command, o.project, o.session_id"
        " FROM events e LEFT JOIN observations o ON o.id = e.observation_id ORDER BY e.received_at",
    )
    assert len(rows) == len(payloads)
    for body, row in zip(payloads, rows, strict=True):
        expected = extract(json.loads(body))
        first = expected.observations[0]
        assert row[:2] == (expected.session_id, expected.hook_event)
        assert row[2:] == (
            first.type,
            first.title,
            first.file_path,
            first.command,
            expected.project,
            expected.session_id,
        )
    integrity_ok(daemon.db)


SKIP = frozenset({"TodoWrite"})
# Refused, all but the last (stored generically): the worker must agree on both kinds.
BAD_BODIES = [b"", b"{", b"\xff\xfe", b"[1, 2]", b"[" * 10_000 + b"]" * 10_000, b'{"hook_event_name": 3}']


def worker_replies(bodies: list[bytes], skip: frozenset[str]) -> list[tuple[int, int, bytes]]:
    """Run a worker over `bodies` (all written, then EOF) and parse its replies, hello first."""
    requests = b"".join(REQUEST.pack(len(b), seq) + b for seq, b in enumerate(bodies, start=1))
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "nmemd.capture.extract_worker", *sorted(skip)],
        input=requests,
        capture_output=True,
        timeout=60,
        check=True,
    )
    out, pos, replies = proc.stdout, 0, []
    while pos < len(out):
        length, seq, status = REPLY.unpack_from(out, pos)
        pos += REPLY.size
        replies.append((seq, status, out[pos : pos + length]))
        pos += length
    assert proc.stderr == b""
    return replies


def check_worker_agrees(payloads: list[bytes]) -> None:
    """The worker's reply to each body (and to BAD_BODIES after them) is byte for byte the loop's."""
    bodies = payloads + BAD_BODIES
    replies = worker_replies(bodies, SKIP)
    assert replies[0] == (0, OK, b"")  # the hello
    assert [seq for seq, _, _ in replies[1:]] == list(range(1, len(bodies) + 1))  # in order, one each
    encode = msgspec.msgpack.Encoder().encode
    for body, (_, status, reply) in zip(bodies, replies[1:], strict=True):
        try:
            expected = (OK, encode(extract_event(body, SKIP)))
        except InvalidEvent as exc:
            expected = (INVALID, str(exc).encode())
        assert (status, reply) == expected, body[:80]
    assert [status for _, status, _ in replies[-len(BAD_BODIES) : -1]] == [INVALID] * (len(BAD_BODIES) - 1)
    assert all(status != FAILED for _, status, _ in replies)
