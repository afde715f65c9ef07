"""Run the real Claude Code binary against the fake Messages API, with nmem installed as a user does.

A `World` is a fresh HOME (nmem's data then lives in its default place, `~/.local/share/nmem`),
a project folder, and the environment Claude Code runs offline with: the fake API's URL, a
fake key, nonessential traffic, the updater and telemetry off, `IS_SANDBOX=1` (so that
`--dangerously-skip-permissions` runs as root). The binary is `NMEM_CLAUDE_BIN` (.ci/run
installs the pinned version from npm and sets it).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_world import KEEP_ENV, AgentWorld
from support.agent_clis import CLIS

REPO = Path(__file__).resolve().parents[2]
TOOLS = "Bash,Read,Write,Edit,Grep,Glob,Agent"
RUN_TIMEOUT_S = 300.0  # a whole `claude -p` session on a 2-core machine others share
# A hook's line in Claude Code's --debug-file: `Hooks: PostToolUse:Bash [<command>] moved to the
# background (6ms)`, `Hooks: Stop [<command>] finished with status 0 (40ms)`,
# `SessionEnd:other [<command>] completed with status 0`. The command holds brackets of its own
# (`trap '' TERM; [ -f CLIENT ] && ... exec PYTHON -I -S CLIENT`): its end is the client's path.
HOOK_LINE = re.compile(
    r"(?:Hooks: )?(?P<event>[A-Za-z]+)(?::[^ \[]*)? "
    r"\[(?=trap |/|')[^\n]*?nmem_client/send\.py'?(?: --agent [a-z-]+)?\] "
    r"(?P<how>finished|moved to the background|completed)[^(\n]*(?:\((?P<ms>\d+)ms\))?"
)


CLI = CLIS["claude_code"]
claude_bin = CLI.binary  # the binary to test with, or None (the tests are then skipped, with the reason)
SKIP_REASON = CLI.skip_reason()


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    debug: str
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        for m in self.messages:
            if m.get("type") == "result" and m.get("session_id"):
                return str(m["session_id"])
        out, err = self.proc.stdout[-2000:], self.proc.stderr[-2000:]
        raise AssertionError(f"no result line in claude's output:\n{out}\n{err}")

    def hooks_fired(self) -> dict[str, int]:
        """How many times each hook event ran nmem's client, from Claude Code's own debug log."""
        counts: dict[str, int] = {}
        for m in HOOK_LINE.finditer(self.debug):
            counts[m["event"]] = counts.get(m["event"], 0) + 1
        return counts


class World(AgentWorld):
    NAME = "claude_code"

    def __init__(self, claude: str, api_url: str) -> None:
        super().__init__("cc", keep=(*KEEP_ENV, "TMPDIR"))
        (self.home / ".claude").mkdir()  # as Claude Code leaves it: nmem install skips an agent it cannot find
        self.claude = claude
        self.runs = 0
        self.env.update(
            ANTHROPIC_BASE_URL=api_url,
            ANTHROPIC_API_KEY="sk-ant-e2e-fake",
            CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            DISABLE_AUTOUPDATER="1",
            DISABLE_TELEMETRY="1",
            DISABLE_ERROR_REPORTING="1",
            IS_SANDBOX="1",
        )

    @property
    def socket(self) -> str:
        return str(self.nmem_home / "run" / "nmemd.sock")

    def claude_run(self, prompt: str, *args: str, timeout: float = RUN_TIMEOUT_S) -> Run:
        self.runs += 1
        debug = self.root / f"debug-{self.runs}.log"
        argv = [
            self.claude, "-p", prompt, "--output-format", "stream-json", "--verbose",
            "--dangerously-skip-permissions", "--debug-file", str(debug), "--tools", TOOLS, *args,
        ]  # fmt: skip
        proc = subprocess.run(argv, cwd=self.project, env=self.env, capture_output=True, text=True, timeout=timeout)
        messages = []
        for line in proc.stdout.splitlines():
            try:
                messages.append(json.loads(line))
            except json.JSONDecodeError:
                pass
        run = Run(proc, debug.read_text(errors="replace") if debug.exists() else "", messages)
        assert proc.returncode == 0, f"claude exited {proc.returncode}: {proc.stderr[-3000:]}"
        return run

    def stop_daemon(self) -> None:
        done = self.nmem("daemon", "stop")
        assert done.returncode == 0, done.stderr
