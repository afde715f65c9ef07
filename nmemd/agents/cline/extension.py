"""Read a task of Cline's VS Code extension (`tasks/<id>/api_conversation_history.json` in VS Code's
globalStorage for `saoudrizwan.claude-dev`, or `~/.cline/data/tasks/<id>/` from the SDK-based versions) as
the hook payloads the extension's hooks would have sent, for `nmem import-transcripts`.

The file is one JSON array, the task's conversation in Anthropic's Messages format (`{role, content,
ts?, id?}`; cline/cline `ClineStorageMessage`), rewritten whole as the task goes on, so it is read whole
whenever it changed; what was stored before adds nothing (natural keys). The task's id is its folder's
name (the time it started, in ms). What becomes a payload (`nmem_agent: cline`, the extension's hook
names, read by the daemon as its live hooks are):

* the user's words: the first message's `<task>`, later `<feedback>` / `<answer>` / `<user_message>`
  blocks (the `<environment_details>` Cline appends is not the user's) -> UserPromptSubmit;
* a tool call and its result: a native `tool_use` with its `tool_result`, or, in the versions that
  wrote tools as XML in the text (`<execute_command><command>...</command></execute_command>`), that
  block with the next user message's `[execute_command for '...'] Result:` text -> PostToolUse;
  `attempt_completion`'s result is the task's reply;
* the assistant's words around its tool calls, and its thinking (`thinking` blocks, or the
  `<thinking>` the older prompts asked for) -> AssistantText / AssistantThinking, keyed by `words_key`.

A message without `ts` (older versions) takes the time of the API request it belongs to in the task's
`ui_messages.json` (`say: api_req_started`), else the task's start. The working folder is the one the
first `<environment_details>` names (`# Current Working Directory (/path) Files`).
"""

from __future__ import annotations

import errno
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Final

from nmemd.agents.cline.capture import AGENT
from nmemd.capture.fields import dict_or_empty
from nmemd.history import files
from nmemd.history.records import STRING_MAX, Counts, Record, bound, nonempty_str
from nmemd.model import words_key

NAME: Final = "api_conversation_history.json"
FILE_MAX: Final = 128 * 1024 * 1024
EXTENSION_ID: Final = "saoudrizwan.claude-dev"
_EDITORS: Final = ("Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf")
_TOOLS: Final = (
    "execute_command", "read_file", "write_to_file", "replace_in_file", "search_files", "list_files",
    "list_code_definition_names", "use_mcp_tool", "access_mcp_resource", "attempt_completion",
    "ask_followup_question", "browser_action", "web_fetch", "new_task", "plan_mode_respond",
)  # fmt: skip
_XML_TOOL: Final = re.compile(r"<(" + "|".join(_TOOLS) + r")>(.*?)</\1>", re.S)
_XML_PARAM: Final = re.compile(r"<([a-z_]+)>\n?(.*?)\n?</\1>", re.S)
_THINKING: Final = re.compile(r"<thinking>(.*?)</thinking>", re.S)
_USER: Final = re.compile(r"<(task|feedback|answer|user_message)>\n?(.*?)\n?</\1>", re.S)
_ENVIRONMENT: Final = re.compile(r"<environment_details>.*?(?:</environment_details>|\Z)", re.S)
_CWD: Final = re.compile(r"# Current (?:Working|Workspace) Directory \((/[^)\n]*)\)")
_RESULT: Final = re.compile(r"\A\[([a-z_]+)(?: for [^\]]*)?\] Result:\s*", re.S)
_FAILED: Final = ("The user denied this operation", "[ERROR]", "Error executing", "The tool execution failed")


class Unreadable(Exception):
    """The file is not a Cline history file nmem can read (a task's, or the CLI's messages file)."""


def is_task_history(path: str) -> bool:
    """A task's conversation: `tasks/<id>/api_conversation_history.json`."""
    return os.path.basename(path) == NAME and os.path.basename(os.path.dirname(os.path.dirname(path))) == "tasks"


def roots() -> list[str]:
    """Every editor's globalStorage folder of the extension (Linux, macOS), and the SDK-based versions' data."""
    home = os.path.expanduser("~")
    bases = [os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config"),
             os.path.join(home, "Library", "Application Support")]  # fmt: skip
    found = [os.path.join(b, e, "User", "globalStorage", EXTENSION_ID, "tasks") for b in bases for e in _EDITORS]
    found.append(os.path.join(home, ".cline", "data", "tasks"))
    return [f for f in found if os.path.isdir(f)]


