"""OpenCode, the terminal coding agent: nmem reaches it through a JavaScript plugin, not command hooks.

What nmem knows of it: README.md beside this file."""

from __future__ import annotations

from nmemd.agent_spec import AgentHome, AgentSpec, Lazy

HOME = AgentHome(env="XDG_CONFIG_HOME", default=".config", inside="opencode", commands=("opencode",))

SPEC = AgentSpec(
    name="opencode",
    label="OpenCode",
    observations=Lazy("nmemd.agents.opencode.capture", "observations"),
    setup=Lazy("nmemd.agents.opencode.setup", "SETUP"),
    home=HOME,
    history=Lazy("nmemd.agents.opencode.history", "SOURCE"),
    history_at="OpenCode's opencode.db",
)
