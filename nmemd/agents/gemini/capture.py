"""Google Gemini CLI: what its hooks send and its session files hold, as nmem reads them.

The Gemini CLI's hooks read into observations: its events renamed to Claude Code's (`normalized`), its tools
(shell, write_file, replace, reads, searches, MCP) read here, the rest as Claude Code's. Its hooks, payloads,
replies, config and history, as verified: README.md beside this file.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Final

from nmemd.agents.gemini import SPEC
from nmemd.capture.fields import (
    CMD_MAX,
    PATH_MAX,
    clean_head_tail,
    clean_line,
    clean_text,
    dict_or_empty,
    join_lines,
    json_summary,
    observation,
    one_line,
    relative_path,
    short_line,
    str_or_none,
)
from nmemd.capture.tools import ToolCall, tool_observation
from nmemd.model import Extracted, Observation

AGENT: Final = SPEC.name
# Gemini's events under the names nmem (and Claude Code) gives the same moments: stored, keyed and
# answered (SessionStart's context, a prompt's recall, a turn's summary) as Claude Code's are.
EVENTS: Final = {
    "BeforeAgent": "UserPromptSubmit", "AfterTool": "PostToolUse", "AfterAgent": "Stop", "PreCompress": "PreCompact",
}  # fmt: skip
SHELL: Final = "run_shell_command"
_HOOK_CONTEXT: Final = re.compile(r"\A\s*<hook_context>.*?</hook_context>\s*", re.DOTALL)
_UNTRUSTED: Final = re.compile(r"\A\s*<untrusted_context>\n?(.*?)\n?</untrusted_context>\s*\Z", re.DOTALL)
_EXIT: Final = re.compile(r"^Exit Code: (-?\d+)\s*$", re.MULTILINE)
_SHELL_TAIL: Final = re.compile(r"^(?:Exit Code|Signal|Background PIDs|Process Group PGID): .*$", re.MULTILINE)


def prompt_text(raw: object) -> str:
    """The user's prompt without the SessionStart context Gemini put before it (`<hook_context>`)."""
    return _HOOK_CONTEXT.sub("", raw, count=1) if isinstance(raw, str) else ""


def _digest(*parts: str) -> str:
    data = "\x00".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def prompt_id(text: str) -> str:
    """A prompt's name in its session: a hash of its text, whitespace collapsed (live and imported alike)."""
    return "g" + _digest(" ".join(text.split()))


def output_text(value: object) -> str:
    """A tool's output as the key hashes it: the live hook's `llmContent` as the session file keeps it (its
    `output`): a string as it is; parts (an MCP tool's) as their texts joined by newlines, the CLI's
    `convertToFunctionResponse` does."""
    if isinstance(value, str):
        return value
    parts = value if isinstance(value, list) else [value] if isinstance(value, dict) else []
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    if texts or parts:
        return "\n".join(texts)
    return "" if value is None else json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def tool_call_id(name: str, args: object, output: object) -> str:
    """A tool call's name in its session, the same from the AfterTool hook and from the session file."""
    canonical = json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "g" + _digest(name, canonical, output_text(output))


def normalized(p: dict[str, Any]) -> dict[str, Any]:
    """A Gemini hook payload as nmem reads hook payloads: the event under nmem's name, the prompt without
    the injected context, the final text as `last_assistant_message`, a tool call's id."""
    event = p.get("hook_event_name")
    out = dict(p)
    if isinstance(event, str) and event in EVENTS:
        out["hook_event_name"] = EVENTS[event]
    if event == "BeforeAgent":
        out["prompt"] = prompt_text(p.get("prompt"))
    elif event == "AfterAgent":
        out["last_assistant_message"] = p.get("prompt_response")
        out.pop("prompt", None)
        out.pop("prompt_response", None)
    elif event == "AfterTool" and not isinstance(p.get("tool_use_id"), str):
        name = str_or_none(p.get("tool_name")) or "unknown"
        out["tool_use_id"] = tool_call_id(
            name, p.get("tool_input"), dict_or_empty(p.get("tool_response")).get("llmContent")
        )
    return out