def _texts(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict_or_empty(c) for c in content] if isinstance(content, list) else []


def _result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(c["text"] for c in _texts(content) if c.get("type") == "text" and isinstance(c.get("text"), str))


@dataclass
class TaskReader:
    """Turns one task's conversation into Records."""

    path: str
    counts: Counts = field(default_factory=Counts)
    session: str = ""
    cwd: str | None = None
    problems: list[str] = field(default_factory=list)
    _times: list[float] = field(default_factory=list)  # the task's API requests (ui_messages.json), in order

    def records(self) -> list[Record]:
        """Every record of the file. Raises Unreadable (with the reason) on a file it cannot read."""
        doc = self._load(self.path)
        if not isinstance(doc, list):
            raise Unreadable("not a Cline task history: not a list of messages")
        self.session = os.path.basename(os.path.dirname(self.path))
        self._find_times()
        out: list[Record] = []
        calls: dict[str, tuple[str, dict[str, Any]]] = {}  # a native call's id -> (name, input)
        waiting: list[tuple[str, dict[str, Any], str]] = []  # XML calls of the last message: (name, params, id)
        users = assistants = 0
        for number, message in enumerate(doc):
            self.counts.lines += 1
            m = dict_or_empty(message)
            parts = _texts(m.get("content"))
            own = nonempty_str(m.get("id")) or f"m{number}"
            if m.get("role") == "assistant":
                ts = self._ts(m, assistants, number) + 0.001
                assistants += 1
                self.counts.messages += 1
                out += self._assistant(own, parts, ts, calls, waiting)
            elif m.get("role") == "user":
                ts = self._ts(m, users, number)
                users += 1
                out += self._user(own, parts, ts, calls, waiting)
            else:
                self.counts.skipped += 1
        return out

    def _load(self, path: str) -> object:
        try:
            raw = files.read_file(path, FILE_MAX)
            if files.too_many_values(raw):
                raise Unreadable(f"task history of over {files.VALUES_MAX:,} JSON values skipped")
            return json.loads(raw.decode("utf-8"))
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                raise Unreadable(f"task history over {FILE_MAX >> 20} MB skipped") from exc
            raise Unreadable(f"read failed: {exc.strerror or exc}") from exc
        except (ValueError, RecursionError) as exc:
            raise Unreadable(f"not a Cline task history: {exc}") from exc

    def _find_times(self) -> None:
        """The start of each API request of the task, from `ui_messages.json` beside it (if it is there)."""
        side = os.path.join(os.path.dirname(self.path), "ui_messages.json")
        try:
            ui = json.loads(files.read_file(side, FILE_MAX, follow=False))
        except FileNotFoundError:
            return
        except (OSError, ValueError, RecursionError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self.problems.append(f"{side} skipped ({why}): message times estimated")
            return
        for item in ui if isinstance(ui, list) else ():
            m = dict_or_empty(item)
            if m.get("say") == "api_req_started" and isinstance(m.get("ts"), int | float):
                self._times.append(m["ts"] / 1000)

    def _ts(self, m: dict[str, Any], nth: int, number: int) -> float:
        """A message's own time; else its API request's (the n-th user message opens the n-th request)."""
        if isinstance(m.get("ts"), int | float) and not isinstance(m.get("ts"), bool):
            return float(m["ts"]) / 1000
        if nth < len(self._times):
            return self._times[nth]
        start = int(self.session) / 1000 if self.session.isdigit() else 0.0
        return start + number * 0.001

    def _payload(self, hook: str) -> dict[str, Any]:
        p: dict[str, Any] = {"nmem_agent": AGENT, "hookName": hook, "taskId": self.session}
        if self.cwd:
            p["cwd"], p["workspaceRoots"] = self.cwd, [self.cwd]
        return p

    # --- user ---------------------------------------------------------------------------------------

    def _user(
        self, own: str, parts: list[dict[str, Any]], ts: float, calls: dict[str, tuple[str, dict[str, Any]]],
        waiting: list[tuple[str, dict[str, Any], str]],
    ) -> list[Record]:  # fmt: skip
        out: list[Record] = []
        prompts: list[str] = []
        for p in parts:
            if p.get("type") == "tool_result":
                call = calls.pop(nonempty_str(p.get("tool_use_id")) or "", None)
                if call is not None:
                    output = _result_text(p.get("content"))
                    out.append(self._tool(call[0], call[1], output, p.get("is_error") is True, p["tool_use_id"], ts))
                continue
            text = p.get("text") if p.get("type") == "text" else None
            if not isinstance(text, str):
                continue
            if self.cwd is None and (found := _CWD.search(text)):
                self.cwd = found.group(1).strip()
            if (result := _RESULT.match(text)) and waiting:
                name, params, call_id = waiting.pop(0)
                body = _ENVIRONMENT.sub("", text[result.end() :]).strip()
                out.append(self._tool(name, params, body, body.startswith(_FAILED), call_id, ts))
                continue
            prompts += [m.group(2).strip() for m in _USER.finditer(_ENVIRONMENT.sub("", text)) if m.group(2).strip()]
        waiting.clear()  # calls never answered (the task was stopped): they did not run
        if prompts:
            payload = self._payload("UserPromptSubmit")
            payload["userPromptSubmit"] = {"prompt": bound("\n\n".join(prompts), STRING_MAX, 0)}
            payload["prompt_id"] = own
            self.counts.prompts += 1
            out.insert(0, Record(key=f"prompt:{self.session}:{own}", ts=ts, payload=payload))
        return out

    def _tool(self, name: str, params: dict[str, Any], result: str, failed: bool, call_id: str, ts: float) -> Record:
        p = self._payload("PostToolUse")
        p["postToolUse"] = {"toolName": name, "parameters": bound(params, STRING_MAX, 0),
                            "result": bound(result, STRING_MAX, 0), "success": not failed}  # fmt: skip
        if failed:
            self.counts.errors += 1
        else:
            self.counts.tools += 1
        return Record(key=f"tool:{self.session}:{call_id}", ts=ts, payload=p)

    # --- assistant ----------------------------------------------------------------------------------

    def _assistant(
        self, own: str, parts: list[dict[str, Any]], ts: float, calls: dict[str, tuple[str, dict[str, Any]]],
        waiting: list[tuple[str, dict[str, Any], str]],
    ) -> list[Record]:  # fmt: skip
        said: list[tuple[str, str]] = []  # (kind, text) in order
        completion: str | None = None
        native = False
        for p in parts:
            kind = p.get("type")
            if kind == "tool_use" and nonempty_str(p.get("id")) and nonempty_str(p.get("name")):
                native = True
                if p["name"] == "attempt_completion":
                    completion = nonempty_str(dict_or_empty(p.get("input")).get("result"))
                else:
                    calls[p["id"]] = (p["name"], dict_or_empty(p.get("input")))
            elif kind in ("thinking", "reasoning") and isinstance(text := p.get("thinking", p.get("text")), str):
                said.append(("thinking", text))
            elif kind == "text" and isinstance(text := p.get("text"), str):
                said += [("thinking", t) for t in _THINKING.findall(text)]
                rest = _THINKING.sub("", text)
                for n, m in enumerate(_XML_TOOL.finditer(rest)):
                    params = {k: v for k, v in _XML_PARAM.findall(m.group(2))}
                    if m.group(1) == "attempt_completion":
                        completion = params.get("result")
                    else:
                        waiting.append((m.group(1), params, f"{own}:{n}"))
                said.append(("text", _XML_TOOL.sub("", rest)))
        out = []
        tools = native or bool(waiting)
        for index, (kind, text) in enumerate(said):
            if text.strip() and (kind == "thinking" or tools or completion is not None):
                thinking = kind == "thinking"
                payload = self._payload("AssistantThinking" if thinking else "AssistantText")
                payload["hook_event_name"], payload["session_id"] = payload["hookName"], self.session
                payload["thinking" if thinking else "text"] = bound(text.strip(), STRING_MAX, 0)
                self.counts.said += 1
                out.append(Record(key=words_key(self.session, own, index), ts=ts, payload=payload))
        if completion and completion.strip():
            p = self._payload("PostToolUse")
            p["postToolUse"] = {"toolName": "attempt_completion", "parameters": {"result": bound(completion)},
                                "result": "", "success": True}  # fmt: skip
            self.counts.replies += 1
            out.append(Record(key=f"reply:{self.session}:{own}", ts=ts, payload=p))
        return out
