"""A tool call under Claude Code's tool names (Read, Edit, Bash, Grep, an MCP tool, ...) as one observation.

Claude Code's PostToolUse payloads are read here, and every other agent maps its own tools onto these
names so that one formatter says "Edit src/app.py (-3 +5 lines)" whoever made the edit. Every string is
read through `capture.fields` (bounded, private blocks stripped, redacted).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from nmemd.capture.fields import (
    CMD_MAX,
    ID_MAX,
    MCP_HEAD,
    MCP_TAIL,
    OUTPUT_HEAD,
    OUTPUT_TAIL,
    PATH_MAX,
    STDERR_HEAD,
    STDERR_TAIL,
    clean_head_tail,
    clean_line,
    clean_text,
    dict_or_empty,
    int_or_none,
    join_lines,
    json_summary,
    list_or_empty,
    observation,
    one_line,
    relative_path,
    short_line,
    str_or_none,
)
from nmemd.model import (
    TITLE_MAX,
    Observation,
)

_TODO_MARK: Final = {"completed": "[x]", "in_progress": "[~]", "pending": "[ ]"}


def _count_lines(text: str) -> int:
    return text.count("\n") + (0 if not text or text.endswith("\n") else 1)


def _patch_stats(patch: object) -> tuple[int, int] | None:
    """(removed, added) line counts from a structuredPatch, None if it has no hunks."""
    hunks = [h for h in list_or_empty(patch)[:500] if isinstance(h, dict)]
    if not hunks:
        return None
    minus = plus = 0
    for h in hunks:
        for line in list_or_empty(h.get("lines"))[:20000]:
            if isinstance(line, str) and line:
                minus += line[0] == "-"
                plus += line[0] == "+"
    return minus, plus


# --- tools (PostToolUse) -----------------------------------------------------------------


class ToolCall:
    """One tool call: name, input, response and the project root for relative paths."""

    __slots__ = ("name", "inp", "resp", "root")

    def __init__(self, name: str, inp: dict[str, Any], resp: object, root: str | None) -> None:
        self.name, self.inp, self.resp, self.root = name, inp, resp, root

    def path(self) -> str:
        raw = self.inp.get("file_path") or self.inp.get("notebook_path") or self.inp.get("path")
        resp = dict_or_empty(self.resp)
        raw = raw or resp.get("filePath") or dict_or_empty(resp.get("file")).get("filePath")
        return clean_line(raw, PATH_MAX)


def _read(t: ToolCall) -> Observation:
    path = t.path()
    resp = dict_or_empty(t.resp)
    f = dict_or_empty(resp.get("file"))
    kind = str_or_none(resp.get("type")) or "text"
    offset, limit = int_or_none(t.inp.get("offset")), int_or_none(t.inp.get("limit"))
    num, start, total = (
        int_or_none(f.get("numLines")),
        int_or_none(f.get("startLine")),
        int_or_none(f.get("totalLines")),
    )
    content = f.get("content")
    if num and isinstance(content, str) and content.endswith("\n") and content.count("\n") + 1 == num:
        # Claude Code counts the empty "line" after a file's final newline: a 3-line file reads as 4.
        total = total - 1 if total == num else total
        num -= 1
    if kind == "text" and num is not None:
        first = start or 1
        whole = first == 1 and total in (None, num)
        detail = f"{num} lines" if whole else f"lines {first}-{first + num - 1}" + (f" of {total}" if total else "")
    elif kind == "text":
        detail = f"from line {offset or 1}" + (f", limit {limit}" if limit else "") if offset or limit else ""
    elif kind == "notebook":
        detail = f"notebook, {len(list_or_empty(f.get('cells')))} cells"
    else:
        detail = "unchanged" if kind == "file_unchanged" else clean_line(kind, 40)
    extra = "truncated by token cap" if f.get("truncatedByTokenCap") else ""
    return observation(
        "read",
        f"Read {relative_path(path, t.root)}" + (f" ({detail})" if detail else ""),
        join_lines(detail, extra),
        file_path=path,
        dedup_key=f"read:{path}:{'' if offset is None else offset}:{'' if limit is None else limit}",
    )


def _write(t: ToolCall) -> Observation:
    path = t.path()
    resp = dict_or_empty(t.resp)
    kind = str_or_none(resp.get("type"))
    body = str_or_none(t.inp.get("content")) or str_or_none(resp.get("content")) or ""
    state = {"create": "created", "update": "updated"}.get(kind or "", "written")
    detail = f"{state}, {_count_lines(body)} lines"
    stats = _patch_stats(resp.get("structuredPatch"))
    if kind == "update" and stats:
        detail += f", -{stats[0]} +{stats[1]}"
    return observation(
        "write",
        f"Write {relative_path(path, t.root)} ({detail})",
        join_lines(detail, clean_text(body, 1200, 15)),
        file_path=path,
    )


def _edit(t: ToolCall) -> Observation:
    path = t.path()
    resp = dict_or_empty(t.resp)
    if t.name == "NotebookEdit":
        mode = str_or_none(t.inp.get("edit_mode")) or str_or_none(resp.get("edit_mode")) or "replace"
        cell = str_or_none(t.inp.get("cell_id")) or str_or_none(resp.get("cell_id")) or "?"
        new = str_or_none(t.inp.get("new_source")) or ""
        head = f"cell {clean_line(cell, 60)}, {clean_line(mode, 20)}"
        content = join_lines(head, "+++ new", clean_text(new, 700, 12))
        return observation("edit", f"Edit {relative_path(path, t.root)} ({head})", content, file_path=path)
    if t.name == "MultiEdit":
        edits = [e for e in list_or_empty(t.inp.get("edits"))[:1000] if isinstance(e, dict)]
    else:
        edits = [
            {
                "old_string": t.inp.get("old_string", resp.get("oldString")),
                "new_string": t.inp.get("new_string", resp.get("newString")),
            }
        ]
    stats = _patch_stats(resp.get("structuredPatch"))
    if stats is None:
        olds = [_count_lines(str_or_none(e.get("old_string")) or "") for e in edits]
        news = [_count_lines(str_or_none(e.get("new_string")) or "") for e in edits]
        stats = (sum(olds), sum(news))
    diff = f"-{stats[0]} +{stats[1]} lines"
    head = f"{len(edits)} edits, {diff}" if t.name == "MultiEdit" else diff
    if t.inp.get("replace_all") or resp.get("replaceAll"):
        head += ", replace all"
    excerpts = [
        join_lines(
            "--- old", clean_text(e.get("old_string"), 600, 12), "+++ new", clean_text(e.get("new_string"), 600, 12)
        )
        for e in edits[:3]
    ]
    return observation(
        "edit", f"Edit {relative_path(path, t.root)} ({head})", join_lines(head, *excerpts), file_path=path
    )


def _bash(t: ToolCall) -> Observation:
    cmd = clean_text(t.inp.get("command"), CMD_MAX)
    resp = t.resp
    r = dict_or_empty(resp)
    stdout = str_or_none(r.get("stdout")) if r else str_or_none(resp)
    flags = [
        "interrupted" if r.get("interrupted") is True else "",
        "background" if r.get("backgroundTaskId") or t.inp.get("run_in_background") is True else "",
    ]
    status = clean_line(r.get("returnCodeInterpretation"), 200)
    content = join_lines(
        clean_text(t.inp.get("description"), 300),
        ", ".join(f for f in [*flags, status] if f),
        "stderr:\n" + err if (err := clean_head_tail(r.get("stderr"), STDERR_HEAD, STDERR_TAIL)) else "",
        "stdout:\n" + out if (out := clean_head_tail(stdout, OUTPUT_HEAD, OUTPUT_TAIL)) else "",
    )
    suffix = "".join(f" ({f})" for f in flags if f)
    return observation(
        "command", f"$ {short_line(cmd, TITLE_MAX)}{suffix}", content, command=cmd, dedup_key=f"cmd:{cmd}"
    )


def _grep(t: ToolCall) -> Observation:
    pattern = clean_line(t.inp.get("pattern"), 300)
    path = clean_line(t.inp.get("path"), PATH_MAX)
    glob = clean_line(t.inp.get("glob") or t.inp.get("type"), 200)
    resp = dict_or_empty(t.resp)
    mode = str_or_none(t.inp.get("output_mode")) or str_or_none(resp.get("mode")) or "files_with_matches"
    mode = clean_line(mode, 40)
    if mode == "content":
        hits = f"{int_or_none(resp.get('numLines')) or 0} lines"
    elif mode == "count":
        hits = f"{int_or_none(resp.get('numMatches')) or int_or_none(resp.get('numLines')) or 0} matches"
    else:
        hits = f"{int_or_none(resp.get('numFiles')) or 0} files"
    where = (f" in {relative_path(path, t.root)}" if path else "") + (f" [{glob}]" if glob else "")
    files = [relative_path(clean_line(f, 500), t.root) for f in list_or_empty(resp.get("filenames"))[:20]]
    content = join_lines(f"{mode}: {hits}", "\n".join(f for f in files if f), clean_text(resp.get("content"), 1000, 12))
    return observation(
        "search",
        f"Grep '{one_line(pattern, 100)}'{where} ({hits})",
        content,
        dedup_key=f"grep:{pattern}:{path}:{glob}:{mode}",
    )


def _glob(t: ToolCall) -> Observation:
    pattern = clean_line(t.inp.get("pattern"), 300)
    path = clean_line(t.inp.get("path"), PATH_MAX)
    resp = dict_or_empty(t.resp)
    names = list_or_empty(resp.get("filenames"))
    count = int_or_none(resp.get("numFiles"))
    hits = f"{len(names) if count is None else count} files" + (", truncated" if resp.get("truncated") else "")
    files = [relative_path(clean_line(f, 500), t.root) for f in names[:20]]
    where = f" in {relative_path(path, t.root)}" if path else ""
    return observation(
        "search",
        f"Glob '{one_line(pattern, 100)}'{where} ({hits})",
        join_lines(hits, "\n".join(f for f in files if f)),
        dedup_key=f"glob:{pattern}:{path}",
    )


def _web_search(t: ToolCall) -> Observation:
    query = clean_line(t.inp.get("query") or dict_or_empty(t.resp).get("query"), 300)
    links = [
        c
        for r in list_or_empty(dict_or_empty(t.resp).get("results"))[:50]
        for c in list_or_empty(dict_or_empty(r).get("content"))[:50]
        if isinstance(c, dict)
    ]
    lines = [clean_line(f"{c.get('title', '')} — {c.get('url', '')}", 300) for c in links[:10]]
    return observation(
        "search",
        f"Web search '{query}' ({len(links)} results)",
        "\n".join(lines),
        dedup_key=f"websearch:{query}",
    )


def _web_fetch(t: ToolCall) -> Observation:
    resp = dict_or_empty(t.resp)
    url = clean_line(t.inp.get("url") or resp.get("url"), 2000)
    code, size = int_or_none(resp.get("code")), int_or_none(resp.get("bytes"))
    text = clean_line(resp.get("codeText"), 40)
    parts = [f"{code} {text}".strip() if code is not None else "", f"{size} bytes" if size is not None else ""]
    detail = ", ".join(p for p in parts if p)
    content = join_lines(detail, clean_text(t.inp.get("prompt"), 500), clean_text(resp.get("result"), 1500, 30))
    title = f"Fetch {url}" + (f" ({detail})" if detail else "")
    return observation("fetch", title, content, dedup_key=f"fetch:{url}")


def _agent(t: ToolCall) -> Observation:
    resp = dict_or_empty(t.resp)
    kind = clean_line(t.inp.get("subagent_type"), 100)
    desc = clean_line(t.inp.get("description") or resp.get("description"), 300)
    status = clean_line(resp.get("status"), 40)
    agent = clean_line(resp.get("agentId"), ID_MAX)
    texts = [str_or_none(b.get("text")) or "" for b in list_or_empty(resp.get("content"))[:20] if isinstance(b, dict)]
    uses, tokens, ms = (int_or_none(resp.get(k)) for k in ("totalToolUseCount", "totalTokens", "totalDurationMs"))
    stats = [
        f"{uses} tool uses" if uses else "",
        f"{tokens} tokens" if tokens else "",
        f"{ms / 1000:.1f} s" if ms else "",
    ]
    content = join_lines(
        ", ".join(x for x in (f"agent {agent}" if agent else "", status, *stats) if x),
        clean_text(t.inp.get("prompt"), 600, 10),
        "result:\n" + res if (res := clean_text("\n".join(texts), 1500)) else "",
    )
    title = "Agent" + (f" {kind}" if kind else "") + (f": {desc}" if desc else "") + (f" ({status})" if status else "")
    return observation("agent", title, content)


def _todos(t: ToolCall) -> Observation:
    items = [
        x
        for x in (list_or_empty(t.inp.get("todos")) or list_or_empty(dict_or_empty(t.resp).get("newTodos")))[:10000]
        if isinstance(x, dict)
    ]
    counts: dict[str, int] = {}
    lines: list[str] = []
    current = ""
    for x in items:
        status = str_or_none(x.get("status")) or "?"
        counts[status] = counts.get(status, 0) + 1
        text = clean_line(x.get("content"), 300)
        if status == "in_progress" and not current:
            current = text
        if len(lines) < 50:
            extra = ", ".join(str(x[k])[:20] for k in ("priority", "id") if isinstance(x.get(k), str | int))
            mark = _TODO_MARK.get(status, f"[{clean_line(status, 20)}]")
            lines.append(f"{mark} {text}" + (f" ({extra})" if extra else ""))
    summary = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items())
    title = f"Todos {counts.get('completed', 0)}/{len(items)} done" + (f"; now: {current}" if current else "")
    return observation("task", title, join_lines(clean_line(summary, 300), "\n".join(lines)))


def _task_tool(t: ToolCall) -> Observation:
    resp = dict_or_empty(t.resp)
    task = dict_or_empty(resp.get("task"))
    tid = clean_line(str(t.inp.get("taskId") or task.get("id") or resp.get("taskId") or ""), 60)
    subject = clean_line(t.inp.get("subject") or task.get("subject"), 200)
    status = clean_line(t.inp.get("status"), 40)
    if t.name == "TaskCreate":
        title = f"Task created: {subject}" + (f" (#{tid})" if tid else "")
    elif t.name == "TaskUpdate":
        title = f"Task #{tid} updated" + (f": {status}" if status else "") + (f" ({subject})" if subject else "")
    elif t.name == "TaskList":
        tasks = list_or_empty(resp.get("tasks"))
        title = "Task list" + (f" ({len(tasks)} tasks)" if tasks else "")
    else:
        title = f"Task #{tid}" + (f": {subject}" if subject else "")
    content = join_lines(clean_text(t.inp.get("description"), 1000), json_summary(t.resp, 1500) if t.resp else "")
    return observation("task", title, content)


def _mcp_result(resp: object) -> str:
    if isinstance(resp, dict) and isinstance(resp.get("content"), list):
        resp = resp["content"]
    if isinstance(resp, list):
        parts = []
        for b in resp[:20]:
            bd = dict_or_empty(b)
            text = str_or_none(bd.get("text")) if bd else str_or_none(b)
            parts.append(text if text is not None else f"[{str_or_none(bd.get('type')) or type(b).__name__}]")
        return clean_head_tail("\n".join(p[:3000] if len(parts) > 1 else p for p in parts), MCP_HEAD, MCP_TAIL)
    if isinstance(resp, str):
        return clean_head_tail(resp, MCP_HEAD, MCP_TAIL)
    return json_summary(resp, 2000) if resp is not None else ""


def _mcp(t: ToolCall) -> Observation:
    server, _, tool = t.name[5:].partition("__")
    server, tool = clean_line(server, 80), clean_line(tool, 80)
    args = json_summary(t.inp, 1200) if t.inp else ""
    result = _mcp_result(t.resp)
    title = f"MCP {server}/{tool}" + (f": {one_line(args, 120)}" if args else "")
    return observation(
        "mcp", title, join_lines("args: " + args if args else "", "result:\n" + result if result else "")
    )


def _tool_search(t: ToolCall) -> Observation:
    query = clean_line(t.inp.get("query"), 300)
    return observation("search", f"Tool search '{query}'", json_summary(t.resp, 1000), dedup_key=f"toolsearch:{query}")


def _generic_tool(t: ToolCall) -> Observation:
    inp = json_summary(t.inp, 1500) if t.inp else ""
    resp = json_summary(t.resp, 2000) if t.resp not in (None, "", {}, []) else ""
    name = clean_line(t.name, 100)
    title = f"Tool {name}" + (f": {one_line(inp, 150)}" if inp else "")
    return observation(
        "tool", title, join_lines("input: " + inp if inp else "", "response: " + resp if resp else ""), tool_name=name
    )


_TOOLS: Final[dict[str, Callable[[ToolCall], Observation]]] = {
    "Read": _read, "NotebookRead": _read, "Write": _write, "Edit": _edit, "MultiEdit": _edit,
    "NotebookEdit": _edit, "Bash": _bash, "Grep": _grep, "Glob": _glob, "WebSearch": _web_search,
    "WebFetch": _web_fetch, "Task": _agent, "Agent": _agent, "TodoWrite": _todos, "TaskCreate": _task_tool,
    "TaskUpdate": _task_tool, "TaskList": _task_tool, "TaskGet": _task_tool, "ToolSearch": _tool_search,
}  # fmt: skip


def tool_observation(t: ToolCall) -> Observation:
    fn = _TOOLS.get(t.name) or (_mcp if t.name.startswith("mcp__") else _generic_tool)
    obs = fn(t)
    obs.tool_name = obs.tool_name or clean_line(t.name, 100)
    return obs


def subject(t: ToolCall, cmd: str | None = None) -> str:
    """What a tool call is about, for error and generic titles (`cmd`: the command, cleaned)."""
    if cmd is not None or "command" in t.inp:
        return short_line(cmd if cmd is not None else clean_text(t.inp.get("command"), 500), 150)
    if any(k in t.inp for k in ("file_path", "notebook_path")):
        return relative_path(t.path(), t.root)
    for key in ("url", "pattern", "query", "description"):
        if isinstance(t.inp.get(key), str):
            return short_line(clean_text(t.inp[key], 300), 150)
    return ""
