"""Process-wide SQLite settings that Python's sqlite3 module cannot reach.

Debian's (and many distributions') libsqlite3 is built with memory statistics on
and without the lookaside allocator: every allocation SQLite makes takes one
process-wide mutex, so two threads using SQLite at once (the writer and the
checkpointer, the writer and a search) run one at a time: two threads each
running the same query took 0.9 s against 0.33 s with the statistics off
(BENCHMARKS.md). nmem never reads those statistics.
"""

from __future__ import annotations

import _sqlite3
import ctypes
import logging

LOG = logging.getLogger("nmemd.sqlite")
SQLITE_CONFIG_MEMSTATUS = 9  # sqlite3.h
SQLITE_OK = 0


def disable_memstatus() -> bool:
    """Turn SQLite's allocation statistics off for this process; True when it took effect.

    Must run before the process opens any SQLite connection (it restarts the library:
    `sqlite3_shutdown`, `sqlite3_config`, `sqlite3_initialize`). The functions are looked up
    through the sqlite3 module's own extension, so they are the library it uses, linked or
    built in (and no `ldconfig` runs at daemon start). A failing call leaves everything as it was.
    """
    try:
        lib = ctypes.CDLL(_sqlite3.__file__)
        if lib.sqlite3_shutdown() != SQLITE_OK:
            return False
        done = bool(lib.sqlite3_config(SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0)) == SQLITE_OK)
        lib.sqlite3_initialize()
    except (OSError, AttributeError) as exc:
        LOG.debug("SQLite memory statistics left on: %s", exc)
        return False
    return done
