"""Typed records that cross module boundaries inside the daemon.

`extract` turns a raw hook payload into an `Extracted`; the batcher turns that
into rows. Keeping these as msgspec structs makes the contract explicit and
cheap to build by the thousand.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

try:  # hashlib's own blake2b, without hashlib's OpenSSL: 3.6 MB of the extraction worker's memory
    from _blake2 import blake2b
except ImportError:  # a Python built without its own blake2
    from hashlib import blake2b

ObservationType = Literal[
    "session",  # SessionStart / SessionEnd
    "prompt",  # UserPromptSubmit
    "read",  # Read, NotebookRead
    "write",  # Write (create or overwrite)
    "edit",  # Edit, MultiEdit, NotebookEdit
    "command",  # Bash that succeeded
    "search",  # Grep, Glob, WebSearch, ToolSearch
    "fetch",  # WebFetch
    "agent",  # Task / Agent tool, SubagentStart, SubagentStop
    "task",  # TodoWrite, TaskCreate, TaskUpdate, ...
    "mcp",  # mcp__server__tool
    "error",  # PostToolUseFailure, StopFailure: never deduplicated
    "compact",  # PreCompact, PostCompact
    "stop",  # Stop (last assistant message when present)
    "assistant",  # what the agent said between its tool calls (a transcript's text blocks)
    "thinking",  # the plain text of its thinking blocks (never their signature)
    "notification",  # Notification
    "tool",  # a tool nmem does not know
    "event",  # an event nmem does not know (or does not model: PreToolUse, ...)
]

OBSERVATION_TYPES: Final[tuple[str, ...]] = ObservationType.__args__  # type: ignore[attr-defined]

# The coding agents nmem captures are the registry's (nmemd.registry), as the `agent` column
# names them. Claude Code's rows store no name (NULL: existing rows and Claude Code's cost no byte);
# every other agent's rows store theirs.
CLAUDE_CODE: Final = "claude-code"


def stored_agent(name: str | None) -> str | None:
    """What the `agent` column holds for an agent's name: None for Claude Code (and no name)."""
    return None if name in (None, "", CLAUDE_CODE) else name


# Bounds on what one observation may hold: a 2 MB file read stores its path and
# line count, not the file.
TITLE_MAX: Final = 200
CONTENT_MAX: Final = 4000
# Three kinds of text hold the answers a later session looks for, so they are kept (nearly) whole:
# a compaction summary (its "Pending Tasks / Current Work / Next Step" come last: in the real corpus
# summaries run 9-17 KB), the assistant's final message of a turn (p99 6.6 KB, longest 48 KB), and an
# error's output, whose verdict (a pytest FAILED line, the final exception) is at its end
# (`nmemd.capture.fields.ERROR_HEAD` / `ERROR_TAIL`).
COMPACT_MAX: Final = 64_000
REPLY_MAX: Final = 32_000


class Observation(msgspec.Struct, kw_only=True):
    """One fact worth remembering, extracted from one hook event."""

    type: ObservationType
    title: str  # one line, <= TITLE_MAX characters
    content: str = ""  # bounded detail, <= CONTENT_MAX characters (COMPACT_MAX, REPLY_MAX, error head + tail)
    tool_name: str | None = None
    file_path: str | None = None  # absolute path as the tool saw it
    command: str | None = None  # Bash command (redacted)
    # Events with equal non-None keys in one session within the dedup window
    # collapse into one observation with a count. None: never deduplicated
    # (writes, edits, errors, prompts).
    dedup_key: str | None = None


# A payload's field naming the folder its session started in, when the sender knows it better than the
# event's `cwd` (history import: the folder Claude Code filed the transcript under). No agent sends it.
LAUNCH_CWD: Final = "nmem_launch_cwd"


