"""How soon an MCP client may offer nmem's tools: spawn of `nmem-mcp` to the reply that completes its handshake.

Two clients' handshakes: Codex 0.169's (legacy `initialize`, then `tools/list`) and Claude Code 2.1.330's
(2026-07-28: `server/discover`, `subscriptions/listen` and its acknowledgement, `server/discover`, the
prompt, resource and tool lists). Codex leaves out a server that has not answered about a second into
its session; Claude Code does not wait at all. Each in a fresh NMEM_HOME: `cold`, no daemon (the bridge
starts it, as at a session's start after a reboot); `warm`, a daemon up that has not built its MCP
server yet. This tree's bridge and `--baseline`'s (a venv's bin folder, e.g. a `git worktree` at an
earlier commit) alternate, run by run; medians.

    .venv/bin/python bench/bench_mcp_start.py [--runs 7] [--baseline /work/base/.venv/bin]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import common
from common import median

BOUND_S = 60.0
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}


def _rpc(rid: int, method: str, params: dict[str, object]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n"


class Bridge:
    """One `nmem-mcp`, its stdout read line by line with a bound."""

    def __init__(self, binary: str, env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen([binary], env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)  # fmt: skip
        self.buf = b""

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def until(self, done: object) -> None:
        """Read messages until one has `id` == `done` (or, a str starting with notifications/, that method)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + BOUND_S
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("id", msg.get("method")) == done:
                    return
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise TimeoutError(f"no {done!r} within {BOUND_S:.0f} s")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise EOFError(f"the bridge closed stdout before {done!r}")
            self.buf += chunk

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=BOUND_S)
        self.proc.stdout.close()


def codex(bridge: Bridge) -> None:
    bridge.send(_rpc(0, "initialize", INIT))
    bridge.until(0)
    bridge.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n' + _rpc(1, "tools/list", {}))
    bridge.until(1)


def claude_code(bridge: Bridge) -> None:
    bridge.send(_rpc(0, "server/discover", {"_meta": META}))
    bridge.until(0)
    bridge.send(_rpc(1, "subscriptions/listen", {"_meta": META, "notifications": {"toolsListChanged": True}}))
    bridge.until("notifications/subscriptions/acknowledged")
    bridge.send(_rpc(2, "server/discover", {"_meta": META}))
    bridge.until(2)
    for n, method in enumerate(("prompts/list", "resources/list", "tools/list"), 3):
        bridge.send(_rpc(n, method, {"_meta": META}))
    bridge.until(5)


def one(bin_dir: Path, warm: bool, handshake: str) -> float:
    """ms from spawn to the reply that completes `handshake`, in a fresh home."""
    root = tempfile.mkdtemp(prefix="nmb", dir="/tmp")  # short: the socket lives under it
    env = {k: v for k, v in os.environ.items() if not k.startswith("NMEM_")}
    env.update(NMEM_HOME=f"{root}/h", NMEM_SOCKET=f"{root}/d.sock", NMEM_AUTOSTART="1", CLAUDE_PROJECT_DIR=root)
    nmem = str(bin_dir / "nmem")
    try:
        if warm:
            subprocess.run([nmem, "daemon", "start"], env=env, capture_output=True, timeout=BOUND_S, check=True)
        start = time.perf_counter()
        bridge = Bridge(str(bin_dir / "nmem-mcp"), env, root)
        (codex if handshake == "codex" else claude_code)(bridge)
        took = (time.perf_counter() - start) * 1000
        bridge.close()
        return took
    finally:
        subprocess.run([nmem, "daemon", "stop"], env=env, capture_output=True, timeout=BOUND_S)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--baseline", type=Path, help="a venv's bin folder holding the other tree's nmem-mcp")
    args = parser.parse_args()
    common.print_machine()
    trees = {"this tree": common.VENV_BIN} | ({"baseline": args.baseline} if args.baseline else {})
    for handshake in ("codex", "claude-code"):
        for warm in (False, True):
            took: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(args.runs):
                for name, bin_dir in trees.items():  # alternated, run by run
                    took[name].append(one(bin_dir, warm, handshake))
            figures = ", ".join(f"{name} {median(v):.0f} ms" for name, v in took.items())
            ratio = f"; ratio {median(took['this tree']) / median(took['baseline']):.3f}" if args.baseline else ""
            print(f"{handshake:11} {'warm' if warm else 'cold'}: spawn -> tools offered: {figures}{ratio}")


if __name__ == "__main__":
    main()
