"""The wire format between clients and nmemd: one header line, then a sized body.

Request:  b"NMEM1 <kind> <event_id> <length> <store>\\n" + body
Reply:    b"OK <length>\\n" + body      or      b"ERR <code> <message>\\n"

`<store>` names the store the client means (`paths.store_id`: NMEM_HOME's device and inode); a
daemon serving another store answers `wrong_store` and the client keeps the event in its own
store's inbox (issue #37, 1). A header without it (an older client's) is served as before.

A header line costs the hook client no import (bytes formatting is builtin)
and lets the daemon refuse an oversized frame before reading it. After an
`mcp` request is answered with OK, the connection carries MCP JSON-RPC lines.
"""

from __future__ import annotations

import posix
import time

MAGIC = b"NMEM1"
MAX_HEADER = 256  # bytes, newline included

KIND_HOOK = b"hook"  # body: a Claude Code hook payload (JSON); reply: bytes for the hook's stdout
KIND_RPC = b"rpc"  # body: {"method": ..., "params": {...}} (JSON); reply: JSON
KIND_MCP = b"mcp"  # body: {"project": ...}; then the socket speaks MCP
KIND_PING = b"ping"  # empty body; reply: daemon facts (JSON)
KINDS = (KIND_HOOK, KIND_RPC, KIND_MCP, KIND_PING)

NO_EVENT_ID = b"-"

# Error codes a client may see. Those in RETRYABLE mean "not stored, try the
# fallback"; the others mean the daemon saw the event and refused it for good.
ERR_INVALID = b"invalid"
ERR_TOO_LARGE = b"too_large"
ERR_BUSY = b"busy"
ERR_STORAGE_FULL = b"storage_full"
ERR_SHUTTING_DOWN = b"shutting_down"
ERR_INTERNAL = b"internal"
ERR_TIMEOUT = b"timeout"
ERR_WRONG_STORE = b"wrong_store"  # the daemon serves another NMEM_HOME than the client's
RETRYABLE = (ERR_BUSY, ERR_STORAGE_FULL, ERR_SHUTTING_DOWN, ERR_INTERNAL, ERR_TIMEOUT, ERR_WRONG_STORE)
# How a `busy` reply starts while the daemon opens its store (nmemd.daemon.starting): a migration may
# write for a minute then, so the event goes to the spool, not to the SQLite inbox behind its lock.
BUSY_STARTING = b"busy starting"
# What a daemon from before the store token says of a header that carries one: the client keeps
# the event in its inbox (the daemon drains it) rather than take it as refused for good.
OLD_DAEMON_REPLY = b"invalid malformed frame header"


def encode_request(kind: bytes, event_id: bytes, body: bytes, store: bytes = b"") -> bytes:
    if store:
        return b"%s %s %s %d %s\n" % (MAGIC, kind, event_id, len(body), store) + body
    return b"%s %s %s %d\n" % (MAGIC, kind, event_id, len(body)) + body


def encode_ok(body: bytes = b"") -> bytes:
    return b"OK %d\n" % len(body) + body


def encode_error(code: bytes, message: str) -> bytes:
    text = message.replace("\n", " ").encode("utf-8", "replace")[:200]
    return b"ERR " + code + b" " + text + b"\n"


def new_event_id() -> bytes:
    """32 hex digits: milliseconds since the epoch (12), then 80 random bits (20).

    Ids that sort by time make the ledger's and the observations' `event_id` indexes grow at
    their end instead of dirtying a random page per event (~2 fewer WAL pages per event,
    BENCHMARKS.md); 80 random bits per millisecond keep them unique.
    """
    return b"%012x" % (time.time_ns() // 1_000_000) + posix.urandom(10).hex().encode()
