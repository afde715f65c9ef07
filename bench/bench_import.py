"""`nmem import-transcripts` throughput against its floor: reading and JSON-parsing the same files.

1. Generate a Claude Code history of `--size-mb` under /tmp: sessions made of copies of the
   shared fixture transcripts (their progress lines, snapshots, tool calls, compactions and a
   subagent file included), every id remapped per copy (session ids, line uuids, message ids,
   tool_use ids, agent ids), paths moved to one of a few projects, dates spread over months.
2. Floor: a child process reads every file line by line and decodes each line with msgspec's
   JSON decoder (what the importer uses), nothing else.
3. Import into a fresh daemon (`nmem import-transcripts ROOT --json`), timed, with the
   importer's peak RSS (wait4) and the daemon's (VmHWM).
4. Check: the ledger holds each record once. The generated data is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import REPO, VENV_BIN, Daemon, Home, add_quiet_arg, print_machine, verdict, wait_quiet

FIXTURES = REPO.parent / "shared" / "fixtures"
if not FIXTURES.exists():
    FIXTURES = Path("/work/shared/fixtures")
MAINS = ["transcript-2.1.38-short.jsonl", "transcript-2.1.38-tool-heavy.jsonl",
         "transcript-2.1.39-excerpt-compaction-hooks-edits.jsonl"]  # fmt: skip
SUBAGENT = "subagent-transcript-2.1.39-agent-aac57f5.jsonl"
SUBAGENT_PARENT = "ae4a77f8-aedd-4bc1-888f-c94edc91af04"
PROJECTS = 12
ID_RE = re.compile(
    rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|toolu_[A-Za-z0-9]{10,}|msg_[A-Za-z0-9]{10,}"
    rb"|\baac57f5\b|2026-02-1[0-9]T"
)
FLOOR = r"""
import msgspec, os, sys, time
decode = msgspec.json.Decoder().decode
files = [os.path.join(r, f) for root in sys.argv[1:] for r, _, fs in os.walk(root) for f in fs if f.endswith(".jsonl")]
t0 = time.perf_counter(); n = lines = 0
for path in files:
    with open(path, "rb") as fh:
        while True:
            raw = fh.readline(32 * 1024 * 1024)
            if not raw:
                break
            n += len(raw); lines += 1
            decode(raw)
