"""Peak memory of `nmem import-transcripts` on hostile history files (issue #28, finding 4).

Cases: a Claude Code transcript whose first line is 30 MB of empty arrays (`[[],[],...]`, each 3 bytes
of line a 64-byte Python list once decoded) before a good transcript; the largest Cline messages file
the importer reads (a 127 MB text); the same size of empty arrays. Each runs in a fresh daemon's home;
the importer's peak RSS is its `wait4` ru_maxrss. `--tree DIR` runs another checkout's importer (its
code on PYTHONPATH) for a before/after comparison.

    .venv/bin/python bench/bench_history_memory.py [--tree /path/to/other/checkout] [--case line]

An older importer reads the 127 MB Cline case whole (~2.7 GB of lists): give it `--case line` only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

from common import PYTHON, REPO, Daemon, Home, print_machine

SHORT = REPO / "tests" / "data" / "transcripts" / "short.jsonl"
TIMEOUT_S = 300.0


def _repeat(f: BinaryIO, unit: bytes, total: int) -> None:
    """`unit` written `total` times, in chunks: the bench's own memory stays small (a child's peak RSS
    counts from its parent's at the fork)."""
    chunk = unit * 1_000_000
    for _ in range(total // 1_000_000):
        f.write(chunk)
    f.write(unit * (total % 1_000_000))


def write_cases(root: Path) -> dict[str, Path]:
    claude = root / "claude" / "-work"
    claude.mkdir(parents=True)
    line = claude / "empty-arrays.jsonl"
    with open(line, "wb") as f:
        f.write(b"[")
        _repeat(f, b"[],", 10 * 1024 * 1024)
        f.write(b"[]]\n")
        f.write(SHORT.read_bytes())
    cases = {"30 MB line of [] + a transcript": line}
    for name, unit, count, tail in (
        ("cline 127 MB text", b"x", 127 * 1024 * 1024, b'"'),
        ("cline 127 MB of []", b"[],", 42 * 1024 * 1024, b'[]], "x": "'),
    ):
        task = root / "cline" / name.replace(" ", "-")
        task.mkdir(parents=True)
        path = task / f"{task.name}.messages.json"
        with open(path, "wb") as f:
            f.write(b'{"sessionId": "s", "messages": [{"id": "m", "role": "user", "ts": 1,')
            f.write(b' "content": [{"type": "text", "text": "' + (b'", "more": [' if unit != b"x" else b""))
            _repeat(f, unit, count)
            f.write(tail + b'"}]}]}' if unit != b"x" else tail + b"}]}]}")
        cases[name] = path
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", help="another checkout whose importer runs instead (PYTHONPATH)")
    parser.add_argument("--case", default="", help="only the cases whose name holds this text (e.g. 'line')")
    args = parser.parse_args()
    print_machine()
    print(f"importer: {args.tree or REPO}")
    root = Path(tempfile.mkdtemp(prefix="nmem-bench-hist-", dir="/tmp"))
    try:
        for name, path in write_cases(root).items():
            if args.case not in name:
                continue
            with Home() as home:
                daemon = Daemon(home)
                daemon.start()
                try:
                    wall, rss, note = run_measured(path, home, args.tree)
                finally:
                    daemon.stop()
            print(f"{name:34s} {path.stat().st_size / 1048576:6.0f} MB  peak RSS {rss / 1024:7.0f} MB"
                  f"  {wall:5.1f} s  {note[:160]}")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_measured(path: Path, home: Home, tree: str | None) -> tuple[float, int, str]:
    """(wall s, peak RSS kB from wait4, what the summary says) of one import; run from /tmp, so that
    `--tree`'s code on PYTHONPATH is the code imported."""
    env = home.env(**({"PYTHONPATH": tree} if tree else {}))
    code = "import sys; from nmemd.cli import main; sys.argv = ['nmem', 'import-transcripts', *sys.argv[1:]]; main()"
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([PYTHON, "-c", code, str(path), "--json"], env=env, cwd="/tmp", stdout=out, stderr=err)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            done, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)  # polling a child's exit, bounded by the deadline above
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        lines = out.read().decode(errors="replace").strip().splitlines()
        errors = err.read().decode(errors="replace").strip().splitlines()
    try:
        summary = json.loads(lines[-1])
        note = f"events_new {summary['events_new']}; bad: " + "; ".join(b["reason"] for b in summary["bad_files"])
    except (IndexError, ValueError, KeyError):
        note = f"exit {proc.returncode}: {errors[-1] if errors else '?'}"
    return wall, usage.ru_maxrss, note


if __name__ == "__main__":
    sys.exit(main())
