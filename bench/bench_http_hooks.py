"""Issue #15: the lower bound of nmem's cost on a Claude Code session if Claude Code talked to nmem over
HTTP (http hooks, an http MCP server) instead of spawning a Python process per hook.

The same scripted session as bench/bench_claude_code.py (Bash, Write, Read, Edit, a failing Bash,
Grep, a final answer; `claude -p` against tests/e2e's fake Messages API, a fresh HOME per variant):

  a  without nmem
  b  nmem as installed today (`nmem install --no-import --no-mcp`: command hooks, the daemon)
  c  every nmem hook (same events, matchers, timeouts, async flags as nmemd/agents/claude_code/settings.py HOOKS)
     an http hook to a trivial server in a thread of this process (200 `{}`; SessionStart: a ~3 KB
     additionalContext; but Claude Code 2.1.330 skips an http SessionStart hook: "not supported")
  d  c + an http MCP server stub (streamable HTTP, JSON replies, stateless) on the same server, serving
     nmem's six tools' real tools/list, the 3 KB context in its instructions
  e  c, but SessionStart nmem's own command hook (`nmem install --no-mcp`, the daemon)
  f  c with every URL on a closed port (the daemon down)
  g  c, but SessionStart a `curl` command hook to the trivial server (a native client)
  h  http hooks on Stop and SessionEnd only (what capture from the transcript would cost)

  --probe      what http hooks do: settings accepted, context injected, `async` honoured (slow
               PostToolUse replies), a closed port, slow Stop / SessionEnd replies at exit
  --timing N   N runs each of the variants (default all), rotating who goes first; median, p90, ratio to a

  NMEM_CLAUDE_BIN=/path/to/claude .venv/bin/python bench/bench_http_hooks.py --probe --timing 17 [--variants abcehd]

Not a transport nmem ships: a measurement of what one would save (BENCHMARKS.md, issue #15).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "e2e"), str(REPO / "tests"), str(REPO / "bench")]

from bench_claude_code import PHASES, hook_waits, phases, script  # noqa: E402
from claude_code import Run, World, claude_bin  # noqa: E402
from common import median, p90, print_machine  # noqa: E402
from fakeapi import FakeAPI  # noqa: E402

from nmemd.agents.claude_code.settings import HOOKS  # noqa: E402

CONTEXT_MARK = "NMEM-HTTP-CONTEXT-MARK"
CONTEXT = (CONTEXT_MARK + "\n" + "- #123 an earlier observation about notes.txt and the build, kept for recall\n" * 40)[
    :3072
]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()


@lru_cache(maxsize=1)
def nmem_tools() -> dict[str, Any]:
    """nmem's real MCP instructions and tools/list, for the stub to serve."""
    import asyncio

    from nmemd.mcp.server import INSTRUCTIONS, build_server

    tools = asyncio.run(build_server().list_tools())
    data = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]
    return {"instructions": INSTRUCTIONS, "tools": data}


