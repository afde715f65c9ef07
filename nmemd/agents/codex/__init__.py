"""Codex, OpenAI's coding agent (the `codex` CLI). What nmem knows of it: README.md beside this file."""

from __future__ import annotations

from nmemd.agent_spec import AgentHome, AgentSpec, Lazy

HOME = AgentHome(env="CODEX_HOME", default=".codex", commands=("codex",))

SPEC = AgentSpec(
    name="codex",
    label="Codex",
    hooks=("SessionStart", "UserPromptSubmit", "PostToolUse", "PreCompact", "PostCompact", "Stop", "SessionEnd"),
    shows_system_message=True,
    observations=Lazy("nmemd.agents.codex.capture", "observations"),
    setup=Lazy("nmemd.agents.codex.setup", "SETUP"),
    home=HOME,
    history=Lazy("nmemd.agents.codex.history", "SOURCE"),
    history_at="${CODEX_HOME:-~/.codex}/sessions",
)
