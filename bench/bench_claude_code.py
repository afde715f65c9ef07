"""nmem under the real Claude Code: events lost at exit, and what nmem costs a session (issue #15).

The same scripted session each run (Bash, Write, Read, Edit, a failing Bash, Grep, a final
answer) through `claude -p` against the fake Messages API of tests/e2e, nmem installed into a
fresh HOME by `nmem install`.

  --loss N      N runs; after each, every hook Claude Code's debug log says it ran must be stored
                (bounded wait); lost per event, then `nmem import-transcripts` and what it added.
  --load        keep every core busy with a spinning process meanwhile (the issue's "busy machine").
  --before REF  the hooks and client of commit REF (e.g. main before the fix) instead of this tree's.
  --timing N    N runs each without nmem, with its hooks only, and with hooks and MCP server,
                rotating: wall time of `claude -p` and its three parts (before the first request,
                the turns' own work, after the last turn), the time Claude Code waits for each hook
                and for the MCP server to connect (from its --debug-file).

    NMEM_CLAUDE_BIN=/path/to/claude .venv/bin/python bench/bench_claude_code.py --loss 20 --load
    NMEM_CLAUDE_BIN=/path/to/claude .venv/bin/python bench/bench_claude_code.py --timing 7
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime
from io import BytesIO
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "tests")]

from claude_code import HOOK_LINE, Run, World, claude_bin  # noqa: E402
from common import median, p90, print_machine  # noqa: E402
from fakeapi import FakeAPI, text, tool  # noqa: E402

SETTLE_S = 15.0  # async hooks in flight, the inbox drained (every 2 s)
OLD_ASYNC = ("PostToolUse", "PostToolUseFailure", "PreCompact", "PostCompact", "Stop", "SubagentStop")


def script(world: World) -> list[list[dict[str, Any]]]:
    notes = str(world.project / "notes.txt")
    return [
        [text("Running the tools."), tool("Bash", command="echo hello-bench", description="Say hello")],
        [tool("Write", file_path=notes, content="alpha\nbeta\n")],
        [tool("Read", file_path=notes)],
        [tool("Edit", file_path=notes, old_string="beta", new_string="gamma", replace_all=False)],
        [tool("Bash", command="ls /nonexistent-bench-dir", description="List a missing folder")],
        [tool("Grep", pattern="gamma", path=str(world.project))],
        [text("All done: notes.txt now says gamma.")],
    ]


def install_before(world: World, ref: str) -> None:
    """Settings as `nmem install` wrote them at `ref`: its async flags, its client, no SIGTERM trap."""
    client = world.root / "before"
    client.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "nmem_client"], capture_output=True, check=True)
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(client, filter="data")
    command = f"{shlex.quote(sys.executable)} -I -S {shlex.quote(str(client / 'nmem_client' / 'send.py'))}"
    path = world.home / ".claude" / "settings.json"
    settings = json.loads(path.read_text())
    for event, groups in settings["hooks"].items():
        for group in groups:
            for handler in group["hooks"]:
                handler["command"] = command
                handler.pop("async", None)
                if event in OLD_ASYNC:
                    handler["async"] = True
    path.write_text(json.dumps(settings, indent=2))


def stored(world: World, session_id: str) -> dict[str, int]:
    rows = world.rows("SELECT hook_event, count(*) FROM events WHERE session_id = ? GROUP BY hook_event", (session_id,))
    return {str(e): int(n) for e, n in rows}


def settle(world: World, run: Run) -> dict[str, int]:
    """Wait, bounded, for the run's hooks to be stored; return what is missing per event."""
    fired = run.hooks_fired()
    deadline = time.monotonic() + SETTLE_S
    while True:
        have = stored(world, run.session_id)
        missing = {e: n - have.get(e, 0) for e, n in fired.items() if have.get(e, 0) < n}
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.1)  # the poll interval of a bounded wait


