"""The way out: search (`search` over `lookups` and `ranking`) and listing queries, the SessionStart
context, deterministic session summaries and handoffs (`handoff`, over what came of a session's
work: `outcomes`), and the replies a hook waits for (`replies`). Reads the store; writes only summaries.
"""
