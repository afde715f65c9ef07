"""Checks worth running over the real captures in ../shared/fixtures, beside the repository.

Every other test reads the invented data of tests/data, so a clone runs them alone. These
run the same code over real Claude Code payloads and transcripts, whose shapes ours only
copy: they are marked `shared`, skipped where the folder is absent, and run by .ci/run. The
captures may not be redistributed, so nothing here quotes them: the assertions hold for any
real payload or transcript.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.checks import check_stored_as_observations, check_worker_agrees
from support.daemon import Daemon
from support.db import db_rows, integrity_ok
from support.fixtures import SHARED, shared_hook_payloads, shared_transcripts
from support.replay import transcript_payloads
from support.transcript_import import nmem_import, observations, session_of

from nmemd.capture.extract import extract
from nmemd.model import CONTENT_MAX, OBSERVATION_TYPES, TITLE_MAX

pytestmark = pytest.mark.shared

BY_EVENT = {
    "SessionStart": "session", "SessionEnd": "session", "UserPromptSubmit": "prompt", "PreToolUse": "event",
    "PermissionRequest": "event", "PostToolUseFailure": "error", "Notification": "notification",
    "SubagentStart": "agent", "SubagentStop": "agent", "Stop": "stop", "PreCompact": "compact",
    "PostCompact": "compact",
}  # fmt: skip
BY_TOOL = {
    "Read": "read", "Bash": "command", "Edit": "edit", "MultiEdit": "edit", "Write": "write", "Grep": "search",
    "Glob": "search", "WebSearch": "search", "WebFetch": "fetch", "TodoWrite": "task", "Task": "agent",
    "Agent": "agent",
}  # fmt: skip


def _kind(payload: dict[str, Any]) -> str:
    """The observation type a payload must give, from its event and tool alone."""
    event, tool = payload["hook_event_name"], payload.get("tool_name", "")
    if event != "PostToolUse":
        return BY_EVENT[event]
    return "mcp" if tool.startswith("mcp__") else BY_TOOL.get(tool, "tool")


def test_every_real_hook_payload_extracts_to_its_kind() -> None:
    payloads = list(shared_hook_payloads())
    events = {p["hook_event_name"] for _, p in payloads}
    assert {"SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "SessionEnd"} <= events
    for name, payload in payloads:
        ex = extract(payload)
        assert len(ex.observations) == 1, name
        obs = ex.observations[0]
        assert obs.type == _kind(payload) and obs.type in OBSERVATION_TYPES, name
        assert obs.title and len(obs.title) <= TITLE_MAX and len(obs.title.splitlines()) == 1, name
        assert len(obs.content) <= CONTENT_MAX and "extraction failed" not in obs.title, name
        assert (ex.hook_event, ex.session_id, ex.cwd) == (payload["hook_event_name"], payload["session_id"],
                                                          payload["cwd"]), name  # fmt: skip
        assert ex.tool_use_id == payload.get("tool_use_id") and obs.tool_name == payload.get("tool_name"), name
        if obs.type in ("read", "edit", "write"):
            assert obs.file_path == payload["tool_input"]["file_path"], name


def test_the_worker_extracts_every_real_payload_exactly_as_the_loop_does() -> None:
    """Byte-identical worker replies over every real hook payload and every call replayed from a real transcript."""
    bodies = [json.dumps(p).encode() for _, p in shared_hook_payloads()]
    bodies += [json.dumps(p).encode() for path in shared_transcripts() for p in transcript_payloads(path)]
    assert len(bodies) > 50
    check_worker_agrees(bodies)


@pytest.mark.timeout(120)
def test_every_real_hook_payload_is_stored_as_its_observation(daemon: Daemon) -> None:
    bodies = [json.dumps(p).encode() for _, p in shared_hook_payloads()]
    check_stored_as_observations(daemon, bodies)


def test_real_transcripts_import_whole_and_once(daemon: Daemon, tmp_path: Path) -> None:
    """Every real transcript, laid out as Claude Code files them, imports without a bad line; again, adds nothing."""
    projects = tmp_path / "projects"
    for path in shared_transcripts():
        sid = session_of(path)
        if "subagent" in path.name:
            folder = projects / "-sub" / sid / "subagents"
            target = folder / f"agent-{path.stem.rsplit('-agent-', 1)[-1]}.jsonl"
        else:
            folder, target = projects / "-main", projects / "-main" / f"{sid}.jsonl"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    daemon.env["NMEM_MAINTENANCE_RETENTION_INTERVAL_S"] = "0"  # old captures: extraction is checked, not retention
    daemon.start()
    code, summary, _ = nmem_import(str(projects))
    assert code == 0
    assert summary["files"] == len(shared_transcripts()) and summary["bad_files"] == []
    assert summary["invalid_lines"] == 0
    # The captures of README.md: 4 prompts, 17 tool results, 2 rejected calls, 2 compaction records, and
    # each file's last text as its final message.
    assert (summary["prompts"], summary["tool_calls"], summary["errors"], summary["compactions"]) == (4, 17, 2, 2)
    assert summary["replies"] == 3 and summary["sessions_summarized"] == 4
    assert summary["said"] == 6  # the agent's words between its tool calls (issue #39)
    assert summary["events_sent"] == summary["events_new"] == 34
    rows = observations(daemon.db)
    assert len(rows) == 34 and all(r[6] for r in rows if r[8].startswith("PostToolUse"))  # calls keep their ids
    assert all("extraction failed" not in r[1] for r in rows)
    assert {r[0] for r in db_rows(daemon.db, "SELECT git_branch FROM sessions")} != {None}

    code, again, _ = nmem_import(str(projects))
    assert code == 0 and again["events_new"] == 0
    assert observations(daemon.db) == rows
    daemon.stop()
    integrity_ok(daemon.db)


def test_the_shared_folder_is_where_the_marker_looks() -> None:
    """The marker's skip and this file read the same folder: a run with it present runs everything here."""
    assert SHARED.is_dir() and any(SHARED.glob("hook-stdin-*")) and shared_transcripts()
