"""The words people use (nmemd.recall.vocabulary, issue #37): "which file did we change", "what
changed", "what broke when we ran", "what did we agree" find what the precise words find; a search
that finds nothing says what to try. Real-shaped Claude Code events through the real extractor and
store into a real SQLite file, then `search` on a read-only connection."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.helpers import claude_bash, claude_edit, claude_event, claude_failure
from support.store import STEP_S, stored

from nmemd.mcp.tools import search_tool
from nmemd.recall import vocabulary
from nmemd.recall.queries import Filters, Hit
from nmemd.recall.search import search
from nmemd.recall.terms import parse

SID = "sess-words-0001"
NOW = time.time()


@pytest.fixture
def project(tmp_path: Path) -> str:
    (tmp_path / "otter" / ".git").mkdir(parents=True)
    return str(tmp_path / "otter")


def _prompt(cwd: str, text: str, session: str = SID) -> dict[str, Any]:
    return claude_event("UserPromptSubmit", session, cwd, prompt=text)


def _store(payloads: list[dict[str, Any]]) -> str:
    filler = [_prompt("/tmp/filler", f"unrelated chore {n}", session="sess-filler") for n in range(3)]
    return stored(filler + payloads, start=NOW - 60 - STEP_S * (len(filler) + len(payloads)))


def searcher(db: str, project: str) -> Callable[[str], list[Hit]]:
    def ranked(text: str) -> list[Hit]:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return search(conn, text, Filters(project=project), limit=10, now=NOW)
        finally:
            conn.close()

    return ranked


def _session(project: str) -> list[dict[str, Any]]:
    return [
        _prompt(project, "amounts should be exact in the invoice"),
        claude_edit(SID, project, "src/invoice.py", "float(x)", "Decimal(x)"),
        claude_bash(SID, project, "git status --short", "M src/invoice.py"),
        claude_failure(SID, project, "pytest -q tests/test_invoice.py", "AssertionError: 0.30000000000000004 != 0.3"),
        _prompt(project, "ok, we agree: keep floats out of the ledger"),
    ]


def _git_diff(project: str) -> dict[str, Any]:
    """What a person's verb matches word for word: git's "1 file changed", not the edit."""
    return claude_bash(SID, project, "git diff --stat", " src/invoice.py | 2 +-\n 1 file changed, 1 insertion(+)")


def test_a_question_made_of_kind_words_finds_the_rows_of_that_kind(project: str) -> None:
    ranked = searcher(_store([*_session(project), _git_diff(project)]), project)
    for question in ("what changed", "which file did we change", "what did we modify", "which files did we touch"):
        hits = ranked(question)
        assert hits and hits[0].type == "edit" and hits[0].file_path == f"{project}/src/invoice.py", question
    assert ranked("what did we run")[0].title.startswith("$ git diff")
    assert ranked("what broke")[0].type == "error"


def test_the_everyday_verb_finds_what_the_precise_one_does(project: str) -> None:
    ranked = searcher(_store(_session(project)), project)
    precise = ranked("which file did we edit for exact invoice amounts")
    assert precise[0].type == "edit"
    for verb in ("change", "modify", "update", "touch"):
        assert ranked(f"which file did we {verb} for exact invoice amounts")[0].id == precise[0].id, verb
    assert ranked("what broke when we ran the invoice tests")[0].type == "error"


def test_kind_words_map_onto_stored_types_and_keep_what_was_typed() -> None:
    assert vocabulary.kinds_of("modified") == ("edit", "write")
    assert vocabulary.kinds_of("crashed") == vocabulary.kinds_of("broke") == ("error",)
    assert vocabulary.kinds_of("executed") == ("command",) and vocabulary.kinds_of("agreed") == ("stop", "assistant")
    assert vocabulary.kinds_of("invoice") == ()
    for text, kinds in [
        ("what changed", ("edit", "write")),
        ("which file did we change", ("edit", "write")),  # the verb, not "file"
        ("which file did we change in the invoice", ()),  # a subject: the words' own search
        ("error", ()),  # a word alone is looked for as a word
        ("what crashed", ("error",)),
    ]:
        assert vocabulary.kinds_only(parse(text), text) == kinds, text
    query = parse("which file did we touch in the invoice")
    assert [t.text for t in query.terms if not t.covers] == [
        "file",
        "touch",
        "invoice",
    ]  # the typed words are all still searched
    assert vocabulary.named_by_type(query, "edit") == {1}  # "touch", not the noun "file"
    assert vocabulary.named_by_type(query, "read") == frozenset()
    assert vocabulary.named_by_type(parse("what broke when we ran the tests"), "error") == {0, 1}  # a failed run
    assert vocabulary.named_by_type(parse("why did the build break after we updated it"), "edit") == frozenset()


def test_nothing_found_says_what_to_try(project: str) -> None:
    assert vocabulary.try_instead(scoped=True, typed=False) == (
        "try fewer or other words (a name, a path, an error's text), --all for every project,"
        " --type edit|command|error|prompt"
    )
    assert vocabulary.try_instead(scoped=False, typed=True, every='project="*"', type_option="type=") == (
        "try fewer or other words (a name, a path, an error's text), no type filter"
    )
    db = _store(_session(project))
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        said = search_tool(conn, project, "zeppelin", None, None, None, None, None, None, 10, NOW)
        typed = search_tool(conn, project, "zeppelin", "*", "edit", None, None, None, None, 10, NOW)
    finally:
        conn.close()
    assert said.startswith("No matches for 'zeppelin'") and 'project="*" for every project' in said
    assert "type=edit|command|error|prompt" in said
    assert "every project" not in typed and "no type filter" in typed
