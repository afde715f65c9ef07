"""What the scripted stand-ins for the model APIs share (fakeapi for Claude Code, codex_api for Codex and
Copilot, gemini_api for the Gemini CLI): a threaded HTTP server on 127.0.0.1 that keeps every request body
and answers from scripts, the turns of a conversation chosen by a marker word (`E2E-<name>`) in its
prompt. Each API says only its routes and its wire format (`post`)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

MARKER = re.compile(r"E2E-([A-Za-z0-9_]+)")
Reply = tuple[int, bytes, str]  # status, body, content type


def marker(texts: Iterable[str]) -> str | None:
    """The last marker of the last text that holds one."""
    for text in reversed(list(texts)):
        found = MARKER.findall(text)
        if found:
            return str(found[-1])
    return None


class ScriptedAPI:
    """`with API() as api:` serves on `api.url`; `api.scripts[name] = [turn, ...]`; `api.requests` keeps
    what was asked, `api.unknown` the requests of paths it does not serve."""

    URL_PATH: ClassVar[str] = ""  # the end of `url` (`/v1`: a base URL the client adds its path to)
    NOT_FOUND: ClassVar[bytes] = b'{"error": {"code": 404, "message": "not found"}}'
    ID_DIGITS: ClassVar[int] = 5

    def __init__(self) -> None:
        self.scripts: dict[str, list[Any]] = {}
        self.requests: list[dict[str, Any]] = []
        self.unknown: list[str] = []
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
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                self._send(*api.post(self.path, raw))

            def do_GET(self) -> None:
                api.note(f"{self.command} {self.path}")
                self._send(404, api.NOT_FOUND, "application/json")

            do_HEAD = do_GET

            def _send(self, code: int, data: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("content-type", kind)
                if kind == "text/event-stream":
                    self.send_header("cache-control", "no-cache")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{self.URL_PATH}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Any:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def post(self, path: str, raw: bytes) -> Reply:
        """The answer to a POST of `raw` to `path` (a route it does not serve: `not_found`)."""
        raise NotImplementedError

    def not_found(self, path: str) -> Reply:
        self.note(f"POST {path}")
        return 404, self.NOT_FOUND, "application/json"

    def keep(self, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(body)

    def note(self, what: str) -> None:
        with self.lock:
            self.unknown.append(what)

    def next_id(self, prefix: str) -> str:
        with self.lock:
            self._ids += 1
            return f"{prefix}_e2e{self._ids:0{self.ID_DIGITS}d}"

    @staticmethod
    def sse(events: Iterable[dict[str, Any]]) -> bytes:
        """Server-sent events named by their `type`."""
        import json

        return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
