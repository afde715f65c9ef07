"""Read a GitHub Copilot CLI session file (`$COPILOT_HOME/session-state/<session>/events.jsonl`) as the
hook payloads Copilot would have sent, for `nmem import-transcripts` (the format: README.md).

What becomes a payload (each with `nmem_agent: copilot`, read by the daemon as live Copilot hooks are):

* `user.message` -> UserPromptSubmit, keyed `prompt:<session>:<ms>` by the time its
  `userPromptSubmitted` hook recorded (`hook.start`), as the live hook's is; a session that ran no
  hook is keyed by the message's id (no live capture saw it);
* `tool.execution_start` joined with its `tool.execution_complete` -> PostToolUse (PostToolUseFailure
  when `success` is false), keyed by the time its `postToolUse` / `postToolUseFailure` hook recorded
  and its arguments (`copilot.hook_call_id`), as the live hook's is; a call no hook saw, by its
  `toolCallId`; with Claude Code's tool names as Copilot's PascalCase hooks give them (`bash` -> Bash,
  `view` -> Read, `apply_patch` -> Edit; an MCP tool `<server>-<tool>` as `mcp__<server>__<tool>`);
* the text of an `assistant.message` that requests tools (the agent's own words between its tool calls)
  -> AssistantText, and its plain `reasoningText` (never `reasoningOpaque`) -> AssistantThinking, keyed by
  `words_key` with the message's id;
* a turn's last assistant text -> Stop, keyed by the time its `agentStop` hook recorded (the live Stop
  carries no text and is keyed so: a turn seen live is not added again), else by `reply_key`.

Everything else (hooks' own records, usage, turn markers, the system prompt) only feeds the session's
id, working directory and branch, or is counted as skipped.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from nmemd.agents.copilot.capture import AGENT, hook_call_id, iso_of, session_state, stop_key
from nmemd.capture.fields import dict_or_empty
from nmemd.history.records import Record, nonempty_str, parse_ts
from nmemd.history.session_lines import SessionLines, decode_line
from nmemd.history.sources import HistorySource, existing
from nmemd.model import reply_key, words_key

TOOL_NAMES: Final = {"bash": "Bash", "view": "Read", "apply_patch": "Edit"}


def is_events(path: str) -> bool:
    return os.path.basename(path) == "events.jsonl"


def _ms(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class _Call:
    name: str
    input: Any
    offset: int
    server: str | None = None  # an MCP tool's server and own name (`mcpServerName`, `mcpToolName`)
    tool: str | None = None
    hook: str | None = None  # its id as its PostToolUse hook had it (copilot.hook_call_id)


@dataclass
class EventsReader(SessionLines[_Call]):
    """Turns the lines of one events.jsonl, in order, into Records."""

    AGENT: ClassVar[str] = AGENT
    NAMES_FILE: ClassVar[bool] = False

    _prompt_ms: int | None = None  # the last userPromptSubmitted hook's time, not yet used
    _reply: str | None = None
    _reply_ts: float = 0.0
    _stop_ms: int | None = None  # the agentStop hook's time for the pending reply
    words_only: bool = False  # only the agent's own words (`nmemd.history.follow`: the hooks send the rest)

    def __post_init__(self) -> None:
        self.session = os.path.basename(os.path.dirname(self.path))

    def _line(self, line: dict[str, Any], offset: int) -> list[Record]:
        kind, data = line.get("type"), dict_or_empty(line.get("data"))
        ts = parse_ts(line.get("timestamp"), self._last_ts)
        self._last_ts = ts
        if self.words_only and kind != "session.start":
            return self._words(data, line, ts) if kind == "assistant.message" else []
        if kind == "session.start":
            self.session = nonempty_str(data.get("sessionId")) or self.session
            context = dict_or_empty(data.get("context"))
            self.cwd = nonempty_str(context.get("cwd")) or self.cwd
            self.branch = nonempty_str(context.get("branch")) or self.branch
        elif kind == "hook.start" and data.get("hookType") == "userPromptSubmitted":
            self._prompt_ms = _ms(dict_or_empty(data.get("input")).get("timestamp"))
        elif kind == "hook.start" and data.get("hookType") in ("postToolUse", "postToolUseFailure"):
            inp = dict_or_empty(data.get("input"))
            ms, args = _ms(inp.get("timestamp")), inp.get("toolArgs")
            seen = next((c for c in reversed(self._pending.values()) if c.hook is None and c.input == args), None)
            if seen is not None and ms is not None:
                seen.hook = hook_call_id(ms, args)
            self.counts.skipped += 1
            return []
        elif kind == "hook.start" and data.get("hookType") == "agentStop":
            self._stop_ms = _ms(dict_or_empty(data.get("input")).get("timestamp"))
            if self._reply is None:
                self.counts.skipped += 1
                return []
            return self._turn_end()
        elif kind == "user.message":
            return self._prompt(data, ts)
        elif kind == "assistant.message":
            text = nonempty_str(data.get("content"))
            said = self._words(data, line, ts)
            if text and text.strip() and not data.get("toolRequests"):
                self._reply, self._reply_ts = text, ts
                self.counts.messages += 1
                return said
            if said:
                return said
        elif kind == "tool.execution_start":
            call = nonempty_str(data.get("toolCallId"))
            if call:
                self._pending[call] = _Call(
                    nonempty_str(data.get("toolName")) or "unknown",
                    data.get("arguments"),
                    offset,
                    server=nonempty_str(data.get("mcpServerName")),
                    tool=nonempty_str(data.get("mcpToolName")),
                )
                return []
        elif kind == "tool.execution_complete":
            return self._result(data, ts)
        self.counts.skipped += 1
        return []

    def _words(self, d: dict[str, Any], line: dict[str, Any], ts: float) -> list[Record]:
        """A message's reasoning, and its text when it requests tools: said between its tool calls."""
        own = nonempty_str(d.get("messageId")) or nonempty_str(line.get("id"))
        records = []
        for index, (event, name, text) in enumerate(
            (("AssistantText", "text", d.get("content") if d.get("toolRequests") else None),
             ("AssistantThinking", "thinking", d.get("reasoningText")))
        ):  # fmt: skip
            if own and isinstance(text, str) and text.strip():
                payload = self._payload(event)
                payload[name] = self._bound(text)
                self.counts.said += 1
                records.append(self._record(words_key(self.session, own, index), payload, ts))
        return records

    def _prompt(self, d: dict[str, Any], ts: float) -> list[Record]:
        text = nonempty_str(d.get("content"))
        if not text or not text.strip():
            self.counts.skipped += 1
            return []
        records = self._turn_end()
        payload = self._payload("UserPromptSubmit")
        payload["prompt"] = self._bound(text)
        if self._prompt_ms is not None:
            key = f"prompt:{self.session}:{self._prompt_ms}"
        else:
            own = (
                nonempty_str(d.get("messageId")) or hashlib.blake2b(f"{ts}:{text}".encode(), digest_size=12).hexdigest()
            )
            key = f"prompt:{self.session}:m{own}"
        self._prompt_ms = None
        self.counts.prompts += 1
        records.append(self._record(key, payload, ts))
        return records

    def _result(self, d: dict[str, Any], ts: float) -> list[Record]:
        call_id = nonempty_str(d.get("toolCallId"))
        call = self._pending.pop(call_id, None) if call_id else None
        if call is None or call_id is None:
            self.counts.skipped += 1
            return []
        ok = d.get("success") is not False
        payload = self._payload("PostToolUse" if ok else "PostToolUseFailure")
        key = call.hook or call_id
        name = TOOL_NAMES.get(call.name, call.name)
        if call.server and call.tool:
            name = f"mcp__{call.server}__{call.tool}"
        payload.update(tool_name=name, tool_input=self._bound(call.input), tool_use_id=key)
        content = nonempty_str(dict_or_empty(d.get("result")).get("content")) or ""
        if ok:
            payload["tool_result"] = {"result_type": "success", "text_result_for_llm": self._bound(content)}
        else:
            error = d.get("error")
            payload["error"] = self._bound(
                nonempty_str(dict_or_empty(error).get("message")) or nonempty_str(error) or content or "failed"
            )
            self.counts.errors += 1
        self.counts.tools += 1
        return [self._record(f"tool:{self.session}:{key}", payload, ts)]

    def _turn_end(self) -> list[Record]:
        text, ts, stop = self._reply, self._reply_ts, self._stop_ms
        self._reply, self._stop_ms = None, None
        if not text:
            return []
        payload = self._payload("Stop")
        payload["stop_hook_active"] = False
        payload["last_assistant_message"] = text
        self.counts.replies += 1
        if stop is not None:
            payload["timestamp"] = iso_of(stop)  # keyed as the live Stop hook was (copilot.stop_key)
        key = stop_key(self.session, stop) if stop is not None else reply_key(self.session, text)
        return [self._record(key, payload, ts)]


_SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")


def live_file(session_id: str) -> str | None:
    """A session's events.jsonl, which Copilot's hooks do not name: `<session-state>/<session id>/`."""
    return str(session_state() / session_id / "events.jsonl") if _SESSION_ID.fullmatch(session_id) else None


SOURCE: Final = HistorySource(
    roots=lambda: existing(str(session_state())),
    claims=is_events,
    lines=lambda path: EventsReader(path=path),
    decode=decode_line,
    where=lambda: str(session_state()),
    words=lambda path: EventsReader(path=path, words_only=True),
    words_line=lambda raw: b'"assistant.message"' in raw or b'"session.start"' in raw,
    live_file=live_file,
)