def shell_output(llm: object) -> tuple[str, int | None]:
    """A shell command's output and exit code from its `llmContent` (None: it exited 0 or said nothing)."""
    text = llm if isinstance(llm, str) else ""
    if m := _UNTRUSTED.match(text):
        text = m.group(1)
    code = int(m.group(1)) if (m := _EXIT.search(text)) else None
    body = _SHELL_TAIL.sub("", text).strip("\n")
    body = body.removeprefix("Output: ").replace("\nOutput: ", "\n", 1)
    return ("" if body == "(empty)" else body), code


def _shell(inp: dict[str, Any], resp: dict[str, Any], root: str | None) -> list[Observation]:
    cmd = clean_text(inp.get("command"), CMD_MAX)
    output, code = shell_output(resp.get("llmContent"))
    if code in (None, 0) and not resp.get("error"):
        obs = tool_observation(ToolCall("Bash", {"command": inp.get("command"), "description": inp.get("description")},
                              output, root))  # fmt: skip
        obs.tool_name = SHELL
        return [obs]
    first = " ".join(cmd.split())[:150]
    why = (
        f"exit {code}"
        if code is not None
        else short_line(clean_text(dict_or_empty(resp.get("error")).get("message"), 300), 80)
    )
    content = join_lines(f"command: {cmd}", clean_head_tail(output))
    return [observation("error", f"Shell failed ({why}): {first}", content, limit=len(content), tool_name=SHELL,
                 command=cmd or None)]  # fmt: skip


def _path(inp: dict[str, Any], cwd: str | None) -> str:
    raw = clean_line(inp.get("file_path") or inp.get("absolute_path") or inp.get("path"), PATH_MAX)
    if raw and not raw.startswith("/") and cwd:
        return f"{cwd.rstrip('/')}/{raw}"
    return raw


def _file(name: str, inp: dict[str, Any], resp: dict[str, Any], root: str | None, cwd: str | None) -> Observation:
    path = _path(inp, cwd)
    rel = relative_path(path, root) if path else "(no path)"
    display = dict_or_empty(resp.get("returnDisplay"))
    diff = clean_text(display.get("fileDiff"), 1200, 20)
    stat = dict_or_empty(display.get("diffStat"))
    added, removed = stat.get("model_added_lines"), stat.get("model_removed_lines")
    counts = f"-{removed} +{added} lines" if isinstance(added, int) and isinstance(removed, int) else ""
    if name == "write_file":
        body = str_or_none(inp.get("content")) or ""
        lines = body.count("\n") + (0 if body.endswith("\n") or not body else 1)
        detail = ("created" if display.get("isNewFile") is True else "written") + f", {lines} lines"
        return observation("write", f"Write {rel} ({detail})", join_lines(detail, diff or clean_text(body, 1200, 20)),
                    file_path=path or None, tool_name=name)  # fmt: skip
    if name == "replace":
        detail = counts or "edited"
        if inp.get("allow_multiple") is True:
            detail += ", every occurrence"
        body = diff or join_lines("--- old", clean_text(inp.get("old_string"), 600, 12), "+++ new",
                             clean_text(inp.get("new_string"), 600, 12))  # fmt: skip
        return observation(
            "edit", f"Edit {rel} ({detail})", join_lines(detail, body), file_path=path or None, tool_name=name
        )
    start, end = inp.get("start_line"), inp.get("end_line")
    span = f"lines {start}-{end or ''}" if isinstance(start, int) else ""
    return observation("read", f"Read {rel}" + (f" ({span})" if span else ""), span, file_path=path or None,
                tool_name=name, dedup_key=f"read:{path}:{span}")  # fmt: skip


