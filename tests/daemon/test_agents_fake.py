"""Adding an agent is one spec: a fake agent registered from this test gets install and uninstall (the
real `nmem` app, in process), capture and context (the real extraction, store and context builder),
doctor's checks and the import of its history (`nmem import-transcripts` in process, into a real
daemon), with no other module touched."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from support.daemon import Daemon
from support.db import db_rows
from typer.testing import CliRunner

from nmemd import config, registry
from nmemd.capture.extract import extract
from nmemd.cli import app
from nmemd.history.importer import default_roots
from nmemd.history.records import Counts, Record
from nmemd.history.sources import HistorySource
from nmemd.model import Extracted, Observation
from nmemd.recall.context import build_context
from nmemd.recall.methods import known_agent
from nmemd.recall.replies import shaped_reply
from nmemd.setup import doctor
from nmemd.setup.agent_setup import AgentSetup, Installed, InstallOptions
from nmemd.setup.checks import Check, fail, ok
from nmemd.store.batches import Incoming
from nmemd.store.database import open_store

NAME = "fakebot"


def _observations(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    """Fakebot says `did` where Claude Code would send a tool call."""
    if "did" not in p:
        return None  # the rest reads as Claude Code's
    return [Observation(type="command", title=f"ran {p['did']}", command=str(p["did"]))]


def _normalized(p: dict[str, Any]) -> dict[str, Any]:
    renamed = {"hello": "SessionStart", "act": "PostToolUse", "bye": "SessionEnd"}
    return {**p, "hook_event_name": renamed.get(str(p.get("fake_event")), "unknown")}


def _setup(folder: Path) -> AgentSetup:
    """Fakebot keeps its hooks in `folder/hooks.json`; it is on this machine when `folder` exists."""
    hooks = folder / "hooks.json"

    def install(o: InstallOptions) -> Installed:
        data = json.dumps({"hooks": ["nmem-send --agent fakebot"], "mcp": o.mcp})
        if o.print_only:
            return Installed(printed=data + "\n")
        hooks.write_text(data)
        return Installed(lines=[f"Fake Bot hooks: {hooks}"])

    def uninstall(o: InstallOptions) -> list[str]:
        hooks.unlink(missing_ok=True)
        return [f"Fake Bot hooks removed from {hooks}"]

    def check(settings: config.Settings) -> Check:
        return ok(NAME, f"hooks in {hooks}") if hooks.exists() else fail(NAME, "no hooks", "nmem install --agent fb")

    return AgentSetup(
        found=folder.is_dir,
        looked=lambda: f"no {folder}",
        install=install,
        uninstall=uninstall,
        checks=((NAME, check),),
        project_refusal="--project is for Claude Code: Fake Bot has one settings file",
    )


class _LogReader:
    """Fakebot's history: a `*.fakelog` file, one JSON object a line, each a command it ran."""

    def __init__(self, path: str) -> None:
        self.counts = Counts()

    def feed(self, line: object, offset: int, size: int, raw: bytes | None = None) -> list[Record]:
        self.counts.lines += 1
        if not isinstance(line, dict) or "did" not in line:
            self.counts.skipped += 1
            return []
        self.counts.tools += 1
        payload = {**_payload("act", did=line["did"]), "session_id": "fake-old"}
        return [Record(key=f"fakebot:{offset}", ts=float(line.get("ts", 0)), payload=payload)]

    def finish(self) -> list[Record]:
        return []

    def safe_offset(self, end: int) -> int:
        return end


def _history(folder: Path) -> HistorySource:
    return HistorySource(
        roots=lambda: [str(folder)] if folder.is_dir() else [],
        claims=lambda path: path.endswith(".fakelog"),
        lines=_LogReader,
        decode=json.loads,
    )


@pytest.fixture
def fakebot(tmp_path: Path) -> Iterator[registry.AgentSpec]:
    setup = _setup(tmp_path / "fakebot")
    history = _history(tmp_path / "fakebot" / "logs")
    spec = registry.register(
        registry.AgentSpec(
            name=NAME,
            label="Fake Bot",
            aliases=("fb",),
            start_events=(("fake_event", "hello"),),
            reply=lambda event, text: f"FAKE[{event}]{text}".encode(),
            normalized=_normalized,
            observations=_observations,
            setup=lambda: setup,
            history=lambda: history,
        )
    )
    yield spec
    registry.unregister(NAME)
    assert registry.get(NAME) is None and registry.get("fb") is None


def _payload(event: str, **fields: Any) -> dict[str, Any]:
    return {"nmem_agent": "fb", "fake_event": event, "session_id": "fake-1", "cwd": "/fake/project", **fields}


