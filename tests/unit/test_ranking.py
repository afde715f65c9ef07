"""How search ranks (nmemd.recall.search, .ranking), in process: a few real-shaped Claude Code events
through the real extractor and store into a real SQLite file, each test's own, then `search` on a
read-only connection. The same rules over a larger corpus a real daemon stored: tests/daemon/test_search.py."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import claude_bash, claude_edit, claude_event, claude_failure, claude_tool
from support.store import STEP_S, stored

from nmemd import config
from nmemd.model import CLAUDE_CODE, Extracted, Observation
from nmemd.recall import ranking
from nmemd.recall.queries import Filters, Hit, teammates_of
from nmemd.recall.search import search
from nmemd.store.batches import Incoming
from nmemd.store.database import open_store

SID = "sess-rank-0001"
NOW = time.time()
DAY = 86400.0


@pytest.fixture
def project(tmp_path: Path) -> str:
    (tmp_path / "walrus" / ".git").mkdir(parents=True)
    return str(tmp_path / "walrus")


def _read(cwd: str, rel: str, text: str) -> dict[str, Any]:
    path = f"{cwd}/{rel}"
    return claude_tool(SID, cwd, "Read", {"file_path": path},
                       {"type": "text", "file": {"filePath": path, "content": text, "numLines": 1,
                                                 "startLine": 1, "totalLines": 1}})  # fmt: skip


def _prompt(cwd: str, text: str, session: str = SID) -> dict[str, Any]:
    return claude_event("UserPromptSubmit", session, cwd, prompt=text)


def searcher(payloads: list[dict[str, Any]]) -> Callable[..., list[Hit]]:
    """The test's corpus: `payloads` stored oldest first (STEP_S apart, the last one a minute ago), after a
    few rows of other words (a word every row holds tells nothing: its idf is nil); then `search` on it."""
    filler = [_prompt("/tmp/filler", f"unrelated chore {n}", session="sess-filler") for n in range(3)]
    db = stored(filler + payloads, start=NOW - 60 - STEP_S * (len(filler) + len(payloads)))

    def ranked(text: str, limit: int = 20, **filters: Any) -> list[Hit]:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return search(conn, text, Filters(**filters), limit=limit, now=NOW)
        finally:
            conn.close()

    return ranked


def titles(hits: list[Hit]) -> Iterator[str]:
    return (h.title for h in hits)


def test_a_row_holding_more_of_the_words_ranks_first_even_when_older(project: str) -> None:
    ranked = searcher([_prompt(project, "make the walrus parser keep tabs"), _prompt(project, "the walrus is back"),
                       _prompt(project, "walrus walrus walrus")])  # fmt: skip
    hits = ranked("walrus parser tabs")
    assert next(titles(hits)) == "make the walrus parser keep tabs"
    assert len(hits) == 3  # a row with one of the words is still found


def test_an_edit_outranks_a_newer_read_of_the_same_file(project: str) -> None:
    ranked = searcher([claude_edit(SID, project, "src/walrus.py", "split(' ')", "split()"),
                       _read(project, "src/walrus.py", "def parse(line): return line.split()")])  # fmt: skip
    assert [h.type for h in ranked("walrus.py")] == ["edit", "read"]


def test_of_two_equal_rows_the_newer_ranks_first(project: str) -> None:
    hits = searcher([_prompt(project, "fix the walrus parser"), _prompt(project, "fix the walrus lexer")])("walrus")
    assert list(titles(hits)) == ["fix the walrus lexer", "fix the walrus parser"] and hits[0].ts > hits[1].ts


def test_a_fresh_row_outranks_a_stronger_one_from_months_ago(project: str) -> None:
    stored(
        [_prompt(project, "the walrus parser: walrus tabs, walrus spaces, walrus parser again")], start=NOW - 90 * DAY
    )
    hits = searcher([_prompt(project, "the walrus parser")])("walrus parser")
    assert list(titles(hits))[0] == "the walrus parser" and len(hits) == 2


def test_a_question_about_an_edit_finds_the_edit_before_the_prompt_that_asked_for_it(project: str) -> None:
    edit = claude_edit(SID, project, "src/invoice.py", "float(x)", "Decimal(x)  # decimal amounts")
    ranked = searcher([_prompt(project, "use decimal amounts in the invoice"), edit])
    hits = ranked("which file did we edit to use decimal amounts?")
    assert hits[0].type == "edit" and hits[0].file_path == f"{project}/src/invoice.py"


def test_a_test_run_outranks_a_newer_look_at_the_same_file(project: str) -> None:
    ranked = searcher([claude_bash(SID, project, "pytest -q tests/test_walrus.py", "3 passed in 0.10s"),
                       claude_bash(SID, project, "cat tests/test_walrus.py", "def test_tabs(): ...")])  # fmt: skip
    assert next(titles(ranked("test_walrus"))).startswith("$ pytest -q tests/test_walrus.py")


def test_an_identifier_is_found_by_its_words_and_the_words_by_the_identifier(project: str) -> None:
    ranked = searcher([claude_edit(SID, project, "src/panes.ts", "old()", "createPaneSplit()"),
                       _prompt(project, "keep the tab split as it was")])  # fmt: skip
    assert [h.type for h in ranked("pane split")][0] == "edit"
    assert [h.type for h in ranked("tabSplit")] == ["prompt"]


def test_a_phrase_keeps_its_order_and_a_missing_word_empties_nothing(project: str) -> None:
    ranked = searcher([_prompt(project, "use decimal amounts in the invoice")])
    assert ranked('"decimal amounts"') and ranked('"amounts decimal"') == []
    assert list(titles(ranked("decimal nonexistentword"))) == ["use decimal amounts in the invoice"]


def test_filters_narrow_to_a_project_a_type_a_session_and_a_time(project: str, tmp_path: Path) -> None:
    other = str(tmp_path / "other")
    ranked = searcher([_prompt(project, "the walrus parser"), _prompt(other, "a walrus elsewhere", session="sess-o2"),
                       claude_bash(SID, project, "pytest -k walrus", "1 passed")])  # fmt: skip
    assert {h.project for h in ranked("walrus")} == {project, other}
    assert {h.project for h in ranked("walrus", project=project)} == {project}
    assert [h.type for h in ranked("walrus", types=["command"])] == ["command"]
    assert [h.session_id for h in ranked("walrus", session_id="sess-o2")] == ["sess-o2"]
    assert ranked("walrus", until=NOW - 3600) == [] and len(ranked("walrus", since=NOW - 3600)) == 3


def test_the_limit_holds_and_the_best_score_comes_first(project: str) -> None:
    places = [a + b for a in ("ice", "sea", "fin") for b in ("bank", "cove", "reef", "spit", "floe", "shoal", "berg")]
    rows = [_prompt(project, f"walrus tusk by the {place}" + " walrus" * (n % 3)) for n, place in enumerate(places)]
    ranked = searcher(rows)
    assert len(ranked("walrus tusk", limit=5)) == 5
    hits = ranked("walrus tusk")
    assert len(rows) == 21 and len(hits) == 20  # the default limit; no two rows alike: none folded
    assert [h.similar for h in hits] == [0] * 20
    scores = [h.score for h in hits]
    assert all(s is not None for s in scores) and scores == sorted(scores)  # type: ignore[type-var]  # lower is better


def test_an_event_is_found_with_the_words_of_its_turn_before_the_prompt(project: str) -> None:
    """Asked in the prompt's words, the answer is an event of its turn that holds none of them (issue #39)."""
    ranked = searcher([
        _prompt(project, "lets deploy to update my github pages"),
        claude_bash(SID, project, "gh workflow list", "deploy  active  1234"),
        claude_failure(SID, project, "gh run watch", "run ID required when not running interactively"),
        _prompt(project, "now tidy the walrus readme"),
        claude_bash(SID, project, "gh run list", "completed success deploy"),
    ])  # fmt: skip
    hits = ranked("what went wrong when we deployed to update my github pages?")
    first = [h.title for h in hits[:3]]
    assert any("gh run watch" in t for t in first[:2]), first  # the turn's failure, first
    assert first.index("lets deploy to update my github pages") > next(
        i for i, t in enumerate(first) if "gh run watch" in t
    )  # the prompt after what came of it


