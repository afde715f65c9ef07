"""What the threat-model tests of team memory share: a hostile member's raw SQL through their own
DSN, a command run on a real pseudo-terminal, and the control characters no output may carry."""

from __future__ import annotations

import os
import re
import select
import subprocess
import time
from typing import Any

from support.team_world import BIN

TERMINAL_S = 60.0
# What must never reach a terminal, a context or a page from stored text (newline and tab are fine).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# A teammate's hostile text: a screen clear, an OSC 8 link whose text is not its target, a C1 CSI,
# a bell, a carriage return that hides what came before, a right-to-left override.
HOSTILE = "\x1b[2J\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\ \x9b31m\x07\rhidden\u202e"


def raw_sql(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """One statement through a member's own credentials (autocommit), as a hostile member would."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def on_terminal(
    argv: list[str], env: dict[str, str], answer: str | None = None, asked: bytes = b": "
) -> tuple[int, str]:
    """Run `nmem ARGV` with stdin, stdout and stderr on a pseudo-terminal (what a user's shell gives
    it); type `answer` once it printed `asked`. Its exit code and every byte it printed, escapes kept."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [str(BIN / "nmem"), *argv], stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
        env={**env, "COLUMNS": "200", "TERM": "xterm-256color"},
    )  # fmt: skip
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + TERMINAL_S
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no end within {TERMINAL_S} s: {seen!r}"
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the command exited and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if answer is not None and asked in seen:
                os.write(master, answer.encode() + b"\n")
                answer = None
        code = proc.wait(timeout=TERMINAL_S)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, seen.decode("utf-8", errors="replace")


def stored_text(text: str) -> str:
    """What rich itself puts on a terminal (colour: CSI ... m) taken out, so what is left is ours."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