def test_a_registered_agent_is_named_by_its_alias_and_listed(fakebot: registry.AgentSpec) -> None:
    assert registry.get("fb") is fakebot
    assert registry.names()[-1] == NAME
    assert ("fake_event", "hello") in registry.start_events()
    assert known_agent("fb") == NAME  # `nmem search --agent fb`, the MCP tools' agent filter


def test_a_registered_agents_payloads_are_captured_by_its_parser(fakebot: registry.AgentSpec) -> None:
    ex = extract(_payload("act", did="make check"))
    assert (ex.agent, ex.hook_event, ex.session_id) == (NAME, "PostToolUse", "fake-1")
    assert [(o.type, o.title, o.command) for o in ex.observations] == [("command", "ran make check", "make check")]
    start = extract(_payload("hello", source="startup"))  # its parser passes: read as Claude Code's
    assert (start.agent, start.hook_event, [o.type for o in start.observations]) == (NAME, "SessionStart", ["session"])


def test_a_registered_agents_sessions_come_back_in_the_context_and_its_reply_shape(
    fakebot: registry.AgentSpec, nmem_env: dict[str, str]
) -> None:
    payloads = [_payload("hello", source="startup"), _payload("act", did="make check"), _payload("bye")]

    async def store() -> str:
        settings = config.load()
        async with open_store(settings) as s:
            for n, payload in enumerate(payloads):
                await s.commit_batch(
                    [Incoming(event_id=f"fake{n}", received_at=1_000_000.0 + n, extracted=extract(payload))]
                )
        return settings.db

    db = anyio.run(store)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT DISTINCT agent FROM observations").fetchall() == [(NAME,)]
        text = build_context(conn, "/fake/project", session_id="fake-2", now=1_000_100.0)
    conn.close()
    assert "by Fake Bot" in text and "make check" in text
    assert shaped_reply("SessionStart", text, NAME) == f"FAKE[SessionStart]{text}".encode()
    # A notice goes inside the context for an agent whose hooks do not show systemMessage.
    assert shaped_reply("SessionStart", "ctx", NAME, "a notice") == b"FAKE[SessionStart]a notice\nctx"


def _doctor(name: str) -> list[Check]:
    return [c for c in doctor.run().checks if c.name == name]


def test_a_registered_agent_is_installed_checked_and_uninstalled(fakebot: registry.AgentSpec, tmp_path: Path) -> None:
    runner = CliRunner()
    skipped = runner.invoke(app, ["install", "--agent", "fb"])
    assert skipped.exit_code == 1 and "skipped Fake Bot: not installed here" in skipped.output, skipped.output
    (tmp_path / "fakebot").mkdir()
    assert [c.status for c in _doctor(NAME)] == ["fail"]

    printed = runner.invoke(app, ["install", "--agent", "fb", "--print", "--no-mcp"])
    assert printed.exit_code == 0 and json.loads(printed.output)["mcp"] is False
    assert not (tmp_path / "fakebot" / "hooks.json").exists()
    refused = runner.invoke(app, ["install", "--agent", "fakebot", "--project"])
    assert refused.exit_code == 2 and "Fake Bot has one settings file" in refused.output

    done = runner.invoke(app, ["install", "--agent", "fb"])
    assert done.exit_code == 0 and "Fake Bot hooks:" in done.output and "new Fake Bot session" in done.output
    assert (tmp_path / "fakebot" / "hooks.json").exists()
    assert [c.status for c in _doctor(NAME)] == ["ok"]

    gone = runner.invoke(app, ["uninstall", "--agent", "fb", "--yes"])
    assert gone.exit_code == 0 and "Fake Bot hooks removed" in gone.output
    assert not (tmp_path / "fakebot" / "hooks.json").exists()


def test_a_registered_agents_history_is_imported(fakebot: registry.AgentSpec, daemon: Daemon, tmp_path: Path) -> None:
    daemon.start()
    logs = tmp_path / "fakebot" / "logs"
    logs.mkdir(parents=True)
    lines = [{"did": "make build", "ts": 1_000_000}, {"noise": 1}, {"did": "make test", "ts": 1_000_001}]
    (logs / "one.fakelog").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (logs / "other.txt").write_text("not fakebot's\n")

    done = CliRunner().invoke(app, ["import-transcripts", str(logs), "--json"])
    assert done.exit_code == 0, done.output
    summary = json.loads(done.output.strip().splitlines()[-1])
    assert (summary["files"], summary["lines"], summary["tool_calls"]) == (1, 3, 2), summary
    rows = db_rows(daemon.db, "SELECT agent, title FROM observations WHERE session_id = 'fake-old' ORDER BY id")
    assert rows == [(NAME, "ran make build"), (NAME, "ran make test")]
    assert str(logs) in default_roots()  # `nmem import-transcripts` with no path reads it too