def test_a_prompt_sent_again_brings_the_failure_of_its_first_turn(project: str) -> None:
    """The same prompt twice folds into one hit; the turn that failed is the first one's (issue #39)."""
    ranked = searcher([
        _prompt(project, "missing required error components, refreshing"),
        claude_failure(SID, project, "npx next build", "Invalid project directory provided, no such directory"),
        _prompt(project, "now tidy the walrus readme"),
        claude_bash(SID, project, "cat README.md", "walrus"),
        _prompt(project, "missing required error components, refreshing"),
        claude_bash(SID, project, "npm run dev", "ready on port 3000"),
    ])  # fmt: skip
    hits = ranked("what happened when we tried to fix the missing required error components?")
    first = [h.title for h in hits[:3]]
    assert any("npx next build" in t for t in first), first


def test_what_happened_brings_the_turns_next_failure_too(project: str) -> None:
    """Asked what came of a turn, its first failure and the one after it stand beside its prompt (issue #39)."""
    ranked = searcher([
        _prompt(project, "please check the walrus server log"),
        claude_failure(SID, project, "tail -f /var/log/walrus.log", "Permission denied"),
        claude_bash(SID, project, "ls /var/log", "walrus.log syslog"),
        claude_failure(SID, project, "open http://localhost:3000", "Cannot access a chrome:// URL from the tool"),
        claude_bash(SID, project, "ls /var/log/walrus", "old.log"),
    ])  # fmt: skip
    for asked in ("what happened when you tried to check the walrus server log?",
                  "were you able to check the walrus server log?"):  # fmt: skip
        first = [h.title for h in ranked(asked)[:3]]
        assert any("open http://localhost:3000" in t for t in first), (asked, first)  # none of the question's words


