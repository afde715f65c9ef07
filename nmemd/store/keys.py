"""What identifies an event across its paths: its natural key, and the digest the ledger keeps of one.

The hook path and the transcript path see the same tool call or prompt; both name it with the same
key, so the events ledger stores it once (migration m005). A key that could hold a secret, or whose
row was purged, is kept only as its digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Final

from nmemd.model import COMPACT_STEPS, Extracted, compact_key

KEYED_TOOL_EVENTS = frozenset({"PostToolUse", "PostToolUseFailure"})


# The same in SQL, over an observations row: an event that finishes a tool call (with `tool_use_id`
# not null and a known session, the row records that call), and the call's natural key.
TOOL_CALL_ROW = f"hook_event IN ({', '.join(repr(e) for e in sorted(KEYED_TOOL_EVENTS))})"
TOOL_CALL_ROW_KEY = "'tool:' || session_id || ':' || tool_use_id"


def tool_call(ex: Extracted) -> tuple[str, str] | None:
    """(session, tool_use_id) of a finished tool call: what its natural key names (migration m005)."""
    if ex.tool_use_id and ex.hook_event in KEYED_TOOL_EVENTS and ex.session_id != "unknown":
        return ex.session_id, ex.tool_use_id
    return None


def tool_key(call: tuple[str, str]) -> str:
    """A finished tool call's natural key, from `tool_call`'s pair."""
    return f"tool:{call[0]}:{call[1]}"


def natural_key(ex: Extracted) -> str | None:
    """The key an event has on the hook path and the transcript path alike.

    `tool:<session>:<tool_use_id>` for a finished tool call (PreToolUse and
    PermissionRequest carry the id too but are not the call's record, so they
    never claim its key); `prompt:<session>:<prompt_id>` for a prompt, where
    Claude Code sends its id (2.1.196+; the transcript calls it `promptId`);
    `compact:<session>:<prompt_id>:start|summary` for a compaction's two steps; otherwise
    the key extraction named (`reply:<session>:<hash>` for a turn's final message).
    """
    call = tool_call(ex)
    if call is not None:
        return tool_key(call)
    if ex.session_id == "unknown":
        return None
    if ex.prompt_id and ex.hook_event == "UserPromptSubmit":
        return f"prompt:{ex.session_id}:{ex.prompt_id}"
    if ex.prompt_id and ex.hook_event in COMPACT_STEPS:
        return compact_key(ex.session_id, ex.prompt_id, ex.hook_event)
    return ex.natural_key


KEY_DIGEST: Final = "sha256:"
KEY_DIGEST_FUNCTION: Final = "nmem_key_digest"  # the same in SQL, on the write connection


def key_digest(key: str | None) -> str | None:
    """What the ledger keeps of a key that must not be kept as it is (one holding a secret, or one
    whose row was purged): enough to recognise the event again, nothing of the key's text."""
    if key is None or key.startswith(KEY_DIGEST):
        return key
    return digest(key)


def digest(key: str) -> str:
    """`KEY_DIGEST` and the key's sha256, whatever the key is."""
    return KEY_DIGEST + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def as_is(text: str) -> str:
    """The redactor of a store opened without one (tools, tests): text kept as it is."""
    return text


def stored_key(key: str | None, redact: Callable[[str], str] = as_is) -> str | None:
    """A natural key as the ledger stores it: a sender's id can hold anything (Copilot's messageId,
    a transcript line's uuid), so one the redactor would change is kept as its digest."""
    return key_digest(key) if key and redact(key) != key else key
