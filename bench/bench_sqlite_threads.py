"""Two threads running SQLite at once, with the library's allocation statistics on and off.

Each configuration runs in its own process (the setting is process-wide and must come
before the first connection): the same recursive query alone, then on two threads at
once, each with its own connection. With the statistics on (the default of Debian's
libsqlite3, built without lookaside), every allocation takes one process-wide mutex and
the two threads run one at a time; `nmemd` turns them off (nmemd/store/sqlite_tuning.py).

    .venv/bin/python bench/bench_sqlite_threads.py
"""

from __future__ import annotations

import subprocess
import sys

import common

CHILD = """
import sqlite3, sys, threading, time
from nmemd.store import sqlite_tuning
off = sys.argv[1] == "off" and sqlite_tuning.disable_memstatus()
Q = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<2000000) SELECT count(*) FROM c"
def run(out):
    c = sqlite3.connect(":memory:", check_same_thread=False)
    t = time.perf_counter(); c.execute(Q).fetchone(); out.append(time.perf_counter() - t)
alone = []
for _ in range(3):
    run(alone)
both = []
threads = [threading.Thread(target=run, args=(both,)) for _ in range(2)]
[t.start() for t in threads]; [t.join() for t in threads]
print(f"{min(alone):.3f} {max(both):.3f} {off}")
"""


def main() -> None:
    common.print_machine()
    for mode in ("on", "off"):
        out = subprocess.run([common.PYTHON, "-c", CHILD, mode], capture_output=True, text=True, timeout=120,
                             check=True)  # fmt: skip
        alone, both, applied = out.stdout.split()
        print(
            f"statistics {mode:3} (applied: {applied}): one thread {float(alone) * 1000:.0f} ms, "
            f"two threads at once {float(both) * 1000:.0f} ms each ({float(both) / float(alone):.2f}x)"
        )


if __name__ == "__main__":
    sys.exit(main())
