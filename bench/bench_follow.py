"""What reading the agent's own words live costs the daemon: real transcripts replayed as their hooks.

Each session of the corpus (default: the shared real corpus, unpacked under /tmp) is replayed as Claude
Code runs it: its transcript's lines are appended to a copy, and after the lines that finish a prompt, a
tool call or a turn, that event's hook payload (naming the copy as `transcript_path`) is sent the way the
hook client sends it (a new connection per event, acked after commit). This checkout's daemon (which
reads the words from the copy as it grows, `nmemd.history.follow`) and the daemon code of another tree
(`--compare-tree`, which does not) take turns, a fresh store each; the daemon's CPU (its threads and the
extraction worker) per hook event is compared, with what was stored. Both trees' bytecode is compiled
first and each daemon's CPU counted from its worker's readiness: start-up is not an event's cost.

    .venv/bin/python bench/bench_follow.py --compare-tree /work/base [--sessions 12] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import common
from common import Daemon, Home, median

UNPACK = Path("/work/shared/corpus/unpack.sh")
QUIET_S = 3.0  # the daemon's CPU unchanged this long (over the follower's READ_DELAY_S): it has read all
QUIET_TIMEOUT_S = 60.0
WORKER_TIMEOUT_S = 30.0


def _hooks(lines: list[bytes], path: str) -> list[tuple[int, dict[str, Any]]]:
    """(lines written before it, payload) for each hook Claude Code fires for these transcript lines."""
    out: list[tuple[int, dict[str, Any]]] = []
    pending: dict[str, dict[str, Any]] = {}
    last_text = ""
    for n, raw in enumerate(lines, 1):
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(line, dict) or line.get("type") not in ("user", "assistant"):
            continue
        message = line.get("message") if isinstance(line.get("message"), dict) else {}
        base = {"session_id": line.get("sessionId") or "bench", "transcript_path": path, "cwd": line.get("cwd") or "/"}
        content = message.get("content")
        if line["type"] == "user" and isinstance(content, str) and not line.get("isMeta"):
            if last_text:
                out.append((n - 1, {**base, "hook_event_name": "Stop", "last_assistant_message": last_text}))
                last_text = ""
            out.append((n, {**base, "hook_event_name": "UserPromptSubmit", "prompt": content[:20000]}))
            continue
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                pending[block["id"]] = block
            elif block.get("type") == "text" and line["type"] == "assistant":
                last_text = str(block.get("text") or "")
            elif block.get("type") == "tool_result" and block.get("tool_use_id") in pending:
                use = pending.pop(block["tool_use_id"])
                result = block.get("content")
                text = result if isinstance(result, str) else json.dumps(result)[:20000]
                call = {"tool_name": use.get("name"), "tool_input": use.get("input"), "tool_use_id": use["id"]}
                out.append((n, {**base, "hook_event_name": "PostToolUse", **call, "tool_response": text}))
    if last_text:
        out.append((len(lines), {**base, "hook_event_name": "Stop", "last_assistant_message": last_text}))
    return out


def _cpu(pid: int) -> float:
    return sum(common_cpu(p) for p in [pid, *common.child_pids(pid)])


def common_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _worker_ready(sock: str) -> None:
    """Wait (bounded) until the extraction worker has imported what it needs: its start-up is not an
    event's cost."""
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    while time.monotonic() < deadline:
        worker = common.ping_facts(sock).get("worker")
        if not isinstance(worker, dict) or worker.get("ready"):
            return
        time.sleep(0.05)


def compile_bytecode(trees: list[str]) -> None:
    """Each tree's modules compiled once, as an installed package has them (pip compiles at install).
    Under PYTHONDONTWRITEBYTECODE every daemon would compile its lazily imported modules after its
    start, a cost of the environment counted per event (and more of it for the tree with more code)."""
    for tree in trees:
        packages = [str(Path(tree) / name) for name in ("nmemd", "nmem_client")]
        subprocess.run([common.PYTHON, "-m", "compileall", "-q", *packages], check=True, stdout=subprocess.DEVNULL)


