"""Recall: the SessionStart context, session summaries, prompt-time recall.

End to end: the transcripts and hook payloads of tests/data replayed as hooks through `nmem-send` into a real
daemon, then a SessionStart through the same client. Unit level: the budget
and ordering rules of `build_context` on a synthetic database built by the
real extractor and store.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows
from support.fixtures import HEAVY, hook_payloads
from support.helpers import send_frame, wait_until
from support.replay import session_event, transcript_payloads

from nmem_client import protocol
from nmemd import config
from nmemd.capture.extract import extract
from nmemd.recall.context import CLOSE, FIRST_PASS, HARD_CAP, MAX_ROWS, OPEN, build_context
from nmemd.recall.replies import keywords, prompt_context
from nmemd.store import fts
from nmemd.store.batches import Incoming
from nmemd.store.database import open_store

ORCHARD = "/home/dev/projects/orchard"  # the project of the transcripts
LIGHTHOUSE = "/Users/dev/work/lighthouse"  # the project of the hook payloads
NOW = 1_800_000_000.0

# --- end to end through nmem-send and nmemd ----------------------------------------------------


def _hook_fixtures() -> list[dict[str, Any]]:
    return [payload for _, payload in hook_payloads()]


def _send(payload: dict[str, Any]) -> bytes:
    done = run_send(json.dumps(payload).encode())
    assert done.returncode == 0 and done.stderr == b""
    return done.stdout


def _context_of(stdout: bytes, event: str = "SessionStart") -> str:
    reply = json.loads(stdout)
    assert reply["hookSpecificOutput"]["hookEventName"] == event
    text: str = reply["hookSpecificOutput"]["additionalContext"]
    assert text.startswith(OPEN) and text.endswith(CLOSE) and len(text) <= HARD_CAP
    return text


def _start(cwd: str, session_id: str, source: str = "startup") -> bytes:
    return _send(session_event("SessionStart", session_id, cwd, source=source, model="claude-opus-4-6"))


@pytest.mark.timeout(90)
def test_replayed_work_comes_back_at_the_next_session_start(daemon: Daemon) -> None:
    daemon.start()
    for payload in transcript_payloads(HEAVY) + _hook_fixtures():
        _send(payload)

    orchard = _context_of(_start(ORCHARD, "new-orchard-session"))
    for fact in ("start the dev server in background", "npm run dev", "web/src/panel.ts"):
        assert fact in orchard, fact
    lighthouse = _context_of(_start(LIGHTHOUSE, "new-lighthouse-session"))
    for fact in ("NOTES.md", "templates/hooks.json.template", "stat -L", "Review the lint hooks",
                 "Shorten NOTES.md"):  # fmt: skip
        assert fact in lighthouse, fact
    assert "[x]" not in lighthouse  # completed todo items are not "open tasks"
    # Another project's data never leaks in.
    for fact in ("dev server", "panel.ts", "orchard"):
        assert fact not in lighthouse.lower(), fact
    for fact in ("NOTES.md", "lighthouse", "hooks.json"):
        assert fact not in orchard, fact
    # A project with no history: nothing on stdout at all.
    assert _start("/tmp/nmem-no-such-project", "new-empty-session") == b""


@pytest.mark.timeout(60)
def test_session_end_summary_is_shown_to_the_next_session(daemon: Daemon) -> None:
    daemon.start()
    payloads = transcript_payloads(HEAVY)
    sid = payloads[0]["session_id"]
    for payload in payloads:
        _send(payload)
    _send(session_event("Stop", sid, ORCHARD, stop_hook_active=False,
                        last_assistant_message="The dev server is up on 5173; the fix is in panel.ts."))  # fmt: skip
    _send(session_event("SessionEnd", sid, ORCHARD, reason="clear"))
    summary = wait_until(
        lambda: (db_rows(daemon.db, "SELECT summary FROM sessions WHERE session_id = ?", (sid,)) or [(None,)])[0][0],
        10, "the session summary to be stored",
    )  # fmt: skip
    assert summary.startswith('Asked: "start the dev server in background" (#')
    assert "\nLast run: `npm run dev` passed (#" in summary and "\nConcluded: The dev server is up" in summary

    text = _context_of(_start(ORCHARD, "after-clear", source="clear"))
    assert f"## Latest session: just now, session {sid[:8]} (ended: clear" in text
    for line in summary.splitlines():
        if line.startswith(("Asked:", "Concluded:", "Last run:")):
            assert "- " + line in text.splitlines(), line


def test_injected_context_sent_back_in_a_prompt_is_not_stored(daemon: Daemon) -> None:
    daemon.start()
    for payload in transcript_payloads(HEAVY):
        _send(payload)
    text = _context_of(_start(ORCHARD, "echo-session"))
    prompt = f"{text}\nplease restart the server"
    assert _send({**session_event("UserPromptSubmit", "echo-session", ORCHARD), "prompt": prompt}) == b""
    stored = wait_until(
        lambda: db_rows(daemon.db, "SELECT title, content FROM observations WHERE session_id = 'echo-session'"
                        " AND type = 'prompt'"), 10, "the prompt to be stored")  # fmt: skip
    assert stored == [("please restart the server", "please restart the server")]
    for marker in ("nmem-context", "Latest session", "npm run dev"):
        relaxed = fts.relax(f'"{marker}"')  # the index holds no positions (m008): none of the rows holds the words
        assert db_rows(daemon.db, "SELECT count(*) FROM observations_fts WHERE observations_fts MATCH ?"
                       " AND rowid IN (SELECT id FROM observations WHERE session_id = 'echo-session')",
                       (relaxed.match if relaxed else f'"{marker}"',)) == [(0,)], marker  # fmt: skip


def test_context_rpc_and_prompt_recall(daemon: Daemon) -> None:
    daemon.env["NMEM_PROMPT_RECALL"] = "true"
    daemon.start()
    for payload in transcript_payloads(HEAVY):
        _send(payload)
    body = json.dumps({"method": "context", "params": {"project": ORCHARD}}).encode()
    status, reply = send_frame(daemon.socket, protocol.KIND_RPC, protocol.NO_EVENT_ID, body)
    assert status == b"OK"
    result = json.loads(reply)
    assert result["project"] == ORCHARD and "npm run dev" in result["context"]
    status, reply = send_frame(daemon.socket, protocol.KIND_RPC, protocol.NO_EVENT_ID,
                               json.dumps({"method": "context", "params": {}}).encode())  # fmt: skip
    assert status == b"ERR" and reply.startswith(b"QueryError "), reply  # the daemon's error, by its kind

    ask = {**session_event("UserPromptSubmit", "later", ORCHARD), "prompt": "is the scrollkit.js scroll fixed yet?"}
    recall = _context_of(_send(ask), "UserPromptSubmit")
    assert "scrollkit.js" in recall and len(recall) <= 1500
    unrelated = {**session_event("UserPromptSubmit", "later", ORCHARD), "prompt": "what is the weather today"}
    assert _send(unrelated) == b""


# --- build_context on a synthetic database -----------------------------------------------------


def _p(event: str, sid: str, cwd: str, **fields: Any) -> dict[str, Any]:
    return session_event(event, sid, cwd, **fields)


def _prompt(sid: str, cwd: str, text: str) -> dict[str, Any]:
    return _p("UserPromptSubmit", sid, cwd, prompt=text)


def _tool(sid: str, cwd: str, name: str, inp: dict[str, Any], resp: Any = None) -> dict[str, Any]:
    return _p("PostToolUse", sid, cwd, tool_name=name, tool_input=inp, tool_response=resp or {})


def _bash(sid: str, cwd: str, command: str) -> dict[str, Any]:
    return _tool(sid, cwd, "Bash", {"command": command}, {"stdout": "ok", "stderr": "", "interrupted": False})


def _fail(sid: str, cwd: str, command: str) -> dict[str, Any]:
    return _p("PostToolUseFailure", sid, cwd, tool_name="Bash", tool_input={"command": command},
              error="Exit code 1\nboom")  # fmt: skip


def _edit(sid: str, cwd: str, path: str) -> dict[str, Any]:
    return _tool(sid, cwd, "Edit", {"file_path": f"{cwd}/{path}", "old_string": "a", "new_string": "b\nc"})


def _read(sid: str, cwd: str, path: str) -> dict[str, Any]:
    return _tool(sid, cwd, "Read", {"file_path": f"{cwd}/{path}"},
                 {"type": "text", "file": {"filePath": f"{cwd}/{path}", "numLines": 10}})  # fmt: skip


def _todos(sid: str, cwd: str, *items: tuple[str, str]) -> dict[str, Any]:
    todos = [{"content": c, "status": s, "activeForm": c} for c, s in items]
    return _tool(sid, cwd, "TodoWrite", {"todos": todos}, {"newTodos": todos})


def _build(payloads: list[dict[str, Any]], start: float = NOW - 86400) -> str:
    """Store payloads one per batch, 10 s apart, through the real extractor and store; return the db path."""

    async def run() -> str:
        settings = config.load()
        async with open_store(settings) as store:
            for n, payload in enumerate(payloads):
                item = Incoming(event_id=f"e{n}", received_at=start + 10 * n, extracted=extract(payload))
                await store.commit_batch([item])
        return settings.db

    import anyio

    return anyio.run(run)


@pytest.fixture
def conn_to() -> Iterator[Any]:
    conns: list[sqlite3.Connection] = []

    def connect(db: str) -> sqlite3.Connection:
        conns.append(sqlite3.connect(f"file:{db}?mode=ro", uri=True))
        return conns[-1]

    yield connect
    for c in conns:
        c.close()


def _rich(project: str = "/p", sessions: int = 6, per: int = 6, pad: str = "") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for s in range(sessions):
        sid = f"sess{s:02d}-{project.strip('/')}"
        out += [
            _p("SessionStart", sid, project, source="startup"),
            _prompt(sid, project, f"task {s} in {project} {pad}"),
        ]
        for k in range(per):
            out += [_read(sid, project, f"src/{pad}mod{k}.py"), _edit(sid, project, f"src/{pad}mod{s}_{k}.py"),
                    _bash(sid, project, f"pytest tests/test_{s}_{k}.py -q {pad}"),
                    _fail(sid, project, f"make target{s}{k} {pad}"),
                    _bash(sid, project, f"echo looking {k}")]  # fmt: skip
        out.append(_todos(sid, project, ("write the parser", "completed"), (f"ship release {s}", "in_progress"),
                          ("update the docs", "pending")))  # fmt: skip
        out.append(_p("SessionEnd", sid, project, reason="logout"))
    return out


def test_no_history_means_no_context(conn_to: Any) -> None:
    db = _build([_p("SessionStart", "only-start", "/empty", source="startup")] + _rich("/q", 1, 1))
    conn = conn_to(db)
    assert build_context(conn, "/empty", session_id="only-start", now=NOW) == ""
    assert build_context(conn, "/never-seen", now=NOW) == ""
    assert build_context(conn, "", now=NOW) == ""


def test_budget_is_respected_with_whole_lines_by_priority(conn_to: Any) -> None:
    conn = conn_to(_build(_rich("/p", 3, 2) + _rich("/other", 2, 2)))
    full = build_context(conn, "/p", now=NOW, budget=HARD_CAP)
    assert len(full) < HARD_CAP - 400, "the small db must fit whole, to compare lines with"
    assert full == build_context(conn, "/p", now=NOW, budget=HARD_CAP)  # deterministic
    assert "other" not in full
    full_lines = set(full.splitlines())
    headings = [line for line in full.splitlines() if line.startswith("## ")]
    assert [re.split(r"[:(]", h)[0].strip() for h in headings] == ["## Latest session",
        "## Failures and what fixed them", "## Build, test and run commands", "## Earlier sessions",
        "## Open tasks", "## Files most worked on"]  # fmt: skip
    for budget in range(250, len(full) + 50, 37):
        text = build_context(conn, "/p", now=NOW, budget=budget)
        assert len(text) <= budget
        if text:
            assert text.startswith(OPEN + "\n") and text.endswith("\n" + CLOSE)
            assert set(text.splitlines()) <= full_lines, budget  # never a cut line
        # A little of everything before a lot of anything: no section gets more than its first
        # lines unless every section got them.
        shown = [len(part.strip("\n").splitlines()) - 1 for part in text.removesuffix(CLOSE).split("\n## ")[1:]]
        if any(n > FIRST_PASS for n in shown):
            assert len(shown) == len(headings) and min(shown) >= min(FIRST_PASS, 2), (budget, shown)
    two_thirds = build_context(conn, "/p", now=NOW, budget=len(full) * 2 // 3)
    assert [line for line in two_thirds.splitlines() if line.startswith("## ")] == headings


def test_hard_cap_holds_whatever_the_budget(conn_to: Any) -> None:
    conn = conn_to(_build(_rich("/p", 12, 10, pad="deeply/nested/package/" * 8)))
    text = build_context(conn, "/p", now=NOW, budget=10**9)
    assert 5000 < len(text) <= HARD_CAP
    assert build_context(conn, "/p", now=NOW) == build_context(conn, "/p", now=NOW, budget=5000)
    assert len(build_context(conn, "/p", now=NOW)) <= 5000
    assert build_context(conn, "/p", now=NOW, budget=0) == ""


def test_sections_state_facts(conn_to: Any) -> None:
    sid, cwd = "facts", "/f"
    conn = conn_to(_build([
        _p("SessionStart", sid, cwd, source="startup"), _prompt(sid, cwd, "make the tests pass"),
        _fail(sid, cwd, "pytest -q"), _edit(sid, cwd, "src/app.py"), _bash(sid, cwd, "pytest -q"),
        _fail(sid, cwd, "npm run build"), _bash(sid, cwd, "npm run build"),
        _bash(sid, cwd, "pytest -q"), _bash(sid, cwd, "ls -la"), _fail(sid, cwd, "cargo build"),
        _todos(sid, cwd, ("a", "completed"), ("b", "in_progress")),
        _todos(sid, cwd, ("a", "completed"), ("b", "completed"), ("c", "pending")),
        _tool(sid, cwd, "Write", {"file_path": f"{cwd}/x </nmem-context> y.txt", "content": "z"}, {"type": "create"}),
    ]))  # fmt: skip
    text = build_context(conn, cwd, now=NOW)
    lines = text.splitlines()
    # outcomes first: what the latest session was asked, how its builds and tests last ended
    assert lines[lines.index("## Latest session: 24 h ago, session facts (no end recorded, 13 events)") + 1 :][:3] == [
        '- Asked: "make the tests pass" (#2)', "- Last run: `cargo build` failed (#9)",
        "- Last run: `npm run build` passed (#7)"]  # fmt: skip
    assert "- Open tasks: [ ] c (#11)" in lines  # the latest list only
    # what failed, and what came after it and passed
    assert "- Fixed: `pytest -q` failed → fixed by editing src/app.py; then it passed (#3 … #5)" in lines
    assert "- Fixed: `npm run build` failed → passed when run again (#6 #7)" in lines
    assert "- Failed: `cargo build` failed; not seen passing after (#9)" in lines
    assert "- Changed: x ‹/nmem-context> y.txt (created, 1 line) (#12)" in lines  # stored text never closes the wrapper
    assert text.count(CLOSE) == 1
    assert "- [ ] c" in lines and "- [~] b" not in lines and "- a" not in text
    commands = text.split("## Build, test and run commands")[1].split("\n## ")[0].splitlines()[1:]
    assert commands == ["- `cargo build`: failed (24 h ago, #9)", "- `npm run build`: passed (24 h ago, #7)",
                        "- `pytest -q`: passed (2 runs, 24 h ago, #5)"]  # fmt: skip
    assert "ls -la" not in text  # looking around is not how the project is built
    assert "- src/app.py: 1 edit (latest: 24 h ago)" in lines


def test_causes_and_decisions_the_assistant_stated_are_listed_with_their_message(conn_to: Any) -> None:
    sid, cwd = "why", "/w"
    conn = conn_to(_build([
        _prompt(sid, cwd, "why do messages stay pending?"),
        _p("Stop", sid, cwd, last_assistant_message="Let me look.\n\n**Root cause:** the hooks run in a separate"
           " shell, so the env var is not there.\nI will fix it."),
        _prompt(sid, cwd, "ok which token do we use"),
        _p("Stop", sid, cwd, last_assistant_message="We decided to use SUBMODULE_TOKEN instead of GITHUB_TOKEN for"
           " the sync workflow."),
    ]))  # fmt: skip
    text = build_context(conn, cwd, now=NOW)
    section = text.removesuffix(CLOSE).split("## Causes and decisions stated by the assistant (newest first)\n")[1]
    section = section.split("\n\n")[0].strip()
    stops = [r[0] for r in conn.execute("SELECT id FROM observations WHERE type = 'stop' ORDER BY id")]
    assert section.splitlines() == [
        f"- We decided to use SUBMODULE_TOKEN instead of GITHUB_TOKEN for the sync workflow. (#{stops[1]})",
        f"- Root cause: the hooks run in a separate shell, so the env var is not there. (#{stops[0]})",
    ]


def test_compaction_puts_the_sessions_own_work_first(conn_to: Any) -> None:
    cwd = "/c"
    mine = [_p("SessionStart", "mine", cwd, source="startup"), _prompt("mine", cwd, "refactor the parser"),
            _edit("mine", cwd, "parser.py"), _bash("mine", cwd, "pytest tests/test_parser.py")]  # fmt: skip
    other = [_p("SessionStart", "other", cwd, source="startup"), _prompt("other", cwd, "docs")]
    other += [_edit("other", cwd, "docs/index.md") for _ in range(5)] + [_bash("other", cwd, "make docs")]
    conn = conn_to(_build(mine + other + [_p("PreCompact", "mine", cwd, trigger="auto")]))
    startup = build_context(conn, cwd, session_id="new", now=NOW).split("## Files most worked on")[1]
    assert startup.index("docs/index.md") < startup.index("parser.py")
    compact = build_context(conn, cwd, session_id="mine", source="compact", now=NOW)
    assert "## Latest session: 24 h ago, this session, before compaction" in compact
    files = compact.split("## Files most worked on")[1]
    assert files.index("parser.py") < files.index("docs/index.md")
    commands = compact.split("## Build, test and run commands")[1]
    assert commands.index("pytest tests/test_parser.py") < commands.index("make docs")


def test_work_sections_read_the_newest_rows_only(conn_to: Any) -> None:
    """Files, errors and commands come from the newest MAX_ROWS rows of the recent sessions, so a
    context costs the same on a project of a million rows; older work is still listed as a session."""
    cwd = "/big"
    old = [_prompt("old", cwd, "early work"), _edit("old", cwd, "early.py"), _bash("old", cwd, "make early"),
           _fail("old", cwd, "make early-broken")]  # fmt: skip
    new = [_prompt("new", cwd, "later work")] + [_edit("new", cwd, f"late{n % 5}.py") for n in range(MAX_ROWS)]
    new += [_bash("new", cwd, "make late")]
    text = build_context(conn_to(_build(old + new)), cwd, now=NOW, budget=HARD_CAP)
    assert "late0.py" in text and "make late" in text and 'asked "early work"' in text
    for older in ("early.py", "make early", "make early-broken"):
        assert older not in text, older


def test_task_tools_state_is_rebuilt(conn_to: Any) -> None:
    sid, cwd = "tasks", "/t"
    created = [_tool(sid, cwd, "TaskCreate", {"subject": f"step {n}"}, {"task": {"id": str(n), "subject": f"step {n}"}})
               for n in (1, 2, 3)]  # fmt: skip
    done = _tool(sid, cwd, "TaskUpdate", {"taskId": "1", "status": "completed"})
    started = _tool(sid, cwd, "TaskUpdate", {"taskId": "2", "status": "in_progress"})
    conn = conn_to(_build([_prompt(sid, cwd, "go"), *created, done, started]))
    lines = build_context(conn, cwd, now=NOW).splitlines()
    assert "- [~] step 2" in lines and "- [ ] step 3" in lines and "- [ ] step 1" not in lines


def test_prompt_recall_needs_relevance_and_skips_the_current_session(conn_to: Any) -> None:
    cwd = "/r"
    conn = conn_to(_build([_prompt("past", cwd, "fix the websocket reconnect in LiveSocket"),
                           _edit("past", cwd, "assets/js/live_socket.js"),
                           _prompt("now", cwd, "LiveSocket reconnect again")]))  # fmt: skip
    assert keywords("Please fix LiveSocket in assets/js/app.js, it does not reconnect") == [
        ("livesocket", 2.0), ("assets/js/app.js", 2.0), ("reconnect", 1.0)]  # fmt: skip
    text = prompt_context(conn, cwd, "now", "why does LiveSocket not reconnect?", now=NOW)
    assert text.startswith(OPEN) and "fix the websocket reconnect in LiveSocket" in text
    assert "LiveSocket reconnect again" not in text  # the asking session itself
    assert prompt_context(conn, cwd, "now", "what about the weather", now=NOW) == ""
    assert prompt_context(conn, "/elsewhere", "now", "LiveSocket reconnect", now=NOW) == ""


def test_a_deadline_leaves_out_what_is_not_ready_and_never_raises(conn_to: Any) -> None:
    """SessionStart answers within the client's timeout: past the deadline nothing waits, nothing breaks."""
    conn = conn_to(_build(_rich("/p", 3, 2)))
    full = build_context(conn, "/p", now=NOW, budget=HARD_CAP)
    assert full
    assert build_context(conn, "/p", now=NOW, budget=HARD_CAP, deadline=time.monotonic() - 1) == ""
    # the abort handler is gone afterwards: the same connection answers in full again
    assert build_context(conn, "/p", now=NOW, budget=HARD_CAP, deadline=time.monotonic() + 60) == full
    assert build_context(conn, "/p", now=NOW, budget=HARD_CAP) == full
