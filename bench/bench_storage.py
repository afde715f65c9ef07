"""What a transcript import costs on disk: db bytes, observations, bytes per observation, by type.

Imports a Claude Code projects/ folder (default: the shared real corpus, unpacked under /tmp) into a
fresh NMEM_HOME through a fresh daemon, stops the daemon (it checkpoints and truncates the WAL), runs
nothing else, and prints the database's size and what the stored text of each type adds up to.

    .venv/bin/python bench/bench_storage.py [PROJECTS_DIR] [--json] [--without CHANGE]...

`--without` runs the importer with one of issue #14's changes turned back (patched in the importer
process, which is where transcripts are extracted; summaries are asked of the daemon by it too), so
the cost of each change can be read off one tree: `summaries` (no session summaries after an import),
`replies` (no Stop per turn), `error-tails` (errors keep 2,000 chars / 40 lines of their head, as
before), `whole-compactions` (compaction summaries cut at 4,000 chars, as before).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(os.environ.get("NMEM_BENCH_BIN") or REPO / ".venv" / "bin")  # another tree's venv: its code
UNPACK = Path("/work/shared/corpus/unpack.sh")
CHANGES = ("summaries", "replies", "error-tails", "whole-compactions")
# Run in the importer's process before the CLI: each line turns one change back.
_PATCHES = {
    "summaries": "from nmemd.history import importer; importer.Importer._summarize = lambda self: None",
    "replies": "from nmemd.agents.claude_code import history; history.TranscriptReader._turn_end = lambda self: []",
    "error-tails": (
        "from nmemd.agents.claude_code import capture as x; from nmemd.capture import tools as y;"
        " x.clean_head_tail = y.clean_head_tail = lambda raw, *a: x.clean_text(raw, 2000, 40)"
    ),
    "whole-compactions": "from nmemd.agents.claude_code import capture as x; x.COMPACT_MAX = 4000",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("projects", nargs="?", help="a projects/ folder (default: the real corpus, unpacked)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--without", action="append", choices=CHANGES, default=[], help="turn a change back")
    args = parser.parse_args()
    projects = (
        args.projects
        or subprocess.run(
            [str(UNPACK), "/tmp/nmem-corpus-storage"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    home = tempfile.mkdtemp(prefix="nmst", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NMEM_")}
    env.update(NMEM_HOME=home, NMEM_SOCKET=os.path.join(home, "d.sock"), NMEM_AUTOSTART="0")
    try:
        subprocess.run([str(BIN / "nmem"), "daemon", "start"], env=env, check=True, timeout=60, capture_output=True)
        patches = "; ".join(_PATCHES[c] for c in args.without)
        importer = (
            [str(BIN / "python"), "-c", f"{patches}\nfrom nmemd.cli import app; app()"]
            if patches
            else [str(BIN / "nmem")]
        )
        out = subprocess.run(
            [*importer, "import-transcripts", projects, "--json"],
            env=env, check=False, timeout=1800, capture_output=True, text=True,
        )  # fmt: skip
        subprocess.run([str(BIN / "nmem"), "daemon", "stop"], env=env, check=True, timeout=120, capture_output=True)
        db = os.path.join(home, "nmem.db")
        size = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        n = con.execute("SELECT count(*) FROM observations").fetchone()[0]
        free = con.execute("PRAGMA freelist_count").fetchone()[0] * con.execute("PRAGMA page_size").fetchone()[0]
        by_type = con.execute(
            "SELECT type, count(*), sum(length(CAST(title AS BLOB)) + length(CAST(coalesce(content, '') AS BLOB)))"
            " FROM observations GROUP BY type ORDER BY 3 DESC"
        ).fetchall()
        summaries = con.execute(
            "SELECT count(*), coalesce(sum(length(CAST(summary AS BLOB))), 0) FROM sessions"
            " WHERE summary IS NOT NULL AND summary != ''"
        ).fetchone()
        con.close()
        report = {
            "without": args.without,
            "import": out.stdout.strip().splitlines()[-1:] if out.stdout else out.stderr[-500:],
            "db_bytes": size,
            "free_bytes": free,  # pages on the freelist (auto_vacuum=INCREMENTAL returns them later)
            "observations": n,
            "bytes_per_observation": round(size / max(n, 1), 1),
            "sessions_with_summary": summaries[0],
            "summary_bytes": summaries[1],
            "by_type": {t: {"count": c, "text_bytes": b} for t, c, b in by_type},
        }
        if args.json:
            print(json.dumps(report))
            return
        print(f"without: {', '.join(args.without) or 'nothing'}")
        print(f"import: {report['import']}")
        print(f"db: {size:,} bytes ({free:,} free), {n:,} observations, {size / max(n, 1):,.1f} bytes/observation")
        print(f"sessions with a summary: {summaries[0]:,} ({summaries[1]:,} bytes)")
        for t, c, b in by_type:
            print(f"  {t:<12} {c:>7,} observations {b:>12,} bytes of title+content")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
