"""Read a Codex CLI rollout file (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`) as the hook payloads
Codex would have sent, for `nmem import-transcripts` (the format: README.md).

What becomes a payload (each with `nmem_agent: codex`, so the daemon's own extraction reads it as
live Codex hooks are read):

* a user message of a turn (`response_item` `message`, role `user`; the harness's own context
  blocks such as `<environment_context>` are not prompts) -> UserPromptSubmit, keyed
  `prompt:<session>:<turn id>` as the live hook is (README.md);
* a tool call (`function_call`, `custom_tool_call`, `local_shell_call`) joined with its output
  (`function_call_output`, `custom_tool_call_output`) -> PostToolUse, keyed `tool:<session>:<call id>`
  like the live hook: the shell tools (`exec_command`, `shell`, `local_shell`, ...) as `Bash` with
  their command line, `apply_patch` with its patch; a command that exited non-zero (the output's
  `Process exited with code N`, an `exec_command_end` or `item_completed` event's `exit_code`) ->
  PostToolUseFailure (live capture reads the same exit code from this file);
* a turn's last assistant text (`task_complete`'s `last_agent_message`, else the last assistant
  message at the next prompt or the end of the file) -> Stop, keyed by `reply_key` like a live Stop;
* `compacted` -> PostCompact with its summary;
* an assistant message followed by a tool call or another message of its turn (the agent's own words
  between its tool calls: the turn's last is its Stop) -> AssistantText, and each plain-text summary
  of a `reasoning` item (never its `encrypted_content`) -> AssistantThinking, keyed by `words_key` with
  the item's id (or a hash of its time and text); the daemon reads the same live (`words_only`);
* a code-mode `exec` call (JavaScript whose nested `tools.exec_command(...)` runs the shell) -> its
  source whole, as its `input`.

Everything else (`session_meta`, `turn_context`, token counts, world state) only feeds the session's
id, working directory, branch and turn, or is counted as skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from nmemd.agents.codex import HOME
from nmemd.agents.codex.capture import AGENT, exit_code
from nmemd.capture.fields import dict_or_empty
from nmemd.history.records import STRING_MAX, Record, nonempty_str, parse_ts
from nmemd.history.session_lines import SessionLines, decode_line
from nmemd.history.sources import HistorySource, existing
from nmemd.model import COMPACT_MAX, compact_key, reply_key, words_key

PENDING_MAX: Final = 10_000
SHELL_TOOLS: Final = frozenset({"exec_command", "shell", "local_shell", "shell_command", "container.exec"})
_HARNESS: Final = ("<environment_context", "<user_instructions", "<turn_aborted", "# AGENTS.md instructions",
                   "<permissions instructions", "<user_shell_command")  # fmt: skip


def words_line(raw: bytes) -> bool:
    """A rollout line that may hold the agent's words or say where they sit (the live follower decodes only
    these): a response item other than a tool's output, the turn's context and end, the session's facts."""
    if b'"response_item"' in raw:
        return b'_call_output"' not in raw[:400]
    return b'"turn_context"' in raw or b'"task_complete"' in raw or b'"session_meta"' in raw[:200]


def is_rollout(path: str) -> bool:
    name = os.path.basename(path)
    return name.startswith("rollout-") and name.endswith(".jsonl")


def _texts(content: object, kind: str) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        b["text"] for b in content if isinstance(b, dict) and b.get("type") == kind and isinstance(b.get("text"), str)
    ]


def _command(value: object) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        words = [str(v) for v in value]
        if len(words) == 3 and words[1] in ("-lc", "-c") and words[0].endswith(("sh", "bash", "zsh")):
            return words[2]  # ["bash", "-lc", "<the command line>"]
        return shlex.join(words)
    return value if isinstance(value, str) else ""