def _search(name: str, inp: dict[str, Any], resp: dict[str, Any], root: str | None) -> Observation:
    pattern = clean_line(inp.get("pattern"), 300)
    where = clean_line(inp.get("dir_path") or inp.get("path"), PATH_MAX)
    include = clean_line(inp.get("include_pattern") or inp.get("include"), 200)
    label = "Glob" if name == "glob" else "Grep"
    inside = relative_path(where, root) if where and where != root else ""
    title = f"{label} '{pattern}'" + (f" in {inside}" if inside else "") + (f" ({include})" if include else "")
    display = resp.get("returnDisplay")
    result = clean_text(resp.get("llmContent"), 1500, 20) if isinstance(resp.get("llmContent"), str) else ""
    content = join_lines(clean_text(display, 300) if isinstance(display, str) else "", result)
    return observation(
        "search", title, content, tool_name=name, dedup_key=f"{label.lower()}:{pattern}:{where}:{include}"
    )


def _mcp(p: dict[str, Any], inp: dict[str, Any], resp: dict[str, Any]) -> list[Observation] | None:
    ctx = dict_or_empty(p.get("mcp_context"))
    server, tool = clean_line(ctx.get("server_name"), 80), clean_line(ctx.get("tool_name"), 80)
    if not server or not tool:
        return None
    name = f"mcp__{server}__{tool}"
    llm = resp.get("llmContent")
    result = clean_text(llm, 1500, 20) if isinstance(llm, str) else json_summary(llm, 1500)
    args = json_summary(inp, 1200) if inp else ""
    title = f"MCP {server}/{tool}" + (f": {one_line(args, 120)}" if args else "")
    return [
        observation(
            "mcp",
            title,
            join_lines("args: " + args if args else "", "result:\n" + result if result else ""),
            tool_name=name,
        )
    ]


def _failed(
    name: str, inp: dict[str, Any], resp: dict[str, Any], root: str | None, cwd: str | None
) -> list[Observation]:
    error = dict_or_empty(resp.get("error"))
    message = clean_head_tail(error.get("message") or resp.get("llmContent"))
    path = _path(inp, cwd)
    subject = (
        short_line(clean_text(inp.get("command"), 300), 120)
        if inp.get("command")
        else relative_path(path, root)
        if path
        else ""
    )
    title = (
        f"{clean_line(name, 100)} failed: {short_line(message, 100) or clean_line(error.get('type'), 80) or 'error'}"
    )
    title += f" — {subject}" if subject else ""
    content = join_lines(f"file: {path}" if path else "", message)
    return [
        observation(
            "error", title, content, limit=len(content), tool_name=clean_line(name, 100), file_path=path or None
        )
    ]


def tool_observations(p: dict[str, Any], root: str | None, cwd: str | None) -> list[Observation]:
    """What nmem keeps of one finished Gemini tool call (an AfterTool payload)."""
    name = str_or_none(p.get("tool_name")) or "unknown"
    inp, resp = dict_or_empty(p.get("tool_input")), dict_or_empty(p.get("tool_response"))
    if name == SHELL:
        return _shell(inp, resp, root)
    if resp.get("error"):
        return _failed(name, inp, resp, root, cwd)
    if name in ("write_file", "replace", "read_file"):
        return [_file(name, inp, resp, root, cwd)]
    if name in ("grep_search", "search_file_content", "glob"):
        return [_search(name, inp, resp, root)]
    if p.get("mcp_context") and (own := _mcp(p, inp, resp)) is not None:
        return own
    llm = resp.get("llmContent")
    response = llm if isinstance(llm, str) and llm else resp.get("returnDisplay")
    if name == "google_web_search":
        return [tool_observation(ToolCall("WebSearch", {"query": inp.get("query")}, response, root))]
    obs = tool_observation(ToolCall(name, inp, response, root))
    return [obs]


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """What nmem keeps of a (normalized) Gemini event, where it differs from Claude Code's; None: as Claude
    Code's."""
    event = ex.hook_event
    if event == "UserPromptSubmit" and ex.session_id != "unknown":
        # The import names it (nmemd.agents.gemini.history: of the whole prompt, before it is cut to send it).
        ex.prompt_id = ex.prompt_id or prompt_id(prompt_text(p.get("prompt")))
        return None
    if event == "PreCompact":
        # 0.61 fires PreCompress before every request, trigger "auto", whether or not it compresses.
        return None if p.get("trigger") == "manual" else []
    if event == "PostToolUse":
        return tool_observations(p, root, ex.cwd)
    return None
