"""A real OpenCode 1.18.33 session (tests/data/opencode, recorded offline against a scripted API): its rows,
put back into a database with OpenCode's own schema, and the payloads nmem's plugin sends for it (built
from the same rows, as the plugin builds them from the hooks; tests/e2e/test_opencode.py checks that
with the real CLI)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from support.fixtures import DATA as ALL_DATA

DATA = json.loads((ALL_DATA / "opencode" / "session-1.18.33.json").read_text())
SESSION = DATA["session"][0][0]
RECORDED_DIR = "/tmp/ocexp/proj"


def build_db(path: Path, project: Path, rename: dict[str, str] | None = None) -> None:
    """OpenCode's database with the recorded session, its directory moved to `project`."""
    rename = rename or {}
    conn = sqlite3.connect(path)
    try:
        for sql in DATA["schema"]:
            conn.execute(sql.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
        for table in ("project", "session", "message", "part"):
            for row in DATA[table]:
                cells = [moved(c, project, rename) for c in row]
                conn.execute(f"INSERT OR REPLACE INTO {table} VALUES ({', '.join('?' * len(cells))})", cells)
        conn.commit()
    finally:
        conn.close()


def moved(cell: object, project: Path, rename: dict[str, str]) -> object:
    if not isinstance(cell, str):
        return cell
    cell = cell.replace(RECORDED_DIR, str(project))
    for old, new in rename.items():
        cell = cell.replace(old, new)
    return cell


def plugin_payloads(project: Path) -> list[dict[str, Any]]:
    """What nmem.js sends for the recorded session: SessionStart, the prompt, each finished tool, the failed
    grep, and Stop with the last text."""
    base = {"session_id": SESSION, "cwd": str(project)}
    out: list[dict[str, Any]] = [{**base, "hook_event_name": "SessionStart", "source": "startup"}]
    messages = {m[0]: json.loads(m[4]) for m in DATA["message"]}
    last = ""
    for part in DATA["part"]:
        p = json.loads(moved(part[5], project, {}))  # type: ignore[arg-type]
        role = messages[part[1]]["role"]
        if role == "user" and p.get("type") == "text":
            out.append({**base, "hook_event_name": "UserPromptSubmit", "prompt": p["text"], "prompt_id": part[1],
                        "model": "fake/m1"})  # fmt: skip
        elif p.get("type") == "tool" and p["state"]["status"] == "completed":
            state = p["state"]
            out.append({**base, "hook_event_name": "PostToolUse", "tool_name": p["tool"], "tool_input": state["input"],
                        "tool_use_id": p["callID"], "tool_response": {"title": state["title"],
                        "output": state["output"], "metadata": state["metadata"]}})  # fmt: skip
        elif p.get("type") == "tool" and p["state"]["status"] == "error":
            state = p["state"]
            out.append({**base, "hook_event_name": "PostToolUseFailure", "tool_name": p["tool"],
                        "tool_input": state["input"], "tool_use_id": p["callID"], "error": state["error"]})  # fmt: skip
        elif p.get("type") == "text":
            last = p["text"]
    out.append({**base, "hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": last})
    return out