class HookServer:
    """A trivial nmem over HTTP: POST /hook answers 200 `{}` (SessionStart: additionalContext), after
    `delay[event]` seconds if set; POST /mcp is a stateless streamable-HTTP MCP server with JSON replies."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[float, str, str]] = []  # (monotonic, event, session id) when the body was read
        self.done: list[tuple[float, str, str]] = []  # (monotonic, event, "ok" | error) after the reply
        self.mcp: list[tuple[float, str]] = []
        self.delay: dict[str, float] = {}
        self.tools = nmem_tools()
        # d: the session-start context in the MCP server's instructions (SessionStart cannot be an http hook)
        self.instructions = self.tools["instructions"] + "\n\n" + CONTEXT
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, code: int, data: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path.startswith("/mcp"):
                    self._mcp(raw)
                    return
                body = json.loads(raw or b"{}")
                event = str(body.get("hook_event_name", "?"))
                with srv.lock:
                    srv.got.append((time.monotonic(), event, str(body.get("session_id", ""))))
                wait = srv.delay.get(event, 0.0)
                if wait:
                    time.sleep(wait)  # the probe's slow reply, bounded
                out: dict[str, Any] = {}
                if event == "SessionStart":
                    out = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": CONTEXT}}
                status = "ok"
                try:
                    self._send(200, json.dumps(out).encode())
                except OSError as exc:
                    status = type(exc).__name__
                with srv.lock:
                    srv.done.append((time.monotonic(), event, status))

            def _mcp(self, raw: bytes) -> None:
                msg = json.loads(raw or b"{}")
                method = str(msg.get("method", "?")) if isinstance(msg, dict) else "batch"
                with srv.lock:
                    srv.mcp.append((time.monotonic(), f"POST {method}"))
                if not isinstance(msg, dict) or "id" not in msg:
                    self._send(202, b"")  # a notification
                    return
                params = msg.get("params") or {}
                if method == "initialize":
                    result: dict[str, Any] = {
                        "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                        "capabilities": {"tools": {"listChanged": False}},
                        "serverInfo": {"name": "nmem", "version": "0-http-stub"},
                        "instructions": srv.instructions,
                    }
                elif method == "tools/list":
                    result = {"tools": srv.tools["tools"]}
                elif method in ("ping", "resources/list", "prompts/list", "resources/templates/list"):
                    result = {"ping": {}, "resources/list": {"resources": []}, "prompts/list": {"prompts": []}}.get(
                        method, {"resourceTemplates": []}
                    )
                else:
                    reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}}
                    self._send(200, json.dumps(reply).encode())
                    return
                self._send(200, json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode())

            def do_GET(self) -> None:
                with srv.lock:
                    srv.mcp.append((time.monotonic(), f"GET {self.path}"))
                self._send(405, b"", "text/plain")  # no server-initiated stream (allowed by the spec)

            def do_DELETE(self) -> None:
                with srv.lock:
                    srv.mcp.append((time.monotonic(), f"DELETE {self.path}"))
                self._send(405, b"", "text/plain")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HookServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        with self.lock:
            self.got.clear()
            self.done.clear()
            self.mcp.clear()
            self.delay.clear()


def closed_port() -> int:
    """A port nothing listens on (bound, then closed: the kernel will not hand it out again soon)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def install_http(world: World, base: str, *, mcp: bool = False, async_flags: bool = True) -> None:
    """nmem's hook table (nmemd/agents/claude_code/settings.py HOOKS) as http hooks; optionally an http MCP server."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for spec in HOOKS:
        handler: dict[str, Any] = {"type": "http", "url": f"{base}/hook", "timeout": spec.timeout}
        if spec.run_async and async_flags:
            handler["async"] = True
        group: dict[str, Any] = {"hooks": [handler]}
        if spec.matcher is not None:
            group = {"matcher": spec.matcher, **group}
        hooks.setdefault(spec.event, []).append(group)
    settings = world.home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"hooks": hooks}, indent=2))
    if mcp:
        state = world.home / ".claude.json"
        data = json.loads(state.read_text()) if state.exists() else {}
        data.setdefault("mcpServers", {})["nmem"] = {"type": "http", "url": f"{base}/mcp"}
        state.write_text(json.dumps(data, indent=2))


STAMPED = re.compile(r"^(\S+)Z \[\w+\] (.*)$")
HOOK_DONE = re.compile(r'"Hook [^ ]+ \((\w+)\) (success|error)')


def http_waits(run: Run) -> dict[str, list[int]]:
    """Per event: ms from `Hooks: HTTP hook POST` to the reply handled (its JSON validated, or the error
    logged). The event is named by the `"Hook X (Event) success|error` line that follows; SessionEnd has none."""
    from datetime import datetime

    lines = [
        (datetime.fromisoformat(m[1]).timestamp() * 1000, m[2]) for m in map(STAMPED.match, run.debug.splitlines()) if m
    ]
    waits: dict[str, list[int]] = {}
    for i, (t0, text) in enumerate(lines):
        if not text.startswith("Hooks: HTTP hook POST"):
            continue
        t1, event = None, "SessionEnd"
        for t, later in lines[i + 1 : i + 40]:
            if later.startswith("Hooks: HTTP hook POST"):
                break
            if t1 is None and (later.startswith(("Hooks: HTTP hook response status", "Hooks: HTTP hook error"))):
                t1 = t
            if t1 is not None and (later.startswith(("Successfully parsed", "Hooks: HTTP hook error"))):
                t1 = t
            m = HOOK_DONE.search(later)
            if m:
                event = m[1]
                break
        if t1 is not None:
            waits.setdefault(event, []).append(round(t1 - t0))
    return waits


CPU: list[float] = []  # CPU s of the last timed run's `claude` and the children it reaped (hook processes)


def timed(world: World, prompt: str) -> tuple[float, Run, float]:
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    run = world.claude_run(prompt)
    end = time.monotonic()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[:] = [r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime]
    return end - start, run, end


def hook_lines(run: Run, limit: int = 60) -> list[str]:
    return [ln[:240] for ln in run.debug.splitlines() if "Hooks:" in ln or "HTTP hook" in ln or "hook" in ln.lower()][
        :limit
    ]


# --- probe -------------------------------------------------------------------------------------


def probe(binary: str) -> None:
    with FakeAPI() as api, HookServer() as hs:
        worlds: list[World] = []

        def world(name: str) -> tuple[World, str]:
            w = World(binary, api.url)
            worlds.append(w)
            prompt = f"E2E-probe{len(worlds)}"
            api.scripts[prompt[4:]] = script(w)
            return w, prompt

        try:
            base, bp = world("base")
            timed(base, f"{bp} warm-up")
            wall0, _, _ = timed(base, f"{bp} run")
            print(f"\nprobe: without hooks, one run: {wall0 * 1000:.0f} ms")

            # 1. nmem's table as http hooks: accepted? every event sent? context injected?
            w1, p1 = world("http")
            install_http(w1, hs.url)
            hs.reset()
            n_req = len(api.requests)
            wall, run, end = timed(w1, f"{p1} run")
            got = [e for _, e, _ in hs.got]
            late = [e for t, e, _ in hs.got if t > end]
            injected = any(CONTEXT_MARK in json.dumps(b) for b in api.requests[n_req:])
            print(
                f"1. http hooks, nmem's table: wall {wall * 1000:.0f} ms;"
                f" events the server got: {json.dumps(_count(got))}"
            )
            print(f"   got after claude exited: {late or 'none'}; SessionStart context reached the model: {injected}")
            print(f"   Claude Code's waits by its debug log (ms): {json.dumps(http_waits(run))}")
            print(
                f"   SessionStart skipped: {[ln[24:140] for ln in run.debug.splitlines() if 'not supported for' in ln]}"
            )
            errs = [ln for ln in run.debug.splitlines() if re.search(r"(?i)invalid|setting.*error|schema", ln)][:5]
            print(f"   settings complaints in the debug log: {errs or 'none'}")
            for ln in hook_lines(run, 14):
                print(f"     | {ln}")

            # 2. async: PostToolUse replies take 1.5 s
            for flag in (True, False):
                w, p = world(f"async{flag}")
                install_http(w, hs.url, async_flags=flag)
                hs.reset()
                hs.delay = {"PostToolUse": 1.5, "PostToolUseFailure": 1.5}
                wall, run, end = timed(w, f"{p} run")
                hows = {k: v for k, v in http_waits(run).items() if k.startswith("PostToolUse")}
                print(
                    f'2. PostToolUse(Failure) replies 1.5 s, "async": {str(flag).lower()}: wall {wall * 1000:.0f} ms'
                    f" (+{(wall - wall0) * 1000:.0f} ms vs none); debug log: {json.dumps(hows)}"
                )
                hs.delay = {}
                sent, finished = len([1 for _, e, _ in hs.got if e.startswith("PostToolUse")]), hs.done
                cut = [s for _, e, s in finished if e.startswith("PostToolUse") and s != "ok"]
                print(f"   PostToolUse requests {sent}, replies that failed to go out: {cut or 'none'}")
                for ln in [ln for ln in run.debug.splitlines() if "PostToolUse" in ln and "Hooks" in ln][:4]:
                    print(f"     | {ln[:220]}")

            # 3. closed port
            w3, p3 = world("closed")
            install_http(w3, f"http://127.0.0.1:{closed_port()}")
            timed(w3, f"{p3} warm-up")
            wall, run, end = timed(w3, f"{p3} run")
            errs = [ln for ln in run.debug.splitlines() if "HTTP hook" in ln or "ECONNREFUSED" in ln]
            print(
                f"3. every hook to a closed port: wall {wall * 1000:.0f} ms (+{(wall - wall0) * 1000:.0f} ms vs none);"
                f" exit {run.proc.returncode}; stderr {run.proc.stderr.strip()[:200]!r}"
            )
            print(
                f"   debug-log lines about it: {len(errs)}; waits: "
                + json.dumps({k: v for k, v in http_waits(run).items()})
            )
            for ln in errs[:6]:
                print(f"     | {ln[:220]}")
            shown = [m for m in run.messages if "hook" in json.dumps(m).lower()][:3]
            print(
                "   stream-json lines mentioning a hook:"
                f" {len([m for m in run.messages if 'hook' in json.dumps(m).lower()])}"
            )
            for m in shown:
                print(f"     | {json.dumps(m)[:220]}")

            # 4. exit: slow Stop (sync) and slow SessionEnd (async as installed, then sync)
            for event, flag in (("Stop", False), ("SessionEnd", True), ("SessionEnd", False)):
                w, p = world(f"exit{event}{flag}")
                install_http(w, hs.url)
                if not flag:
                    s = json.loads((w.home / ".claude" / "settings.json").read_text())
                    for g in s["hooks"][event]:
                        for h in g["hooks"]:
                            h.pop("async", None)
                    (w.home / ".claude" / "settings.json").write_text(json.dumps(s))
                hs.reset()
                hs.delay = {event: 2.0}
                wall, run, end = timed(w, f"{p} run")
                got = [(t - end) * 1000 for t, e, _ in hs.got if e == event]
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and len([1 for _, e, _ in hs.done if e == event]) < len(got):
                    time.sleep(0.05)  # poll, bounded: the slow reply goes out (or fails)
                done = [(round((t - end) * 1000), s) for t, e, s in hs.done if e == event]
                lines = [ln[:220] for ln in run.debug.splitlines() if event in ln and ("Hooks" in ln or "hook" in ln)]
                print(
                    f"4. {event} replies after 2 s, async {str(flag).lower()}: wall {wall * 1000:.0f} ms"
                    f" (+{(wall - wall0) * 1000:.0f} ms vs none); request received at {[round(g) for g in got]} ms"
                    f" from exit; reply at/status {done}"
                )
                for ln in lines[-4:]:
                    print(f"     | {ln}")
                hs.delay = {}

            # 5. the http MCP stub: connects? what does Claude Code ask at start and at exit?
            w5, p5 = world("mcp")
            install_http(w5, hs.url, mcp=True)
            hs.reset()
            wall, run, end = timed(w5, f"{p5} run")
            conn = [ln[:200] for ln in run.debug.splitlines() if 'MCP server "nmem"' in ln][:6]
            tools_sent = any("mcp__nmem__search" in json.dumps(b) for b in api.requests[-3:])
            print(
                f"5. http hooks + http MCP stub: wall {wall * 1000:.0f} ms; MCP requests:"
                f" {[(round((t - end) * 1000), m) for t, m in hs.mcp]} (ms from exit);"
                f" nmem tools offered to the model: {tools_sent}"
            )
            for ln in conn:
                print(f"     | {ln}")
        finally:
            for w in worlds:
                w.cleanup()


def _count(items: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


# --- timing ------------------------------------------------------------------------------------

VARIANTS = (
    "a without nmem",
    "b nmem command hooks (today)",
    "c http hooks (SessionStart skipped)",
    "e http hooks + nmem's command SessionStart",
    "d http hooks + http MCP (context in instructions)",
    "f http hooks to a closed port",
    "g http hooks + SessionStart a curl command hook",
    "h http hooks on Stop and SessionEnd only (capture from the transcript)",
)


def install_few(world: World, base: str, events: tuple[str, ...] = ("Stop", "SessionEnd")) -> None:
    """Only a few of nmem's events as http hooks: what per-hook overhead the others cost."""
    install_http(world, base)
    path = world.home / ".claude" / "settings.json"
    settings = json.loads(path.read_text())
    settings["hooks"] = {e: g for e, g in settings["hooks"].items() if e in events}
    path.write_text(json.dumps(settings, indent=2))