print(time.perf_counter() - t0, n, lines, len(files))
"""


# Every imported event is known by one natural key: in the ledger, or for a tool call with a row
# of its own, by that row's (session_id, tool_use_id) (migration m005). Events, distinct keys, tool calls.
KEYS_SQL = (
    "SELECT (SELECT count(*) FROM events), count(*), sum(k LIKE 'tool:%') FROM ("
    "SELECT natural_key AS k FROM events WHERE natural_key IS NOT NULL UNION SELECT 'tool:' || session_id"
    " || ':' || tool_use_id FROM observations WHERE tool_use_id IS NOT NULL"
    " AND hook_event IN ('PostToolUse', 'PostToolUseFailure'))"
)


def _session_of(data: bytes) -> bytes:
    return json.loads(next(ln for ln in data.splitlines() if b'"sessionId"' in ln))["sessionId"].encode()


def generate(root: Path, size_mb: float, seed: int = 6) -> tuple[int, int]:
    """Write about `size_mb` of transcripts under root/projects; return (bytes, files)."""
    rng = random.Random(seed)
    sources = {name: (FIXTURES / name).read_bytes() for name in [*MAINS, SUBAGENT]}
    target = int(size_mb * 1024 * 1024)
    written = files = 0

    def remap(data: bytes, mapping: dict[bytes, bytes], project: bytes) -> bytes:
        """Fresh ids for everything `mapping` does not fix (the session, the date), paths in `project`."""

        def sub(m: re.Match[bytes]) -> bytes:
            old = m.group(0)
            new = mapping.get(old)
            if new is None:
                if old.startswith(b"toolu_"):
                    new = b"toolu_%024x" % rng.getrandbits(96)
                elif old.startswith(b"msg_"):
                    new = b"msg_%024x" % rng.getrandbits(96)
                elif old == b"aac57f5":
                    new = b"%07x" % rng.getrandbits(28)
                elif old.startswith(b"2026-"):
                    new = mapping[b"day"]
                else:
                    new = str(uuid.UUID(int=rng.getrandbits(128))).encode()
                mapping[old] = new
            return new

        out = ID_RE.sub(sub, data)
        return out.replace(b"/home/marco/projects/spotter", project).replace(b"/home/USER/projects/spotter", project)

    while written < target:
        name = rng.choice(MAINS)
        source = sources[name]
        project = f"/home/dev/src/project-{rng.randrange(PROJECTS):02d}"
        folder = root / "projects" / project.replace("/", "-")
        folder.mkdir(parents=True, exist_ok=True)
        session = str(uuid.UUID(int=rng.getrandbits(128))).encode()
        day = rng.randrange(300)
        fixed = {_session_of(source): session, b"day": f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}T".encode()}
        with (folder / f"{session.decode()}.jsonl").open("wb") as f:
            for _ in range(rng.randint(1, 12)):  # a session: several stretches of work shaped like the fixture
                data = remap(source, dict(fixed), project.encode())
                f.write(data)
                written += len(data)
        files += 1
        if rng.random() < 0.3:  # a subagent transcript beside it, in its parent's session
            sub = folder / session.decode() / "subagents"
            sub.mkdir(parents=True, exist_ok=True)
            data = remap(sources[SUBAGENT], {**fixed, SUBAGENT_PARENT.encode(): session}, project.encode())
            agent = json.loads(data.splitlines()[0])["agentId"]
            (sub / f"agent-{agent}.jsonl").write_bytes(data)
            written += len(data)
            files += 1
    return written, files


def vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_child(argv: list[str], env: dict[str, str]) -> tuple[float, str, int, float]:
    """(wall s, stdout, peak RSS kB, CPU s) of a child, from wait4."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:2]} exited {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
    return wall, out.decode(), usage.ru_maxrss, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=500.0, help="size of the generated history (default 500)")
    parser.add_argument("--keep", action="store_true", help="keep the generated history (default: deleted)")
    add_quiet_arg(parser)
    args = parser.parse_args()
    wait_quiet(args.wait_quiet)
    print_machine()
    data_dir = Path(tempfile.mkdtemp(prefix="nmem-bench-import-", dir="/tmp"))
    try:
        t0 = time.perf_counter()
        size, files = generate(data_dir, args.size_mb)
        print(f"history: {size / 1e6:.1f} MB in {files} files under {data_dir} (generated in"
              f" {time.perf_counter() - t0:.1f} s)")  # fmt: skip
        python = str(VENV_BIN / "python")
        floor_s, out, floor_rss, floor_cpu = run_child([python, "-c", FLOOR, str(data_dir)], dict(os.environ))
        floor_wall, floor_bytes, lines, nfiles = out.split()
        floor = float(floor_wall)
        print(f"floor (read + msgspec decode every line, {int(lines):,} lines): {floor:.2f} s,"
              f" {int(floor_bytes) / 1e6 / floor:.0f} MB/s (process wall {floor_s:.2f} s, peak RSS"
              f" {floor_rss / 1024:.0f} MB)")  # fmt: skip
        with Home() as home, Daemon(home) as daemon:
            env = home.env()
            load = os.getloadavg()[0]  # another process busy meanwhile makes the two sides share a core
            cpu0 = cpu_s(daemon.pid)
            wall, out, rss, cli_cpu = run_child([str(VENV_BIN / "nmem"), "import-transcripts", "--json",
                                                 str(data_dir / "projects")], env)  # fmt: skip
            daemon_cpu = cpu_s(daemon.pid) - cpu0
            daemon_hwm = vm_hwm_kb(daemon.pid)
            summary = json.loads(out)
            conn_rows = subprocess.run(
                [python, "-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(*c.execute("
                 f"{KEYS_SQL!r}).fetchone())", home.db], capture_output=True, text=True, check=True, timeout=60,
            ).stdout.split()  # fmt: skip
        events, keys, tools = (int(x) for x in conn_rows)
        mb = summary["bytes"] / 1e6
        ratio = wall / floor
        print(f"import: {mb:.1f} MB, {summary['files']} files, {summary['events_new']:,} events"
              f" ({summary['prompts']:,} prompts, {summary['tool_calls']:,} tool calls, {summary['errors']:,} errors,"
              f" {summary['compactions']:,} compactions) in {wall:.2f} s")  # fmt: skip
        print(f"  throughput {mb / wall:.1f} MB/s, {summary['events_new'] / wall:,.0f} events/s")
        print(f"  ratio import / floor: {wall:.2f} / {floor:.2f} s = {ratio:.2f} (target <= 3: {verdict(ratio <= 3)})")
        per = 1e6 / max(summary["events_sent"], 1)
        print(f"  CPU: importer {cli_cpu:.1f} s ({cli_cpu * per:.0f} us/event), daemon {daemon_cpu:.1f} s"
              f" ({daemon_cpu * per:.0f} us/event) (floor {floor_cpu:.1f} s); load average before the import"
              f" {load:.2f}")  # fmt: skip
        print(f"  peak RSS: importer {rss / 1024:.0f} MB, daemon {daemon_hwm / 1024:.0f} MB"
              f" (target < 200 MB: {verdict(max(rss, daemon_hwm) < 200 * 1024)})")  # fmt: skip
        ok = events == keys == summary["events_new"] == summary["events_sent"] and tools == (
            summary["tool_calls"] + summary["errors"]
        )
        print(f"  db check: events={events:,} distinct natural keys={keys:,} tool calls={tools:,}"
              f" expected {summary['events_sent']:,}: {'OK' if ok else 'MISMATCH'}")  # fmt: skip
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
