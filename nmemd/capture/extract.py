"""Turn one raw hook payload into typed, redacted observations: decode it, read the fields every
agent's events share, and hand the rest to the agent's parser (its `AgentSpec` in `nmemd.registry`;
Claude Code's for Claude Code and for what another agent sends under Claude Code's names).

Extraction is parsing, not an LLM: fast, free and reproducible. It runs for every event inside the
daemon's event loop, so it never raises (any JSON value is accepted; any field may be absent or of the
wrong type) and it bounds every string *before* formatting it (`capture.fields`), so a 20 MB tool
response costs a slice, not a copy. Every stored string goes through `strip_private` then `redact`.

Prompt choice: `<ide_opened_file>`, `<ide_selection>` (any `<ide_*>`) and `<system-reminder>` blocks
are dropped from prompts. They are editor state injected by the client, not what the user asked, and
would swamp search.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from nmemd import registry
from nmemd.capture.fields import (
    ID_MAX,
    PATH_MAX,
    clean_line,
    dict_or_empty,
    json_summary,
    observation,
    one_line,
    short_field,
    str_or_none,
)
from nmemd.capture.project import project_root
from nmemd.capture.redact import redact
from nmemd.errors import InvalidEvent
from nmemd.jsonsafe import loads_replacing_surrogates, may_hold_surrogate
from nmemd.model import CLAUDE_CODE, LAUNCH_CWD, Extracted, stored_agent

_AGENT_NAME: Final = re.compile(r"[a-z0-9-]{1,32}")


def _skipped(tool: object, skip: frozenset[str]) -> bool:
    if not skip or not isinstance(tool, str):
        return False
    return tool in skip or any(tool.startswith(s + "__") for s in skip if s.startswith("mcp__"))


def agent_of(p: dict[str, Any]) -> str | None:
    """The agent the hook client named (`nmem_agent`, from `send.py --agent NAME`); None for Claude Code,
    for none, and for anything that is not a plain name."""
    raw = p.get("nmem_agent")
    if not isinstance(raw, str) or not _AGENT_NAME.fullmatch(raw):
        return None
    return stored_agent(registry.canonical(raw))


def _extract(payload: object, skip_tools: frozenset[str]) -> Extracted:
    if not isinstance(payload, dict):
        title = f"Non-object hook payload ({type(payload).__name__})"
        return Extracted(
            hook_event="unknown",
            session_id="unknown",
            observations=[observation("event", title, json_summary(payload, 1000))],
        )
    p: dict[str, Any] = payload
    normalized, _ = registry.parsers(agent_of(p) or CLAUDE_CODE)
    if normalized is not None:  # its events under Claude Code's names and fields first
        p = normalized(p)
    raw_cwd = str_or_none(p.get("cwd"))
    cwd = clean_line(raw_cwd, PATH_MAX) or None
    project = project_root(raw_cwd) if raw_cwd and len(raw_cwd) <= PATH_MAX else raw_cwd
    root = clean_line(project, PATH_MAX) or None
    launch = str_or_none(p.get(LAUNCH_CWD))
    launch_root = (clean_line(project_root(launch), PATH_MAX) or None) if launch and len(launch) <= PATH_MAX else None
    event = str_or_none(p.get("hook_event_name")) or "unknown"
    ex = Extracted(
        hook_event=clean_line(event, 100) or "unknown",
        session_id=short_field(p, "session_id") or "unknown",
        agent=agent_of(p),
        cwd=cwd,
        project=root,
        launch_project=launch_root,
        transcript_path=short_field(p, "transcript_path", PATH_MAX),
        agent_id=short_field(p, "agent_id"),
        tool_use_id=short_field(p, "tool_use_id"),
        prompt_id=short_field(p, "prompt_id") if event in _KEYED_BY_PROMPT_ID else None,
        # Not every version's startup SessionStart names the model; later events of the session may.
        # A subagent's event names the subagent's model, not the session's.
        model=short_field(p, "model") if not p.get("agent_id") else None,
    )
    if _skipped(p.get("tool_name"), skip_tools):
        return ex
    # What the agent sends differently, read by its parser; the rest (None from it) as Claude Code's.
    _, parse = registry.parsers(ex.agent or CLAUDE_CODE)
    own = parse(p, ex, root) if parse is not None else None
    if own is None and ex.agent is not None:
        _, claude = registry.parsers(CLAUDE_CODE)
        own = claude(p, ex, root) if claude is not None else None
    ex.observations = own or []
    return ex


# Events whose `prompt_id` (Claude Code 2.1.196+) names them in the transcript too: a prompt, and a
# compaction (its PreCompact and PostCompact carry the id of the summary line, `promptId`).
_KEYED_BY_PROMPT_ID: Final = frozenset({"UserPromptSubmit", "PreCompact", "PostCompact"})


def extract(payload: object, *, skip_tools: frozenset[str] = frozenset()) -> Extracted:
    """All nmem keeps of one hook event: session fields and redacted observations. Never raises."""
    try:
        return _extract(payload, skip_tools)
    except Exception as exc:  # a parser bug must never lose the event or crash the daemon
        p = dict_or_empty(payload)
        event = one_line(str_or_none(p.get("hook_event_name")) or "unknown", 100)
        session = one_line(str_or_none(p.get("session_id")) or "unknown", ID_MAX)
        title = f"{event} (extraction failed: {type(exc).__name__})"
        return Extracted(
            hook_event=redact(event), session_id=redact(session), agent=agent_of(p),
            observations=[observation("event", redact(title))],
        )  # fmt: skip


# Every event ends in Claude Code's parser: it loads with this module (the extraction worker says hello
# once it is loaded), not with the first event.
registry.parsers(CLAUDE_CODE)


# --- hook payloads -------------------------------------------------------------------------------

_decoder = msgspec.json.Decoder()


def decode_event(body: bytes) -> dict[str, Any]:
    """Parse a hook payload; raise InvalidEvent for anything that is not JSON we can hold."""
    if not body.strip():
        raise InvalidEvent("empty payload")
    try:
        payload = _decoder.decode(body)
    except RecursionError as exc:
        raise InvalidEvent("payload nested too deeply") from exc
    except UnicodeDecodeError as exc:
        raise InvalidEvent("payload is not valid UTF-8") from exc
    except msgspec.DecodeError as exc:
        if not may_hold_surrogate(body):
            raise InvalidEvent(f"payload is not valid JSON: {exc}") from exc
        try:  # a lone surrogate (a string cut inside an emoji): keep the event, U+FFFD for the character
            payload = loads_replacing_surrogates(body)
        except RecursionError as exc2:
            raise InvalidEvent("payload nested too deeply") from exc2
        except ValueError:
            raise InvalidEvent(f"payload is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidEvent(f"payload is a JSON {type(payload).__name__}, not an object")
    return payload


def extract_event(body: bytes, skip_tools: frozenset[str]) -> Extracted:
    """A hook payload's bytes to what nmem keeps of it; raise InvalidEvent for a payload it refuses."""
    return extract(decode_event(body), skip_tools=skip_tools)
