"""A scripted OpenAI-compatible chat completions API on 127.0.0.1, and a fresh HOME, for the real OpenCode.

OpenCode with a custom provider (`@ai-sdk/openai-compatible`, bundled) calls only `POST
<baseURL>/chat/completions`, streamed. This server answers each request from a script: a list of turns
(tool calls, or a text), picked by counting the `tool` messages after the request's last user message
(turn n answers after n results). The script is chosen by a marker word (`E2E-<name>`) in that user
message; a request without one (the session's title, asked of `small_model` with no tools) gets a short
text. Every request body is kept (`requests`).

`OpenCodeWorld`: a HOME whose `~/.config/opencode/opencode.json` holds only what a user of such a provider
writes, a git project folder, nmem's data in its default place under that HOME. The binary is
`NMEM_OPENCODE_BIN` (.ci/run installs the pinned version from npm and sets it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent_world import AgentWorld
from support.agent_clis import CLIS

MARKER = re.compile(r"E2E-([A-Za-z0-9_]+)")
RUN_TIMEOUT_S = 300.0
Turn = list[tuple[str, dict[str, Any]]] | str


CLI = CLIS["opencode"]
opencode_bin = CLI.binary  # the binary to test with, or None (the tests are then skipped, with the reason)
SKIP_REASON = CLI.skip_reason()


def last_user(body: dict[str, Any]) -> tuple[str, int]:
    """The last user message's text and how many tool results follow it."""
    messages = body.get("messages", [])
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            content = messages[i].get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            return text, sum(1 for m in messages[i:] if m.get("role") == "tool")
    return "", 0


def system_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


def tool_results(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "tool"]


class FakeChat:
    def __init__(self) -> None:
        self.scripts: dict[str, list[Turn]] = {}
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
                with fake.lock:
                    fake.requests.append(body)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in fake.answer(body):
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        text, results = last_user(body)
        found = MARKER.findall(text)
        script = self.scripts.get(found[-1], []) if found and body.get("tools") else []
        turn: Turn = script[results] if results < len(script) else "Done."
        head = {"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": 1, "model": body.get("model")}
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if isinstance(turn, str):
            delta: dict[str, Any] = {"role": "assistant", "content": turn}
            finish = "stop"
        else:
            calls = [{"index": i, "id": f"call_{results}_{i}", "type": "function",
                      "function": {"name": name, "arguments": json.dumps(args)}}
                     for i, (name, args) in enumerate(turn)]  # fmt: skip
            delta, finish = {"role": "assistant", "tool_calls": calls}, "tool_calls"
        return [
            {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}], "usage": usage},
        ]

    def since(self, start: int) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests[start:] if r.get("tools")]  # not the title requests

    def __enter__(self) -> FakeChat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class OpenCodeWorld(AgentWorld):
    NAME = "opencode"

    def __init__(self, opencode: str, api_url: str) -> None:
        super().__init__("oc")
        self.opencode = opencode
        self.config_dir = self.home / ".config" / "opencode"
        self.config_dir.mkdir(parents=True)
        (self.project / ".git").mkdir()
        config = {
            "$schema": "https://opencode.ai/config.json",
            "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake", "options": {
                "baseURL": api_url, "apiKey": "e2e-fake-key"}, "models": {"m1": {"name": "M1", "tool_call": True}}}},
            "model": "fake/m1",
            "small_model": "fake/m1",
            "autoupdate": False,
            "share": "disabled",
        }  # fmt: skip
        (self.config_dir / "opencode.json").write_text(json.dumps(config, indent=2))
        self.env.update(TMPDIR=str(self.root), OPENCODE_DISABLE_AUTOUPDATE="1",
                        OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_LSP_DOWNLOAD="1")  # fmt: skip

    @property
    def opencode_db(self) -> Path:
        return self.home / ".local" / "share" / "opencode" / "opencode.db"

    def send(self, payload: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
        """Claude Code's hook client, as its hooks run it (no --agent)."""
        client = Path(__file__).resolve().parents[2] / "nmem_client" / "send.py"
        return subprocess.run([sys.executable, "-I", "-S", str(client)], input=json.dumps(payload).encode(),
                              env=self.env, capture_output=True, timeout=60)  # fmt: skip

    def run(self, prompt: str) -> subprocess.CompletedProcess[str]:
        argv = [self.opencode, "run", prompt]
        proc = subprocess.run(argv, cwd=self.project, env=self.env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT_S)  # fmt: skip
        assert proc.returncode == 0, f"opencode exited {proc.returncode}: {proc.stderr[-3000:]}"
        return proc