def _output(raw: object) -> str:
    """A tool output's text: `output` may be a string, a JSON string (older versions) or content blocks."""
    if isinstance(raw, dict):
        raw = raw.get("content", raw.get("output", ""))
    if isinstance(raw, list):
        return "\n".join(t for t in _texts(raw, "input_text") + _texts(raw, "output_text"))
    if not isinstance(raw, str):
        return ""
    if raw.startswith("{") and '"output"' in raw[:200]:
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw
        if isinstance(parsed, dict) and isinstance(parsed.get("output"), str):
            code = dict_or_empty(parsed.get("metadata")).get("exit_code")
            return (f"Process exited with code {code}\n" if isinstance(code, int) else "") + str(parsed["output"])
    return raw


def _exit_in(text: str) -> int | None:
    """`Process exited with code N` anywhere in an exec output's header (0.169 starts with a chunk id)."""
    for line in text[:1000].splitlines()[:8]:
        code = exit_code(line)
        if code is not None:
            return code
        if line.startswith("Output:"):
            break
    return None


def _body(text: str) -> str:
    """An exec output without its header (chunk id, wall time, exit code, token count)."""
    head, sep, rest = text.partition("\nOutput:\n")
    return rest if sep and len(head) < 1000 else text.removeprefix("Output:\n")


@dataclass
class _Call:
    name: str
    input: dict[str, Any]
    offset: int
    turn: str | None


