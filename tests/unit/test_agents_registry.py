"""The agent registry (nmemd.registry): the names the rest of nmem knows, the hook client's start events."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import anyio
import pytest

from nmem_client import hook
from nmemd import registry
from nmemd.model import CLAUDE_CODE


def test_the_registry_names_the_built_in_agents_claude_code_first() -> None:
    assert registry.names() == ("claude-code", "codex", "gemini", "copilot", "cursor", "cline", "opencode")
    assert registry.names()[0] == CLAUDE_CODE


def test_an_alias_and_a_name_find_the_same_spec() -> None:
    assert registry.get("claude") is registry.get(CLAUDE_CODE) is registry.AGENTS[CLAUDE_CODE]
    assert registry.canonical("claude") == CLAUDE_CODE
    assert registry.canonical("someone-else") == "someone-else"
    assert registry.get("someone-else") is None


def test_every_agent_has_a_label_and_a_start_event() -> None:
    for spec in registry.AGENTS.values():
        assert spec.label and spec.start_events, spec.name


def test_the_hook_client_starts_the_daemon_on_the_registrys_start_events() -> None:
    """The stdlib-only hook client cannot import the registry: its own table must say the same."""
    client = {(key.decode().strip('"'), name.decode()) for key, names in hook.START_EVENTS.items() for name in names}
    assert client == registry.start_events()
    for key, name in registry.start_events():
        assert hook.starts_a_session(json.dumps({"session_id": "s", key: name}).encode())
    assert not hook.starts_a_session(b'{"hook_event_name": "UserPromptSubmit", "hookName": "TaskComplete"}')


def test_import_transcripts_names_every_agent_whose_history_it_reads() -> None:
    from nmemd.cli.import_transcripts import import_transcripts

    doc = " ".join((import_transcripts.__doc__ or "").split())
    assert all(spec.label in doc for spec in registry.AGENTS.values() if spec.history is not None), doc


def test_every_built_in_agent_is_one_folder_its_spec_names() -> None:
    """Each built-in spec's `Lazy` names resolve in the agent's own folder, each to what its field holds."""
    from nmemd.agent_spec import Lazy
    from nmemd.history.sources import HistorySource
    from nmemd.setup.agent_setup import AgentSetup

    kinds = {"setup": AgentSetup, "history": HistorySource}
    for spec in registry.builtin():
        folder = f"nmemd.agents.{spec.name.replace('-', '_')}"
        for field in ("normalized", "observations", "setup", "history"):
            part = getattr(spec, field)
            if not isinstance(part, Lazy):
                continue
            assert part.module.startswith(folder + "."), (spec.name, field, part)
            got = part() if field in kinds else getattr(importlib.import_module(part.module), part.name)
            assert isinstance(got, kinds[field]) if field in kinds else callable(got), (spec.name, field)


def test_each_installer_installs_the_hook_events_its_spec_names() -> None:
    from nmemd.agents.claude_code import settings

    assert [h.event for h in settings.HOOKS] == list(registry.AGENTS[CLAUDE_CODE].hooks)
    for spec in registry.builtin()[1:]:
        setup = importlib.import_module(f"nmemd.agents.{spec.name}.setup")
        events = [getattr(h, "event", h) for h in getattr(setup, "HOOKS", ())]
        assert events == list(spec.hooks), spec.name


def test_every_built_in_agent_has_its_reference_notes_beside_its_code_and_linked() -> None:
    """An agent's notes (hook events, payloads, replies, where its config and history live) are its folder's
    README.md, not a docstring; docs/agents.md links each one."""
    from pathlib import Path

    repo = Path(registry.__file__).resolve().parents[1]
    agents_doc = (repo / "docs" / "agents.md").read_text()
    for spec in registry.builtin():
        folder = spec.name.replace("-", "_")
        notes = repo / "nmemd" / "agents" / folder / "README.md"
        assert notes.read_text().startswith(f"# {spec.label}"), spec.name
        assert f"(../nmemd/agents/{folder}/README.md)" in agents_doc, spec.name


def test_install_for_all_with_none_found_says_where_it_looked_for_each_agent(
    nmem_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nmem install --agent all` on a machine without any agent names every agent the registry knows,
    each with where nmem looked (it named five of seven, by hand)."""
    from typer.testing import CliRunner

    from nmemd.cli import app

    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    done = CliRunner().invoke(app, ["install", "--agent", "all"])
    assert done.exit_code == 1, done.output
    said = " ".join(done.output.split())
    assert "no coding agent found on this machine" in said
    for spec in registry.builtin():
        assert f"{spec.label}: no " in said, (spec.label, said)


def test_import_with_no_history_anywhere_says_where_it_looked_for_each_agent(
    nmem_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nmem import-transcripts` with nothing to import names every agent whose history the registry
    knows, with where it looked: an agent registered later too (the message named six by hand)."""
    from typer.testing import CliRunner

    from nmemd.cli import app
    from nmemd.history.sources import HistorySource

    monkeypatch.setenv("HOME", str(tmp_path / "nobody"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(name, raising=False)
    history = HistorySource(roots=list, claims=lambda path: False, where=lambda: "/nowhere/tinybot")
    registry.register(registry.AgentSpec(name="tinybot", label="Tiny Bot", history=lambda: history))
    try:
        done = CliRunner().invoke(app, ["import-transcripts"])
    finally:
        registry.unregister("tinybot")
    said = " ".join(done.output.split())
    assert done.exit_code == 0 and "nothing to import" in said, done.output
    assert "Tiny Bot's at /nowhere/tinybot" in said, said
    for spec in registry.builtin():
        assert (spec.label in said) == (spec.history is not None), (spec.label, said)


def test_the_daemon_loads_no_installer_and_of_the_agents_code_only_claude_codes_parser() -> None:
    """Hook latency and the daemon's start: importing the daemon loads the specs, Claude Code's parser
    (every event ends in it) and no agent's installer, history reader or other parser."""
    import subprocess
    import sys

    code = "import sys, nmemd.daemon.server; print(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = done.stdout.split()
    assert not [m for m in loaded if m.startswith("nmemd.setup")], loaded
    agents_code = [m for m in loaded if m.startswith("nmemd.agents.") and m.count(".") > 2]
    assert agents_code == ["nmemd.agents.claude_code.capture"], agents_code


def test_the_mcp_search_tool_offers_every_registered_agent_a_new_one_too() -> None:
    from nmemd.mcp.server import build_server

    def offered() -> list[str]:
        tools = anyio.run(build_server().list_tools)
        (search,) = [t for t in tools if t.name == "search"]
        (choice, _none) = search.input_schema["properties"]["agent"]["anyOf"]
        return list(choice["enum"])

    assert offered() == list(registry.names())
    registry.register(registry.AgentSpec(name="fake-agent", label="Fake Agent"))
    try:
        assert offered()[-1] == "fake-agent"
    finally:
        registry.unregister("fake-agent")
