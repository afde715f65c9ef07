"""Claude Code's hook events (SessionStart, UserPromptSubmit, PostToolUse, Stop, ...) as observations:
the form every agent's payload is read in once its own parser and normalizer have had their say
(`capture.extract`). Its tool calls are `capture.tools`'s; `stop_observations` is shared with the
agents whose turn ends the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import islice
from typing import Any, Final

from nmemd.capture.fields import (
    CMD_MAX,
    PATH_MAX,
    clean_head_tail,
    clean_line,
    clean_text,
    cut_index,
    dict_or_empty,
    join_lines,
    json_summary,
    observation,
    one_line,
    short_field,
    short_line,
    str_or_none,
)
from nmemd.capture.tools import ToolCall, subject, tool_observation
from nmemd.model import (
    COMPACT_MAX,
    CONTENT_MAX,
    REPLY_MAX,
    TITLE_MAX,
    Extracted,
    Observation,
    reply_key,
)

_COMMON_KEYS: Final = frozenset(
    {"session_id", "transcript_path", "cwd", "hook_event_name", "permission_mode", "effort", "prompt_id",
     "nmem_agent", "nmem_exit_code", "turn_id"}
)  # fmt: skip


# --- events ------------------------------------------------------------------------------


def _session_start(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    ex.source, ex.model = short_field(p, "source", 40), short_field(p, "model")
    extra = [f"{k}: {v}" for k in ("source", "model", "agent_type", "session_title") if (v := short_field(p, k))]
    return [observation("session", "Session started" + (f" ({ex.source})" if ex.source else ""), "\n".join(extra))]


def _session_end(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    ex.end_reason = short_field(p, "reason", 40)
    return [observation("session", "Session ended" + (f" ({ex.end_reason})" if ex.end_reason else ""))]


def _prompt(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    text = clean_text(p.get("prompt"), CONTENT_MAX, prompt=True)
    return [observation("prompt", short_line(text, TITLE_MAX) or "(empty prompt)", text)]


def _last_message(p: dict[str, Any], ex: Extracted, limit: int = CONTENT_MAX) -> str:
    """The turn's final assistant text, cleaned to `limit`; the session row keeps CONTENT_MAX of it."""
    raw = p.get("last_assistant_message")
    msg = clean_text(raw, limit)
    if len(msg) > CONTENT_MAX:
        ex.last_assistant_message = msg[: cut_index(msg, CONTENT_MAX - 2)].rstrip() + " …"
    else:
        ex.last_assistant_message = msg or None
    return msg


def _reply(p: dict[str, Any], ex: Extracted) -> str:
    """The final message of a turn, whole up to REPLY_MAX: searchable, and keyed so that a transcript
    import of the same turn (`nmemd.agents.claude_code.history`) is stored once."""
    msg = _last_message(p, ex, REPLY_MAX)
    raw = p.get("last_assistant_message")
    if msg and isinstance(raw, str) and ex.session_id != "unknown":
        ex.natural_key = reply_key(ex.session_id, raw)
    return msg


def stop_observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    msg = _reply(p, ex)
    hook = " (stop hook active)" if p.get("stop_hook_active") is True else ""
    return [observation("stop", f"Stop{hook}" + (f": {short_line(msg, 150)}" if msg else ""), msg, limit=REPLY_MAX)]


