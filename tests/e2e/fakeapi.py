"""A scripted stand-in for the Anthropic Messages API, on 127.0.0.1, for the real Claude Code.

Claude Code (with nonessential traffic off) calls only `POST /v1/messages`, streaming. This
server answers each request from a script: a list of assistant turns, picked by counting the
`tool_result` blocks already in the request's messages (turn n answers after n results). The
script is chosen by a marker word (`E2E-<name>`) in the conversation's first user text; a
request without a marker (a /compact summary, a subagent, a title) gets a short text reply.

Every request body is kept (`requests`) so a test can check what the model was sent.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Block = dict[str, Any]
Turn = list[Block]
MODEL = "claude-sonnet-4-5-20250929"
MARKER = re.compile(r"E2E-([A-Za-z0-9_]+)")
DEFAULT_REPLY = (
    "<analysis>A scripted session.</analysis>\n<summary>1. Primary request: the scripted end-to-end"
    " session ran Bash, Write, Read, Edit and Grep on notes.txt. Nothing is pending.</summary>"
)


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tool(name: str, **tool_input: Any) -> Block:
    return {"type": "tool_use", "name": name, "input": tool_input}


def user_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return []


def tool_results(body: dict[str, Any]) -> int:
    return sum(
        1
        for m in body.get("messages", [])
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    )


def all_text(body: dict[str, Any]) -> str:
    """Every text the request carries (system, messages, tool results), for `in` checks."""
    return json.dumps(body, ensure_ascii=False)


def first_user_text(body: dict[str, Any]) -> str:
    for m in body.get("messages", []):
        if m.get("role") == "user":
            return "\n".join(user_texts(m))
    return ""


def script_name(body: dict[str, Any]) -> str | None:
    """The marker of the turn's prompt: the last user message with text of its own (not only
    tool results and system reminders). A prompt without a marker (a /compact summary) has none."""
    for m in reversed(body.get("messages", [])):
        if m.get("role") != "user":
            continue
        own = [t for t in user_texts(m) if t.strip() and not t.lstrip().startswith("<system-reminder>")]
        if own:
            found = MARKER.findall("\n".join(own))
            return str(found[-1]) if found else None
    return None


class FakeAPI:
    """`with FakeAPI() as api:` serves on `api.url`; `api.scripts[name] = [turn, ...]`."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[Turn]] = {}
        self.requests: list[dict[str, Any]] = []
        self.unknown: list[str] = []  # paths other than /v1/messages
        self.lock = threading.Lock()
        self._ids = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out in two writes: with Nagle's algorithm the body waited for the
            # client's delayed ACK, 40 ms on about half of the requests (bench_claude_code.py's walls).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                if not self.path.startswith("/v1/messages") or "count_tokens" in self.path:
                    api._note_unknown(f"POST {self.path}")
                    self._send(404, b'{"type":"error","error":{"type":"not_found_error","message":"nope"}}')
                    return
                body = json.loads(raw)
                with api.lock:
                    api.requests.append(body)
                blocks = api.answer(body)
                stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                if body.get("stream"):
                    self._stream(body, blocks, stop)
                else:
                    message = api._message(body, blocks, stop)
                    self._send(200, json.dumps(message).encode())

            def do_GET(self) -> None:
                api._note_unknown(f"GET {self.path}")
                self._send(404, b"{}")

            do_HEAD = do_GET

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, body: dict[str, Any], blocks: list[Block], stop: str) -> None:
                events = api._events(body, blocks, stop)
                data = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeAPI:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _note_unknown(self, what: str) -> None:
        with self.lock:
            self.unknown.append(what)

    def _next_id(self, prefix: str) -> str:
        with self.lock:
            self._ids += 1
            return f"{prefix}_e2e{self._ids:06d}"

    def answer(self, body: dict[str, Any]) -> list[Block]:
        name = script_name(body)
        script = self.scripts.get(name or "")
        if script is None:
            return [text(DEFAULT_REPLY)]
        step = tool_results(body)
        turn = script[step] if step < len(script) else [text("done")]
        return [dict(b) for b in turn]

    def _message(self, body: dict[str, Any], blocks: list[Block], stop: str) -> dict[str, Any]:
        content = []
        for b in blocks:
            if b["type"] == "tool_use":
                b = {**b, "id": self._next_id("toolu")}
            content.append(b)
        return {
            "id": self._next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or MODEL,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }

    def _events(self, body: dict[str, Any], blocks: list[Block], stop: str) -> list[dict[str, Any]]:
        message = self._message(body, [], stop)
        message["stop_reason"] = None
        message["usage"] = {"input_tokens": 100, "output_tokens": 1}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
        for index, b in enumerate(blocks):
            if b["type"] == "tool_use":
                start = {"type": "tool_use", "id": self._next_id("toolu"), "name": b["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
            else:
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": b["text"]}
            events += [
                {"type": "content_block_start", "index": index, "content_block": start},
                {"type": "content_block_delta", "index": index, "delta": delta},
                {"type": "content_block_stop", "index": index},
            ]
        events += [
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
            {"type": "message_stop"},
        ]
        return events

    def bodies(self, where: Callable[[dict[str, Any]], bool] = lambda b: True) -> list[dict[str, Any]]:
        with self.lock:
            return [b for b in self.requests if where(b)]
