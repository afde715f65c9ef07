"""The Gemini CLI, Google's coding agent. What nmem knows of it: README.md beside this file."""

from __future__ import annotations

from nmemd.agent_spec import AgentHome, AgentSpec, Lazy

HOME = AgentHome(env="GEMINI_CLI_HOME", default="", inside=".gemini", commands=("gemini",))

SPEC = AgentSpec(
    name="gemini",
    label="Gemini CLI",
    hooks=("SessionStart", "BeforeAgent", "AfterTool", "AfterAgent", "SessionEnd"),
    shows_system_message=True,
    normalized=Lazy("nmemd.agents.gemini.capture", "normalized"),
    observations=Lazy("nmemd.agents.gemini.capture", "observations"),
    setup=Lazy("nmemd.agents.gemini.setup", "SETUP"),
    home=HOME,
    history=Lazy("nmemd.agents.gemini.history", "SOURCE"),
    history_at="~/.gemini/tmp",
)
