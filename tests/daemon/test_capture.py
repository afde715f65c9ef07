"""Acceptance: every hook payload of tests/data goes through nmem-send into a running daemon."""

from __future__ import annotations

import json

import pytest
from support.checks import check_stored_as_observations
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.fixtures import hook_bodies

PROJECT = "/Users/dev/work/lighthouse"
_payloads = hook_bodies


@pytest.mark.timeout(120)
def test_every_hook_fixture_is_stored_as_its_observation(daemon: Daemon) -> None:
    payloads = _payloads()
    assert len(payloads) == 40  # 35 + 5 legacy
    check_stored_as_observations(daemon, payloads)


def test_fixture_spot_checks(daemon: Daemon) -> None:
    """A few literal expectations, so the test above is not only extract() against itself."""
    daemon.start()
    wanted = {"Read", "Bash", "Edit", "Task"}
    for body in _payloads():
        payload = json.loads(body)
        if payload.get("hook_event_name") in ("PostToolUse", "PostToolUseFailure") and (
            payload.get("tool_name") in wanted or payload.get("hook_event_name") == "PostToolUseFailure"
        ):
            run_send(body)
    daemon.stop()
    by_type = {}
    for type_, title, path, command, project in db_rows(
        daemon.db, "SELECT type, title, file_path, command, project FROM observations ORDER BY id"
    ):
        by_type.setdefault(type_, []).append((title, path, command, project))
    read_title, read_path, _, read_project = by_type["read"][0]
    assert read_path == f"{PROJECT}/data/cost_tiers.yaml"
    assert read_title == "Read data/cost_tiers.yaml (33 lines)"
    assert read_project == PROJECT
    assert any(cmd and cmd.startswith("wc -c ") for _, _, cmd, _ in by_type["command"])
    assert any(path and path.endswith("templates/hooks.json.template") for _, path, _, _ in by_type["edit"])
    assert any(title.startswith("Agent researcher") for title, _, _, _ in by_type["agent"])
    errors = [title for title, _, _, _ in by_type["error"]]
    assert any(t.startswith("Bash failed") for t in errors) and any(t.startswith("Read failed") for t in errors)


def test_unknown_event_and_tool_are_stored_generically(daemon: Daemon) -> None:
    daemon.start()
    run_send(b'{"session_id": "u1", "hook_event_name": "BrandNewEvent", "cwd": "/tmp", "x": 1}')
    run_send(
        b'{"session_id": "u1", "hook_event_name": "PostToolUse", "tool_name": "FrobnicateTool",'
        b' "tool_input": {"level": 3}, "tool_response": "ok", "cwd": "/tmp"}'
    )
    run_send(
        b'{"session_id": "u1", "hook_event_name": "PostToolUse", "tool_name": "mcp__memory__search",'
        b' "tool_input": {"q": "auth"}, "tool_response": [{"type": "text", "text": "3 hits"}], "cwd": "/tmp"}'
    )
    daemon.stop()
    rows = db_rows(daemon.db, "SELECT hook_event, type, tool_name FROM observations ORDER BY id")
    assert rows == [
        ("BrandNewEvent", "event", None),
        ("PostToolUse", "tool", "FrobnicateTool"),
        ("PostToolUse", "mcp", "mcp__memory__search"),
    ]