class Load:
    """One spinning process per core, ended by pid."""

    def __init__(self, on: bool):
        self.procs: list[subprocess.Popen[bytes]] = []
        self.on = on

    def __enter__(self) -> Load:
        if self.on:
            for _ in range(os.cpu_count() or 2):
                self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait(timeout=10)


def bench_loss(binary: str, runs: int, load: bool, before: str | None) -> None:
    tree = f"hooks and client of {before}" if before else "this tree"
    label = f"{tree}, {'both cores busy' if load else 'no extra load'}"
    with FakeAPI() as api:
        world = World(binary, api.url)
        try:
            assert world.nmem("install", "--no-import").returncode == 0
            if before:
                install_before(world, before)
            api.scripts["bench"] = script(world)
            lost: dict[str, int] = {}
            runs_losing = 0
            fired_total: dict[str, int] = {}
            with Load(load):
                for i in range(runs):
                    run = world.claude_run(f"E2E-bench run {i}")
                    for e, n in run.hooks_fired().items():
                        fired_total[e] = fired_total.get(e, 0) + n
                    missing = settle(world, run)
                    runs_losing += bool(missing)
                    for e, n in missing.items():
                        lost[e] = lost.get(e, 0) + n
                    print(f"  run {i + 1:2d}: {'lost ' + json.dumps(missing) if missing else 'nothing lost'}")
            before_types = dict(world.rows("SELECT type, count(*) FROM observations GROUP BY type"))
            imported = world.nmem("import-transcripts", timeout=600)
            after_types = dict(world.rows("SELECT type, count(*) FROM observations GROUP BY type"))
            added = {t: after_types.get(t, 0) - before_types.get(t, 0) for t in after_types}
            added = {t: n for t, n in added.items() if n}
            dup = world.rows("SELECT count(*) - count(DISTINCT event_id) FROM events")[0][0]
            print(f"loss ({label}): {runs} runs, hooks run {sum(fired_total.values())} {json.dumps(fired_total)}")
            print(
                f"  runs losing an event: {runs_losing}/{runs}; lost by event: {json.dumps(lost) if lost else 'none'}"
            )
            print(f"  Stop lost in {lost.get('Stop', 0)}/{runs} runs; SessionEnd lost {lost.get('SessionEnd', 0)}")
            print(f"  import-transcripts: {imported.stdout.strip()[:200]}")
            print(f"  observations it added (stored twice or recovered): {json.dumps(added) if added else 'none'}")
            print(f"  event ids stored twice: {dup}")
        finally:
            world.cleanup()


def hook_waits(run: Run) -> dict[str, list[int]]:
    waits: dict[str, list[int]] = {}
    for m in HOOK_LINE.finditer(run.debug):
        if m["ms"] is not None:
            waits.setdefault(m["event"] + (" (async)" if m["how"].startswith("moved") else ""), []).append(int(m["ms"]))
    return waits


MCP_CONNECTED = re.compile(r'MCP server "nmem": Successfully connected \(transport: stdio\) in (\d+)ms')
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ", re.M)
TURN_END = re.compile(r"^(\S+)Z \[DEBUG\] \[engine\] turn \d+ end", re.M)
FIRST_REQUEST = re.compile(r"^(\S+)Z \[DEBUG\] \[API REQUEST\]", re.M)
STOP_WAIT = re.compile(r"Hooks: Stop \[[^\]]*\] finished with status \d+ \((\d+)ms\)")
PHASES = ("before the first request", "the turns' own work", "after the last turn")


def phases(run: Run) -> dict[str, float]:
    """A session's wall in three parts, by its debug log (ms): start to the first API request (SessionStart,
    UserPromptSubmit, the MCP connection); the turns, less the Stop hooks' waits (what async hooks' CPU
    costs shows here); `turn N end` to the last line (MCP servers stopped, SessionEnd run; exit follows)."""
    stamps = STAMP.findall(run.debug)
    first, ends = FIRST_REQUEST.search(run.debug), TURN_END.findall(run.debug)
    if not stamps or first is None or not ends:
        return {}
    at = [datetime.fromisoformat(t).timestamp() * 1000 for t in (stamps[0], first.group(1), ends[-1], stamps[-1])]
    stops = sum(int(ms) for ms in STOP_WAIT.findall(run.debug))
    return dict(zip(PHASES, (at[1] - at[0], at[2] - at[1] - stops, at[3] - at[2]), strict=True))


