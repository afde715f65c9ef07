"""A prompt seen by the hook and again in its transcript is stored once (Claude Code 2.1.196+ ids)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import BIN, Daemon, db_rows, run_send
from helpers import new_id, wait_until


def _hook(session: str, prompt_id: str, cwd: str) -> bytes:
    return json.dumps(
        {
            "session_id": session,
            "transcript_path": f"{cwd}/t.jsonl",
            "cwd": cwd,
            "permission_mode": "default",
            "hook_event_name": "UserPromptSubmit",
            "prompt_id": prompt_id,
            "prompt": "why does the build fail on CI",
        }
    ).encode()


def _transcript(root: Path, session: str, prompt_id: str, cwd: str) -> Path:
    folder = root / "projects" / "-tmp-nk"
    folder.mkdir(parents=True)
    line = {
        "parentUuid": None,
        "isSidechain": False,
        "userType": "external",
        "cwd": cwd,
        "sessionId": session,
        "version": "2.1.200",
        "gitBranch": "main",
        "type": "user",
        "promptId": prompt_id,
        "message": {"role": "user", "content": "why does the build fail on CI"},
        "uuid": f"u-{new_id()}",
        "timestamp": "2026-11-20T10:00:00.000Z",
    }
    (folder / f"{session}.jsonl").write_text(json.dumps(line) + "\n")
    return root / "projects"


def _import(projects: Path) -> None:
    done = subprocess.run(
        [str(BIN / "nmem"), "import-transcripts", "--json", str(projects)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("order", ["live-then-import", "import-then-live"])
def test_a_prompt_seen_live_and_imported_is_stored_once(daemon: Daemon, tmp_path: Path, order: str) -> None:
    daemon.env["NMEM_MAINTENANCE_RETENTION_INTERVAL_S"] = "0"
    daemon.start()
    session, prompt_id, cwd = f"nk-{new_id()[:12]}", f"p-{new_id()[:12]}", str(tmp_path)
    projects = _transcript(tmp_path, session, prompt_id, cwd)

    def live() -> None:
        assert run_send(_hook(session, prompt_id, cwd)).returncode == 0
        wait_until(
            lambda: db_rows(daemon.db, "SELECT count(*) FROM events WHERE session_id = ?", (session,))[0][0],
            10,
            "the live prompt acked",
        )

    steps = [live, lambda: _import(projects)] if order == "live-then-import" else [lambda: _import(projects), live]
    for step in steps:
        step()
    assert db_rows(
        daemon.db, "SELECT count(*) FROM observations WHERE session_id = ? AND type = 'prompt'", (session,)
    ) == [(1,)]
    assert db_rows(
        daemon.db, "SELECT natural_key FROM events WHERE session_id = ? AND natural_key IS NOT NULL", (session,)
    ) == [(f"prompt:{session}:{prompt_id}",)]
