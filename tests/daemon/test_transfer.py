"""Export / import: hook payloads round-trip into an empty home, import is idempotent, bad lines change nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from support.daemon import Daemon
from support.db import db_rows, integrity_ok
from support.fixtures import hook_payloads
from support.helpers import new_id, nmem_bytes, send_hook

TABLES = ("observations", "sessions", "prompts", "events")


def populate(daemon: Daemon) -> None:
    """Every hook payload of tests/data, through the socket; plus a second project."""
    for _, body in hook_payloads():
        status, reply = send_hook(daemon.socket, new_id(), json.dumps(body).encode())
        assert status == b"OK", reply
    other = {"session_id": "other-s", "cwd": "/tmp/nmem-other-project", "hook_event_name": "UserPromptSubmit",
             "prompt": "explain the walrus parser"}  # fmt: skip
    assert send_hook(daemon.socket, new_id(), json.dumps(other).encode())[0] == b"OK"


def counts(db: Path) -> dict[str, int]:
    return {t: int(db_rows(db, f"SELECT count(*) FROM {t}")[0][0]) for t in TABLES}  # type: ignore[call-overload]


def body_lines(export: bytes) -> list[bytes]:
    """The export without its header line (which holds the export time)."""
    lines = export.splitlines()
    assert json.loads(lines[0])["kind"] == "header"
    return lines[1:]


def other_home(tmp_path: Path, short_dir: str, name: str) -> dict[str, str]:
    return {"NMEM_HOME": str(tmp_path / name), "NMEM_SOCKET": os.path.join(short_dir, name, "s.sock")}


def test_round_trip_into_an_empty_home_and_importing_twice_changes_nothing(
    daemon: Daemon, tmp_path: Path, short_dir: str
) -> None:
    daemon.start()
    populate(daemon)
    first = int(db_rows(daemon.db, "SELECT min(id) FROM observations")[0][0])  # type: ignore[call-overload]
    assert nmem_bytes("pin", str(first)).returncode == 0
    exported = nmem_bytes("export")  # the daemon runs: export reads a snapshot beside it
    assert exported.returncode == 0, exported.stderr
    assert daemon.stop() == 0
    source = counts(daemon.db)
    lines = body_lines(exported.stdout)
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds.count("observation") == source["observations"] and kinds.count("session") == source["sessions"]
    obs = [json.loads(line) for line in lines if b'"kind":"observation"' in line]
    assert {"event_id", "session_id", "project", "ts", "type", "title", "content", "file_path", "pinned",
            "count", "prompt_number"} <= set(obs[0])  # fmt: skip
    assert sum(o["pinned"] for o in obs) == 1

    dump = tmp_path / "nmem.jsonl"
    dump.write_bytes(exported.stdout)
    empty = other_home(tmp_path, short_dir, "b")
    done = nmem_bytes("import", str(dump), "--json", env=empty)  # no daemon for this home: written directly
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"observations": source["observations"], "sessions": source["sessions"], "present": 0,
                      "bad_lines": []}  # fmt: skip
    target = Path(empty["NMEM_HOME"]) / "nmem.db"
    after_first = counts(target)
    assert after_first["observations"] == source["observations"] and after_first["prompts"] == source["prompts"]
    integrity_ok(target)

    again = nmem_bytes("import", str(dump), env=empty)
    assert again.returncode == 0, again.stderr
    assert b"imported 0 observations and 0 sessions" in again.stdout
    assert counts(target) == after_first
    reexported = nmem_bytes("export", env=empty)
    assert reexported.returncode == 0, reexported.stderr
    assert body_lines(reexported.stdout) == lines  # everything restored, in the same order

    # searching the restored home finds what the original held
    found = nmem_bytes("search", "walrus", "--all", "--json", env=empty)
    assert found.returncode == 0 and b"walrus" in found.stdout


def test_import_through_a_running_daemon_restores_what_was_forgotten(daemon: Daemon, tmp_path: Path) -> None:
    daemon.start()
    populate(daemon)
    exported = nmem_bytes("export")
    assert exported.returncode == 0, exported.stderr
    dump = tmp_path / "all.jsonl"
    dump.write_bytes(exported.stdout)
    before = counts(daemon.db)

    same = nmem_bytes("import", str(dump), "--json")  # into the store it came from: all present
    assert same.returncode == 0, same.stderr
    assert json.loads(same.stdout)["observations"] == 0 and counts(daemon.db) == before

    walrus = db_rows(daemon.db, "SELECT id FROM observations WHERE content LIKE '%walrus%' OR title LIKE '%walrus%'")
    assert nmem_bytes("forget", str(walrus[0][0])).returncode == 0
    restored = nmem_bytes("import", str(dump), "--json")
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["observations"] == 1
    assert counts(daemon.db)["observations"] == before["observations"]
    # ingestion goes on after an import on the daemon's connection (no id collision)
    later = {"session_id": "later", "cwd": "/tmp/nmem-other-project", "hook_event_name": "UserPromptSubmit",
             "prompt": "after the import: narwhal"}  # fmt: skip
    assert send_hook(daemon.socket, new_id(), json.dumps(later).encode())[0] == b"OK"
    assert db_rows(daemon.db, "SELECT count(*) FROM observations WHERE title LIKE '%narwhal%'") == [(1,)]
    assert daemon.stop() == 0
    integrity_ok(daemon.db)


def test_export_one_project(daemon: Daemon) -> None:
    daemon.start()
    populate(daemon)
    done = nmem_bytes("export", "--project", "/tmp/nmem-other-project")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in body_lines(done.stdout)]
    assert [r["kind"] for r in records] == ["session", "observation"]
    assert records[1]["title"].endswith("walrus parser") and records[1]["project"] == "/tmp/nmem-other-project"
    assert json.loads(done.stdout.splitlines()[0])["project"] == "/tmp/nmem-other-project"


GOOD = {"kind": "observation", "event_id": "ev-good-1", "session_id": "s-imp", "ts": 1_700_000_000.0,
        "type": "prompt", "title": "imported prompt about the okapi"}  # fmt: skip


def test_bad_lines_are_reported_by_number_and_change_nothing(daemon: Daemon, tmp_path: Path) -> None:
    daemon.start()
    populate(daemon)
    before = counts(daemon.db)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        b"\n".join([
            json.dumps(GOOD).encode(),
            b"{not json",
            json.dumps({**GOOD, "event_id": "ev-2", "type": "bogus"}).encode(),
            b"",
            json.dumps({**GOOD, "event_id": "ev-3", "ts": "yesterday"}).encode(),
            json.dumps({"kind": "hamster"}).encode(),
            json.dumps({"kind": "header", "format": 99, "exported_at": 0}).encode(),
            b"\xff\xfe garbage",
            json.dumps({**GOOD, "event_id": "ev-4", "extra": 1}).encode(),
        ])
    )  # fmt: skip
    done = nmem_bytes("import", str(bad))
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "7 bad lines: line 2:" in lines[0] and "line 3:" in lines[0] and "nothing imported" in lines[0], lines
    assert counts(daemon.db) == before

    skipped = nmem_bytes("import", str(bad), "--skip-bad", "--json")
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads(skipped.stdout) == {"observations": 1, "sessions": 0, "present": 0,
                                          "bad_lines": [2, 3, 5, 6, 7, 8, 9]}  # fmt: skip
    assert b"skipped 7 bad lines" in skipped.stderr
    assert db_rows(daemon.db, "SELECT count(*) FROM prompts p JOIN observations o ON o.id = p.observation_id"
                              " WHERE o.event_id = 'ev-good-1'") == [(1,)]  # fmt: skip

    for args in (("import", str(tmp_path / "missing.jsonl")), ("import", str(tmp_path))):
        gone = nmem_bytes(*args)
        assert gone.returncode == 1 and b"Traceback" not in gone.stderr
        assert len(gone.stderr.strip().splitlines()) == 1 and b"cannot read" in gone.stderr, gone.stderr
    from_stdin = nmem_bytes("import", "-", stdin=json.dumps({**GOOD, "event_id": "ev-stdin"}).encode())
    assert from_stdin.returncode == 0 and b"imported 1 observation " in from_stdin.stdout, from_stdin.stderr
    assert daemon.stop() == 0
    integrity_ok(daemon.db)


def test_export_without_a_database_is_one_line(tmp_path: Path) -> None:
    done = nmem_bytes("export")
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode().strip().count("\n") == 0 and "no database yet" in done.stderr.decode()
