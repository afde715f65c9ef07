"""Handoff summaries (nmemd.recall.handoff): one per session, for every agent, each line read from observations.

Real-shaped events of each agent (the payloads their own tests replay) go through the real extractor
and store into a real SQLite file; the handoff is read on a read-only connection. The end-to-end
test (tests/daemon/test_handoff_cli.py) imports a transcript and lists sessions through a real daemon and the CLI.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import COMPACT, HEAVY, hook_payloads
from support.helpers import claude_event
from support.replay import transcript_payloads
from support.store import stored

from nmemd.errors import NmemError
from nmemd.mcp.tools import search_tool, sessions_tool
from nmemd.recall.handoff import SUMMARY_MAX, Handoff, fit, handoff, summarize_session

NOW = 1_800_000_000.0
CWD = "/tmp/nmem-handoff-project"


def _store(payloads: list[dict[str, Any]]) -> str:
    """Each payload through the real extractor and store, one batch each, 10 s apart; the db's path."""
    return stored(payloads, NOW - 86400)


@pytest.fixture
def conn_to() -> Iterator[Any]:
    conns: list[sqlite3.Connection] = []

    def connect(payloads: list[dict[str, Any]]) -> sqlite3.Connection:
        conns.append(sqlite3.connect(f"file:{_store(payloads)}?mode=ro", uri=True))
        return conns[-1]

    yield connect
    for c in conns:
        c.close()


def traced(conn: sqlite3.Connection, h: Handoff) -> Handoff:
    """`h`, after checking that every line has observations behind it, all of that session."""
    assert h.lines, f"no handoff for {h.session_id}"
    own = {r[0] for r in conn.execute("SELECT id FROM observations WHERE session_id = ?", (h.session_id,))}
    for line in h.lines:
        assert line.ids and set(line.ids) <= own, line
    return h


def kinds(h: Handoff) -> list[str]:
    return [line.kind for line in h.lines]


def line_of(h: Handoff, kind: str) -> str:
    return next(line.text for line in h.lines if line.kind == kind)


# --- one per agent, from each agent's real-shaped events -----------------------------------------


def test_claude_code_live_hooks_and_an_imported_transcript(conn_to: Any) -> None:
    live = [p for _, p in hook_payloads()]
    conn = conn_to(live + transcript_payloads(HEAVY) + transcript_payloads(COMPACT))
    sessions = [r[0] for r in conn.execute("SELECT session_id FROM sessions WHERE event_count > 2")]
    assert len(sessions) >= 3
    for sid in sessions:
        h = traced(conn, handoff(conn, sid))
        assert h.agent == "claude-code", h.render()
    lifecycle_only = handoff(conn, "5e9b2c74-1a03-4d8f-b6e2-7c4a9d0f3b28")  # subagents and a compaction
    assert [line.kind for line in lifecycle_only.lines] == ["activity"]
    compacted = next(s for s in sessions if s in {p.get("session_id") for p in transcript_payloads(COMPACT)})
    h = handoff(conn, compacted)
    assert kinds(h) == ["asked", "changed"], h.render()


def test_codex(conn_to: Any) -> None:
    from support.payloads.codex import SESSION, real_payloads

    conn = conn_to(real_payloads())
    h = traced(conn, handoff(conn, SESSION))
    assert h.agent == "codex"
    assert line_of(h, "asked") == '"edit the notes"'
    assert line_of(h, "changed") == "notes.txt (1 edit, +1 -1 lines)"
    assert line_of(h, "concluded") == "Edited notes.txt."


def test_gemini_cli(conn_to: Any) -> None:
    from support.payloads.gemini import SESSION, real_payloads

    conn = conn_to([p for p in real_payloads() if p["hook_event_name"] != "BeforeTool"])
    h = traced(conn, handoff(conn, SESSION))
    assert h.agent == "gemini" and line_of(h, "asked") == '"E2E-edit: write hello"'
    assert line_of(h, "changed").startswith("b.txt (1 edit, created")
    assert "concluded" in kinds(h)


def test_copilot_cli(conn_to: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from support.payloads.copilot import DATA, EVENTS, SESSION, real_payloads

    state = tmp_path / "copilot" / "session-state" / SESSION
    state.mkdir(parents=True)
    shutil.copy(EVENTS, state / "events.jsonl")
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "copilot"))
    assert DATA.is_dir()
    conn = conn_to(real_payloads())
    h = traced(conn, handoff(conn, SESSION))
    assert h.agent == "copilot" and line_of(h, "asked") == '"Do it E2E-one"'
    assert any(k in kinds(h) for k in ("failed", "fixed")), h.render()


def test_cursor(conn_to: Any) -> None:
    from support.payloads.cursor import session

    conn = conn_to([{"nmem_agent": "cursor", **p} for p in session("conv-handoff")])
    h = traced(conn, handoff(conn, "conv-handoff"))
    assert h.agent == "cursor" and line_of(h, "asked") == '"make the walrus parser accept tabs"'
    assert line_of(h, "changed").startswith("walrus.py (1 edit")
    # Cursor reports no exit status: the test run's own output says it failed
    checks = [line.text for line in h.lines if line.kind == "checks"]
    assert checks == ["`make lint` failed", "`pytest -q tests/test_walrus.py` ran; its output reports failures"]
    assert line_of(h, "concluded") == "The walrus parser now splits on any whitespace."