def bench_timing(binary: str, runs: int, load: bool) -> None:
    """Alternate three installs: none, nmem's hooks only (`--no-mcp`), nmem whole (hooks and MCP)."""
    with FakeAPI() as api:
        worlds = {"without nmem": World(binary, api.url), "nmem hooks only": World(binary, api.url)}
        worlds["nmem hooks + MCP"] = World(binary, api.url)
        try:
            assert worlds["nmem hooks only"].nmem("install", "--no-import", "--no-mcp").returncode == 0
            assert worlds["nmem hooks + MCP"].nmem("install", "--no-import").returncode == 0
            prompts = {}
            for n, (name, world) in enumerate(worlds.items()):
                prompts[name] = f"E2E-bench{n}"
                api.scripts[f"bench{n}"] = script(world)
            walls: dict[str, list[float]] = {name: [] for name in worlds}
            parts: dict[str, dict[str, list[float]]] = {name: {p: [] for p in PHASES} for name in worlds}
            waits: dict[str, list[int]] = {}
            mcp: list[int] = []
            with Load(load):
                for name, world in worlds.items():
                    world.claude_run(f"{prompts[name]} warm-up")  # page cache, the daemon started, .pyc files
                for i in range(runs):
                    order = list(worlds.items())
                    order = order[i % len(order) :] + order[: i % len(order)]  # rotate who goes first
                    for name, world in order:
                        start = time.monotonic()
                        run = world.claude_run(f"{prompts[name]} run {i}")
                        walls[name].append(time.monotonic() - start)
                        for part, took in phases(run).items():
                            parts[name][part].append(took)
                        if name != "without nmem":
                            for k, v in hook_waits(run).items():
                                waits.setdefault(k, []).extend(v)
                        mcp += [int(m) for m in MCP_CONNECTED.findall(run.debug)]
            base = median(walls["without nmem"])
            print(f"timing: {runs} runs each, rotating, {'both cores busy' if load else 'no extra load'}")
            for name, values in walls.items():
                extra = "" if name == "without nmem" else f" ({(median(values) / base - 1) * 100:+.1f} %)"
                print(f"  {name}: median {median(values) * 1000:.0f} ms, p90 {p90(values) * 1000:.0f} ms{extra}")
            print("  medians by Claude Code's debug log: " + "; ".join(PHASES))
            for name, by_part in parts.items():
                print(f"    {name}: " + ", ".join(f"{median(v):.0f} ms" if v else "-" for v in by_part.values()))
            print("  Claude Code's wait per hook (its debug log; async: until it is moved to the background):")
            for k in sorted(waits):
                print(f"    {k}: n={len(waits[k])} median {median(waits[k]):.0f} ms, p90 {p90(waits[k]):.0f} ms")
            if mcp:
                print(
                    f"  MCP server 'nmem' connected in: n={len(mcp)} median {median(mcp):.0f} ms, p90 {p90(mcp):.0f} ms"
                )
        finally:
            for world in worlds.values():
                world.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loss", type=int, default=0, metavar="N")
    parser.add_argument("--timing", type=int, default=0, metavar="N")
    parser.add_argument("--load", action="store_true")
    parser.add_argument("--before", metavar="REF")
    args = parser.parse_args()
    binary = claude_bin()
    if binary is None:
        sys.exit("set NMEM_CLAUDE_BIN to a Claude Code binary (.ci/run installs 2.1.330 into .ci/claude-code)")
    if not (args.loss or args.timing):
        args.loss = 20
    print_machine()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    print(f"Claude Code {version}")
    if args.loss:
        bench_loss(binary, args.loss, args.load, args.before)
    if args.timing:
        bench_timing(binary, args.timing, args.load)


if __name__ == "__main__":
    tempfile.tempdir = "/tmp"
    main()
