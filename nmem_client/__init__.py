"""nmem's stdlib-only side: the hook client, the inbox fallback and the MCP bridge.

Nothing here may import nmemd or a third-party package: hooks start a fresh
interpreter for every event, so every import is paid on every tool call.
"""