def test_cline(conn_to: Any) -> None:
    from support.payloads.cline import task_events

    conn = conn_to([{"nmem_agent": "cline", **p} for p in task_events("task-handoff")])
    sid = conn.execute("SELECT session_id FROM sessions").fetchone()[0]
    h = traced(conn, handoff(conn, sid))
    assert h.agent == "cline"
    assert "`npm run lint` failed" in line_of(h, "failed")
    assert {"changed", "checks"} <= set(kinds(h)), h.render()


def test_opencode(conn_to: Any, tmp_path: Path) -> None:
    from support.payloads.opencode import SESSION, plugin_payloads

    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    conn = conn_to([{"nmem_agent": "opencode", **p} for p in plugin_payloads(project)])
    h = traced(conn, handoff(conn, SESSION))
    assert h.agent == "opencode" and h.lines[0].kind == "asked", h.render()


# --- what each line says -------------------------------------------------------------------------


def _p(event: str, **fields: Any) -> dict[str, Any]:
    return claude_event(event, "work", CWD, **fields)


def _bash(command: str, out: str = "ok") -> dict[str, Any]:
    return _p("PostToolUse", tool_name="Bash", tool_input={"command": command},
              tool_response={"stdout": out, "stderr": "", "interrupted": False})  # fmt: skip


def _fail(command: str, output: str) -> dict[str, Any]:
    return _p("PostToolUseFailure", tool_name="Bash", tool_input={"command": command}, error=f"Exit code 1\n{output}")


def _edit(path: str, new: str = "b\nc") -> dict[str, Any]:
    return _p("PostToolUse", tool_name="Edit",
              tool_input={"file_path": f"{CWD}/{path}", "old_string": "a", "new_string": new})  # fmt: skip


COMPACT_SUMMARY = """This session is being continued from a previous conversation. Analysis: ...
7. Pending Tasks:
   - Wire the parser into the CLI
   - Document the tab rule
8. Current Work:
   I was making the walrus parser keep tabs.
9. Optional Next Step:
   Run the parser tests again after wiring the CLI.
Please continue the conversation from where we left it off without asking the user any further questions."""


def test_each_line_says_what_happened_with_its_observations(conn_to: Any) -> None:
    todos = [{"content": "keep tabs", "status": "completed", "activeForm": "x"},
             {"content": "wire the CLI", "status": "in_progress", "activeForm": "x"},
             {"content": "write the docs", "status": "pending", "activeForm": "x"}]  # fmt: skip
    conn = conn_to([
        _p("UserPromptSubmit", prompt="make the walrus parser keep tabs in quoted fields"),
        _fail("pytest -q tests/test_walrus.py", "tests/test_walrus.py F  [100%]\n"
              "E   AssertionError: 'a\\tb' != 'a b'\nFAILED tests/test_walrus.py::test_tabs"),
        _edit("src/walrus.py", "x\ny\nz"),
        _bash("pytest -q tests/test_walrus.py", "3 passed in 0.1s"),
        _fail("npm run build", "src/app.ts(3,1): error TS2304: Cannot find name 'walrus'."),
        _p("UserPromptSubmit", prompt="continue"),
        _p("UserPromptSubmit", prompt="now package the release notes for version two on the website"),
        _p("PostToolUse", tool_name="TodoWrite", tool_input={"todos": todos}, tool_response={"newTodos": todos}),
        _p("PostCompact", trigger="auto", compact_summary=COMPACT_SUMMARY),
        _p("Stop", last_assistant_message="The root cause was the split on a single space instead of any"
           " whitespace. Tabs are kept now; the build still fails on app.ts."),
    ])  # fmt: skip
    h = traced(conn, handoff(conn, "work"))
    ids = {r[1]: r[0] for r in conn.execute("SELECT id, title FROM observations")}
    assert h.render() == [
        f'Asked: "make the walrus parser keep tabs in quoted fields"'
        f" (#{ids['make the walrus parser keep tabs in quoted fields']})",
        f'Then asked: "now package the release notes for version two on the website"'
        f" (#{ids['now package the release notes for version two on the website']})",
        f"Changed: src/walrus.py (1 edit, +3 -1 lines) (#{ids['Edit src/walrus.py (-1 +3 lines)']})",
        f"Failed: `npm run build` failed: src/app.ts(3,1): error TS2304: Cannot find name 'walrus'.; not seen"
        f" passing after (#{ids['Bash failed (exit 1): npm run build']})",
        f"Fixed: `pytest -q tests/test_walrus.py` failed: E AssertionError: 'a\\tb' != 'a b' → fixed by editing"
        f" src/walrus.py; then it passed (#{ids['Bash failed (exit 1): pytest -q tests/test_walrus.py']}"
        f" #{ids['Edit src/walrus.py (-1 +3 lines)']} #{ids['$ pytest -q tests/test_walrus.py']})",
        f"Last run: `npm run build` failed (#{ids['Bash failed (exit 1): npm run build']})",
        f"Last run: `pytest -q tests/test_walrus.py` passed (#{ids['$ pytest -q tests/test_walrus.py']})",
        f"Open tasks: [~] wire the CLI; [ ] write the docs (#{ids['Todos 1/3 done; now: wire the CLI']})",
        f"Pending: Wire the parser into the CLI; Document the tab rule (#{ids['Compacted (auto)']})",
        f"Next step: Run the parser tests again after wiring the CLI. (#{ids['Compacted (auto)']})",
        "Concluded: The root cause was the split on a single space instead of any whitespace. Tabs are kept now;"
        f" the build still fails on app.ts. (#{max(ids.values())})",
    ]
    assert summarize_session(conn, "work") == "\n".join(h.render())