def run_once(sessions: list[Path], env: dict[str, str]) -> tuple[int, float, int, int]:
    """Replay `sessions` into a fresh daemon: (events, daemon CPU s, observations, words stored)."""
    events = 0
    with Home() as home, tempfile.TemporaryDirectory(prefix="nmfollow", dir="/tmp") as copies:
        daemon = Daemon(home, env=env)
        daemon.start()
        try:
            _worker_ready(home.socket)
            start = _cpu(daemon.pid)
            for source in sessions:
                copy = os.path.join(copies, source.name)
                lines = source.read_bytes().splitlines(keepends=True)
                written = 0
                with open(copy, "wb") as out:
                    for upto, payload in _hooks(lines, copy):
                        out.write(b"".join(lines[written:upto]))
                        out.flush()
                        written = max(written, upto)
                        head = common.send_one(home.socket, json.dumps(payload).encode())
                        if not head.startswith(b"OK"):
                            raise RuntimeError(f"daemon refused an event: {head!r}")
                        events += 1
            cpu, since, deadline = _cpu(daemon.pid), time.monotonic(), time.monotonic() + QUIET_TIMEOUT_S
            while time.monotonic() < deadline and time.monotonic() - since < QUIET_S:
                time.sleep(0.1)
                now = _cpu(daemon.pid)
                if now != cpu:
                    cpu, since = now, time.monotonic()
            used = cpu - start
        finally:
            daemon.stop()
        con = sqlite3.connect(f"file:{home.db}?mode=ro", uri=True)
        stored = con.execute("SELECT count(*) FROM observations").fetchone()[0]
        words = con.execute("SELECT count(*) FROM observations WHERE type IN ('assistant', 'thinking')").fetchone()[0]
        con.close()
    return events, used, stored, words


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("projects", nargs="?", help="a projects/ folder (default: the real corpus, unpacked)")
    parser.add_argument("--compare-tree", required=True, help="a git worktree of the baseline commit")
    parser.add_argument("--sessions", type=int, default=12, help="transcripts replayed per run (the largest)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    projects = (
        args.projects
        or subprocess.run(
            [str(UNPACK), "/tmp/nmem-corpus-follow"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    sessions = sorted(Path(projects).rglob("*.jsonl"), key=lambda p: p.stat().st_size, reverse=True)[: args.sessions]
    common.print_machine()
    tree = os.path.abspath(args.compare_tree)
    compile_bytecode([str(Path(__file__).resolve().parent.parent), tree])
    variants = {"this tree": {}, tree: {"PYTHONPATH": tree}}
    runs: dict[str, list[tuple[int, float, int, int]]] = {label: [] for label in variants}
    for _ in range(args.rounds):
        for label, env in variants.items():
            runs[label].append(run_once(sessions, env))
    size = sum(p.stat().st_size for p in sessions)
    print(f"{len(sessions)} transcripts ({size / 1e6:.1f} MB) replayed as hooks, {args.rounds} alternating rounds")
    per_event = {}
    for label, results in runs.items():
        events = results[0][0]
        per_event[label] = median([cpu / events * 1e6 for _, cpu, _, _ in results])
        print(f"  {label}: {events} events; daemon CPU median {per_event[label]:.0f} us/event"
              f" (runs {', '.join(f'{cpu / events * 1e6:.0f}' for _, cpu, _, _ in results)});"
              f" {results[0][2]} observations, {results[0][3]} of the agent's words")  # fmt: skip
    first, second = per_event.values()
    mine, theirs = runs.values()
    paired = median([a[1] / b[1] for a, b in zip(mine, theirs, strict=True)])  # each round's pair: the load drifts
    print(f"  CPU per event, this tree / {tree}: {first / second:.2f} (medians), {paired:.2f} (rounds' ratios' median)")


if __name__ == "__main__":
    main()