@dataclass
class RolloutReader(SessionLines[_Call]):
    """Turns the lines of one rollout file, in order, into Records."""

    AGENT: ClassVar[str] = AGENT

    turn: str | None = None
    words_only: bool = False  # only the agent's own words (`nmemd.history.follow`: the hooks send the rest)
    _held: Record | None = None  # the last assistant message, until what follows shows it was not the turn's end
    _exits: dict[str, tuple[int, str]] = field(default_factory=dict)  # call id -> (exit code, output)
    _reply: str | None = None  # the turn's last assistant text so far
    _reply_ts: float = 0.0
    _replied: set[str] = field(default_factory=set)
    _prompted: set[str] = field(default_factory=set)  # turns whose prompt was sent

    def __post_init__(self) -> None:
        name = os.path.basename(self.path).removesuffix(".jsonl")
        self.session = name[-36:] if len(name) >= 36 else name  # rollout-<time>-<uuid>: until session_meta says

    def _line(self, line: dict[str, Any], offset: int) -> list[Record]:
        kind, payload = line.get("type"), dict_or_empty(line.get("payload"))
        ts = parse_ts(line.get("timestamp"), self._last_ts)
        self._last_ts = ts
        if kind == "session_meta":
            self.session = nonempty_str(payload.get("id")) or self.session
            self.cwd = nonempty_str(payload.get("cwd")) or self.cwd
            self.branch = nonempty_str(dict_or_empty(payload.get("git")).get("branch")) or self.branch
        elif kind == "turn_context":
            self.cwd = nonempty_str(payload.get("cwd")) or self.cwd
            self.turn = nonempty_str(payload.get("turn_id")) or self.turn
        elif kind == "response_item":
            return self._item(payload, offset, ts)
        elif kind == "event_msg":
            return self._event(payload, ts)
        elif kind == "compacted":
            return self._compacted(payload, ts)
        self.counts.skipped += 1
        return []

    # --- records -------------------------------------------------------------------------------

    def _payload(self, event: str) -> dict[str, Any]:
        p = super()._payload(event)
        if self.turn:
            p["turn_id"] = self.turn
        return p

    def _turn_of(self, payload: dict[str, Any]) -> str | None:
        meta = dict_or_empty(payload.get("internal_chat_message_metadata_passthrough"))
        return nonempty_str(meta.get("turn_id")) or nonempty_str(payload.get("turn_id"))

    def _item(self, p: dict[str, Any], offset: int, ts: float) -> list[Record]:
        kind = p.get("type")
        self.turn = self._turn_of(p) or self.turn
        if kind == "message":
            role = p.get("role")
            if role == "user":
                return self._prompt(p, ts)
            if role == "assistant":
                text = "\n".join(t for t in _texts(p.get("content"), "output_text") if t.strip())
                if text:
                    said = self._said()  # a message that another follows was said between tool calls
                    self._reply, self._reply_ts = text, ts
                    self._held = self._words("AssistantText", "text", text, nonempty_str(p.get("id")), 0, ts)
                    self.counts.messages += 1
                    return said
        elif kind == "reasoning":
            summary = p.get("summary") if isinstance(p.get("summary"), list) else []
            self.counts.said += sum(1 for text in _texts(summary, "summary_text") if text.strip())
            return [self._words("AssistantThinking", "thinking", text, nonempty_str(p.get("id")), i, ts)
                    for i, text in enumerate(_texts(summary, "summary_text")) if text.strip()]  # fmt: skip
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            said = self._said()
            if not self.words_only:
                self._call(p, offset)
            return said
        elif kind in ("function_call_output", "custom_tool_call_output") and not self.words_only:
            return self._result(p, ts)
        self.counts.skipped += 1
        return []

    def _words(self, event: str, field_name: str, text: str, item: str | None, index: int, ts: float) -> Record:
        """One passage of the agent's own words, keyed by its item (a rollout line has no other id)."""
        own = item or "h" + hashlib.blake2b(f"{ts}:{text}".encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
        payload = self._payload(event)
        payload[field_name] = self._bound(text)
        return self._record(words_key(self.session, own, index), payload, ts)

    def _said(self) -> list[Record]:
        held, self._held = self._held, None
        if held is None:
            return []
        self.counts.said += 1
        return [held]

    def _prompt(self, p: dict[str, Any], ts: float) -> list[Record]:
        self._held = None
        if self.words_only:
            return []
        text = "\n".join(_texts(p.get("content"), "input_text"))
        if not text.strip() or text.lstrip().startswith(_HARNESS):
            self.counts.skipped += 1
            return []
        turn = self.turn
        if turn is not None and turn in self._prompted:  # a second user message in one turn: its first is the prompt
            self.counts.skipped += 1
            return []
        records = self._turn_end()
        self._pending.clear()
        payload = self._payload("UserPromptSubmit")
        payload["prompt"] = self._bound(text)
        if turn is not None:
            self._prompted.add(turn)
            key = f"prompt:{self.session}:{turn}"
        else:
            key = f"prompt:{self.session}:h{hashlib.blake2b(f'{ts}:{text}'.encode(), digest_size=12).hexdigest()}"
        self.counts.prompts += 1
        records.append(self._record(key, payload, ts))
        return records

    def _call(self, p: dict[str, Any], offset: int) -> None:
        call_id = nonempty_str(p.get("call_id")) or nonempty_str(p.get("id"))
        if call_id is None or call_id in self._pending:
            self.counts.skipped += 1
            return
        name = nonempty_str(p.get("name")) or ("local_shell" if p.get("type") == "local_shell_call" else "unknown")
        namespace = nonempty_str(p.get("namespace"))
        if namespace and namespace.startswith("mcp__"):  # an MCP tool, named as its live hook names it
            name = f"{namespace}__{name}"
        args: dict[str, Any] = {}
        if p.get("type") == "local_shell_call":
            args = {"command": dict_or_empty(p.get("action")).get("command")}
        elif isinstance(p.get("input"), str):  # a custom (freeform) tool: apply_patch's patch
            args = {"input": p["input"]}
        elif isinstance(p.get("arguments"), str):
            try:
                parsed = json.loads(p["arguments"])
            except ValueError:
                parsed = {"arguments": p["arguments"]}
            args = parsed if isinstance(parsed, dict) else {"arguments": parsed}
        if name in SHELL_TOOLS:
            tool, tool_input = "Bash", {"command": _command(args.get("cmd", args.get("command")))}
            if isinstance(args.get("workdir"), str):
                tool_input["workdir"] = args["workdir"]
        elif name == "apply_patch":
            tool, tool_input = "apply_patch", {"command": args.get("input") or args.get("patch") or ""}
        else:
            tool, tool_input = name, args
        if len(self._pending) >= PENDING_MAX:
            self._pending.pop(next(iter(self._pending)))
        self._pending[call_id] = _Call(tool, self._bound(tool_input), offset, self.turn)

    def _result(self, p: dict[str, Any], ts: float) -> list[Record]:
        call_id = nonempty_str(p.get("call_id"))
        call = self._pending.pop(call_id, None) if call_id else None
        if call is None or call_id is None:
            self.counts.skipped += 1
            return []
        text = _output(p.get("output"))
        known = self._exits.pop(call_id, None)
        code = known[0] if known else _exit_in(text)
        output = known[1] if known and known[1] else _body(text) if call.name == "Bash" else text
        failed = call.name == "Bash" and code not in (None, 0)
        payload = self._payload("PostToolUseFailure" if failed else "PostToolUse")
        if call.turn:
            payload["turn_id"] = call.turn
        payload.update(tool_name=call.name, tool_input=call.input, tool_use_id=call_id)
        if call.name == "Bash":
            payload["nmem_exit_code"] = code  # known here (or not at all): extraction need not read the file
        if failed:
            payload["error"] = self._bound(f"Exit code {code}\n{output}", tail=STRING_MAX)
            self.counts.errors += 1
        else:
            payload["tool_response"] = self._bound(output)
            self.counts.tools += 1
        return [self._record(f"tool:{self.session}:{call_id}", payload, ts)]

    def _event(self, p: dict[str, Any], ts: float) -> list[Record]:
        kind = p.get("type")
        self.turn = nonempty_str(p.get("turn_id")) or self.turn
        if kind == "task_complete":
            self._held = None
            if self.words_only:
                return []
            text = nonempty_str(p.get("last_agent_message"))
            if text:
                self._reply, self._reply_ts = text, ts
            return self._turn_end()
        if kind in ("exec_command_end", "item_completed"):
            item = dict_or_empty(p.get("item")) if kind == "item_completed" else p
            call_id = nonempty_str(item.get("call_id")) or nonempty_str(item.get("id"))
            code = item.get("exit_code")
            if call_id and isinstance(code, int) and not isinstance(code, bool):
                out = item.get("aggregated_output")
                if not isinstance(out, str):
                    out = "\n".join(x for x in (item.get("stdout"), item.get("stderr")) if isinstance(x, str) and x)
                self._exits[call_id] = (code, out)
                if len(self._exits) > PENDING_MAX:
                    self._exits.pop(next(iter(self._exits)))
        self.counts.skipped += 1
        return []

    def _turn_end(self) -> list[Record]:
        text, ts = self._reply, self._reply_ts
        self._reply, self._held = None, None
        if not text or not text.strip() or self.words_only:
            return []
        key = reply_key(self.session, text)
        if key in self._replied:
            return []
        self._replied.add(key)
        payload = self._payload("Stop")
        payload["stop_hook_active"] = False
        payload["last_assistant_message"] = text
        self.counts.replies += 1
        return [self._record(key, payload, ts)]

    def _compacted(self, p: dict[str, Any], ts: float) -> list[Record]:
        if self.words_only:
            return []
        summary = nonempty_str(p.get("message")) or ""
        payload = self._payload("PostCompact")
        payload["trigger"] = "auto"
        payload["compact_summary"] = self._bound(summary, COMPACT_MAX)
        self.counts.compactions += 1
        if self.turn:
            key = compact_key(self.session, self.turn, "PostCompact")
        else:
            key = f"compact:{self.session}:h{hashlib.blake2b(f'{ts}:{summary}'.encode(), digest_size=12).hexdigest()}"
        return [self._record(key, payload, ts)]


def sessions_root() -> str:
    """Where Codex keeps its rollout files: `$CODEX_HOME/sessions` (default `~/.codex/sessions`)."""
    return str(HOME.path() / "sessions")


SOURCE: Final = HistorySource(
    roots=lambda: existing(sessions_root()),
    claims=is_rollout,
    lines=lambda path: RolloutReader(path=path),
    decode=decode_line,  # Codex's, the Gemini CLI's and Copilot's lines: plain JSON, any shape
    where=sessions_root,
    words=lambda path: RolloutReader(path=path, words_only=True),
    words_line=words_line,
)
