"""Claude Code, Anthropic's coding agent: the form every other agent's events are read in.

What nmem knows of it: README.md beside this file."""

from __future__ import annotations

from nmemd.agent_spec import AgentHome, AgentSpec, Lazy
from nmemd.model import CLAUDE_CODE

HOME = AgentHome(env="CLAUDE_CONFIG_DIR", default=".claude", commands=("claude",))

SPEC = AgentSpec(
    name=CLAUDE_CODE,
    label="Claude Code",
    aliases=("claude",),
    hooks=(
        "SessionStart",
        "UserPromptSubmit",
        "PostToolUse",
        "PostToolUseFailure",
        "PreCompact",
        "PostCompact",
        "Stop",
        "SubagentStop",
        "SessionEnd",
    ),  # fmt: skip
    shows_system_message=True,
    observations=Lazy("nmemd.agents.claude_code.capture", "observations"),
    setup=Lazy("nmemd.agents.claude_code.setup", "SETUP"),
    home=HOME,
    history=Lazy("nmemd.agents.claude_code.history", "SOURCE"),
    history_at="${CLAUDE_CONFIG_DIR:-~/.claude}/projects",
)
