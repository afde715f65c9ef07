"""Recall: the budget and ordering rules of `build_context` on a synthetic database built by the real
extractor and store, and prompt-time recall (the same through hooks into a real daemon:
tests/daemon/test_context_hooks.py)."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.helpers import claude_event
from support.store import stored

from nmemd.recall.context import CLOSE, FIRST_PASS, HARD_CAP, MAX_ROWS, OPEN, build_context
from nmemd.recall.replies import keywords, prompt_context

NOW = 1_800_000_000.0

# --- build_context on a synthetic database -----------------------------------------------------


def _p(event: str, sid: str, cwd: str, **fields: Any) -> dict[str, Any]:
    return claude_event(event, sid, cwd, **fields)


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
    return stored(payloads, start)


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


def _failures(text: str) -> str:
    return text.split("## Failures and what fixed them")[1].split("\n## ")[0] if "## Failures" in text else ""


def test_kept_sections_are_built_again_once_a_row_of_their_sessions_is_written_or_deleted(conn_to: Any) -> None:
    """What failed and what fixed it is kept between SessionStarts (the same rows say the same), and read
    again when a row of the scope's sessions is written (a newer id) or deleted (one row fewer)."""
    sid, cwd = "kept", "/k"
    db = _build([_prompt(sid, cwd, "build it"), _fail(sid, cwd, "make all"), _bash(sid, cwd, "ls -la")])
    first = build_context(conn_to(db), cwd, now=NOW)
    assert "- Failed: `make all` failed" in _failures(first)
    assert build_context(conn_to(db), cwd, session_id="next", now=NOW) == first
    stored([_fail(sid, cwd, "cargo test")], NOW - 3600)
    second = _failures(build_context(conn_to(db), cwd, now=NOW))
    assert "`cargo test` failed" in second and "`make all` failed" in second
    writer = sqlite3.connect(db)
    writer.execute("DELETE FROM observations WHERE command = 'make all'")  # not the newest row
    writer.commit()
    writer.close()
    third = _failures(build_context(conn_to(db), cwd, now=NOW))
    assert "`cargo test` failed" in third and "make all" not in third


def test_kept_sections_follow_a_run_merged_a_row_deleted_outside_the_scope_and_the_time(conn_to: Any) -> None:
    """Every section is kept between SessionStarts, and read again after what their rows say changed: a command
    run again (merged into its row: no new row), a row deleted outside the newest MAX_ROWS (a session's first
    prompt, which its line quotes); what depends on the time is written each time."""
    cwd = "/m"
    old = [_prompt("old", cwd, "early work"), _edit("old", cwd, "early.py")]
    new = [_prompt("new", cwd, "later work")] + [_edit("new", cwd, f"late{n % 5}.py") for n in range(MAX_ROWS)]
    db = _build(old + new + [_bash("new", cwd, "make late")])
    first = build_context(conn_to(db), cwd, now=NOW, budget=HARD_CAP)
    assert 'asked "early work"' in first and "- `make late`: passed (" in first
    assert build_context(conn_to(db), cwd, session_id="next", now=NOW, budget=HARD_CAP) == first
    later = build_context(conn_to(db), cwd, now=NOW + 3 * 86400, budget=HARD_CAP)
    assert "(latest: 4 days ago)" in later and "(latest: 4 days ago)" not in first  # written for its own time
    stored([_bash("new", cwd, "make late")], NOW - 60)  # the same command again: merged into its row
    assert "- `make late`: passed (2 runs, " in build_context(conn_to(db), cwd, now=NOW, budget=HARD_CAP)
    writer = sqlite3.connect(db)
    writer.execute("DELETE FROM observations WHERE title LIKE '%early work%'")
    writer.commit()
    writer.close()
    assert 'asked "early work"' not in build_context(conn_to(db), cwd, now=NOW, budget=HARD_CAP)


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
