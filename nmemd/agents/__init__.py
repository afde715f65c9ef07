"""The coding agents nmem captures, as one typed registry (`registry.AgentSpec`, `AGENTS`): what the core
loops over instead of naming agents (extraction dispatch, hook replies, install and uninstall, doctor,
the hook client's start events)."""
