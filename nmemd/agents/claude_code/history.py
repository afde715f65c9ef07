"""Claude Code's history: where it lives (`~/.claude/projects/**/*.jsonl`, `$CLAUDE_CONFIG_DIR/projects`;
`SOURCE`, the reader every `*.jsonl` no other agent claims goes to) and how a transcript (JSONL) is read
as the hook payloads Claude Code would have sent.

The importer feeds these payloads to the daemon's own `extract`, so history is
stored exactly as live hooks would have stored it. What becomes a payload:

* a user prompt (string content, or text blocks without a tool result) ->
  UserPromptSubmit; meta lines, local slash-command echoes without arguments and
  "[Request interrupted ...]" markers fired no hook and are skipped;
* an assistant `tool_use` joined with the later `tool_result` of its id ->
  PostToolUse (`tool_response` = the line's `toolUseResult` when it has one,
  else the result text), or PostToolUseFailure when `is_error`;
* `system/compact_boundary` -> PreCompact, the `isCompactSummary` line -> PostCompact;
* the text of a turn's last assistant message with text, at the next real prompt or the end of
  the file -> Stop (SubagentStop in a subagent's file) with it as `last_assistant_message`, as
  the live hook sends it;
* each text and thinking block (its plain text, never its signature) of a message that calls a
  tool -> AssistantText / AssistantThinking, keyed `said:<session>:<line uuid>:<block index>`
  (`nmemd.model.words_key`): the agent's own words between its tool calls, which no hook sends.
  The daemon reads them live with the same reader (`words_only`, `nmemd.history.follow`);
* a slash command given arguments (`<command-args>`) -> UserPromptSubmit, `/name args`.

Everything else (`progress`, snapshots, queue operations, titles, unknown
types) is counted and skipped. Assistant lines carry one content block each and
one message spans several lines, not always adjacent (a tool result can sit
between two of them): blocks are grouped by `message.id`, and tool calls wait
for their result until the next prompt (a call never answered by then never
will be). Each payload carries a natural key (`tool:<session>:<tool_use_id>`,
`prompt:<session>:<promptId or uuid>`, `compact:<session>:<promptId>:start|summary` or
`compact:<session>:<uuid>`) so an event seen live and imported again, or imported twice, is
stored once. A turn's final message is known by `reply:<session>:<hash of its text>`
(`nmemd.model.reply_key`), which a live Stop computes too.
A file read while its session runs ends mid-turn: its last text so far is that turn's reply, and
the text that ends the turn, read by the next run, is another.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final, TypedDict

import msgspec

from nmemd.history.records import STRING_MAX, Counts, Record, bound, nonempty_str, parse_ts
from nmemd.history.sources import HistorySource, existing
from nmemd.jsonsafe import loads_replacing_surrogates, may_hold_surrogate
from nmemd.model import COMPACT_MAX, LAUNCH_CWD, compact_key, reply_key, words_key

OPEN_MESSAGES_MAX: Final = 64  # message ids remembered for grouping (a message is never far from its next line)
PENDING_MAX: Final = 10_000  # tool calls waiting for a result, per file
_LOCAL_COMMAND: Final = ("<command-name>", "<local-command-", "<command-message>", "<bash-input>", "<bash-std")
_INTERRUPTED: Final = "[Request interrupted"
_ENCODED: Final = re.compile(r"[^A-Za-z0-9]")  # Claude Code's folder name for a cwd: each other character a `-`
_COMMAND_NAME: Final = re.compile(r"<command-name>\s*(/?[^<\s]{1,100})\s*</command-name>")
_COMMAND_ARGS: Final = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)


class _Block(TypedDict, total=False):
    """A content block: the keys any kind of block is read for (signatures, images are not)."""

    type: Any
    id: Any
    name: Any
    input: Any
    text: Any
    thinking: Any
    tool_use_id: Any
    content: Any
    is_error: Any


class _Message(TypedDict, total=False):
    id: Any
    content: str | list[_Block] | None


class _Line(TypedDict, total=False):
    """A transcript line: every key the reader looks at, each as it is (`Any`); the rest is skipped."""

    type: Any
    subtype: Any
    sessionId: Any
    timestamp: Any
    cwd: Any
    agentId: Any
    isSidechain: Any
    gitBranch: Any
    uuid: Any
    promptId: Any
    isMeta: Any
    isCompactSummary: Any
    compactMetadata: Any
    toolUseResult: Any
    message: _Message


_decode_typed = msgspec.json.Decoder(_Line).decode
_decode_any = msgspec.json.Decoder().decode


def decode_line(raw: bytes) -> object:
    """One transcript line, as `msgspec.json.decode` would give it minus what the reader never looks at.

    What a reader never uses (progress data, thinking, file snapshots, images)
    is skipped, not built. A line of another shape (a message that is not an
    object, a block that is not one) is decoded whole: the reader sees every
    line as before. Raises `msgspec.DecodeError` for a line that is not JSON.
    The one difference: bytes no reader looks at are only checked to be JSON,
    so a line whose unused part holds invalid UTF-8 or an out-of-range number
    is read, not refused.
    """
    try:
        return _decode_typed(raw)
    except msgspec.ValidationError:
        return _decode_any(raw)
    except msgspec.DecodeError:
        if not may_hold_surrogate(raw):
            raise
        try:  # a lone surrogate (a string cut inside an emoji): read the line, U+FFFD for the character
            return loads_replacing_surrogates(raw)
        except (ValueError, RecursionError):
            raise msgspec.DecodeError("invalid JSON") from None


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return content if isinstance(content, str) else ""


def _prompt_text(content: object) -> str | None:
    """The prompt a user line holds, None when it holds none (tool results, markers, echoes)."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict)]
        if any(b.get("type") == "tool_result" for b in blocks):
            return None
        text = "\n".join(b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str))
    else:
        return None
    head = text.lstrip()
    if not head or head.startswith((*_LOCAL_COMMAND, _INTERRUPTED)):
        return _command(head)
    return text


