"""The coding agents nmem captures: one folder per agent (`claude_code/` and the others: its spec, its
payload parser, its history reader, its installer and doctor checks, its README). The typed registry the
core loops over instead of naming agents (`nmemd.registry.AGENTS` of `nmemd.agent_spec.AgentSpec`) sits
low, beside `config`, and imports these folders' specs when first read."""