def test_a_failure_found_first_brings_what_the_agent_did_next(project: str) -> None:
    """The failure holds the question's words; the command right after it is how the agent got past it."""
    ranked = searcher([
        _prompt(project, "push the walrus report"),
        claude_failure(SID, project, "git commit -m 'walrus report'", "Author identity unknown: set user.email"),
        claude_bash(SID, project, "git config user.email tusk@example.org", ""),
        claude_bash(SID, project, "git commit -m 'walrus report'", "[main 1a2b3c] walrus report"),
    ])  # fmt: skip
    hits = ranked("which identity did we set to commit the walrus report?")
    assert [h.title for h in hits[:2]][1].startswith("$ git config user.email"), [h.title for h in hits[:3]]


def test_a_prompt_sent_again_with_its_first_time_keeps_the_first_turn(project: str) -> None:
    """A prompt sent again can carry its first sending's time (a resumed session's copy): the first turn still
    ends at the next prompt after it, not at the copy's time, and its failure is found (issue #39)."""
    rows = [
        _prompt(project, "deploy the walrus site to the edge network"),
        claude_failure(SID, project, "npx wrangler pages publish", "set CLOUDFLARE_API_TOKEN: non-interactive"),
        _prompt(project, "now tidy the walrus readme"),
        claude_bash(SID, project, "cat README.md", "walrus"),
        _prompt(project, "deploy the walrus site to the edge network"),
        claude_bash(SID, project, "npm run build", "compiled"),
    ]  # fmt: skip
    db = stored(rows, start=NOW - 3600)
    conn = sqlite3.connect(db)
    first, _, again = (r[0] for r in conn.execute("SELECT observation_id FROM prompts ORDER BY observation_id"))
    conn.execute("UPDATE prompts SET ts = (SELECT ts FROM prompts WHERE observation_id = ?) WHERE observation_id = ?",
                 (first, again))  # fmt: skip
    conn.execute("UPDATE observations SET ts = (SELECT ts FROM observations WHERE id = ?) WHERE id = ?", (first, again))
    conn.commit()
    hits = search(conn, "why couldn't you deploy the walrus site to the edge network?", Filters(), limit=5, now=NOW)
    conn.close()
    assert any("wrangler" in h.title for h in hits[:3]), [h.title for h in hits]


def test_a_run_that_reported_failures_brings_its_rerun_in_the_turn(project: str) -> None:
    """A test run found first whose output reports failures (its exit status did not, through `| tail`) is
    followed by the same command's next run in its turn: what came of the fix (issue #39)."""
    ranked = searcher([
        _prompt(project, "build the anomaly detector package"),
        claude_bash(SID, project, "python3 scripts/walrus_cusum.py --tests", "walrus cusum tests written"),
        claude_bash(SID, project, "python3 scripts/walrus_cusum.py --check", "walrus cusum tests found"),
        claude_bash(SID, project, "cd /tmp/walrus && PYTHONPATH=src python3 -m pytest tests/ -v | tail -60",
                    "walrus cusum tests: 76 passed, 2 failed"),
        claude_edit(SID, project, "src/detector.py", "baseline=1.0", "baseline=2.0"),
        claude_bash(SID, project, "PYTHONPATH=src python3 -m pytest tests/ -v | tail -20", "78 passed"),
    ])  # fmt: skip
    hits = ranked("how many walrus tests passed after the cusum fix?")
    assert [h.title for h in hits[:2]][1].startswith("$ PYTHONPATH=src python3 -m pytest"), [h.title for h in hits[:3]]


def test_asked_why_the_agents_words_that_state_a_cause_rank_before_its_plans(project: str) -> None:
    """Of two things the agent said holding the same words, a why is answered by the one that states a
    cause ("because", "due to"), not a shorter, newer one that says what it will do next (issue #39)."""
    said = [
        ("The walrus parsing is failing because the field names carry a `Raster.` prefix.", NOW - 600),
        ("Walrus parsing failing: let me print it.", NOW - 300),
    ]

    async def add() -> None:
        async with open_store(config.load()) as store:
            for n, (text, at) in enumerate(said):
                obs = Observation(type="assistant", title=text, content=text)
                ex = Extracted(hook_event="Stop", session_id=SID, cwd=project, project=project, observations=[obs])
                await store.commit_batch([Incoming(event_id=f"said{n}", received_at=at, extracted=ex)])

    ranked = searcher([_prompt(project, "make the walrus dashboard load")])
    anyio.run(add)
    hits = ranked("why was the walrus parsing failing?")
    assert hits[0].title.startswith("The walrus parsing is failing because"), [h.title for h in hits[:3]]