def install_curl_start(world: World, base: str) -> None:
    """c, and SessionStart a command hook that is one curl process POSTing its stdin to the same server
    (whose reply, the additionalContext JSON, is the hook's stdout): a native client instead of Python."""
    install_http(world, base)
    path = world.home / ".claude" / "settings.json"
    settings = json.loads(path.read_text())
    command = f"curl -sS --max-time 5 -H 'content-type: application/json' --data-binary @- {base}/hook"
    for group in settings["hooks"]["SessionStart"]:
        group["hooks"] = [{"type": "command", "command": command, "timeout": 10}]
    path.write_text(json.dumps(settings, indent=2))


def install_mixed(world: World, base: str) -> None:
    """`nmem install --no-mcp`, then every hook but SessionStart (which cannot be http) an http hook."""
    assert world.nmem("install", "--no-import", "--no-mcp").returncode == 0
    path = world.home / ".claude" / "settings.json"
    settings = json.loads(path.read_text())
    start = settings["hooks"]["SessionStart"]
    install_http(world, base)
    http = json.loads(path.read_text())
    http["hooks"]["SessionStart"] = start
    path.write_text(json.dumps(http, indent=2))


def timing(binary: str, runs: int, variants: tuple[str, ...]) -> None:
    with FakeAPI() as api, HookServer() as hs:
        worlds = {name: World(binary, api.url) for name in variants}
        try:
            for name, world in worlds.items():
                if name.startswith("b"):
                    assert world.nmem("install", "--no-import", "--no-mcp").returncode == 0
                elif name.startswith("c"):
                    install_http(world, hs.url)
                elif name.startswith("d"):
                    install_http(world, hs.url, mcp=True)
                elif name.startswith("e"):
                    install_mixed(world, hs.url)
                elif name.startswith("f"):
                    install_http(world, f"http://127.0.0.1:{closed_port()}")
                elif name.startswith("g"):
                    install_curl_start(world, hs.url)
                elif name.startswith("h"):
                    install_few(world, hs.url)
            prompts = {}
            for n, (name, world) in enumerate(worlds.items()):
                prompts[name] = f"E2E-httpb{n}"
                api.scripts[f"httpb{n}"] = script(world)
            walls: dict[str, list[float]] = {name: [] for name in worlds}
            parts: dict[str, dict[str, list[float]]] = {name: {p: [] for p in PHASES} for name in worlds}
            waits: dict[str, dict[str, list[int]]] = {name: {} for name in worlds}
            events: dict[str, dict[str, int]] = {name: {} for name in worlds}
            late: dict[str, int] = {name: 0 for name in worlds}
            mcp_conn: list[int] = []
            ctx: dict[str, int] = {name: 0 for name in worlds}
            cpus: dict[str, list[float]] = {name: [] for name in worlds}
            for name, world in worlds.items():
                world.claude_run(f"{prompts[name]} warm-up")  # page cache, the daemon started, .pyc files
            print(f"timing: {runs} runs each, rotating; load before: {uptime()}")
            for i in range(runs):
                order = list(worlds.items())
                order = order[i % len(order) :] + order[: i % len(order)]
                for name, world in order:
                    hs.reset()
                    n_req = len(api.requests)
                    wall, run, end = timed(world, f"{prompts[name]} run {i}")
                    walls[name].append(wall)
                    cpus[name].append(CPU[0])
                    ctx[name] += any(CONTEXT_MARK in json.dumps(b) for b in api.requests[n_req:])
                    for part, took in phases(run).items():
                        parts[name][part].append(took)
                    got = hs.got[:]
                    if name[0] in "cdefgh":
                        for _, e, _ in got:
                            events[name][e] = events[name].get(e, 0) + 1
                        late[name] += sum(1 for t, _, _ in got if t > end)
                        for k, v in http_waits(run).items():
                            waits[name].setdefault(k, []).extend(v)
                        mcp_conn += [
                            int(m)
                            for m in re.findall(
                                r'MCP server "nmem": Successfully connected \(transport: http\) in (\d+)ms', run.debug
                            )
                        ]
                    if name[0] == "g":
                        for m in re.finditer(r"SessionStart(?::\S*)? \[curl[^\]]*\] \w+[^(\n]*\((\d+)ms\)", run.debug):
                            waits[name].setdefault("SessionStart (curl)", []).append(int(m[1]))
                    if name[0] in "be":
                        for k, v in hook_waits(run).items():
                            waits[name].setdefault(k, []).extend(v)
                print(f"  run {i + 1}: " + ", ".join(f"{n[0]} {walls[n][-1] * 1000:.0f}" for n in worlds))
            print(f"  load after: {uptime()}")
            base = median(walls[variants[0]])
            print(f"timing: {runs} runs each, rotating (ms; ratio to a)")
            for name, values in walls.items():
                paired = median([v / a for v, a in zip(values, walls[variants[0]], strict=True)])
                print(
                    f"  {name}: median {median(values) * 1000:.0f} ms, p90 {p90(values) * 1000:.0f} ms,"
                    f" min {min(values) * 1000:.0f} ms  ({(median(values) / base - 1) * 100:+.1f} %);"
                    f" paired (median of the rounds' ratios) {(paired - 1) * 100:+.1f} %;"
                    f" CPU of claude + its hooks median {median(cpus[name]) * 1000:.0f} ms"
                )
            print("  medians by Claude Code's debug log: " + "; ".join(PHASES))
            for name, by_part in parts.items():
                print(f"    {name}: " + ", ".join(f"{median(v):.0f} ms" if v else "-" for v in by_part.values()))
            for name in worlds:
                if waits[name]:
                    print(f"  {name}: Claude Code's wait per hook (debug log):")
                    for k in sorted(waits[name]):
                        w = waits[name][k]
                        print(f"    {k}: n={len(w)} median {median(w):.0f} ms, p90 {p90(w):.0f} ms")
                if events[name]:
                    print(
                        f"  {name}: requests the server got in {runs} runs: {json.dumps(events[name])};"
                        f" after exit: {late[name]}"
                    )
            print(f"  runs whose requests carried the 3 KB context (http stub's mark): {json.dumps(ctx)}")
            if mcp_conn:
                print(
                    f"  http MCP stub connected in: n={len(mcp_conn)} median {median(mcp_conn):.0f} ms,"
                    f" p90 {p90(mcp_conn):.0f} ms"
                )
        finally:
            for world in worlds.values():
                world.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--timing", type=int, default=0, metavar="N")
    parser.add_argument("--variants", default="abcdefgh", help="variants to time, by letter")
    args = parser.parse_args()
    binary = claude_bin()
    if binary is None:
        sys.exit("set NMEM_CLAUDE_BIN")
    print_machine()
    print(f"uptime: {uptime()}")
    print(
        "Claude Code "
        + subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    )
    if args.probe:
        probe(binary)
    if args.timing:
        timing(binary, args.timing, tuple(v for v in VARIANTS if v[0] in args.variants))
    print(f"uptime: {uptime()}")


if __name__ == "__main__":
    tempfile.tempdir = "/tmp"
    os.environ.pop("NMEM_E2E_KEEP", None) if os.environ.get("HTTP15_KEEP") != "1" else None
    main()
