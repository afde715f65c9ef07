"""The web viewer as the tests meet it: the real `nmem ui` command, its URL read from its output,
spoken to over plain HTTP (http.client) with the cookie its secret buys."""

from __future__ import annotations

import http.client
import json
import os
import re
import select
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlencode

from support.daemon import RLIMIT_WRAPPER, run_send
from support.env import BIN

PROJECT = "/tmp/nmem-web-test-project"
READY_S = 20.0


@dataclass
class Viewer:
    proc: subprocess.Popen[bytes]
    port: int
    key: str
    secret: str
    cookie: str = ""

    @property
    def root(self) -> str:
        return f"/{self.key}"

    @property
    def token(self) -> str:
        """What the viewer's confirmation forms carry (derived from the secret, never the secret)."""
        from nmemd.web.guard import form_token

        return form_token(self.secret)

    def url(self, path: str = "/") -> str:
        """The address of `path` below the viewer's secret path, for a browser."""
        return f"http://127.0.0.1:{self.port}{self.root}{path}"

    def request(
        self,
        method: str,
        path: str,
        *,
        body: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        raw: bool = False,
    ) -> tuple[int, dict[str, str], str]:
        """`path` below the viewer's secret path (`raw`: as it is)."""
        path = path if raw else self.root + path
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            sent = {"Host": f"127.0.0.1:{self.port}", **({"Cookie": self.cookie} if self.cookie else {})}
            data = None
            if body is not None:
                data = urlencode(body)
                sent["Content-Type"] = "application/x-www-form-urlencoded"
            conn.request(method, path, body=data, headers={**sent, **(headers or {})})
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read().decode()
        finally:
            conn.close()

    def get(self, path: str, **kw: object) -> tuple[int, str]:
        status, _, text = self.request("GET", path, **kw)  # type: ignore[arg-type]
        return status, text

    def post(self, path: str, body: dict[str, str], origin: str | None = "self") -> tuple[int, str]:
        headers = {} if origin is None else {"Origin": f"http://127.0.0.1:{self.port}" if origin == "self" else origin}
        status, _, text = self.request("POST", path, body=body, headers=headers)
        return status, text


@contextmanager
def open_viewer(
    *args: str, env: dict[str, str] | None = None, browser: bool = False, max_files: int | None = None
) -> Iterator[Viewer]:
    """`nmem ui --no-open ARGS` (`browser`: without --no-open; `max_files`: under that RLIMIT_NOFILE)
    until the block ends; its URL's port, path and secret."""
    argv = [str(BIN / "nmem"), "ui", *([] if browser else ["--no-open"]), *args]
    if max_files is not None:
        argv = [sys.executable, "-c", RLIMIT_WRAPPER, f"RLIMIT_NOFILE:{max_files}:{max_files}", *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], READY_S)
        assert ready, "nmem ui printed no URL"
        line = proc.stdout.readline().decode()
        m = re.fullmatch(r"nmem ui: http://127\.0\.0\.1:(\d+)/([\w-]{20,})/\?token=(\S+)\n", line)
        assert m, line
        yield Viewer(proc, int(m.group(1)), m.group(2), m.group(3))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def login(v: Viewer) -> None:
    status, headers, text = v.request("GET", f"/?token={v.secret}")
    assert status == 200 and f'content="0;url={v.root}/"' in text
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Path={v.root}/" in cookie
    v.cookie = cookie.split(";")[0]


def prompt(text: str, session: str = "web-1", agent: str | None = None) -> None:
    """A prompt through the real hook client (`agent`: as `send.py --agent` marks it)."""
    payload = {"session_id": session, "hook_event_name": "UserPromptSubmit", "prompt": text, "cwd": PROJECT}
    if agent:
        payload = {"nmem_agent": agent, **payload}
    done = run_send(json.dumps(payload).encode())
    assert done.returncode == 0 and done.stderr == b""
