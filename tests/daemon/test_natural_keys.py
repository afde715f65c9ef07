"""A prompt seen by the hook and again in its transcript is stored once (Claude Code 2.1.196+ ids)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.env import BIN
from support.helpers import new_id, wait_until


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


def _compaction_hooks(session: str, prompt_id: str, cwd: str) -> list[bytes]:
    base = {"session_id": session, "transcript_path": f"{cwd}/t.jsonl", "cwd": cwd, "prompt_id": prompt_id}
    return [
        json.dumps({**base, "hook_event_name": "PreCompact", "trigger": "manual", "custom_instructions": ""}).encode(),
        json.dumps(
            {**base, "hook_event_name": "PostCompact", "trigger": "manual", "compact_summary": "Summary: kiwi work"}
        ).encode(),
    ]


def _compaction_transcript(root: Path, session: str, prompt_id: str, cwd: str) -> Path:
    """A compact boundary and its summary line, as Claude Code 2.1.196+ writes them (the summary has `promptId`)."""
    folder = root / "projects" / "-tmp-nkc"
    folder.mkdir(parents=True)
    common = {"cwd": cwd, "sessionId": session, "version": "2.1.330", "gitBranch": "main", "isSidechain": False}
    boundary = {
        **common,
        "type": "system",
        "subtype": "compact_boundary",
        "content": "Conversation compacted",
        "compactMetadata": {"trigger": "manual", "preTokens": 12000},
        "uuid": f"b-{new_id()}",
        "timestamp": "2026-11-20T10:00:00.000Z",
    }
    summary = {
        **common,
        "type": "user",
        "isCompactSummary": True,
        "promptId": prompt_id,
        "message": {"role": "user", "content": "Summary: kiwi work"},
        "uuid": f"s-{new_id()}",
        "timestamp": "2026-11-20T10:00:01.000Z",
    }
    (folder / f"{session}.jsonl").write_text(json.dumps(boundary) + "\n" + json.dumps(summary) + "\n")
    return root / "projects"


@pytest.mark.parametrize("order", ["live-then-import", "import-then-live"])
def test_a_compaction_seen_live_and_imported_is_stored_once(daemon: Daemon, tmp_path: Path, order: str) -> None:
    daemon.env["NMEM_MAINTENANCE_RETENTION_INTERVAL_S"] = "0"
    daemon.start()
    session, prompt_id, cwd = f"nkc-{new_id()[:12]}", f"p-{new_id()[:12]}", str(tmp_path)
    projects = _compaction_transcript(tmp_path, session, prompt_id, cwd)

    def live() -> None:
        for body in _compaction_hooks(session, prompt_id, cwd):
            assert run_send(body).returncode == 0
        wait_until(
            lambda: db_rows(daemon.db, "SELECT count(*) FROM events WHERE session_id = ?", (session,))[0][0] >= 2,
            10,
            "the live compaction acked",
        )

    steps = [live, lambda: _import(projects)] if order == "live-then-import" else [lambda: _import(projects), live]
    for step in steps:
        step()
    titles = db_rows(daemon.db, "SELECT title FROM observations WHERE session_id = ? ORDER BY id", (session,))
    assert [t[0].split(" (")[0] for t in titles] == ["Compacting", "Compacted"], titles
    assert sorted(
        r[0] for r in db_rows(daemon.db, "SELECT natural_key FROM events WHERE session_id = ?", (session,))
    ) == [
        f"compact:{session}:{prompt_id}:start",
        f"compact:{session}:{prompt_id}:summary",
    ]
