"""The coding agents nmem captures: one folder per agent (`claude_code/`, `codex/`, ...: its spec, its
payload parser, its history reader, its installer and doctor checks, its README), and the typed registry
(`registry.AGENTS` of `spec.AgentSpec`) that the core loops over instead of naming agents."""
