"""Read a Cline CLI task's history (`~/.cline/data/sessions/<id>/<id>.messages.json`, Cline CLI 3.x) as the
hook payloads the CLI would have sent, for `nmem import-transcripts` (the format: README.md).

The file is one JSON document, `{"sessionId", "messages": [{id, role, content: [...], ts}, ...]}`,
rewritten whole as the task goes on (verified with the real CLI 3.0.65: tests/data/cline/). It is read
whole whenever its size or time changed; what was stored before adds nothing (natural keys). What becomes
a payload (each with `nmem_agent: cline` and the CLI's hook names, read by the daemon as live hooks are):

* a user message's text (its `<user_input mode="...">` wrapper removed) -> `prompt_submit`, with the
  message's id as `prompt_id` (a one-shot `cline "PROMPT"` fires no live prompt hook);
* an assistant `tool_use` joined with the next user message's `tool_result` of the same id ->
  `tool_result` with the CLI's call id, keyed by `cline.tool_key` as the live hook is;
* a run's last assistant text -> `agent_end` with `turn.outputText`, keyed by `reply_key` as the live
  hook is;
* the text of an assistant message that calls a tool (the agent's own words between its tool calls) ->
  AssistantText, and its `thinking` / `reasoning` blocks' plain text (never a signature) ->
  AssistantThinking, keyed by `words_key` with the message's id (or place) and the block's.

The session is the file's `sessionId`: the hooks' `sessionContext.rootSessionId`. The VS Code extension's
tasks (`tasks/<id>/api_conversation_history.json`) are read by `extension.TaskReader`.
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Final

from nmemd.agents.cline import extension
from nmemd.agents.cline.capture import AGENT
from nmemd.agents.cline.extension import TaskReader, Unreadable
from nmemd.capture.fields import dict_or_empty
from nmemd.history import files
from nmemd.history.records import STRING_MAX, Counts, Record, bound, nonempty_str
from nmemd.history.sources import HistorySource, existing
from nmemd.model import words_key

SUFFIX: Final = ".messages.json"
# A larger messages file is reported, not read. Read whole and decoded at once: its bytes, its
# strings and its values (nmemd.history.files.VALUES_MAX) cost ~2.5 times this at most.
FILE_MAX: Final = 128 * 1024 * 1024
_WRAPPER: Final = re.compile(r"\A\s*<user_input(?:\s[^>]*)?>(.*)</user_input>\s*\Z", re.S)


def is_messages(path: str) -> bool:
    """A task's messages file: `<id>/<id>.messages.json`."""
    name = os.path.basename(path)
    return name.endswith(SUFFIX) and name[: -len(SUFFIX)] == os.path.basename(os.path.dirname(path))


def _prompt(text: str) -> str:
    m = _WRAPPER.match(text)
    return m.group(1).strip() if m else text.strip()


def _output(content: object) -> Any:
    """A tool result's content as the live hook's `tool_result.output`: a JSON string (editor) decoded."""
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


