"""A scripted stand-in for the OpenAI Responses API, on 127.0.0.1, for the real GitHub Copilot CLI.

Copilot in its "bring your own key" mode (`COPILOT_PROVIDER_WIRE_API=responses`) calls only `POST
<base>/responses`, streamed, as Codex does (codex_api.FakeResponses, whose scripts, markers and kept
requests this reuses), but it reads a turn only from `response.output_item.added` per item and a
`response.completed` carrying the whole `output`: without them it says "No response was returned".
Its tools: `bash` (`{"command", "description"}`), `apply_patch` (freeform: the patch text is the
call's input), `view` (`{"path"}`), ...; an MCP server's tools are offered as `<server>-<tool>`.
"""

from __future__ import annotations

import json
from typing import Any

from codex_api import FakeResponses, Item, message, patch, user_texts
from scripted_api import MARKER

__all__ = ["FakeCopilotAPI", "call", "message", "output_texts", "patch", "shell", "tool_names", "user_texts"]


def call(name: str, **arguments: Any) -> Item:
    return {"type": "function_call", "name": name, "arguments": json.dumps(arguments)}


def shell(command: str) -> Item:
    """Copilot's `bash` tool (its `description` is required)."""
    return call("bash", command=command, description="run it")


def tool_names(body: dict[str, Any]) -> list[str]:
    return [str(t.get("name")) for t in body.get("tools", []) if isinstance(t, dict)]


def output_texts(body: dict[str, Any]) -> list[str]:
    """The text of every tool result in a request, in order."""
    outs = []
    for item in body.get("input", []):
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            out = item.get("output")
            outs.append(out if isinstance(out, str) else json.dumps(out))
    return outs


def prompt_marker(body: dict[str, Any]) -> str | None:
    """The marker of the turn's prompt: Copilot sends it as the last user text, `<current_datetime>` first
    and a UserPromptSubmit hook's context after it in `<system_reminder>` (which may quote older prompts)."""
    for text in reversed(user_texts(body)):
        found = MARKER.findall(text.split("<system_reminder>")[0])
        if found:
            return str(found[-1])
    return None


class FakeCopilotAPI(FakeResponses):
    """`with FakeCopilotAPI() as api:` serves on `api.url` (COPILOT_PROVIDER_BASE_URL, ending in /v1)."""

    def answer(self, body: dict[str, Any]) -> list[Item]:
        script = self.scripts.get(prompt_marker(body) or "")
        step = sum(1 for i in body.get("input", []) if isinstance(i, dict) and str(i.get("type")).endswith("_output"))
        if script is None or step >= len(script):
            return [message("Done.")]
        return [dict(i) for i in script[step]]

    def events(self, body: dict[str, Any]) -> list[bytes]:
        response = self.next_id("resp")
        out: list[dict[str, Any]] = [
            {"type": "response.created", "response": {"id": response, "status": "in_progress", "output": []}}
        ]
        items = []
        for index, item in enumerate(self.answer(body)):
            item.setdefault("id", self.next_id("item"))
            if item["type"] in ("function_call", "custom_tool_call"):
                item.setdefault("call_id", self.next_id("call"))
            item.setdefault("status", "completed")
            out.append({"type": "response.output_item.added", "output_index": index, "item": item})
            if item["type"] == "message":
                text = item["content"][0]["text"]
                where = {"output_index": index, "item_id": item["id"], "content_index": 0}
                out.append({"type": "response.output_text.delta", **where, "delta": text})
                out.append({"type": "response.output_text.done", **where, "text": text})
            out.append({"type": "response.output_item.done", "output_index": index, "item": item})
            items.append(item)
        usage = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
        done = {"id": response, "status": "completed", "output": items, "usage": usage}
        out.append({"type": "response.completed", "response": done})
        return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in out]
