"""A scripted stand-in for the OpenAI Responses API, on 127.0.0.1, for the real Codex CLI.

Codex with `wire_api = "responses"` calls only `POST <base_url>/responses`, streamed as server-sent
events (`response.created`, one `response.output_item.done` per output item, `response.completed`).
This server answers each request from a script: a list of turns (lists of output items), picked
by counting the tool outputs already in the request's `input` (turn n answers after n outputs).
The script is chosen by a marker word (`E2E-<name>`) in the request's last user text; a request
without one gets a short text reply. Every request body is kept (`requests`).
"""

from __future__ import annotations

import json
from typing import Any

from scripted_api import Reply, ScriptedAPI, marker

Item = dict[str, Any]
OUTPUTS = ("function_call_output", "custom_tool_call_output", "tool_search_output")


def message(text: str) -> Item:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def shell(command: str) -> Item:
    """Codex's shell tool as offered to gpt-5.5 (`exec_command`, JSON arguments)."""
    return {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": command})}


def patch(text: str) -> Item:
    """Codex's `apply_patch`, a freeform (custom) tool for gpt-5.5: the patch is its input."""
    return {"type": "custom_tool_call", "name": "apply_patch", "input": text}


def tool_search(query: str) -> Item:
    """Codex 0.169 defers MCP tools: the model searches for them first (Codex runs the search itself)."""
    return {"type": "tool_search_call", "execution": "client", "status": "completed", "arguments": {"query": query}}


def mcp_call(namespace: str, name: str, **arguments: Any) -> Item:
    """A call of a tool `tool_search` exposed: its namespace (`mcp__<server>`) and name."""
    return {"type": "function_call", "namespace": namespace, "name": name, "arguments": json.dumps(arguments)}


def outputs(body: dict[str, Any]) -> list[Item]:
    return [i for i in body.get("input", []) if isinstance(i, dict) and i.get("type") in OUTPUTS]


def user_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for item in body.get("input", []):
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "user":
            content = item.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    texts.append(block["text"])
    return texts


def developer_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for item in body.get("input", []):
        if isinstance(item, dict) and item.get("role") == "developer":
            content = item.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    texts.append(block["text"])
    return texts


def tool_outputs(body: dict[str, Any]) -> int:
    return sum(1 for i in body.get("input", []) if isinstance(i, dict) and i.get("type") in OUTPUTS)


def script_name(body: dict[str, Any]) -> str | None:
    return marker(user_texts(body))


class FakeResponses(ScriptedAPI):
    """`with FakeResponses() as api:` serves on `api.url` (the `base_url`, ending in /v1)."""

    URL_PATH = "/v1"
    NOT_FOUND = b"{}"

    def post(self, path: str, raw: bytes) -> Reply:
        if not path.rstrip("/").endswith("/responses"):
            self.note(f"POST {path}")
            return 404, b'{"error": {"message": "not found"}}', "application/json"
        body = json.loads(raw)
        self.keep(body)
        return 200, b"".join(self.events(body)), "text/event-stream"

    def answer(self, body: dict[str, Any]) -> list[Item]:
        script = self.scripts.get(script_name(body) or "")
        if script is None:
            return [message("Done.")]
        step = tool_outputs(body)
        return [dict(i) for i in script[step]] if step < len(script) else [message("Done.")]

    def events(self, body: dict[str, Any]) -> list[bytes]:
        response = self.next_id("resp")
        out = [{"type": "response.created", "response": {"id": response}}]
        for item in self.answer(body):
            item.setdefault("id", self.next_id("item"))
            if item["type"] in ("function_call", "custom_tool_call", "tool_search_call"):
                item.setdefault("call_id", self.next_id("call"))
            out.append({"type": "response.output_item.done", "item": item})
        usage = {"input_tokens": 100, "input_tokens_details": None, "output_tokens": 20,
                 "output_tokens_details": None, "total_tokens": 120}  # fmt: skip
        out.append({"type": "response.completed", "response": {"id": response, "usage": usage}})
        return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in out]
