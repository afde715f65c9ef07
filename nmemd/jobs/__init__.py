"""Maintenance the daemon schedules and the CLI can run now: the jobs (`maintenance`: checkpoint,
FTS merge, vacuum, optimize, integrity, the history import; `retention`: the sweep), when and how
they run (`scheduler`). Retention removes through `nmemd.history.purge`.
"""
