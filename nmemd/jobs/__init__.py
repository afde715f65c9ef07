"""Maintenance the daemon schedules and the CLI can run now: checkpoint, FTS merge, vacuum,
optimize, integrity, the retention sweep, and purge (delete by filter, leaving no bytes behind).
"""
