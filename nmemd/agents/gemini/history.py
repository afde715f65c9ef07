"""Read a Gemini CLI session file (`~/.gemini/tmp/<project>/chats/session-*.jsonl`) as the hook payloads
the Gemini CLI would have sent, for `nmem import-transcripts` (the format: README.md).

What becomes a payload (each with `nmem_agent: gemini`, so the daemon's own extraction reads it as live
Gemini hooks are read, under the same natural keys):

* a `user` message with text (not tool results, not the CLI's `<session_context>` preamble) ->
  BeforeAgent, keyed `prompt:<session>:<hash of the text>` as the live hook is;
* each finished tool call of a `gemini` message (`toolCalls`, the last version of the message) ->
  AfterTool with `tool_use_id` the hash of its tool, arguments and output (`tool_call_id`), as the live
  hook is keyed; a call whose `status` is "error" carries its error;
* a turn's last `gemini` text (at the next prompt or the end of the file) -> AfterAgent, keyed by
  `reply_key` like a live one;
* the text of a `gemini` message that calls tools (the agent's own words between its tool calls) ->
  AssistantText, and each of its `thoughts` (subject and description: the CLI keeps their plain text
  only) -> AssistantThinking, keyed by `words_key` with the message's id; the daemon reads the same live
  (`words_only`), from the file the hooks name.

The session's working directory is the project folder's `.project_root` (or `projects.json`).
Everything else (`$set` updates, `info` messages, token counts) is counted as skipped. The
single-object `session-*.json` files of older versions are not read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from nmemd.agents.gemini import HOME
from nmemd.agents.gemini.capture import AGENT, prompt_id, prompt_text, tool_call_id
from nmemd.capture.fields import dict_or_empty
from nmemd.history import files
from nmemd.history.records import STRING_MAX, Record, bound, nonempty_str, parse_ts
from nmemd.history.session_lines import SessionLines, decode_line
from nmemd.history.sources import HistorySource, existing
from nmemd.model import reply_key, words_key

SEEN_MAX: Final = 100_000
_PREAMBLE: Final = ("<session_context>",)


def is_session(path: str) -> bool:
    """A Gemini CLI session file: `session-*.jsonl` in a `chats` folder."""
    name = os.path.basename(path)
    return (
        name.startswith("session-") and name.endswith(".jsonl") and os.path.basename(os.path.dirname(path)) == "chats"
    )


def _texts(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]


def project_of(path: str, problems: list[str] | None = None) -> str | None:
    """The project folder a session file belongs to: `<project>/.project_root`, else `projects.json`'s
    entry. Both are read bounded and never waiting (nmemd.history.files); what was wrong with one that
    is there goes to `problems`."""
    folder = os.path.dirname(os.path.dirname(path))
    side = os.path.join(folder, ".project_root")
    try:
        root = files.read_file(side, files.SIDE_MAX, follow=False).decode("utf-8").strip()
        if root.startswith("/"):
            return root
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as exc:
        _problem(problems, side, exc)
    index = os.path.join(os.path.dirname(os.path.dirname(folder)), "projects.json")
    try:
        raw = files.read_file(index, files.PROJECTS_MAX, follow=False)
        if files.too_many_values(raw):
            raise ValueError(f"over {files.VALUES_MAX:,} JSON values")
        projects = dict_or_empty(json.loads(raw)).get("projects")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        _problem(problems, index, exc)
        return None
    name = os.path.basename(folder)
    found = [
        p for p, short in dict_or_empty(projects).items() if short == name and isinstance(p, str) and p.startswith("/")
    ]
    return found[0] if len(found) == 1 else None


def _problem(problems: list[str] | None, path: str, exc: Exception) -> None:
    if problems is not None:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        problems.append(f"{path} skipped ({why}): project folder unknown")


@dataclass
class SessionReader(SessionLines[Any]):
    """Turns the lines of one session file, in order, into Records."""

    AGENT: ClassVar[str] = AGENT

    _calls: set[str] = field(default_factory=set)  # tool call ids already sent
    _reply: tuple[str, str, float] | None = None  # (message id, text, ts) of the turn's last text so far
    _replied: set[str] = field(default_factory=set)
    _said: set[str] = field(default_factory=set)  # keys of the words sent (a message is written several times)
    problems: list[str] = field(default_factory=list)  # side files that could not be read
    words_only: bool = False  # only the agent's own words (`nmemd.history.follow`: the hooks send the rest)

    def __post_init__(self) -> None:
        name = os.path.basename(self.path).removesuffix(".jsonl")
        self.session = name.rpartition("-")[2] or name  # session-<time>-<id prefix>: until the first line says
        self.cwd = project_of(self.path, self.problems)

    def _line(self, line: dict[str, Any], offset: int) -> list[Record]:
        if "sessionId" in line and "type" not in line:
            self.session = nonempty_str(line.get("sessionId")) or self.session
            self.counts.skipped += 1
            return []
        kind = line.get("type")
        ts = parse_ts(line.get("timestamp"), self._last_ts)
        self._last_ts = ts
        if kind == "user":
            return self._user(line, ts)
        if kind == "gemini":
            return self._gemini(line, ts)
        self.counts.skipped += 1
        return []

    def _user(self, line: dict[str, Any], ts: float) -> list[Record]:
        if self.words_only:
            return []
        text = "\n".join(_texts(line.get("content")))
        if not text.strip() or text.lstrip().startswith(_PREAMBLE):
            self.counts.skipped += 1  # tool results, the CLI's own context
            return []
        records = self._turn_end()
        payload = self._payload("BeforeAgent")
        payload["prompt_id"] = prompt_id(prompt_text(text))  # of the whole text, as the live hook's is
        payload["prompt"] = bound(text)
        self.counts.prompts += 1
        records.append(Record(key=f"prompt:{self.session}:{payload['prompt_id']}", ts=ts, payload=payload))
        return records

    def _gemini(self, line: dict[str, Any], ts: float) -> list[Record]:
        msg_id = nonempty_str(line.get("id")) or ""
        calls = line.get("toolCalls")
        text = "\n".join(t for t in _texts(line.get("content")) if t.strip())
        records = self._thoughts(msg_id, line.get("thoughts"), ts)
        if isinstance(calls, list) and calls:
            if self._reply is not None and self._reply[0] == msg_id:
                self._reply = None  # a text before tool calls: not the turn's last
            if text and msg_id:
                records += self._words(msg_id, 0, "AssistantText", "text", text, ts)
            for call in calls if not self.words_only else ():
                if isinstance(call, dict):
                    records += self._call(call, ts)
        elif text:
            self._reply = (msg_id, text, ts)
            self.counts.messages += 1
        if not records and not text:
            self.counts.skipped += 1
        return records

    def _thoughts(self, msg_id: str, thoughts: object, ts: float) -> list[Record]:
        records: list[Record] = []
        for i, thought in enumerate(thoughts if isinstance(thoughts, list) and msg_id else ()):
            t = dict_or_empty(thought)
            text = ": ".join(
                v.strip() for k in ("subject", "description") if isinstance(v := t.get(k), str) and v.strip()
            )
            if text:
                records += self._words(
                    msg_id, i + 1, "AssistantThinking", "thinking", text, parse_ts(t.get("timestamp"), ts)
                )
        return records

    def _words(self, msg_id: str, index: int, event: str, name: str, text: str, ts: float) -> list[Record]:
        key = words_key(self.session, msg_id, index)
        if key in self._said:
            return []
        if len(self._said) >= SEEN_MAX:
            self._said.clear()
        self._said.add(key)
        payload = self._payload(event)
        payload[name] = bound(text)
        self.counts.said += 1
        return [Record(key=key, ts=ts, payload=payload)]

    def _call(self, call: dict[str, Any], ts: float) -> list[Record]:
        status = call.get("status")
        call_id, name = nonempty_str(call.get("id")), nonempty_str(call.get("name"))
        if status not in ("success", "error") or call_id is None or name is None or call_id in self._calls:
            return []  # still running, cancelled, or sent already (a message is written again as calls finish)
        if len(self._calls) >= SEEN_MAX:
            self._calls.clear()
        self._calls.add(call_id)
        response: dict[str, Any] = {}
        result = call.get("result")
        for part in result if isinstance(result, list) else []:
            fr = dict_or_empty(dict_or_empty(part).get("functionResponse"))
            if fr:
                response = dict_or_empty(fr.get("response"))
                break
        output = response.get("output", response.get("error", ""))
        args = call.get("args") if isinstance(call.get("args"), dict) else {}
        tool_response: dict[str, Any] = {"llmContent": output, "returnDisplay": call.get("resultDisplay")}
        if status == "error":
            tool_response["error"] = {"message": output if isinstance(output, str) else "error"}
            self.counts.errors += 1
        else:
            self.counts.tools += 1
        payload = self._payload("AfterTool")
        payload.update(tool_name=name, tool_input=bound(args), tool_response=bound(tool_response, STRING_MAX),
                       tool_use_id=tool_call_id(name, args, output))  # fmt: skip
        ts = parse_ts(call.get("timestamp"), ts)
        return [Record(key=f"tool:{self.session}:{payload['tool_use_id']}", ts=ts, payload=payload)]

    def _turn_end(self) -> list[Record]:
        reply, self._reply = self._reply, None
        if reply is None or self.words_only:
            return []
        _, text, ts = reply
        key = reply_key(self.session, text)
        if key in self._replied:
            return []
        self._replied.add(key)
        payload = self._payload("AfterAgent")
        payload.update(prompt_response=text, stop_hook_active=False)
        self.counts.replies += 1
        return [Record(key=key, ts=ts, payload=payload)]


def tmp_root() -> str:
    """Where the Gemini CLI keeps its session files: `~/.gemini/tmp` (`$GEMINI_CLI_HOME/.gemini/tmp`)."""
    return str(HOME.path() / "tmp")


def _in_tmp(folder: str) -> bool:
    """A folder in the Gemini CLI's `.gemini/tmp`, where only `chats/session-*.jsonl` files are history."""
    return f"{os.sep}.gemini{os.sep}tmp" in folder


SOURCE: Final = HistorySource(
    roots=lambda: existing(tmp_root()),
    claims=is_session,
    reserves=_in_tmp,
    lines=lambda path: SessionReader(path=path),
    decode=decode_line,
    where=tmp_root,
    words=lambda path: SessionReader(path=path, words_only=True),
    words_line=lambda raw: b'"gemini"' in raw or b'"sessionId"' in raw[:40],  # the header names the session
)
