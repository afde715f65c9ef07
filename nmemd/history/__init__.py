"""Other sources of events: agents' transcript files read back into memory (`transcripts`; the
CLI's `importer`, the daemon's `backfill`) and nmem's own JSONL export and import (`transfer`). All go
through capture's extraction.
"""
