"""Near-identical hits fold into one result that says how many it stands for (issue #14, ranking).

The same test command run many times, or successive todo snapshots, would otherwise fill a
page of results and push the edit that made the change out of sight. Events go through the
real hook client into a real daemon; the result is read through `nmem search` and through the
MCP search tool's text, which is what the model reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from support.daemon import Daemon, run_send
from support.env import BIN

from nmemd.mcp.tools import search_tool
from nmemd.recall import search
from nmemd.recall.queries import Filters
from nmemd.store import readers

RUNS = 6


def _bash(session: str, cwd: str, command: str, stdout: str) -> dict[str, Any]:
    return {
        "session_id": session,
        "cwd": cwd,
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "run the wombat tests"},
        "tool_response": {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False},
        "tool_use_id": f"toolu_{os.urandom(8).hex()}",
    }


def _edit(session: str, cwd: str) -> dict[str, Any]:
    path = f"{cwd}/src/wombat.py"
    return {
        "session_id": session,
        "cwd": cwd,
        "hook_event_name": "PostToolUse",
        "tool_name": "Edit",
        "tool_input": {"file_path": path, "old_string": "wombat = 1", "new_string": "wombat = 2"},
        "tool_response": {"filePath": path, "oldString": "wombat = 1", "newString": "wombat = 2"},
        "tool_use_id": f"toolu_{os.urandom(8).hex()}",
    }


def test_repeated_commands_fold_into_one_hit_with_a_count(
    tmp_path: Path, nmem_env: dict[str, str], short_dir: str
) -> None:
    project = tmp_path / "zoo"
    (project / ".git").mkdir(parents=True)
    cwd = str(project)
    daemon = Daemon(nmem_env, short_dir)
    daemon.start()
    try:
        for i in range(RUNS):  # the same command, each run its own output (numbers differ)
            body = _bash("sess-fold", cwd, f"pytest tests/test_wombat.py -k case{i}", f"{i + 3} passed in 0.{i}s")
            assert run_send(json.dumps(body).encode()).returncode == 0
        assert run_send(json.dumps(_edit("sess-fold", cwd)).encode()).returncode == 0
        cli = subprocess.run(
            [str(BIN / "nmem"), "search", "wombat", "--project", cwd],
            env={**os.environ, **nmem_env, "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        assert daemon.stop() == 0
    assert cli.returncode == 0, cli.stderr
    assert f"(+{RUNS - 1} similar)" in cli.stdout, cli.stdout

    conn = readers.open_readonly(str(daemon.db))
    try:
        hits = search.search(conn, "wombat", Filters(project=cwd))
        text = search_tool(conn, cwd, "wombat", None, None, None, None, None, None, 10, time.time())
    finally:
        conn.close()
    assert sorted(h.type for h in hits) == ["command", "edit"]  # six runs, one line
    assert next(h for h in hits if h.type == "command").similar == RUNS - 1
    lines = text.splitlines()[1:]
    assert len(lines) == 2 and any(line.endswith(f"(+{RUNS - 1} similar)") for line in lines), text


def test_a_commit_message_ranks_below_the_work_it_records(
    tmp_path: Path, nmem_env: dict[str, str], short_dir: str
) -> None:
    """A commit's message restates the work (every word of it, often): the edit that did it ranks first."""
    project = tmp_path / "zoo"
    (project / ".git").mkdir(parents=True)
    cwd = str(project)
    path = f"{cwd}/src/wombat.py"
    change = {"file_path": path, "old_string": "m = 1", "new_string": "m = 2"}
    edit = {**_edit("sess-commit", cwd), "tool_input": change, "tool_response": {"filePath": path}}
    message = 'git commit -m "Fix wombat feeding: wombat meals, wombat water, wombat bedding, wombat naps"'
    commit = _bash("sess-commit", cwd, message, "[main 1a2b3c] Fix wombat feeding")
    daemon = Daemon(nmem_env, short_dir)
    daemon.start()
    try:
        for body in (edit, commit):
            assert run_send(json.dumps(body).encode()).returncode == 0
    finally:
        assert daemon.stop() == 0
    conn = readers.open_readonly(str(daemon.db))
    try:
        hits = search.search(conn, "wombat", Filters(project=cwd))
    finally:
        conn.close()
    assert [h.type for h in hits] == ["edit", "command"], hits
