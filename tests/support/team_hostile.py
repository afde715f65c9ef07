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


# Obviously fake tokens in each provider's format (issue #36, finding 17): each must be redacted
# bare, wherever it appears (a command's output, a title, a summary).
BARE_TOKENS: dict[str, str] = {
    "gitlab-token": "glpat-" + "xY7zQ2mN4pL8kR1tV6wB",
    "huggingface-token": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH",
    "pypi-token": "pypi-AgEIcHlwaS5vcmc" + "CJDk3ZWQ2NzQwLWE5YjMtNDk1Ni04ZmU3LTg5NmY2ZDY2MWQ4NAACKlsz",
    "npm-token": "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "dockerhub-token": "dckr_pat_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9",
    "digitalocean-token": "dop_v1_" + "0123456789abcdef" * 4,
    "sendgrid-key": "SG." + "aBcDeFgHiJkLmNoPqRsTuV" + "." + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789abcdefg",
    "vault-token": "hvs." + "CAESIJ3kx9Qn2PzZm4Yd0fXr8LwVt5uH1aS6bG7cK",
    "age-secret-key": "AGE-SECRET-KEY-1" + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L" + "QPZRY9X8GF2TVDW0S3JN54KHCE",
    "telegram-token": "123456789:AA" + "HdqTcvCH1vGWJxfSeofSAs0K5PALDsaw3",
    "twilio-key": "SK" + "0123456789abcdef" * 2,
    "shopify-token": "shpat_" + "0123456789abcdef0123456789ABCDEF",
    "linear-key": "lin_api_" + "aB3dE6gH9j" * 4,
    "databricks-token": "dapi" + "0123456789abcdef" * 2,
    "grafana-token": "glsa_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF" + "_0a1b2c3d",
    "postman-key": "PMAK-" + "0123456789abcdef01234567" + "-" + "0123456789abcdef0123456789abcdef01",
    "rubygems-key": "rubygems_" + "0123456789abcdef" * 3,
    "pulumi-token": "pul-" + "0123456789abcdef0123456789abcdef01234567",
}
# Redacted when captured (stored locally too); the others before a push only (secret_patterns.OUTGOING).
AT_CAPTURE: frozenset[str] = frozenset({
    "gitlab-token", "huggingface-token", "pypi-token", "npm-token", "dockerhub-token", "digitalocean-token",
    "sendgrid-key", "vault-token", "age-secret-key", "telegram-token", "twilio-key", "shopify-token",
})  # fmt: skip