def _words(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    """A block of the agent's own words between its tool calls, read from its transcript (never a hook
    of its own): its text ("it fails because ...") or the plain text of its thinking."""
    thinking = p.get("hook_event_name") == "AssistantThinking"
    text = clean_text(p.get("thinking" if thinking else "text"), CONTENT_MAX)
    if not text:
        return []
    title = one_line(text, TITLE_MAX)
    # A short passage is its title whole: stored (and indexed) once, not twice.
    return [observation("thinking" if thinking else "assistant", title, "" if title == text else text)]


def _subagent(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    started = p.get("hook_event_name") == "SubagentStart"
    msg = "" if started else _reply(p, ex)
    if not started:  # what the subagent said between its tool calls is in its own file (nmemd.history.follow)
        ex.agent_transcript_path = short_field(p, "agent_transcript_path", PATH_MAX)
    kind, agent = short_field(p, "agent_type", 100), short_field(p, "agent_id")
    title = "Subagent" + (f" {kind}" if kind else "") + (" started" if started else " stopped")
    title += f" ({agent})" if agent else ""
    # Claude Code's own helpers (`/compact` runs two) say `agent_type: ""`; a Task subagent names its type,
    # and versions before agent_type send none: only the former is not the agent's work.
    internal = p.get("agent_type") == ""
    return [observation("event" if internal else "agent", title + (f": {short_line(msg, 120)}" if msg else ""), msg,
                 limit=REPLY_MAX)]  # fmt: skip


def _stop_failure(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    msg = _last_message(p, ex)
    err = short_field(p, "error", 200) or "unknown error"
    details = p.get("error_details")
    detail = clean_text(details, 1500) if isinstance(details, str) else json_summary(details, 1500) if details else ""
    return [observation("error", f"Stop failed: {err}", join_lines(detail, msg))]


def _notification(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    kind = short_field(p, "notification_type", 60)
    msg = clean_text(p.get("message"), 1000)
    title = "Notification" + (f" ({kind})" if kind else "") + (f": {short_line(msg, 150)}" if msg else "")
    return [observation("notification", title, join_lines(short_field(p, "title", 200) or "", msg))]


def _pre_compact(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    trigger = short_field(p, "trigger", 40)
    return [
        observation(
            "compact", "Compacting" + (f" ({trigger})" if trigger else ""), clean_text(p.get("custom_instructions"))
        )
    ]


def _post_compact(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    trigger = short_field(p, "trigger", 40)
    summary = clean_text(p.get("compact_summary"), COMPACT_MAX)  # whole: its last sections say what comes next
    return [observation("compact", "Compacted" + (f" ({trigger})" if trigger else ""), summary, limit=COMPACT_MAX)]


def _post_tool(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    name = str_or_none(p.get("tool_name")) or "unknown"
    return [tool_observation(ToolCall(name, dict_or_empty(p.get("tool_input")), p.get("tool_response"), root))]


def _tool_failure(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    t = ToolCall(str_or_none(p.get("tool_name")) or "unknown", dict_or_empty(p.get("tool_input")), None, root)
    name = clean_line(t.name, 100)
    error = clean_head_tail(p.get("error"))
    first = short_line(error, 150)
    cmd = clean_text(t.inp.get("command"), CMD_MAX) or None
    about = subject(t, cmd)
    if p.get("is_interrupt") is True:
        title = f"{name} interrupted" + (f": {about}" if about else "")
    elif (m := re.fullmatch(r"Exit code (-?\d+)", first)) and about:
        title = f"{name} failed (exit {m.group(1)}): {about}"
    else:
        title = f"{name} failed: {first or 'error'}" + (f" — {about}" if about else "")
    path = t.path() or None
    where = f"command: {cmd}" if cmd else f"file: {path}" if path else ""
    content = join_lines(where, error)
    return [observation("error", title, content, limit=len(content), tool_name=name, command=cmd, file_path=path)]


def _generic_event(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    event = clean_line(str_or_none(p.get("hook_event_name")) or "unknown", 100)
    name = str_or_none(p.get("tool_name"))
    about = subject(ToolCall(name, dict_or_empty(p.get("tool_input")), None, root)) if name else ""
    tool = clean_line(name, 100) if name else None
    title = event + (f" {tool}" if tool else "") + (f": {about}" if about else "")
    rest = {k: v for k, v in islice(p.items(), 100) if k not in _COMMON_KEYS}
    return [observation("event", title, json_summary(rest), tool_name=tool)]


_EVENTS: Final[dict[str, Callable[[dict[str, Any], Extracted, str | None], list[Observation]]]] = {
    "SessionStart": _session_start, "SessionEnd": _session_end, "UserPromptSubmit": _prompt,
    "PostToolUse": _post_tool, "PostToolUseFailure": _tool_failure, "PreCompact": _pre_compact,
    "PostCompact": _post_compact, "Stop": stop_observations, "SubagentStop": _subagent, "SubagentStart": _subagent,
    "Notification": _notification, "StopFailure": _stop_failure, "AssistantText": _words,
    "AssistantThinking": _words,
}  # fmt: skip


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation]:
    """One Claude Code hook event's observations (`ex` gets the session fields the event names)."""
    return _EVENTS.get(str_or_none(p.get("hook_event_name")) or "unknown", _generic_event)(p, ex, root)
