"""Cline's hooks into nmem (nmemd.agents.cline.capture, nmemd.agents.cline.setup).

The documented payloads below follow Cline's hook reference (docs.cline.bot "Hook Reference", as the VS
Code extension sends them). The real Cline CLI 3.0.65 was run offline (Node 20, a local OpenAI-compatible
fake API) and sends other shapes: its payloads, captured, are replayed from tests/data/cline/ (what differs
is in nmemd/agents/cline/README.md); in that CLI TaskStart's context does not reach the model. Both
go through the real hook client, run as nmem's installed hook scripts run it (`send.py --agent cline`),
into a real daemon.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from support.daemon import Daemon, run_send
from support.db import db_rows
from support.helpers import imported, new_id, nmem
from support.payloads.cline import PROJECT, hook, task_events, tool

from nmemd.agents.cline import setup as cline


def send(payload: dict[str, Any]) -> subprocess.CompletedProcess[bytes]:
    """The hook client exactly as `nmem install --agent cline` runs it."""
    return run_send(json.dumps(payload).encode(), timeout=30, args=("--agent", "cline"))


def test_a_documented_cline_task_is_stored_with_its_agent_and_types(daemon: Daemon) -> None:
    daemon.start()
    task = "task-" + new_id()[:12]
    for payload in task_events(task):
        done = send(payload)
        assert (done.returncode, done.stderr) == (0, b""), payload["hookName"]
    rows = db_rows(daemon.db, "SELECT type, title, agent, file_path FROM observations WHERE session_id = ? "
                   "ORDER BY id", (task,))  # fmt: skip
    assert {r[2] for r in rows} == {"cline"}
    assert [(r[0], r[1]) for r in rows] == [
        ("session", "Task started: add a gnu mode to the yak shaver"),
        ("prompt", "also cover the yak shaver's dry run"),
        ("command", "$ npm test -- yak"),
        ("error", "Command failed: npm run lint"),
        ("read", "Read src/yak.ts"),
        ("write", "Write src/gnu.ts (1 lines)"),
        ("edit", "Edit src/yak.ts (1 blocks)"),
        ("search", "Grep 'shave\\(' in src"),
        ("mcp", 'MCP nmem/search: {"query": "yak"}'),
        ("stop", "Stop: The yak shaver has a gnu mode and a dry run."),
        ("compact", "Compacting"),
        ("session", "Task completed"),
    ]
    assert rows[4][3] == f"{PROJECT}/src/yak.ts"  # Cline's paths are relative to the workspace root
    assert db_rows(daemon.db, "SELECT agent, project, end_reason FROM sessions WHERE session_id = ?", (task,)) == [
        ("cline", PROJECT, "complete")
    ]


def test_the_same_cline_tool_calls_sent_twice_are_stored_once(daemon: Daemon) -> None:
    daemon.start()
    task = "task-" + new_id()[:12]
    events = task_events(task)[2:10]
    for payload in events + events:
        assert send(payload).returncode == 0
    assert db_rows(daemon.db, "SELECT COUNT(*) FROM observations WHERE session_id = ?", (task,)) == [(8,)]


def test_taskstart_answers_a_context_modification_naming_earlier_work(daemon: Daemon) -> None:
    daemon.start()
    for payload in task_events("task-" + new_id()[:12])[:4]:
        assert send(payload).returncode == 0
    done = send(hook("task-" + new_id()[:12], "TaskStart", {"taskMetadata": {"taskId": "t", "initialTask": "next"}}))
    assert done.returncode == 0 and done.stderr == b""
    reply = json.loads(done.stdout)  # Cline reads the last JSON object on stdout
    assert reply["cancel"] is False and set(reply) == {"cancel", "contextModification"}
    assert "npm test -- yak" in reply["contextModification"] and "by Cline" in reply["contextModification"]
    assert len(reply["contextModification"].encode()) <= 50_000  # Cline's documented maximum


REAL = Path(__file__).resolve().parents[1] / "data" / "cline" / "hooks-3.0.65.jsonl"


def test_the_real_cline_cli_payloads_are_stored_under_nmems_types(daemon: Daemon) -> None:
    """What the real Cline CLI 3.0.65 sent (tests/data/README.md): its internal event names (`agent_start`,
    `tool_result`, `agent_end`), its own tools, a failed command inside a call whose `success` is true."""
    daemon.start()
    payloads = [json.loads(line) for line in REAL.read_text().splitlines()]
    for payload in payloads + payloads[1:]:  # the calls and the end sent twice: stored once
        done = send(payload)
        assert (done.returncode, done.stderr) == (0, b""), payload["hookName"]
    task = payloads[0]["sessionContext"]["rootSessionId"]  # the CLI's session, not the run's taskId
    rows = db_rows(daemon.db, "SELECT type, title, agent, file_path FROM observations WHERE session_id = ? "
                   "ORDER BY id", (task,))  # fmt: skip
    assert {r[2] for r in rows} == {"cline"}
    assert [(r[0], r[1]) for r in rows] == [
        ("session", "Task started"),
        ("command", "$ echo probe-out-7"),
        ("write", "Write notes.txt (2 lines)"),
        ("read", "Read notes.txt"),
        ("error", "Command failed: false"),
        ("stop", "Stop: All done: notes.txt written."),
    ]
    assert rows[2][3] == "/tmp/clwfixed/notes.txt"
    assert db_rows(daemon.db, "SELECT agent, project FROM sessions WHERE session_id = ?", (task,)) == [
        ("cline", "/tmp/clwfixed")
    ]


def test_a_cline_payload_of_the_wrong_shape_is_kept_and_not_a_traceback(daemon: Daemon) -> None:
    daemon.start()
    for payload in ({"hookName": "PostToolUse", "taskId": "t-bad", "postToolUse": "oops"},
                    {"hookName": "PostToolUse", "taskId": "t-bad", "workspaceRoots": [3],
                     "postToolUse": {"toolName": "read_file", "parameters": ["x"], "result": {"a": 1}}},
                    {"hookName": 5, "taskId": ["t"]}):  # fmt: skip
        done = send(payload)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    titles = [r[0] for r in db_rows(daemon.db, "SELECT title FROM observations WHERE agent = 'cline'")]
    assert len(titles) == 3 and not any("extraction failed" in t for t in titles)


# --- nmem install / uninstall / doctor --agent cline -------------------------------------------------------


def test_install_twice_then_uninstall_keeps_the_users_own_hooks(nmem_env: dict[str, str]) -> None:
    folder = Path(nmem_env["NMEM_CLINE_HOOKS_DIR"])
    folder.mkdir(parents=True)
    theirs = {"PreToolUse": "#!/bin/sh\necho '{\"cancel\": false}'\n", "TaskCancel": "#!/bin/sh\nlogger cancelled\n"}
    for name, text in theirs.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    first = nmem("install", "--agent", "cline")
    assert first.returncode == 0 and "Traceback" not in first.stderr, first.stderr
    assert "TaskCancel is not nmem's: left alone" in " ".join(first.stdout.split()), first.stdout
    assert "nmem-mcp" in first.stdout  # how to add the MCP server in Cline's MCP view
    ours = [n for n in cline.HOOKS if n != "TaskCancel"]
    for name in ours:
        path = folder / name
        assert cline.is_ours(path) and os.access(path, os.X_OK)
        assert path.read_text().splitlines()[2].endswith("nmem_client/send.py --agent cline")
    for name, text in theirs.items():
        assert (folder / name).read_text() == text
    again = nmem("install", "--agent", "cline")
    assert again.returncode == 0 and "already up to date" in again.stdout and "written" not in again.stdout
    doctor = nmem("doctor")
    assert "cline hooks" in doctor.stdout and "TaskCancel" in doctor.stdout, doctor.stdout  # theirs hides ours
    gone = nmem("uninstall", "--agent", "cline")
    assert gone.returncode == 0 and "removed" in gone.stdout
    assert sorted(p.name for p in folder.iterdir()) == sorted(theirs)
    assert all((folder / n).read_text() == t for n, t in theirs.items())
    assert "cline hooks" not in nmem("doctor").stdout


def test_an_installed_cline_script_stores_the_event_and_answers_taskstart(daemon: Daemon) -> None:
    """nmem's script, run as Cline runs a hook (the file itself, the payload on stdin), stores the event;
    TaskStart's stdout is Cline's JSON reply."""
    daemon.start()
    cline.hooks_dir().parent.mkdir(parents=True, exist_ok=True)  # Cline is installed (nmem skips an agent that is not)
    assert nmem("install", "--agent", "cline").returncode == 0
    task = "task-" + new_id()[:12]
    script = cline.hooks_dir() / "PostToolUse"
    payload = tool(task, "execute_command", {"command": "cargo test"}, "ok")
    done = subprocess.run([str(script)], input=json.dumps(payload).encode(), capture_output=True, timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert db_rows(daemon.db, "SELECT type, agent FROM observations WHERE session_id = ?", (task,)) == [
        ("command", "cline")
    ]
    start = hook("task-" + new_id()[:12], "TaskStart", {"taskMetadata": {"taskId": "x", "initialTask": "go"}})
    done = subprocess.run([str(cline.hooks_dir() / "TaskStart")], input=json.dumps(start).encode(),
                          capture_output=True, timeout=30)  # fmt: skip
    assert done.returncode == 0 and "cargo test" in json.loads(done.stdout)["contextModification"]


def test_uninstall_without_nmems_scripts_changes_nothing(nmem_env: dict[str, str]) -> None:
    done = nmem("uninstall", "--agent", "cline")
    assert done.returncode == 0 and "no nmem hooks" in done.stdout
    assert not Path(nmem_env["NMEM_CLINE_HOOKS_DIR"]).exists()
    assert nmem("install", "--agent", "cline", "--project").returncode == 2


SESSIONS = Path(__file__).resolve().parents[1] / "data" / "cline" / "sessions"


def test_a_real_cline_cli_task_history_imports_once(daemon: Daemon, tmp_path: Path) -> None:
    """The messages file the real Cline CLI 3.0.65 wrote for tests/e2e/test_cline.py's task, imported twice, with
    a bad file beside it: reported, the rest imported."""
    daemon.start()
    shutil.copytree(SESSIONS, tmp_path / "sessions")
    bad = tmp_path / "sessions" / "x" / "x.messages.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    first = imported(str(tmp_path / "sessions"))
    assert (first["events_new"], first["prompts"], first["tool_calls"], first["replies"]) == (4, 1, 2, 1), first
    assert [b["path"] for b in first["bad_files"]] == [str(bad)], first
    rows = db_rows(daemon.db, "SELECT session_id, type, title, agent FROM observations ORDER BY id")
    assert rows == [
        ("1795627691279_50kdn", "prompt", "E2E-cline write the okapi notes", "cline"),
        ("1795627691279_50kdn", "command", "$ echo nmem-e2e-out", "cline"),
        ("1795627691279_50kdn", "write", "Write notes.txt (1 lines)", "cline"),
        ("1795627691279_50kdn", "stop", "Stop: Finished the okapi notes.", "cline"),
    ]
    assert imported(str(tmp_path / "sessions"))["events_new"] == 0
    assert len(db_rows(daemon.db, "SELECT id FROM observations")) == 4
