"""Cursor, the editor and its `cursor-agent` CLI. What nmem knows of it: README.md beside this file."""

from __future__ import annotations

import msgspec

from nmemd.agent_spec import AgentHome, AgentSpec, Lazy


def _reply(event: str, text: str) -> bytes:
    """sessionStart's form; beforeSubmitPrompt takes no context (README.md: Replies)."""
    return msgspec.json.encode({"additional_context": text}) if event == "SessionStart" else b""


HOME = AgentHome(env="NMEM_CURSOR_DIR", default=".cursor", commands=("cursor", "cursor-agent"))

SPEC = AgentSpec(
    name="cursor",
    label="Cursor",
    hooks=(
        "sessionStart",
        "beforeSubmitPrompt",
        "afterShellExecution",
        "afterFileEdit",
        "afterMCPExecution",
        "postToolUseFailure",
        "afterAgentResponse",
        "stop",
        "preCompact",
        "sessionEnd",
    ),  # fmt: skip
    start_events=(("hook_event_name", "sessionStart"),),
    reply=_reply,
    normalized=Lazy("nmemd.agents.cursor.capture", "normalized"),
    observations=Lazy("nmemd.agents.cursor.capture", "observations"),
    setup=Lazy("nmemd.agents.cursor.setup", "SETUP"),
    home=HOME,
)
