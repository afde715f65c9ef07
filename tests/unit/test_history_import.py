"""Every agent's history into the store, in process: the CLI's importer (`nmemd.history.importer`) reads each
agent's recorded history file and asks the daemon's own import methods (`nmemd.history.import_rpc.call`),
run here over a real store and its ingestor with no socket between them. A second run adds nothing. The
same through `nmem import-transcripts` and a real daemon: tests/daemon/test_agents_*_import.py."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import msgspec
import pytest
from support.fixtures import DATA, TRANSCRIPTS
from support.host import InProcessHost
from support.payloads import codex, copilot, gemini, opencode

from nmemd import config, registry
from nmemd.capture.ingest import Ingestor
from nmemd.history import import_rpc
from nmemd.history.importer import Importer
from nmemd.model import CLAUDE_CODE, stored_agent
from nmemd.store.database import open_store

Ask = Callable[[str, dict[str, Any], float], Any]


@contextmanager
def daemon_methods() -> Iterator[tuple[Ask, str]]:
    """`ask` as the CLI's importer calls the daemon, answered by import_rpc.call in an event loop of its own
    over the test's store; the database's path."""
    settings = config.load()
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(open_store(settings)) as store:
            host = InProcessHost(settings, Ingestor(store))
            running = portal.start_task_soon(host.ingestor.run)

            def ask(method: str, params: dict[str, Any], timeout: float) -> Any:
                reply = portal.call(import_rpc.call, host, method, params)
                return msgspec.json.decode(msgspec.json.encode(reply))  # as it crosses the socket

            try:
                yield ask, settings.db
            finally:
                portal.call(host.ingestor.close)
                running.result(timeout=30)


def _claude_code(tmp: Path) -> Path:
    folder = tmp / "projects" / "-home-dev-projects-orchard"
    folder.mkdir(parents=True)
    shutil.copy(TRANSCRIPTS / "tool-heavy.jsonl", folder / "tool-heavy.jsonl")
    return folder / "tool-heavy.jsonl"


def _codex(tmp: Path) -> Path:
    return Path(shutil.copy(codex.ROLLOUT, tmp / codex.ROLLOUT.name))


def _gemini(tmp: Path) -> Path:
    (tmp / "chats").mkdir()
    return Path(shutil.copy(gemini.SESSION_FILE, tmp / "chats" / gemini.SESSION_FILE.name))


def _copilot(tmp: Path) -> Path:
    (tmp / copilot.SESSION).mkdir()
    return Path(shutil.copy(copilot.EVENTS, tmp / copilot.SESSION / "events.jsonl"))


def _cline(tmp: Path) -> Path:
    task = next((DATA / "cline" / "sessions").iterdir())
    shutil.copytree(task, tmp / task.name)
    return tmp / task.name / f"{task.name}.messages.json"


def _opencode(tmp: Path) -> Path:
    (tmp / "proj" / ".git").mkdir(parents=True)
    opencode.build_db(tmp / "opencode.db", tmp / "proj")
    return tmp / "opencode.db"


HISTORY: dict[str, Callable[[Path], Path]] = {
    CLAUDE_CODE: _claude_code,
    "codex": _codex,
    "gemini": _gemini,
    "copilot": _copilot,
    "cline": _cline,
    "opencode": _opencode,
}


def test_every_agent_with_a_history_has_one_here() -> None:
    agents = set(registry.names())
    assert set(HISTORY) <= agents and agents - set(HISTORY) == {"cursor"}  # Cursor keeps none nmem reads


@pytest.mark.parametrize("agent", sorted(HISTORY))
def test_an_agents_history_imports_once_under_its_name(agent: str, tmp_path: Path) -> None:
    path = HISTORY[agent](tmp_path)
    with daemon_methods() as (ask, db):
        first = Importer(ask).run([str(path)])
        again = Importer(ask).run([str(path)])
    assert first.files == 1 and first.bad_files == [] and not first.interrupted, first
    assert first.events_sent == first.events_new > 0 and first.sessions_summarized == 1, first
    assert again.events_sent == again.events_new == 0 and again.bad_files == [], again  # nothing new read
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        agents = {r[0] for r in conn.execute("SELECT DISTINCT agent FROM observations")}
        stored = conn.execute("SELECT count(*) FROM observations").fetchone()[0]
    finally:
        conn.close()
    assert agents == {stored_agent(agent)} and stored == first.events_new
