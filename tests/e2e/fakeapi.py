"""A scripted stand-in for the Anthropic Messages API, on 127.0.0.1, for the real Claude Code.

Claude Code (with nonessential traffic off) calls only `POST /v1/messages`, streaming. This
server answers each request from a script: a list of assistant turns, picked by counting the
`tool_result` blocks already in the request's messages (turn n answers after n results). The
script is chosen by a marker word (`E2E-<name>`) in the conversation's first user text; a
request without a marker (a /compact summary, a subagent, a title) gets a short text reply.

Every request body is kept (`requests`) so a test can check what the model was sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from scripted_api import MARKER, Reply, ScriptedAPI

Block = dict[str, Any]
Turn = list[Block]
MODEL = "claude-sonnet-4-5-20250929"
DEFAULT_REPLY = (
    "<analysis>A scripted session.</analysis>\n<summary>1. Primary request: the scripted end-to-end"
    " session ran Bash, Write, Read, Edit and Grep on notes.txt. Nothing is pending.</summary>"
)


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tool(name: str, **tool_input: Any) -> Block:
    return {"type": "tool_use", "name": name, "input": tool_input}


def user_texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
    return []


def tool_results(body: dict[str, Any]) -> int:
    return sum(
        1
        for m in body.get("messages", [])
        if m.get("role") == "user" and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    )


def all_text(body: dict[str, Any]) -> str:
    """Every text the request carries (system, messages, tool results), for `in` checks."""
    return json.dumps(body, ensure_ascii=False)


def first_user_text(body: dict[str, Any]) -> str:
    for m in body.get("messages", []):
        if m.get("role") == "user":
            return "\n".join(user_texts(m))
    return ""


def script_name(body: dict[str, Any]) -> str | None:
    """The marker of the turn's prompt: the last user message with text of its own (not only
    tool results and system reminders). A prompt without a marker (a /compact summary) has none."""
    for m in reversed(body.get("messages", [])):
        if m.get("role") != "user":
            continue
        own = [t for t in user_texts(m) if t.strip() and not t.lstrip().startswith("<system-reminder>")]
        if own:
            found = MARKER.findall("\n".join(own))
            return str(found[-1]) if found else None
    return None


class FakeAPI(ScriptedAPI):
    """`with FakeAPI() as api:` serves on `api.url`; `api.scripts[name] = [turn, ...]`."""

    NOT_FOUND = b"{}"
    ID_DIGITS = 6

    def post(self, path: str, raw: bytes) -> Reply:
        if not path.startswith("/v1/messages") or "count_tokens" in path:
            self.note(f"POST {path}")
            return 404, b'{"type":"error","error":{"type":"not_found_error","message":"nope"}}', "application/json"
        body = json.loads(raw)
        self.keep(body)
        blocks = self.answer(body)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        if body.get("stream"):
            return 200, self.sse(self._events(body, blocks, stop)), "text/event-stream"
        return 200, json.dumps(self._message(body, blocks, stop)).encode(), "application/json"

    def answer(self, body: dict[str, Any]) -> list[Block]:
        name = script_name(body)
        script = self.scripts.get(name or "")
        if script is None:
            return [text(DEFAULT_REPLY)]
        step = tool_results(body)
        turn = script[step] if step < len(script) else [text("done")]
        return [dict(b) for b in turn]

    def _message(self, body: dict[str, Any], blocks: list[Block], stop: str) -> dict[str, Any]:
        content = []
        for b in blocks:
            if b["type"] == "tool_use":
                b = {**b, "id": self.next_id("toolu")}
            content.append(b)
        return {
            "id": self.next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model") or MODEL,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }

    def _events(self, body: dict[str, Any], blocks: list[Block], stop: str) -> list[dict[str, Any]]:
        message = self._message(body, [], stop)
        message["stop_reason"] = None
        message["usage"] = {"input_tokens": 100, "output_tokens": 1}
        events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
        for index, b in enumerate(blocks):
            if b["type"] == "tool_use":
                start = {"type": "tool_use", "id": self.next_id("toolu"), "name": b["name"], "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
            else:
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": b["text"]}
            events += [
                {"type": "content_block_start", "index": index, "content_block": start},
                {"type": "content_block_delta", "index": index, "delta": delta},
                {"type": "content_block_stop", "index": index},
            ]
        events += [
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
            {"type": "message_stop"},
        ]
        return events

    def bodies(self, where: Callable[[dict[str, Any]], bool] = lambda b: True) -> list[dict[str, Any]]:
        with self.lock:
            return [b for b in self.requests if where(b)]
