"""A scripted stand-in for the Gemini API (generativelanguage v1beta), on 127.0.0.1, for the real Gemini CLI.

With `GOOGLE_GEMINI_BASE_URL` pointing here and an API key, the Gemini CLI calls
`POST /v1beta/models/<model>:streamGenerateContent?alt=sse` for the agent's turns (server-sent
events, one `data: <GenerateContentResponse>` each), `:generateContent` for its own side questions
(the next speaker, a session summary, ...) and `:countTokens`. This server answers a streamed
request from a script: a list of turns (lists of parts), picked by counting the `functionResponse`
parts already in the request's `contents` (turn n answers after n responses). The script is chosen
by a marker word (`E2E-<name>`) in the last user text; a request without one gets a short text
reply. Every streamed request body is kept (`requests`), the others in `side`.
"""

from __future__ import annotations

import json
from typing import Any

from scripted_api import Reply, ScriptedAPI, marker

Part = dict[str, Any]


def text(value: str) -> Part:
    return {"text": value}


def call(name: str, **args: Any) -> Part:
    return {"functionCall": {"name": name, "args": args}}


def shell(command: str) -> Part:
    return call("run_shell_command", command=command, description="e2e")


def user_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for content in body.get("contents", []):
        if isinstance(content, dict) and content.get("role") == "user":
            for part in content.get("parts") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return texts


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for content in body.get("contents", []):
        for part in content.get("parts") or [] if isinstance(content, dict) else []:
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                out.append(part["functionResponse"])
    return out


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        for decl in tool.get("functionDeclarations") or [] if isinstance(tool, dict) else []:
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                names.append(decl["name"])
    return names


def script_name(body: dict[str, Any]) -> str | None:
    return marker(user_texts(body))


def _response(parts: list[Part], finish: str = "STOP") -> dict[str, Any]:
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
        "modelVersion": "gemini-e2e",
    }


class FakeGemini(ScriptedAPI):
    """`with FakeGemini() as api:` serves on `api.url` (the `GOOGLE_GEMINI_BASE_URL`); the side questions
    it was asked in `side`."""

    def __init__(self) -> None:
        super().__init__()
        self.side: list[tuple[str, dict[str, Any]]] = []

    def post(self, path: str, raw: bytes) -> Reply:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        route = path.split("?", 1)[0]
        if route.endswith(":streamGenerateContent"):
            self.keep(body)
            return 200, f"data: {json.dumps(_response(self.answer(body)))}\r\n\r\n".encode(), "text/event-stream"
        if route.endswith(":generateContent"):
            with self.lock:
                self.side.append((route, body))
            return 200, json.dumps(self.side_answer(body)).encode(), "application/json"
        if route.endswith(":countTokens"):
            return 200, b'{"totalTokens": 100}', "application/json"
        return self.not_found(path)

    def answer(self, body: dict[str, Any]) -> list[Part]:
        script = self.scripts.get(script_name(body) or "")
        if script is None:
            return [text("Done.")]
        step = len(function_responses(body))
        return [dict(p) for p in script[step]] if step < len(script) else [text("Done.")]

    @staticmethod
    def side_answer(body: dict[str, Any]) -> dict[str, Any]:
        """A side question (JSON mode: the next speaker, a complexity rating, ...) or a summary."""
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json" or config.get("responseJsonSchema"):
            reply = json.dumps({"next_speaker": "user", "reasoning": "the turn is done", "complexity_score": 1,
                                "complexity_reasoning": "simple", "model_choice": "flash"})  # fmt: skip
            return _response([text(reply)])
        return _response([text("A scripted session.")])
