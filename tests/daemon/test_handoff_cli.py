"""Handoffs end to end: an imported transcript, through a real daemon and the `nmem` CLI (how the lines are
made: tests/unit/test_handoff.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from support.daemon import Daemon
from support.env import BIN
from support.fixtures import COMPACT


def test_an_imported_session_gets_its_handoff_stored_listed_and_shown(daemon: Daemon, tmp_path: Path) -> None:
    daemon.start()
    folder = tmp_path / "projects" / "-home-dev-projects-orchard"
    folder.mkdir(parents=True)
    shutil.copy(COMPACT, folder / COMPACT.name)
    nmem = str(BIN / "nmem")
    done = subprocess.run([nmem, "import-transcripts", "--json", str(tmp_path / "projects")], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = subprocess.run([nmem, "sessions", "--all", "--json"], capture_output=True, text=True, timeout=60)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    (row,) = [r for r in rows if r["handoff"]]
    assert row["summary"].startswith("Asked: ") and all(line["ids"] for line in row["handoff"])
    shown = subprocess.run([nmem, "show", "s:" + row["session_id"][:8]], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"session {row['session_id']} claude-code")
    assert f"Asked: {row['handoff'][0]['text']} (#{row['handoff'][0]['ids'][0]})" in shown.stdout
    as_json = subprocess.run([nmem, "show", row["session_id"], "--json"], capture_output=True, text=True, timeout=60)
    assert json.loads(as_json.stdout)["lines"] == row["handoff"]
    long = subprocess.run([nmem, "sessions", "--all", "--handoff"], capture_output=True, text=True, timeout=60)
    assert "Asked: " in long.stdout
    bad = subprocess.run([nmem, "show", "s:zz"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr.startswith("error: no session 'zz'") and "Traceback" not in bad.stderr
