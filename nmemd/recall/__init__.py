"""The way out: search and listing queries, the SessionStart context, deterministic session
summaries, and the replies a hook waits for (`replies`). Reads the store; writes only summaries.
"""