@dataclass
class MessagesReader:
    """Turns one messages file into Records."""

    path: str
    counts: Counts = field(default_factory=Counts)
    session: str = ""
    cwd: str | None = None
    problems: list[str] = field(default_factory=list)  # side files that could not be read

    def records(self) -> list[Record]:
        """Every record of the file. Raises Unreadable (with the reason) on a file it cannot read."""
        try:
            raw = files.read_file(self.path, FILE_MAX)
            if files.too_many_values(raw):
                raise Unreadable(f"messages file of over {files.VALUES_MAX:,} JSON values skipped")
            text = raw.decode("utf-8")
            del raw  # held while the document is built, it would cost a third more at the peak
            doc = json.loads(text)
            del text
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                raise Unreadable(f"messages file over {FILE_MAX >> 20} MB skipped") from exc
            raise Unreadable(f"read failed: {exc.strerror or exc}") from exc
        except (ValueError, RecursionError) as exc:
            raise Unreadable(f"not a Cline messages file: {exc}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            raise Unreadable("not a Cline messages file: no `messages` list")
        self.session = nonempty_str(doc.get("sessionId")) or os.path.basename(os.path.dirname(self.path))
        self._find_cwd()
        out: list[Record] = []
        calls: dict[str, dict[str, Any]] = {}
        reply: tuple[str, float] | None = None
        for number, message in enumerate(doc["messages"]):
            self.counts.lines += 1
            m = dict_or_empty(message)
            ts = m["ts"] / 1000 if isinstance(m.get("ts"), int | float) and not isinstance(m.get("ts"), bool) else 0.0
            parts = [dict_or_empty(c) for c in m.get("content", [])] if isinstance(m.get("content"), list) else []
            if isinstance(m.get("content"), str):
                parts = [{"type": "text", "text": m["content"]}]
            if m.get("role") == "assistant":
                self.counts.messages += 1
                out += self._words(nonempty_str(m.get("id")) or f"m{number}", parts, ts)
                texts = [p["text"] for p in parts if p.get("type") == "text" and nonempty_str(p.get("text"))]
                for p in parts:
                    if p.get("type") == "tool_use" and nonempty_str(p.get("id")):
                        calls[p["id"]] = p
                if texts and "".join(texts).strip():
                    reply = ("\n".join(texts), ts)
                continue
            if m.get("role") != "user":
                self.counts.skipped += 1
                continue
            for p in parts:
                if p.get("type") == "tool_result":
                    call = calls.pop(nonempty_str(p.get("tool_use_id")) or "", None)
                    if call is not None:
                        out.append(self._tool(call, p, ts))
                elif p.get("type") == "text" and nonempty_str(p.get("text")) and _prompt(p["text"]):
                    if reply is not None:
                        out.append(self._end(*reply))
                        reply = None
                    out.append(self._prompt_record(nonempty_str(m.get("id")), _prompt(p["text"]), ts))
        if reply is not None:
            out.append(self._end(*reply))
        return out

    def _find_cwd(self) -> None:
        """The task's working directory, from its `<id>.json` beside the messages file."""
        meta = self.path[: -len(SUFFIX)] + ".json"
        self.cwd = None
        try:
            self.cwd = nonempty_str(
                dict_or_empty(json.loads(files.read_file(meta, files.SIDE_MAX, follow=False))).get("cwd")
            )
        except FileNotFoundError:
            pass
        except (OSError, ValueError, RecursionError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.problems.append(f"{meta} skipped ({why}): working folder unknown")

    def _words(self, own: str, parts: list[dict[str, Any]], ts: float) -> list[Record]:
        """A message's thinking, and its text when it calls a tool: said between its tool calls."""
        calls = any(p.get("type") == "tool_use" for p in parts)
        out = []
        for index, p in enumerate(parts):
            kind = p.get("type")
            text = p.get("thinking") if kind == "thinking" else p.get("text")
            if (
                (kind in ("thinking", "reasoning") or (kind == "text" and calls))
                and isinstance(text, str)
                and text.strip()
            ):
                thinking = kind != "text"
                payload: dict[str, Any] = {"nmem_agent": AGENT, "hook_event_name": "AssistantThinking" if thinking
                                           else "AssistantText", "session_id": self.session,
                                           "thinking" if thinking else "text": bound(text, STRING_MAX, 0)}  # fmt: skip
                if self.cwd:
                    payload["cwd"] = self.cwd
                self.counts.said += 1
                out.append(Record(key=words_key(self.session, own, index), ts=ts, payload=payload))
        return out

    def _payload(self, hook: str) -> dict[str, Any]:
        p: dict[str, Any] = {"nmem_agent": AGENT, "hookName": hook, "taskId": self.session,
                             "sessionContext": {"rootSessionId": self.session}}  # fmt: skip
        if self.cwd:
            p["cwd"], p["workspaceRoots"] = self.cwd, [self.cwd]
        return p

    def _prompt_record(self, message_id: str | None, text: str, ts: float) -> Record:
        p = self._payload("prompt_submit")
        p["userPromptSubmit"] = {"prompt": bound(text, STRING_MAX, 0)}
        own = message_id or f"{ts}"
        p["prompt_id"] = own
        self.counts.prompts += 1
        return Record(key=f"prompt:{self.session}:{own}", ts=ts, payload=p)

    def _tool(self, call: dict[str, Any], result: dict[str, Any], ts: float) -> Record:
        name = nonempty_str(call.get("name")) or "unknown"
        inp = dict_or_empty(call.get("input"))
        output = _output(result.get("content"))
        outputs = output if isinstance(output, list) else [output]
        failed = result.get("is_error") is True or any(dict_or_empty(o).get("success") is False for o in outputs)
        if failed:
            self.counts.errors += 1
        p = self._payload("tool_result")
        p["tool_result"] = {"id": call["id"], "name": name, "input": bound(inp, STRING_MAX, 0),
                            "output": bound(output, STRING_MAX, 0)}  # fmt: skip
        text = output if isinstance(output, str) else json.dumps(output, separators=(",", ":"), ensure_ascii=False)
        ok = result.get("is_error") is not True
        p["postToolUse"] = {"toolName": name, "parameters": p["tool_result"]["input"],
                            "result": bound(text, STRING_MAX, 0), "success": ok}  # fmt: skip
        self.counts.tools += 1
        return Record(key=f"tool:{self.session}:{call['id']}", ts=ts, payload=p)

    def _end(self, text: str, ts: float) -> Record:
        p = self._payload("agent_end")
        p["turn"], p["taskComplete"] = {"outputText": bound(text, STRING_MAX, 0)}, {"taskMetadata": {}}
        self.counts.replies += 1
        return Record(key=f"reply:{self.session}:{ts}", ts=ts, payload=p)


def sessions_root() -> str:
    """Where the Cline CLI keeps its tasks: `~/.cline/data/sessions/<id>/`."""
    return os.path.join(os.path.expanduser("~"), ".cline", "data", "sessions")


def _reader(path: str) -> MessagesReader | TaskReader:
    """The CLI's messages file, or a task of the VS Code extension (`nmemd.agents.cline.extension`)."""
    return TaskReader(path) if extension.is_task_history(path) else MessagesReader(path)


SOURCE: Final = HistorySource(
    roots=lambda: existing(sessions_root()) + extension.roots(),
    claims=lambda path: is_messages(path) or extension.is_task_history(path),
    document=_reader,
    unreadable=Unreadable,
    where=lambda: f"{sessions_root()} and the VS Code extension's globalStorage ({extension.EXTENSION_ID}/tasks)",
)
