"""Codex CLI payloads into nmem's observation types (nmemd.agents.codex.capture), from a real session's hooks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.payloads.codex import ROLLOUT, SESSION, real_payloads

from nmemd.agents.codex.capture import ROLLOUT_TAIL, exit_code, parse_patch, rollout_exit_code
from nmemd.capture.extract import extract
from nmemd.model import OBSERVATION_TYPES


def _codex(payload: dict[str, Any]) -> dict[str, Any]:
    return {"nmem_agent": "codex", **payload}


def test_a_real_codex_session_becomes_nmems_observation_types(tmp_path: Path) -> None:
    rollout = Path(shutil.copy(ROLLOUT, tmp_path / ROLLOUT.name))
    got = []
    for p in real_payloads(rollout):
        ex = extract(p)
        assert ex.agent == "codex" and ex.session_id == SESSION and ex.project == "/tmp/cx/work"
        got += [(ex.hook_event, o.type, o.title, o.file_path, o.command) for o in ex.observations]
    assert got == [
        ("SessionStart", "session", "Session started (startup)", None, None),
        ("UserPromptSubmit", "prompt", "edit the notes", None, None),
        ("PreToolUse", "event", "PreToolUse Bash: echo hello > notes.txt && cat notes.txt", None, None),
        ("PostToolUse", "command", "$ echo hello > notes.txt && cat notes.txt", None,
         "echo hello > notes.txt && cat notes.txt"),
        ("PreToolUse", "event", "PreToolUse apply_patch: *** Begin Patch", None, None),
        ("PostToolUse", "edit", "Edit notes.txt (-1 +1 lines)", "/tmp/cx/work/notes.txt", None),
        ("PreToolUse", "event", "PreToolUse Bash: ls missing-file", None, None),
        # The hook's payload says nothing of the exit code; the rollout file, written before, does.
        ("PostToolUse", "error", "Bash failed (exit 2): ls missing-file", None, "ls missing-file"),
        ("Stop", "stop", "Stop: Edited notes.txt.", None, None),
        ("SessionEnd", "session", "Session ended (other)", None, None),
    ]  # fmt: skip


def test_without_the_rollout_file_a_failed_command_is_a_command() -> None:
    (failed,) = [extract(p) for p in real_payloads() if p.get("tool_use_id") == "call_3"][1:]
    assert [(o.type, o.title) for o in failed.observations] == [("command", "$ ls missing-file")]


def test_the_exit_code_is_read_only_from_a_rollout_file_and_only_that(tmp_path: Path) -> None:
    rollout = Path(shutil.copy(ROLLOUT, tmp_path / ROLLOUT.name))
    assert [rollout_exit_code(str(rollout), c) for c in ("call_1", "call_2", "call_3", "call_9")] == [0, None, 2, None]
    other = Path(shutil.copy(ROLLOUT, tmp_path / "notes.jsonl"))  # not a rollout file: not read
    assert rollout_exit_code(str(other), "call_3") is None
    link = tmp_path / "rollout-link.jsonl"
    link.symlink_to(rollout)
    assert rollout_exit_code(str(link), "call_3") is None
    fifo = tmp_path / "rollout-fifo.jsonl"
    os.mkfifo(fifo)
    assert rollout_exit_code(str(fifo), "call_3") is None  # never blocks
    assert rollout_exit_code(ROLLOUT.name, "call_3") is None  # a relative path
    assert rollout_exit_code(str(rollout), 'x" OR "') is None and rollout_exit_code(str(rollout), None) is None
    odd = tmp_path / "rollout-odd.jsonl"
    odd.write_bytes(
        b'{"id":"call_3","exit_code": not json\n[1]\n{"payload":{"item":{"id":"call_3","exit_code":true}}}\n'
    )
    assert rollout_exit_code(str(odd), "call_3") is None
    big = tmp_path / "rollout-big.jsonl"
    line = b'{"type":"event_msg","payload":{"type":"exec_command_end","call_id":"c7","exit_code":127}}\n'
    big.write_bytes(line + b"x" * (ROLLOUT_TAIL + 10) + b"\n")
    assert rollout_exit_code(str(big), "c7") is None  # beyond the tail searched
    big.write_bytes(b"x" * (ROLLOUT_TAIL + 10) + b"\n" + line)
    assert rollout_exit_code(str(big), "c7") == 127  # older versions' exec_command_end


def test_the_prompt_and_tool_calls_carry_the_keys_the_rollout_import_computes_too() -> None:
    from nmemd.store.keys import natural_key

    keys = [natural_key(extract(p)) for p in real_payloads()]
    assert f"prompt:{SESSION}:01a2134e-5dcf-7811-9728-c70a071a13d9" in keys  # the turn id: Codex sends no prompt id
    assert [k for k in keys if k and k.startswith("tool:")] == [f"tool:{SESSION}:call_{n}" for n in (1, 2, 3)]
    assert any(k and k.startswith(f"reply:{SESSION}:") for k in keys)


def test_a_patch_of_several_files_is_an_observation_per_file() -> None:
    patch = (
        "*** Begin Patch\n*** Add File: src/new.py\n+a = 1\n+b = 2\n"
        "*** Update File: src/old.py\n*** Move to: src/renamed.py\n@@ def f\n-    return 1\n+    return 2\n"
        "*** Delete File: docs/gone.md\n*** End Patch\n"
    )
    ex = extract(_codex({"session_id": "s", "cwd": "/home/dev/app", "hook_event_name": "PostToolUse",
                         "tool_name": "apply_patch", "tool_use_id": "call_9", "tool_input": {"command": patch},
                         "tool_response": "Exit code: 0\nOutput:\nSuccess."}))  # fmt: skip
    assert [(o.type, o.title, o.file_path, o.tool_name) for o in ex.observations] == [
        ("write", "Write src/new.py (created, 2 lines)", "/home/dev/app/src/new.py", "apply_patch"),
        ("edit", "Edit src/old.py (-1 +1 lines, moved to src/renamed.py)", "/home/dev/app/src/old.py", "apply_patch"),
        ("edit", "Delete docs/gone.md", "/home/dev/app/docs/gone.md", "apply_patch"),
    ]
    assert "+    return 2" in ex.observations[1].content


def test_a_failed_patch_and_a_failed_command_are_errors() -> None:
    base = {"session_id": "s", "cwd": "/home/dev/app", "hook_event_name": "PostToolUse"}
    patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch"
    ex = extract(_codex({**base, "tool_name": "apply_patch", "tool_input": {"command": patch},
                         "tool_response": "Exit code: 1\nOutput:\nFailed to find context in a.py"}))  # fmt: skip
    assert [(o.type, o.title) for o in ex.observations] == [("error", "apply_patch failed (exit 1): a.py")]
    assert "Failed to find context" in ex.observations[0].content
    out = "Exit code: 2\nOutput:\n" + "".join(f"line {i}\n" for i in range(300)) + "FAILED tests/test_a.py::test_b"
    ex = extract(_codex({**base, "tool_name": "Bash", "tool_input": {"command": "pytest -q"}, "tool_response": out}))
    (obs,) = ex.observations
    assert (obs.type, obs.title, obs.command) == ("error", "Bash failed (exit 2): pytest -q", "pytest -q")
    assert "FAILED tests/test_a.py::test_b" in obs.content  # the verdict at the end is kept


@pytest.mark.parametrize(
    ("text", "code"),
    [("Exit code: 0\n", 0), ("Exit code: 12\nWall", 12), ("Process exited with code 2\n", 2), ("hello", None),
     (None, None), ("Chunk ID: 1\nProcess exited with code 2", None)],
)  # fmt: skip
def test_exit_code(text: object, code: int | None) -> None:
    assert exit_code(text) == code


def test_parse_patch_of_anything_never_raises() -> None:
    assert parse_patch("") == []
    assert parse_patch("+ a line before any file\n*** End Patch") == []
    files = parse_patch("*** Update File: x\n" + "+y\n" * 10)
    assert [(f.op, f.path, f.added) for f in files] == [("update", "x", 10)]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    event=st.sampled_from(["PostToolUse", "UserPromptSubmit", "PreCompact", "Stop", "SessionStart", "X"]),
    tool=st.sampled_from(["apply_patch", "Bash", "mcp__nmem__search", "view_image"]) | st.text(max_size=10),
    tool_input=json_values,
    response=json_values,
    turn=json_values,
)
def test_never_raises_on_codex_like_payloads(event: str, tool: str, tool_input: Any, response: Any, turn: Any) -> None:
    ex = extract(_codex({"session_id": "s", "cwd": "/tmp/x", "hook_event_name": event, "tool_name": tool,
                         "tool_input": tool_input, "tool_response": response, "turn_id": turn}))  # fmt: skip
    assert ex.agent == "codex"
    assert ex.observations and all(o.type in OBSERVATION_TYPES and o.title for o in ex.observations)
    assert "extraction failed" not in ex.observations[0].title


@pytest.mark.parametrize(
    ("known", "kind"), [(1, "error"), (0, "command"), (None, "command"), ("9", "command"), (True, "command")]
)
def test_an_exit_code_the_import_knows_is_taken_as_it_is(known: object, kind: str) -> None:
    """The rollout import names the exit code (`nmem_exit_code`): extraction then reads no file."""
    ex = extract(_codex({"session_id": "s", "cwd": "/tmp/p", "hook_event_name": "PostToolUse", "tool_name": "Bash",
                         "tool_input": {"command": "false"}, "tool_response": "", "nmem_exit_code": known,
                         "transcript_path": str(ROLLOUT), "tool_use_id": "call_3"}))  # fmt: skip
    assert [o.type for o in ex.observations] == [kind]  # call_3 failed in ROLLOUT: not read here
