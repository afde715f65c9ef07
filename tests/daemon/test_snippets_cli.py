"""Result lines that hold the answer through `nmem search` as a subprocess (no daemon: it reads the file
itself), in a pipe and under a pseudo-terminal; the store is filled in process (the snippets themselves:
tests/unit/test_snippets.py)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time

from support.env import BIN
from support.snippet_session import snippet_session
from support.store import stored

NMEM = str(BIN / "nmem")
CWD = "/tmp/nmem-snippet-project"


def _nmem_search(*args: str, tty: bool = False, env: dict[str, str] | None = None) -> str:
    env = {**os.environ, "NMEM_AUTOSTART": "0", "COLUMNS": "200", **(env or {})}
    argv = [NMEM, "search", *args, "--project", CWD]
    if not tty:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL, env=env)
    os.close(follower)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower closed: the command is done
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=10) == 0
    return out.decode("utf-8", "replace")


def test_the_cli_marks_when_asked_bolds_on_a_terminal_and_gives_spans_in_json() -> None:
    stored(snippet_session(CWD))
    piped = _nmem_search("walrus")  # plain text for a pipe, as rg and ls --color=auto give it (issue #37, 4)
    assert "walrus" in piped and "⟦walrus⟧" not in piped and "\x1b[" not in piped
    marked = _nmem_search("walrus", "--marks")
    assert "⟦walrus⟧" in marked and "[walrus]" not in marked and "\x1b[" not in marked
    zebra = _nmem_search("zebra", "--marks").splitlines()[1]
    assert zebra.split()[0].isdigit() and "test_⟦zebra⟧.py ... [100%] ⟦⟦kept⟧⟧" in zebra  # each line starts with its id
    rows = [json.loads(line) for line in _nmem_search("walrus", "--json").splitlines()]
    error = next(r for r in rows if r["type"] == "error" and "walrus" in (r["snippet"] or ""))
    assert "⟦" not in error["snippet"].replace("⟦kept⟧", "") and error["spans"]
    assert all(error["snippet"][s:e].lower() == "walrus" for s, e in error["spans"])
    drawn = _nmem_search("walrus", tty=True, env={"NO_COLOR": ""})
    assert "\x1b[1m" in drawn and "⟦walrus⟧" not in drawn
    plain = _nmem_search("walrus", tty=True, env={"NO_COLOR": "1"})
    assert "⟦walrus⟧" in plain