def test_every_row_of_a_long_turn_gets_the_words_of_its_prompt(project: str) -> None:
    """A turn's prompt counts for each of its rows that lacks a word, however many (they are looked up in
    statements of sixteen rows): the turn's commands rank above a newer one that its own turn's prompt
    does not explain."""
    names = [
        a + b
        for a in ("red", "tan", "big", "old", "new")
        for b in ("fox", "owl", "elk", "ant", "bee", "cod", "eel", "yak")
    ]
    turn = [claude_bash(SID, project, f"cat walrus_{name}.txt", f"walrus {name}") for name in names]
    other = [_prompt(project, "tidy the notes", session="sess-other"),
             claude_bash("sess-other", project, "cat walrus_notes.txt", "walrus notes")]  # fmt: skip
    hits = searcher([_prompt(project, "deploy the pages"), *turn, *other])("walrus deploy", limit=50)
    commands = [h.title for h in hits if h.type == "command"]
    assert len(commands) == 41 and "walrus_notes" in commands[-1], commands[-3:]


@given(
    st.lists(st.tuples(st.sets(st.integers(0, 11), max_size=4), st.booleans()), min_size=1, max_size=300),
    st.lists(st.sampled_from([0.5, 1.0, 1.0, 2.25, 0.1 + 0.2, 3.0]), min_size=1, max_size=12),
)
@settings(max_examples=300, deadline=None)
def test_the_rough_order_is_the_weight_then_the_newest(cands: list[tuple[set[int], bool]], idf: list[float]) -> None:
    """Candidates by (-weight, -rowid), the weight their lookups' idf summed in their set's order (ties
    and all): `_roughly_best` sorts ints and floats, never tuples, and sums each set of lookups once."""
    found = {}
    for rowid, (by, all_terms) in enumerate(cands, start=1):
        found[rowid * 7 % 1000 + 1] = ranking.Candidate({i % len(idf) for i in by}, all_terms)
    every = sum(idf[i] for i in range(len(idf)))
    keyed = sorted((-every if c.all_terms else -sum(map(idf.__getitem__, c.found_by)), -r) for r, c in found.items())
    assert ranking._roughly_best(found, idf) == [-r for _, r in keyed[: ranking.RESCORE]]


_PATH_PIECES = ["/home/me/proj", "/HOME/Me/Proj", "/home/me/proJ", "a", "A", "k", "K", "\u212a", "s", "\u017f", "i",
                "\u0130", "\u0131", "é", " ", "/", "-", "\n"]  # fmt: skip
_PATHS = st.sampled_from(["/home/me/proj", "a", "k", "s"])


@given(
    st.lists(st.sampled_from(_PATH_PIECES), max_size=12).map("".join), st.sampled_from(["/home/me/proj", "a", "k", "s"])
)
@settings(max_examples=500, deadline=None)
def test_the_projects_own_path_is_left_out_in_any_case_as_the_pattern_does(text: str, unsaid: str) -> None:
    """An ASCII field loses the project's path by its lowercase offsets, any other by the regex: one answer."""
    low = text.lower()
    if unsaid in low:
        assert ranking._unsaid_out(text, low, unsaid) == ranking._without(unsaid).sub("/", text)


def test_hits_of_a_store_from_before_the_team_columns_still_name_their_agent() -> None:
    """`teammates_of` reads author and agent in one statement, and asks the schema only when a store older
    than migrations m011 and m012 (a read-only CLI's, not migrated yet) lacks them."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE observations (id INTEGER PRIMARY KEY, title TEXT NOT NULL)")
    conn.execute("INSERT INTO observations(id, title) VALUES (7, 'Read a.py')")
    hit = Hit(id=7, type="read", project="/p", session_id="s", ts=0.0, title="Read a.py")
    teammates_of(conn, [hit])
    assert hit.agent == CLAUDE_CODE and hit.author is None
    conn.execute("ALTER TABLE observations ADD COLUMN agent TEXT")
    conn.execute("ALTER TABLE observations ADD COLUMN author TEXT")
    conn.execute("UPDATE observations SET agent = 'codex', author = 'kim'")
    teammates_of(conn, [hit])
    assert hit.agent == "codex" and hit.author == "kim"
