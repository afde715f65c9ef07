"""The coding agents nmem captures, as one typed registry (`registry.AgentSpec`, `AGENTS`): what the core
loops over instead of naming agents (extraction dispatch, hook replies, the hook client's start events)."""