def _command(text: str) -> str | None:
    """A slash command given arguments (`/compact keep the API notes`), as the prompt it is: its
    arguments say what the user asked. Without arguments it asked nothing (`/clear`, `/model`)."""
    if "<command-args>" not in text:
        return None
    name, args = _COMMAND_NAME.search(text), _COMMAND_ARGS.search(text)
    if name is None or args is None or not args.group(1).strip():
        return None
    command = name.group(1) if name.group(1).startswith("/") else "/" + name.group(1)
    return f"{command} {args.group(1).strip()}"


@dataclass
class _Use:
    name: str
    input: dict[str, Any]
    offset: int  # where its line starts: a resumed read must see it again while it waits


_WORDS: Final = {"text": ("AssistantText", "text"), "thinking": ("AssistantThinking", "thinking")}


def assistant_line(raw: bytes) -> bool:
    """Whether a transcript line may be an assistant's (the live follower decodes only these)."""
    return b'"assistant"' in raw


@dataclass
class _Held:
    """A compact boundary's PreCompact, waiting to see whether its summary line names it."""

    line: dict[str, Any]
    offset: int  # where a later run reads again from, if this one stops before the next line
    session: str
    own_key: str  # its own line's id, when no summary with a promptId follows
    payload: dict[str, Any]
    ts: float


