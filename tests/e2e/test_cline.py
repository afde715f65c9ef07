"""nmem under the real Cline CLI (issue #19): installed by `nmem install --agent cline` into a fresh HOME
(marked hook scripts in ~/Documents/Cline/Hooks), driven by `cline --json -c WORKSPACE PROMPT` against the
scripted OpenAI-compatible API of `opencode_api` on 127.0.0.1 (`cline auth -p openai-compatible -b URL`).

One task runs a shell command, writes a file and answers; its hooks (run by the CLI itself, with no
daemon up at first) must store each of them once, as Cline's. Not checked: the TaskStart context reaching
the model. Cline CLI 3.0.65 runs TaskStart, TaskResume and UserPromptSubmit hooks in the background and
ignores what they print (nmemd/agents/cline/README.md records how that was verified). Skipped, with the reason,
without the binary. Then `nmem import-transcripts` reads the CLI's task history
(~/.cline/data/sessions): only the prompt, which no live hook sent, is new.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest
from opencode_api import FakeChat
from support.agent_clis import CLIS
from support.env import BIN
from support.helpers import wait_until

CLI = CLIS["cline"]
STORE_WAIT_S = 60.0


cline_bin = CLI.binary
pytestmark = [
    pytest.mark.cline,
    pytest.mark.skipif(cline_bin() is None, reason=CLI.skip_reason()),
    pytest.mark.timeout(600),
]


def _processes_under(root: str) -> list[int]:
    """Processes whose command line names `root`: the CLI leaves a hub daemon (`cline --cline-hub-daemon
    --cwd ROOT/w`) running after the task, detached from the test's process group."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if root.encode() in Path("/proc", entry, "cmdline").read_bytes():
                    pids.append(int(entry))
    return pids


def _stop_processes_under(root: str) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _processes_under(root):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not _processes_under(root), 5.0, "the Cline CLI's processes gone")
            return


def _rows(db: Path) -> list[tuple[str | None, str, str]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    try:
        return [(r[0], r[1], r[2]) for r in conn.execute("SELECT agent, type, title FROM observations ORDER BY id")]
    except sqlite3.OperationalError:  # the daemon is still creating the schema
        return []
    finally:
        conn.close()


def test_a_cline_task_is_remembered_as_clines() -> None:
    cline = cline_bin()
    assert cline is not None
    root = tempfile.mkdtemp(dir="/tmp", prefix="ncl")  # short: the daemon's socket lives under HOME
    home, workspace = Path(root, "h"), Path(root, "w")
    home.mkdir()
    workspace.mkdir()
    (home / "Documents" / "Cline").mkdir(parents=True)  # Cline's own folder: nmem skips an agent it cannot find
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG")} | {"HOME": str(home)}
    try:
        installed = subprocess.run([str(BIN / "nmem"), "install", "--agent", "cline"], env=env, capture_output=True,
                                   text=True, timeout=120)  # fmt: skip
        assert installed.returncode == 0, installed.stderr
        assert (home / "Documents" / "Cline" / "Hooks" / "TaskStart").exists()
        with FakeChat() as api:
            api.scripts["cline"] = [
                [("run_commands", {"commands": ["echo nmem-e2e-out"]})],
                [("editor", {"path": str(workspace / "notes.txt"), "new_text": "remember the okapi\n"})],
                "Finished the okapi notes.",
            ]
            auth = subprocess.run([cline, "auth", "-p", "openai-compatible", "-k", "fake", "-m", "m1", "-b", api.url],
                                  env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
            assert auth.returncode == 0, auth.stderr
            done = subprocess.run([cline, "--json", "-c", str(workspace), "E2E-cline write the okapi notes"], env=env,
                                  capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
        assert (workspace / "notes.txt").read_text() == "remember the okapi\n"
        db = home / ".local" / "share" / "nmem" / "nmem.db"

        def stored() -> list[tuple[str | None, str, str]] | None:
            rows = _rows(db)
            return rows if any(t == "stop" for _, t, _ in rows) and any(t == "write" for _, t, _ in rows) else None

        rows = wait_until(stored, STORE_WAIT_S, "the task's command, write and end stored")
        assert {agent for agent, _, _ in rows} == {"cline"}
        titles = [title for _, _, title in rows]
        assert sum("echo nmem-e2e-out" in t for t in titles) == 1, titles
        assert sum("notes.txt" in t for t in titles) == 1, titles
        assert any("Finished the okapi notes" in t for t in titles), titles
        # The CLI's own history read back: the command, the write and the answer were seen live (same keys);
        # the prompt was not (a one-shot task fires no prompt hook), so it alone is new. Again: nothing new.
        for new in (1, 0):
            done = subprocess.run([str(BIN / "nmem"), "import-transcripts", "--json"], env=env, capture_output=True,
                                  text=True, timeout=120)  # fmt: skip
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout.splitlines()[-1])
            assert report["bad_files"] == [], report
            assert (report["events_sent"], report["events_new"]) == ((4, 1) if new else (0, 0)), report
        rows = _rows(db)
        assert [t for _, t, _ in rows].count("prompt") == 1 and len(rows) == 5, rows
    finally:
        subprocess.run([str(BIN / "nmem"), "daemon", "stop"], env=env, capture_output=True, timeout=60)
        _stop_processes_under(root)
        assert not _processes_under(root), "the Cline CLI left processes running"
        shutil.rmtree(root, ignore_errors=True)