def test_a_bounded_handoff_keeps_whole_lines_by_priority(conn_to: Any) -> None:
    payloads = [_p("UserPromptSubmit", prompt="x" * 3000)]
    for n in range(40):
        payloads += [_edit(f"very/long/path/number/{n}/" + "d" * 80 + ".py"), _fail(f"make t{n}", "z" * 300)]
    payloads.append(_p("Stop", last_assistant_message="done " * 500))
    conn = conn_to(payloads)
    text = summarize_session(conn, "work")
    assert 1000 < len(text) <= SUMMARY_MAX
    assert [line.split(":")[0] for line in text.splitlines()][:1] == ["Asked"] and "Concluded: done" in text
    h = handoff(conn, "work")
    assert all(len(line) <= 300 for line in fit(h.lines, 10**6))
    assert summarize_session(conn, "no-such-session") == ""
    assert handoff(conn, "no-such-session").lines == []


def test_the_mcp_sessions_tool_shows_each_sessions_handoff(conn_to: Any) -> None:
    conn = conn_to([_p("UserPromptSubmit", prompt="make the walrus parser keep tabs"), _edit("src/walrus.py")])
    text = sessions_tool(conn, CWD, None, 10, NOW)
    assert '\nAsked: "make the walrus parser keep tabs" (#1)\nChanged: src/walrus.py (1 edit, +2 -1 lines) (#2)' in text


def test_the_mcp_search_tool_takes_a_session_prefix_as_the_cli_does(conn_to: Any) -> None:
    """The tools resolve a session prefix with the CLI's own `queries.resolve_session`: a unique prefix
    narrows, a short or ambiguous one is a one-line error the model can act on."""
    asked = [("walrus-1111", "make the walrus parser keep tabs"), ("walrus-2222", "document the walrus parser")]
    conn = conn_to([claude_event("UserPromptSubmit", sid, CWD, prompt=prompt) for sid, prompt in asked])
    found = search_tool(conn, CWD, "walrus parser", None, None, "walrus-1", None, None, None, 10, NOW)
    assert "keep tabs" in found and "document the walrus" not in found
    with pytest.raises(NmemError, match="a prefix needs at least 4 characters"):
        search_tool(conn, CWD, "walrus", None, None, "wal", None, None, None, 10, NOW)
    with pytest.raises(NmemError, match="session prefix 'walrus' is ambiguous"):
        search_tool(conn, CWD, "walrus", None, None, "walrus", None, None, None, 10, NOW)


# --- the pieces the lines are made of ------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "key"),
    [
        ("npm run build", "npm run build"),
        ('cd "/a b" && npm run build 2>&1 | tail -5', "npm run build"),
        ("nix develop --command go list -m all", "go list -m"),
        ("npx playwright test tests/x.spec.ts --headed", "playwright test tests/x.spec.ts"),
        ("uv run ruff check src/", "ruff check src/"),
        ("timeout 3s ./app serve --port 1", "./app serve --port"),
        ("PYTHONPATH=src python3 -m pytest tests/", "python3 -m pytest"),
        ("cd /tmp/kit && PYTHONPATH=src python3 -m pytest tests/", "python3 -m pytest"),
        ("bun install react@19 react-dom@19", "bun install"),
    ],
)
def test_a_command_is_known_by_what_it_runs(command: str, key: str) -> None:
    """Reruns match (`npm run build` after `cd x && npm run build`); a wrapper is not the command."""
    from nmemd.recall.outcomes import command_key

    assert command_key(command) == key


def test_the_error_line_is_the_one_that_says_what_went_wrong() -> None:
    from nmemd.recall.facts import error_lines

    pytest_out = "tests/x.py F  [100%]\n\n    def test_a():\n>       assert 'a' == 'b'\nE   AssertionError: 'a' != 'b'"
    assert error_lines(pytest_out, 1) == ["E AssertionError: 'a' != 'b'"]
    eslint = "97:10 Warning: 'x' is assigned a value but never used\n29:42 Error: The `Function` type accepts any"
    assert error_lines(eslint, 1) == ["29:42 Error: The `Function` type accepts any"]
    jest = "✓ returns null when the comment is not found (1 ms)\n● Validation Error: Module ts-jest was not found"
    assert error_lines(jest, 1) == ["● Validation Error: Module ts-jest was not found"]
    assert error_lines("all good\n3 passed", 1) == []
