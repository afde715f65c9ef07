"""Hooks while the daemon upgrades a store: how long each waits, and where its event goes.

A migration that indexes the store again (m016: ~40 s at a million observations) runs as the daemon
starts, after it bound its socket. This copies a store of an earlier version (a `bench_scale.py` store
built by a commit before m016), starts the daemon of this checkout (or `--tree`'s) on the copy, and runs
the hook client as hooks run it (`python -I -S send.py`), one after another, until the daemon serves and a
few more: each hook's wall time, and afterwards whether every event was stored once.

    .venv/bin/python bench/bench_upgrade_hooks.py --store /tmp/nmem-1m-b/obs-1000000 [--tree /work/base]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sqlite3
import subprocess
import time
from pathlib import Path

import bench_scale
import common

AFTER_READY = 20  # hooks sent once the daemon serves
HOOK_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 600.0
STORED_TIMEOUT_S = 120.0


def hook(env: dict[str, str], marker: str) -> float:
    """One hook as installed hooks run it; its wall time in ms."""
    body = json.dumps({"session_id": "upgrade-bench", "hook_event_name": "UserPromptSubmit", "prompt": marker,
                       "cwd": "/tmp/nmem-upgrade-bench"}).encode()  # fmt: skip
    start = time.perf_counter()
    subprocess.run([common.PYTHON, "-I", "-S", common.SEND_PY], input=body, env=env, capture_output=True,
                   timeout=HOOK_TIMEOUT_S, check=True)  # fmt: skip
    return (time.perf_counter() - start) * 1000


def run(store: Path) -> dict[str, object]:
    with common.Home() as home:
        bench_scale.copy_store(store / "nmem.db", home.db)
        daemon = common.Daemon(home)
        env = home.env()
        during: list[float] = []
        after: list[float] = []
        markers: list[str] = []
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(home.notify)
        notify.setblocking(False)
        quiet = subprocess.DEVNULL
        daemon.proc = subprocess.Popen([common.NMEMD], env=home.env(NOTIFY_SOCKET=home.notify), stdin=quiet,
                                       stdout=quiet, stderr=quiet)  # fmt: skip
        started, ready_s = time.perf_counter(), math.nan
        try:
            while len(after) < AFTER_READY:
                if math.isnan(ready_s):
                    try:
                        if b"READY=1" in notify.recv(4096).split(b"\n"):
                            ready_s = time.perf_counter() - started
                    except BlockingIOError:
                        pass
                    if daemon.proc.poll() is not None:
                        raise SystemExit(f"nmemd exited with {daemon.proc.returncode}")
                    if time.perf_counter() - started > READY_TIMEOUT_S:
                        raise SystemExit(f"nmemd not serving after {READY_TIMEOUT_S:.0f} s")
                marker = f"upgrade-bench-{len(markers):04d}"
                markers.append(marker)
                ms = hook(env, marker)
                (during if math.isnan(ready_s) else after).append(ms)
            deadline = time.monotonic() + STORED_TIMEOUT_S
            while (stored := _stored(home.db)) < len(markers):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{stored} of {len(markers)} events stored after {STORED_TIMEOUT_S:.0f} s")
                time.sleep(0.1)
        finally:
            notify.close()
            daemon.stop()
    return {"during": during, "after": after, "ready_s": ready_s, "sent": len(markers)}


def _stored(db: str) -> int:
    """The bench's prompts stored (each once: a second copy ends the run)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute(
            "SELECT count(DISTINCT title) FROM observations WHERE session_id = 'upgrade-bench' AND type = 'prompt'"
        ).fetchone()
        dup = conn.execute(
            "SELECT count(*) - count(DISTINCT title) FROM observations WHERE session_id = 'upgrade-bench'"
            " AND type = 'prompt'"
        ).fetchone()
    finally:
        conn.close()
    if dup[0]:
        raise SystemExit(f"an event was stored twice ({dup[0]})")
    return int(rows[0])


def report(label: str, r: dict[str, object]) -> None:
    during, after = r["during"], r["after"]
    assert isinstance(during, list) and isinstance(after, list)
    line = f"{label}: serving after {r['ready_s']:.1f} s; {len(during)} hooks meanwhile"
    if during:
        line += (f": p50 {common.median(during):.0f} ms, p99 {common.percentile(during, 99):.0f} ms,"
                 f" max {max(during):.0f} ms")  # fmt: skip
    line += f"; then {len(after)} hooks: p50 {common.median(after):.0f} ms; all {r['sent']} events stored once"
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", type=Path, required=True, help="a bench_scale store of a version before m016")
    parser.add_argument("--tree", type=Path, help="run the daemon and hook client of this checkout instead")
    args = parser.parse_args()
    if args.tree is not None:
        bench_scale.use_tree(args.tree)
    common.print_machine()
    report(str(args.tree or "this checkout"), run(args.store))


if __name__ == "__main__":
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    main()