@dataclass
class TranscriptReader:
    """Turns the lines of one transcript, in order, into Records.

    `path` becomes the sessions' `transcript_path` for a main transcript;
    `agent_id` marks every event of a subagent file (sidechain lines name
    their agent themselves when the version writes `agentId`).
    """

    path: str
    agent_id: str | None = None
    # Only the agent's own words (`nmemd.history.follow`, live: the hooks send everything else).
    words_only: bool = False
    counts: Counts = field(default_factory=Counts)
    _pending: dict[str, _Use] = field(default_factory=dict)
    _messages: OrderedDict[str, int] = field(default_factory=OrderedDict)  # message.id -> tool calls seen
    _last_ts: float = 0.0
    _trigger: str | None = None  # of the last compact boundary: its summary line comes next
    # The last compact boundary's line, held until the next line: when that is its summary with a
    # `promptId`, both are keyed by it, as the live PreCompact and PostCompact are.
    _boundary: _Held | None = None
    _reply: list[str] = field(default_factory=list)  # the text blocks of the turn's last message with text
    _reply_mid: str | None = None  # that message's id
    _reply_line: dict[str, Any] | None = None  # its last line with text (session, time, cwd of the Stop)
    _launch: str | None = None  # the folder the session started in (`_note_launch`)
    _last_cwd: str | None = None  # the last cwd `_note_launch` looked at
    # The current message's words, held until a tool call of the same message shows they sit between
    # tool calls: the words of a message without one end the turn, and are its Stop.
    _said: list[Record] = field(default_factory=list)
    _said_mid: str | None = None  # that message's id
    _said_tool: bool = False  # whether it called a tool
    _big: bool = False  # the current line may hold a string over STRING_MAX (a string is never longer than its line)
    _raw: bytes | None = None  # the current line's bytes, when its decoded form is partial

    @classmethod
    def for_file(cls, path: str, words_only: bool = False) -> TranscriptReader:
        name = os.path.basename(path)
        agent = name[len("agent-") : -len(".jsonl")] if name.startswith("agent-") and name.endswith(".jsonl") else None
        return cls(path=path, agent_id=agent, words_only=words_only)

    @classmethod
    def words_of(cls, path: str) -> TranscriptReader:
        """A reader of only the agent's words, for the live follower."""
        return cls.for_file(path, words_only=True)

    def finish(self) -> list[Record]:
        """At the end of the file: a boundary still held, the last turn's final message (the turns
        before ended at a prompt). Words still held are that message's: its Stop."""
        self._said = []
        return self._held_boundary(None) + self._turn_end()

    def safe_offset(self, end: int) -> int:
        """How far a later run may skip: before the oldest tool call still waiting for its result, or a
        compact boundary still waiting for the line after it."""
        waiting = [u.offset for u in self._pending.values()]
        if self._boundary is not None:
            waiting.append(self._boundary.offset)
        return min(end, *waiting) if waiting else end

    def feed(self, line: object, offset: int, size: int, raw: bytes | None = None) -> list[Record]:
        """Records for one decoded line of `size` bytes starting at byte `offset`. Never raises on odd input.

        `raw`: the line's bytes when `line` came from `decode_line` (which drops keys), so a
        line without a uuid is named by all its content, as when it was decoded whole.
        """
        self.counts.lines += 1
        self._big = size > STRING_MAX
        self._raw = raw
        if not isinstance(line, dict):
            self.counts.skipped += 1
            return []
        if self._boundary is not None:
            held = self._held_boundary(line)
            return held + self._line(line, offset) if held else self._line(line, offset)
        return self._line(line, offset)

    def _note_launch(self, cwd: object) -> None:
        """The session's launch folder: the first cwd whose encoding is the name of the folder Claude Code
        filed the transcript under (every character outside [A-Za-z0-9] a `-`), wherever the agent `cd`s."""
        if self._launch is not None or not isinstance(cwd, str) or cwd == self._last_cwd:
            return
        self._last_cwd = cwd
        if _ENCODED.sub("-", cwd) == os.path.basename(os.path.dirname(self.path)):
            self._launch = cwd

    def _line(self, line: dict[str, Any], offset: int) -> list[Record]:
        self._note_launch(line.get("cwd"))
        kind = line.get("type")
        if kind == "assistant":
            return self._assistant(line, offset)
        if self.words_only:
            self.counts.skipped += 1
            return []
        if kind == "user":
            return self._user(line)
        if kind == "system" and line.get("subtype") == "compact_boundary":
            return self._compact_boundary(line, offset)
        self.counts.skipped += 1
        return []

    # --- records -------------------------------------------------------------------------------

    def _base(self, line: dict[str, Any], event: str) -> tuple[dict[str, Any], str, float]:
        session = nonempty_str(line.get("sessionId")) or os.path.basename(self.path).removesuffix(".jsonl")
        ts = parse_ts(line.get("timestamp"), self._last_ts)
        self._last_ts = ts
        payload: dict[str, Any] = {"session_id": session, "hook_event_name": event}
        cwd = nonempty_str(line.get("cwd"))
        if cwd:
            payload["cwd"] = cwd
        if self._launch is not None:
            payload[LAUNCH_CWD] = self._launch
        if self.agent_id is None:
            payload["transcript_path"] = self.path
        agent = nonempty_str(line.get("agentId")) or self.agent_id
        if agent is None and line.get("isSidechain") is True:
            agent = "sidechain"
        if agent:
            payload["agent_id"] = agent
        return payload, session, ts

    def _bound(self, value: Any, limit: int = STRING_MAX, tail: int = 0) -> Any:
        return bound(value, limit, tail) if self._big else value

    def _record(self, line: dict[str, Any], key: str, payload: dict[str, Any], ts: float) -> Record:
        branch = nonempty_str(line.get("gitBranch"))
        return Record(key=key, ts=ts, payload=payload, git_branch=None if branch == "HEAD" else branch)

    def _line_id(self, line: dict[str, Any]) -> str:
        uuid = nonempty_str(line.get("uuid"))
        if uuid:
            return uuid
        return "h" + hashlib.blake2b(self._content(line), digest_size=12).hexdigest()

    def _content(self, line: dict[str, Any]) -> bytes:
        """What names a line without a uuid (very old lines): all of it, re-encoded."""
        if self._raw is None:
            return msgspec.json.encode(line)
        try:
            return msgspec.json.encode(_decode_any(self._raw))
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # a line only `decode_line` accepts
            return self._raw.strip()

    def _assistant(self, line: dict[str, Any], offset: int) -> list[Record]:
        message = line.get("message")
        if not isinstance(message, dict):
            self.counts.skipped += 1
            return []
        mid = nonempty_str(message.get("id")) or self._line_id(line)
        if mid in self._messages:
            self._messages.move_to_end(mid)
        else:
            self._messages[mid] = 0
            self.counts.messages += 1
            if len(self._messages) > OPEN_MESSAGES_MAX:
                self._messages.popitem(last=False)
        if mid != self._said_mid:  # a new message: the last one's words still held were its turn's end
            self._said, self._said_mid, self._said_tool = [], mid, False
        content = message.get("content")
        for index, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_use":
                self._said_tool = True
                if not self.words_only:
                    self._tool_use(block, mid, offset)
            elif isinstance(kind, str) and kind in _WORDS:
                self._hold_words(line, index, kind, block.get(_WORDS[kind][1]))
        said = self._said if self._said_tool and self._said else []
        if said:
            self._said = []
            self.counts.said += len(said)
        if not self.words_only and (self.agent_id is not None or line.get("isSidechain") is not True):
            self._note_text(line, mid, content)  # inline sidechains: their Task has it
        return said

    def _tool_use(self, block: dict[str, Any], mid: str, offset: int) -> None:
        use_id = nonempty_str(block.get("id"))
        if use_id is None or use_id in self._pending:
            return  # a repeated line of the same message
        if len(self._pending) >= PENDING_MAX:
            self._pending.pop(next(iter(self._pending)))
        tool_input = block.get("input")
        self._pending[use_id] = _Use(
            name=nonempty_str(block.get("name")) or "unknown",
            input=self._bound(tool_input) if isinstance(tool_input, dict) else {},
            offset=offset,
        )
        self._messages[mid] += 1

    def _hold_words(self, line: dict[str, Any], index: int, kind: str, text: object) -> None:
        """One text or thinking block (its plain text: never a signature), as the Record it becomes once its
        message calls a tool. Keyed by its line's uuid and its place in the line, live and imported alike."""
        if not isinstance(text, str) or not text.strip():
            return
        last_ts = self._last_ts
        payload, session, ts = self._base(line, _WORDS[kind][0])
        self._last_ts = max(last_ts, ts)
        payload[_WORDS[kind][1]] = bound(text)
        self._said.append(self._record(line, words_key(session, self._line_id(line), index), payload, ts))

    def _note_text(self, line: dict[str, Any], mid: str, content: object) -> None:
        """Remember the text of the turn's latest assistant message that has some: the turn's reply so far."""
        if isinstance(content, str):
            texts = [content] if content.strip() else []
        elif isinstance(content, list):
            texts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"
                     and isinstance(b.get("text"), str) and b["text"].strip()]  # fmt: skip
        else:
            texts = []
        if not texts:
            return
        if mid != self._reply_mid:
            self._reply, self._reply_mid = [], mid
        self._reply += [t for t in texts if t not in self._reply]  # a repeated line adds nothing
        self._reply_line = line

    def _turn_end(self) -> list[Record]:
        """The Stop (SubagentStop in a subagent's file) a live hook would have sent for the turn that ends."""
        line, text = self._reply_line, "\n".join(self._reply)
        self._reply, self._reply_mid, self._reply_line = [], None, None
        if line is None or not text.strip():
            return []
        last_ts = self._last_ts
        payload, session, ts = self._base(line, "Stop" if self.agent_id is None else "SubagentStop")
        self._last_ts = max(last_ts, ts)
        payload["stop_hook_active"] = False
        payload["last_assistant_message"] = text  # whole: its hash is the key a live Stop computes too
        self.counts.replies += 1
        return [self._record(line, reply_key(session, text), payload, ts)]

    def _user(self, line: dict[str, Any]) -> list[Record]:
        message = line.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if line.get("isCompactSummary") is True:
            return self._compact_summary(line, content)
        if line.get("isMeta") is True:
            self.counts.skipped += 1
            return []
        if isinstance(content, list):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                return self._results(line, results)
        text = _prompt_text(content)
        if text is None or line.get("isSidechain") is True or self.agent_id is not None:
            self.counts.skipped += 1  # a subagent's first "prompt" is its task, stored with the Task/Agent call
            return []
        self._pending.clear()  # a new turn: calls of the last one that got no result never will
        records = self._turn_end()
        payload, session, ts = self._base(line, "UserPromptSubmit")
        payload["prompt"] = self._bound(text)
        prompt_id = nonempty_str(line.get("promptId")) or self._line_id(line)
        self.counts.prompts += 1
        records.append(self._record(line, f"prompt:{session}:{prompt_id}", payload, ts))
        return records

    def _results(self, line: dict[str, Any], blocks: list[dict[str, Any]]) -> list[Record]:
        records = []
        structured = line.get("toolUseResult", None) if len(blocks) == 1 else None
        for block in blocks:
            use_id = nonempty_str(block.get("tool_use_id"))
            use = self._pending.pop(use_id, None) if use_id else None
            if use is None or use_id is None:
                self.counts.skipped += 1  # its call is before where this read started, or was never written
                continue
            failed = block.get("is_error") is True
            payload, session, ts = self._base(line, "PostToolUseFailure" if failed else "PostToolUse")
            payload.update(tool_name=use.name, tool_input=use.input, tool_use_id=use_id)
            if failed:
                payload["error"] = self._bound(_result_text(block), tail=STRING_MAX)  # its end is the verdict
                self.counts.errors += 1
            else:
                response = structured if structured is not None else _result_text(block)
                payload["tool_response"] = self._bound(response)
                self.counts.tools += 1
            records.append(self._record(line, f"tool:{session}:{use_id}", payload, ts))
        return records

    def _compact_boundary(self, line: dict[str, Any], offset: int) -> list[Record]:
        meta = line.get("compactMetadata")
        self._trigger = nonempty_str(meta.get("trigger")) if isinstance(meta, dict) else None
        self._pending.clear()
        payload, session, ts = self._base(line, "PreCompact")
        payload["trigger"] = self._trigger or "auto"
        payload["custom_instructions"] = None
        self.counts.compactions += 1
        # Recorded with the next line, which may be its summary.
        self._boundary = _Held(line, offset, session, f"compact:{session}:{self._line_id(line)}", payload, ts)
        return []

    def _held_boundary(self, following: dict[str, Any] | None) -> list[Record]:
        """The held boundary's PreCompact, keyed by the `promptId` of the summary that follows it, if one does."""
        held, self._boundary = self._boundary, None
        if held is None:
            return []
        summary = following is not None and following.get("isCompactSummary") is True
        prompt_id = nonempty_str(following.get("promptId")) if summary and following is not None else None
        key = compact_key(held.session, prompt_id, "PreCompact") if prompt_id else held.own_key
        return [self._record(held.line, key, held.payload, held.ts)]

    def _compact_summary(self, line: dict[str, Any], content: object) -> list[Record]:
        text = content if isinstance(content, str) else _prompt_text(content) or ""
        payload, session, ts = self._base(line, "PostCompact")
        payload["trigger"] = self._trigger or "auto"
        payload["compact_summary"] = self._bound(text, COMPACT_MAX)  # stored whole
        self.counts.compactions += 1
        prompt_id = nonempty_str(line.get("promptId"))
        key = (
            compact_key(session, prompt_id, "PostCompact") if prompt_id else f"compact:{session}:{self._line_id(line)}"
        )
        return [self._record(line, key, payload, ts)]


def projects_root() -> str:
    """`~/.claude/projects` (`$CLAUDE_CONFIG_DIR/projects`): a folder per project, a transcript per session."""
    base = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    return os.path.join(base, "projects")


SOURCE: Final = HistorySource(
    roots=lambda: existing(projects_root()),
    claims=lambda path: path.endswith(".jsonl"),
    catch_all=True,
    lines=TranscriptReader.for_file,
    decode=decode_line,
    where=projects_root,
    words=TranscriptReader.words_of,
    words_line=assistant_line,
)
