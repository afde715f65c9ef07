"""Other sources of events: agents' history files read back into memory by `nmem import-transcripts`
(each agent's reader gives `records`; the CLI's `importer`, the daemon's side `import_rpc`) and nmem's own
JSONL export and import (`transfer`), all through capture's extraction; and what leaves memory on the
user's word (`purge`: forget, pin, purge, leaving no bytes behind).
"""
