"""A scripted stand-in for the Gemini API (generativelanguage v1beta), on 127.0.0.1, for the real Gemini CLI.

With `GOOGLE_GEMINI_BASE_URL` pointing here and an API key, the Gemini CLI calls
`POST /v1beta/models/<model>:streamGenerateContent?alt=sse` for the agent's turns (server-sent
events, one `data: <GenerateContentResponse>` each), `:generateContent` for its own side questions
(the next speaker, a session summary, ...) and `:countTokens`. This server answers a streamed
request from a script: a list of turns (lists of parts), picked by counting the `functionResponse`
parts already in the request's `contents` (turn n answers after n responses). The script is chosen
by a marker word (`E2E-<name>`) in the last user text; a request without one gets a short text
reply. Every streamed request body is kept (`requests`), the others in `side`.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Part = dict[str, Any]
MARKER = re.compile(r"E2E-([A-Za-z0-9_]+)")


def text(value: str) -> Part:
    return {"text": value}


def call(name: str, **args: Any) -> Part:
    return {"functionCall": {"name": name, "args": args}}


def shell(command: str) -> Part:
    return call("run_shell_command", command=command, description="e2e")


def user_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for content in body.get("contents", []):
        if isinstance(content, dict) and content.get("role") == "user":
            for part in content.get("parts") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return texts


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for content in body.get("contents", []):
        for part in content.get("parts") or [] if isinstance(content, dict) else []:
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                out.append(part["functionResponse"])
    return out


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations") or [] if isinstance(tool, dict) else []:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                names.append(decl["name"])
    return names


def script_name(body: dict[str, Any]) -> str | None:
    for value in reversed(user_texts(body)):
        found = MARKER.findall(value)
        if found:
            return str(found[-1])
    return None


def _response(parts: list[Part], finish: str = "STOP") -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
        "modelVersion": "gemini-e2e",
    }


class FakeGemini:
    """`with FakeGemini() as api:` serves on `api.url` (the `GOOGLE_GEMINI_BASE_URL`)."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[list[Part]]] = {}
        self.requests: list[dict[str, Any]] = []
        self.side: list[tuple[str, dict[str, Any]]] = []
        self.unknown: list[str] = []
        self.lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?", 1)[0]
                if path.endswith(":streamGenerateContent"):
                    with api.lock:
                        api.requests.append(body)
                    data = f"data: {json.dumps(_response(api.answer(body)))}\r\n\r\n".encode()
                    self._send(200, data, "text/event-stream")
                elif path.endswith(":generateContent"):
                    with api.lock:
                        api.side.append((path, body))
                    self._send(200, json.dumps(api.side_answer(body)).encode(), "application/json")
                elif path.endswith(":countTokens"):
                    self._send(200, b'{"totalTokens": 100}', "application/json")
                else:
                    api._note(f"POST {self.path}")
                    self._send(404, b'{"error": {"code": 404, "message": "not found"}}', "application/json")

            def do_GET(self) -> None:
                api._note(f"GET {self.path}")
                self._send(404, b'{"error": {"code": 404, "message": "not found"}}', "application/json")

            def _send(self, code: int, data: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGemini:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _note(self, what: str) -> None:
        with self.lock:
            self.unknown.append(what)

    def answer(self, body: dict[str, Any]) -> list[Part]:
        script = self.scripts.get(script_name(body) or "")
        if script is None:
            return [text("Done.")]
        step = len(function_responses(body))
        return [dict(p) for p in script[step]] if step < len(script) else [text("Done.")]

    @staticmethod
    def side_answer(body: dict[str, Any]) -> dict[str, Any]:
        """A side question (JSON mode: the next speaker, a complexity rating, ...) or a summary."""
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json" or config.get("responseJsonSchema"):
            reply = json.dumps({"next_speaker": "user", "reasoning": "the turn is done", "complexity_score": 1,
                                "complexity_reasoning": "simple", "model_choice": "flash"})  # fmt: skip
            return _response([text(reply)])
        return _response([text("A scripted session.")])
