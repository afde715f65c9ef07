"""SQLite's allocation statistics off for the daemon's process (nmemd/store/sqlite_tuning.py)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sqlite3
from nmemd.store import sqlite_tuning
ok = sqlite_tuning.disable_memstatus()
c = sqlite3.connect(":memory:")
c.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
c.execute("INSERT INTO t VALUES ('save_hook useState')")
assert c.execute("SELECT count(*) FROM t WHERE t MATCH 'usestate'").fetchone()[0] == 1
print(ok)
"""


def test_statistics_go_off_before_the_first_connection_and_sqlite_still_works() -> None:
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    if sys.platform.startswith("linux"):  # the system library the sqlite3 module links against
        assert done.stdout.strip() == "True"
