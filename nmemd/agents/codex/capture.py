"""OpenAI Codex CLI: what its hooks send and its rollout files hold, as nmem reads them.

Codex's hooks read into observations: its shell calls (the exit code read from its rollout file) and
`apply_patch` edits read here, the rest as Claude Code's (Codex sends Claude Code's event names). Its hooks,
payloads, replies, config and history, as verified: README.md beside this file.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any, Final

from nmem_client import paths
from nmemd.agents.codex import SPEC
from nmemd.capture.fields import (
    CMD_MAX,
    PATH_MAX,
    clean_head_tail,
    clean_line,
    clean_text,
    dict_or_empty,
    join_lines,
    observation,
    one_line,
    relative_path,
    str_or_none,
)
from nmemd.capture.redact import redact
from nmemd.capture.tools import ToolCall, tool_observation
from nmemd.model import Extracted, Observation

AGENT: Final = SPEC.name
PATCH_MAX: Final = 200_000  # chars of a patch read for its files and counts (the excerpts are far shorter)
FILES_MAX: Final = 20  # files of one patch that get an observation each
_FILE_OP: Final = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$")
_MOVE: Final = re.compile(r"^\*\*\* Move to: (.+?)\s*$")
_EXIT: Final = re.compile(r"\A(?:Exit code|Process exited with code):? (-?\d+)")
# What Codex answers a patch it did not apply (codex-rs apply_patch: verification, a rejected or empty
# patch, a refused approval), with no exit code; a patch it applied says "Success. Updated ...".
_PATCH_FAILED: Final = re.compile(
    r"verification failed|patch rejected|invalid (?:patch|hunk)|failed to (?:find|apply|read|write)"
    r"|rejected by (?:the )?user|no such file|permission denied",
    re.IGNORECASE,
)
_NESTED_COMMAND: Final = re.compile(r"""exec_command\(\s*(?:\{[^}]*?\bcmd\s*:\s*)?(["'`])((?:\\.|(?!\1).)*)\1""", re.S)


class PatchFile:
    """One file of an `apply_patch` patch: what happens to it, and its lines."""

    __slots__ = ("op", "path", "move_to", "removed", "added", "lines")

    def __init__(self, op: str, path: str) -> None:
        self.op, self.path, self.move_to = op, path, ""
        self.removed = self.added = 0
        self.lines: list[str] = []


def parse_patch(text: str) -> list[PatchFile]:
    """The files of a Codex patch (`*** Begin Patch` ... `*** End Patch`), in order. Never raises;
    text that is not a patch has no files."""
    files: list[PatchFile] = []
    current: PatchFile | None = None
    for line in text[:PATCH_MAX].splitlines():
        if m := _FILE_OP.match(line):
            current = PatchFile(m.group(1).lower(), m.group(2))
            files.append(current)
        elif current is None or line.startswith("*** "):
            if current is not None and (m := _MOVE.match(line)):
                current.move_to = m.group(1)
            elif line.startswith("*** End"):
                current = None
        elif line.startswith("+"):
            current.added += 1
            current.lines.append(line)
        elif line.startswith("-"):
            current.removed += 1
            current.lines.append(line)
        elif line.startswith("@@") or current.op == "update":
            current.lines.append(line)
    return files


def _absolute(path: str, cwd: str | None) -> str:
    return path if os.path.isabs(path) or not cwd else os.path.normpath(os.path.join(cwd, path))


def exit_code(text: object) -> int | None:
    """The exit code a Codex tool output starts with (`Exit code: 1`, `Process exited with code 2`)."""
    m = _EXIT.match(text) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


def _text_of(resp: object) -> str:
    """A tool response's text: a string, or the `output` of a structured one."""
    if isinstance(resp, dict):
        resp = resp.get("output", resp.get("content", ""))
    return resp if isinstance(resp, str) else ""


def patch_failure(resp: object) -> str | None:
    """Why Codex did not apply a patch (its answer's first line), None when it did: a non-zero exit code, or
    no exit code and a message such as `apply_patch verification failed: Failed to find expected lines`."""
    text = _text_of(resp)
    code = exit_code(text)
    if code not in (None, 0):
        return f"exit {code}"
    head = text[:2000]
    if code is None and "Success." not in head and _PATCH_FAILED.search(head):
        return one_line(next((ln for ln in head.splitlines() if ln.strip()), head), 150)
    return None


def apply_patch_observations(t: ToolCall, cwd: str | None) -> list[Observation]:
    raw = t.inp.get("command") or t.inp.get("input") or t.inp.get("patch")
    patch = raw if isinstance(raw, str) else ""
    files = parse_patch(patch)
    failure = patch_failure(t.resp)
    if failure is not None or not files:
        output = clean_head_tail(_text_of(t.resp))
        names = ", ".join(relative_path(clean_line(f.path, PATH_MAX), t.root) for f in files[:5])
        if failure is None:
            title = "apply_patch (no file in the patch)" + (f": {names}" if names else "")
        elif failure.startswith("exit "):
            title = f"apply_patch failed ({failure})" + (f": {names}" if names else "")
        else:
            title = f"apply_patch failed: {redact(failure.removeprefix('apply_patch '))}" + (
                f" — {names}" if names else ""
            )
        content = join_lines(output, clean_text(patch, 1200, 20))
        path = _absolute(clean_line(files[0].path, PATH_MAX), cwd) if files else None
        return [
            observation("error" if failure is not None else "tool", title, content, limit=len(content),
                        tool_name="apply_patch", file_path=path)
        ]  # fmt: skip
    out = []
    for f in files[:FILES_MAX]:
        path = _absolute(clean_line(f.path, PATH_MAX), cwd)
        rel = relative_path(path, t.root)
        body = clean_text("\n".join(f.lines), 1200, 20)
        if f.op == "add":
            detail = f"created, {f.added} lines"
            out.append(observation("write", f"Write {rel} ({detail})", join_lines(detail, body), file_path=path))
        elif f.op == "delete":
            out.append(observation("edit", f"Delete {rel}", "deleted", file_path=path))
        else:
            detail = f"-{f.removed} +{f.added} lines"
            if f.move_to:
                detail += f", moved to {relative_path(_absolute(clean_line(f.move_to, PATH_MAX), cwd), t.root)}"
            out.append(observation("edit", f"Edit {rel} ({detail})", join_lines(detail, body), file_path=path))
    if len(files) > FILES_MAX:
        out[-1].content = join_lines(out[-1].content, f"… and {len(files) - FILES_MAX} more files in the same patch")
    for obs in out:
        obs.tool_name = "apply_patch"
    return out


ROLLOUT_TAIL: Final = 256 * 1024  # bytes of a rollout's end searched for a call's exit code
_ID_SAFE: Final = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def rollout_exit_code(path: object, call_id: object) -> int | None:
    """The exit code Codex recorded for a shell call in its rollout file (`item_completed` of a
    `CommandExecution`, or `exec_command_end` before 0.169), from the last ROLLOUT_TAIL bytes; None
    when it is not there (yet) or anything is odd. Codex writes that line before it runs the
    PostToolUse hook, whose payload says nothing of the exit code. Only a regular `rollout-*.jsonl`
    file is read, and only that number is taken from it. Never raises."""
    if not isinstance(path, str) or not isinstance(call_id, str) or not _ID_SAFE.fullmatch(call_id):
        return None
    name = os.path.basename(path)
    if not (os.path.isabs(path) and name.startswith("rollout-") and name.endswith(".jsonl")):
        return None
    try:
        fd = paths.open_regular(path)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        start = max(st.st_size - ROLLOUT_TAIL, 0)
        data = os.pread(fd, st.st_size - start, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    needle = f'"{call_id}"'.encode()
    end = len(data)
    while (at := data.rfind(needle, 0, end)) >= 0:
        first = data.rfind(b"\n", 0, at) + 1
        last = data.find(b"\n", at)
        line = data[first : last if last >= 0 else len(data)]
        end = first
        if b'"exit_code"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        payload = record.get("payload") if isinstance(record, dict) else None
        item = payload.get("item") if isinstance(payload, dict) else None
        for found in (item, payload):
            if isinstance(found, dict) and call_id in (found.get("id"), found.get("call_id")):
                code = found.get("exit_code")
                if isinstance(code, int) and not isinstance(code, bool):
                    return code
    return None


def shell_observations(
    t: ToolCall, rollout: object = None, call_id: object = None, known: int | None = None
) -> list[Observation]:
    """Codex's shell tools as Claude Code's Bash: the command, its output; an error when the output
    names a non-zero exit code (a rollout's output does) or the rollout file records one for the call
    (the live hook's payload names none)."""
    code = known if known is not None else exit_code(t.resp)
    if code is None and rollout is not None:
        code = rollout_exit_code(rollout, call_id)
    if code in (None, 0):
        return [tool_observation(t)]
    output = t.resp if isinstance(t.resp, str) else ""
    cmd = clean_text(t.inp.get("command"), CMD_MAX)
    first = " ".join(cmd.split())[:150]
    return [
        observation(
            "error",
            f"Bash failed (exit {code}): {first}",
            content := join_lines(f"command: {cmd}", clean_head_tail(output)),
            limit=len(content),
            tool_name="Bash",
            command=cmd or None,
        )
    ]


def exec_observations(t: ToolCall) -> list[Observation]:
    """A code-mode `exec` call: JavaScript whose nested `tools.exec_command(...)` runs the shell. Its source
    is the command, kept whole within CMD_MAX (the title names the first shell command it runs)."""
    raw = next((v for k in ("input", "code", "source", "command") if isinstance(v := t.inp.get(k), str)), "")
    source = clean_text(raw, CMD_MAX)
    nested = [m.group(2) for m in _NESTED_COMMAND.finditer(raw[: CMD_MAX * 4])]
    about = one_line(nested[0], 150) if nested else one_line(source, 150)
    output = _text_of(t.resp)
    code = exit_code(output)
    failed = code not in (None, 0)
    title = (f"exec failed (exit {code})" if failed else "exec") + (f": {redact(about)}" if about else "")
    content = join_lines(f"source: {source}" if source else "", clean_head_tail(output))
    return [observation("error" if failed else "command", title, content, limit=len(content), tool_name="exec",
                        command=source or None)]  # fmt: skip


def observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """What nmem keeps of a Codex event, where it differs from Claude Code's; None: as Claude Code's."""
    event = ex.hook_event
    if event in ("UserPromptSubmit", "PreCompact", "PostCompact") and ex.session_id != "unknown":
        # Codex sends no prompt id; its turn's id names the prompt in the rollout file too.
        ex.prompt_id = clean_line(str_or_none(p.get("turn_id")), 200) or None
    if event != "PostToolUse":
        return None
    name = str_or_none(p.get("tool_name")) or "unknown"
    tool = ToolCall(name, dict_or_empty(p.get("tool_input")), p.get("tool_response"), root)
    if name == "apply_patch":
        return apply_patch_observations(tool, ex.cwd)
    if name == "exec":
        return exec_observations(tool)
    if name == "Bash":
        if "nmem_exit_code" in p:  # the rollout import read it already (nmemd.agents.codex.history): no file to read
            code = p["nmem_exit_code"]
            known = code if isinstance(code, int) and not isinstance(code, bool) and code != 0 else None
            return shell_observations(tool, known=known)
        return shell_observations(tool, p.get("transcript_path"), p.get("tool_use_id"))
    return None
