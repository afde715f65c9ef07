"""The GitHub Copilot CLI. What nmem knows of it: README.md beside this file."""

from __future__ import annotations

import msgspec

from nmemd.agent_spec import AgentHome, AgentSpec, Lazy


def _reply(event: str, text: str) -> bytes:
    """Copilot reads only the plain form (README.md: Replies)."""
    return msgspec.json.encode({"additionalContext": text})


HOME = AgentHome(env="COPILOT_HOME", default=".copilot", commands=("copilot",))

SPEC = AgentSpec(
    name="copilot",
    label="Copilot CLI",
    hooks=(
        "SessionStart",
        "UserPromptSubmit",
        "PostToolUse",
        "PostToolUseFailure",
        "PreCompact",
        "Stop",
        "SubagentStop",
        "SessionEnd",
    ),  # fmt: skip
    reply=_reply,
    observations=Lazy("nmemd.agents.copilot.capture", "observations"),
    setup=Lazy("nmemd.agents.copilot.setup", "SETUP"),
    home=HOME,
    history=Lazy("nmemd.agents.copilot.history", "SOURCE"),
    history_at="${COPILOT_HOME:-~/.copilot}/session-state",
)
