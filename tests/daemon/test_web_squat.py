"""The viewer's bookmark cannot be squatted (issue #37, 5): while the viewer that stays is down, another
local user listens on its port and records what a bookmark's visit sends (the secret path, the cookie);
once the viewer is back, what they recorded opens nothing for them, and the bookmark still opens it for
its own user. The real `nmem ui --background`, a real daemon, a squatter run as a second user (nobody)."""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess

import pytest
from support.daemon import Daemon
from support.env import BIN
from support.web_viewer import prompt

pytestmark = pytest.mark.daemon
SECOND_UID = 65534  # nobody: a second local user on every Linux system
TIMEOUT_S = 60.0

SQUATTER = """
import http.server, sys
class Record(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print(self.path + "\\t" + (self.headers.get("Cookie") or ""), flush=True)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"squatted")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Record)
print("listening", flush=True)
server.serve_forever()
"""

REPLAY = """
import http.client, sys
port, path, cookie = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
c.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "Cookie": cookie})
reply = c.getresponse()
body = reply.read()
print(reply.status, b"okapi" in body)
"""


def _system_python() -> str:
    python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if python is None:
        pytest.skip("no system python3 that a second user may run")
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nmem_ui(*args: str) -> str:
    done = subprocess.run([str(BIN / "nmem"), "ui", "--no-open", *args], capture_output=True, text=True,
                          timeout=TIMEOUT_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _get(port: int, path: str, cookie: str = "") -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", **({"Cookie": cookie} if cookie else {})})
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read().decode(errors="replace")
    finally:
        conn.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a squatter of another uid needs root to start it")
def test_what_a_squatter_records_of_a_bookmark_opens_nothing(daemon: Daemon) -> None:
    python = _system_python()
    daemon.start()
    prompt("the okapi exporter keeps a bookmark")
    port = _free_port()
    first = _nmem_ui("--background", "--port", str(port))
    try:
        m = re.fullmatch(rf"nmem ui: http://127\.0\.0\.1:{port}(/[\w-]+/)\?token=(\S+)\n", first)
        assert m, first
        bookmark, token = m.group(1), m.group(2)
        status, headers, _ = _get(port, f"{bookmark}?token={token}")  # the first visit: the cookie
        assert status == 200
        cookie = headers["set-cookie"].split(";")[0]
        assert _get(port, bookmark, cookie)[0] == 200
        _nmem_ui("--stop")

        squatter = subprocess.Popen([python, "-I", "-c", SQUATTER, str(port)], user=SECOND_UID, cwd="/",
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            assert squatter.stdout is not None and squatter.stdout.readline() == b"listening\n"
            assert _get(port, bookmark, cookie)[2] == "squatted"  # the user opens the bookmark meanwhile
            seen_path, seen_cookie = squatter.stdout.readline().decode().rstrip("\n").split("\t")
        finally:
            squatter.terminate()
            squatter.wait(TIMEOUT_S)
            if squatter.stdout is not None:
                squatter.stdout.close()
        assert seen_path == bookmark and seen_cookie == cookie  # what the bookmark hands the port's holder

        assert _nmem_ui("--background") == first  # back, at the same address, with the same secret
        replay = subprocess.run([python, "-I", "-c", REPLAY, str(port), seen_path, seen_cookie], user=SECOND_UID,
                                cwd="/", capture_output=True, text=True, timeout=TIMEOUT_S)  # fmt: skip
        assert replay.stdout.split() == ["403", "False"], replay  # the squatter's copy opens nothing
        token_replay = subprocess.run([python, "-I", "-c", REPLAY, str(port), f"{seen_path}?token={token}", ""],
                                      user=SECOND_UID, cwd="/", capture_output=True, text=True,
                                      timeout=TIMEOUT_S)  # fmt: skip
        assert token_replay.stdout.split()[0] == "403", token_replay
        status, _, page = _get(port, bookmark, cookie)  # the bookmark still opens it for its own user
        assert status == 200 and "okapi" in page
    finally:
        _nmem_ui("--stop")
