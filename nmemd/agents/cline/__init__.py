"""Cline, the VS Code extension and its CLI. What nmem knows of it: README.md beside this file."""

from __future__ import annotations

import msgspec

from nmemd.agent_spec import AgentHome, AgentSpec, Lazy


def _reply(event: str, text: str) -> bytes:
    """README.md: Replies."""
    return msgspec.json.encode({"cancel": False, "contextModification": text})


HOME = AgentHome(env="NMEM_CLINE_HOOKS_DIR", default="Documents/Cline/Hooks", commands=("cline",), sign_levels=1)

SPEC = AgentSpec(
    name="cline",
    label="Cline",
    hooks=("TaskStart", "TaskResume", "UserPromptSubmit", "PostToolUse", "PreCompact", "TaskComplete", "TaskCancel"),
    start_events=(("hookName", "TaskStart"), ("hookName", "TaskResume")),
    reply=_reply,
    normalized=Lazy("nmemd.agents.cline.capture", "normalized"),
    observations=Lazy("nmemd.agents.cline.capture", "observations"),
    setup=Lazy("nmemd.agents.cline.setup", "SETUP"),
    home=HOME,
    history=Lazy("nmemd.agents.cline.history", "SOURCE"),
    history_at="~/.cline/data/sessions",
)