class Extracted(msgspec.Struct, kw_only=True):
    """Everything the daemon keeps of one hook event, already redacted."""

    hook_event: str  # hook_event_name as sent, "unknown" when absent
    session_id: str  # "unknown" when absent
    agent: str | None = None  # the agent that sent it (its registry name); None: Claude Code
    cwd: str | None = None
    project: str | None = None  # git top-level of cwd, else cwd
    # The project of the folder the session started in, when the event names it (an imported transcript's
    # folder): the session's project, whatever folder this event came from.
    launch_project: str | None = None
    observations: list[Observation] = []
    # Session row updates (only the fields this event knows).
    source: str | None = None  # SessionStart source
    end_reason: str | None = None  # SessionEnd reason
    model: str | None = None
    transcript_path: str | None = None
    agent_transcript_path: str | None = None  # SubagentStop: the subagent's own transcript (its words)
    last_assistant_message: str | None = None  # Stop / SubagentStop (redacted, bounded)
    agent_id: str | None = None
    tool_use_id: str | None = None
    # Claude Code 2.1.196+: a prompt's id in its transcript (UserPromptSubmit), or the id of the compaction
    # summary's line (PreCompact, PostCompact)
    prompt_id: str | None = None
    # A natural key extraction names itself, for events `store.keys.natural_key` has no rule of its
    # own for: a turn's final message (Stop, SubagentStop), `reply_key`; natural_key returns it.
    natural_key: str | None = None


COMPACT_STEPS: Final = {"PreCompact": "start", "PostCompact": "summary"}


def compact_key(session_id: str, prompt_id: str, hook_event: str) -> str:
    """A compaction's step, named by its summary line's `promptId`: live (PreCompact and PostCompact carry
    it as `prompt_id` from 2.1.196) and in the transcript (the summary line, and the boundary before it)."""
    return f"compact:{session_id}:{prompt_id}:{COMPACT_STEPS[hook_event]}"


def words_key(session_id: str, line_id: str, block: int) -> str:
    """The natural key of one block of the agent's own words (its text or thinking between tool calls), the
    same read live by the daemon and by `nmem import-transcripts`: the transcript record's own id (a Claude
    Code line's uuid, a Codex item's place) and the block's index in it."""
    return f"said:{session_id}:{line_id}:{block}"


def reply_key(session_id: str, text: str) -> str:
    """The natural key of a turn's final assistant message, the same live (Stop's `last_assistant_message`)
    and in a transcript (the turn's last text): the session and a hash of the text, whitespace collapsed.

    A live Stop has no line uuid, and its `prompt_id` (2.1.196+) is missing where transcripts already
    write `promptId` (2.1.90+), so the text is what both sides know. The limit: two identical final
    messages in one session ("Done.") are stored once, the first.
    """
    words = " ".join(text.split()).encode("utf-8", "surrogatepass")
    return f"reply:{session_id}:{blake2b(words, digest_size=12).hexdigest()}"


class WorkerFacts(msgspec.Struct, kw_only=True):
    """The extraction worker (nmemd.capture.extractor): whether it answers, and how much it did."""

    pid: int | None = None
    ready: bool = False  # False while it starts or restarts: the loop extracts meanwhile
    extracted: int = 0
    restarts: int = 0


# Issue #16, finding 10: a time outside these bounds (year 1, year 9999, negative, NaN) is not a
# time anything nmem stores could carry; datetime cannot even show some of them. Times that
# reach the store from outside (transcript lines, import batches) are checked against them.
TS_MIN: Final = 946_684_800.0  # 2000-01-01T00:00:00Z
TS_MAX: Final = 4_102_444_800.0  # 2100-01-01T00:00:00Z


def plausible_ts(ts: object) -> bool:
    """True for an epoch time nmem may store (NaN and infinities are not)."""
    return isinstance(ts, int | float) and not isinstance(ts, bool) and TS_MIN <= ts < TS_MAX


def clamp_ts(ts: float) -> float:
    """`ts` within `TS_MIN`..`TS_MAX` (NaN: `TS_MIN`), deterministic so a re-import names the same event."""
    if ts != ts:  # NaN
        return TS_MIN
    return min(max(ts, TS_MIN), TS_MAX - 1.0)
