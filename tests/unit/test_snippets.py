"""Result lines that hold the answer, with highlights no stored text can imitate (nmemd.recall.snippets).

Rows are stored by the real extractor and store into a real SQLite file; search runs in process on a
read-only connection (`nmem search` as a subprocess, in a pipe and under a pseudo-terminal:
tests/daemon/test_snippets_cli.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.snippet_session import snippet_session
from support.store import stored

from nmemd import remembered
from nmemd.mcp.tools import search_tool
from nmemd.recall import facts, snippets
from nmemd.recall.queries import Filters
from nmemd.recall.search import search
from nmemd.recall.terms import parse
from nmemd.web.pages import highlight

CWD = "/tmp/nmem-snippet-project"
NOW = 1_800_000_000.0


def _build(payloads: list[dict[str, Any]]) -> str:
    return stored(payloads, NOW - 3600)


@pytest.fixture
def store() -> Iterator[sqlite3.Connection]:
    db = _build(snippet_session(CWD))
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    yield conn
    conn.close()


def _words(text: str, spans: list[tuple[int, int]]) -> list[str]:
    return [text[s:e] for s, e in spans]


def test_the_snippet_is_cut_at_the_line_that_matches_and_names_the_fault(store: sqlite3.Connection) -> None:
    """Today's first-match cut showed the 'imported but unused' lines above; the answer is the N818 line."""
    hits = search(store, "which lint rule flagged the ConfirmationRequired exception", Filters(project=CWD), now=NOW)
    ruff = next(h for h in hits if "ruff" in h.title)
    assert ruff.snippet is not None and "N818 Exception name `ConfirmationRequired`" in ruff.snippet
    assert "confirmationrequired" in [w.lower() for w in _words(ruff.snippet, ruff.spans)]
    assert len(ruff.snippet) <= snippets.SNIPPET_CHARS + 2


def test_a_literal_bracket_is_text_and_the_spans_are_the_matches(store: sqlite3.Connection) -> None:
    (hit,) = [h for h in search(store, "walrus tab", Filters(project=CWD), now=NOW) if h.type == "error"][:1]
    assert hit.snippet is not None and "walrus" in hit.snippet
    assert {w.lower() for w in _words(hit.snippet, hit.spans)} <= {"walrus", "tab", "tabs"}
    assert all(hit.snippet[s:e].lower() in ("walrus", "tab", "tabs") for s, e in hit.spans)


def test_marks_cannot_be_confused_with_the_text() -> None:
    text = "ok [100%] ⟦kept⟧ walrus"
    spans = [(text.index("walrus"), len(text))]
    line = snippets.marked(text, spans)
    assert line == "ok [100%] ⟦⟦kept⟧⟧ ⟦walrus⟧"
    assert snippets.marked("walrus and walrus", [(0, 6), (11, 17)], limit=9) == "⟦walrus⟧…"  # never cut inside a mark
    assert highlight("<script>x</script> [100%] walrus", [(26, 32)]) == (
        "&lt;script&gt;x&lt;/script&gt; [100%] <mark>walrus</mark>"
    )
    assert highlight("</mark> walrus", []) == "&lt;/mark&gt; walrus"


def test_the_cut_prefers_a_fact_and_reports_spans_in_its_own_offsets() -> None:
    content = "\n".join(["progress " * 30] * 5 + ["Error: Cannot find package 'multer' imported from server.js"])
    cut = snippets.cut(parse("missing package backend"), content)
    assert cut is not None
    text, spans = cut
    assert text.startswith("…Error: Cannot find package 'multer'"), text
    assert _words(text, spans) == ["package"]
    assert snippets.cut(parse("nothing here"), "") is None
    no_match = snippets.cut(parse("zebra"), "line one\nfatal: cannot remove a locked working tree\nbye")
    assert no_match is not None and no_match[0].startswith("…fatal: cannot remove a locked working tree")
    assert no_match[1] == []


def test_mcp_lines_mark_matches_and_keep_stored_brackets(store: sqlite3.Connection) -> None:
    text = search_tool(store, CWD, "walrus", None, None, None, None, None, None, 10, NOW)
    line = next(line for line in text.splitlines() if "pytest" in line)
    assert line.startswith("#") and "⟦walrus⟧" in line and "[walrus]" not in text
    (zebra,) = search_tool(store, CWD, "zebra", None, None, None, None, None, None, 10, NOW).splitlines()[1:]
    assert "test_⟦zebra⟧.py ... [100%] ⟦⟦kept⟧⟧" in zebra, zebra  # stored brackets and marks, literally


def test_a_question_about_a_cause_is_shown_the_line_that_states_one() -> None:
    content = (
        "Build succeeded. Here's what I fixed:\n\n"
        "**Root cause:** the instance id was set in the server process, but hooks run in a separate shell.\n\n"
        "**To test:** restart your instances; messages to each instance now arrive."
    )
    query = parse("why did messages stay pending with a single instance running?")
    plain = snippets.cut(query, content)
    asked_why = snippets.cut(query, content, why=True)
    assert plain is not None and plain[0].startswith("…**To test:**")  # more of the words
    assert asked_why is not None and asked_why[0].startswith("…**Root cause:** the instance id")
    assert snippets.ASKS_WHY.search("why did messages stay pending?") and not snippets.ASKS_WHY.search("run tests")


def _fact_weight_by_the_regexes(line: str) -> float:
    """`fact_weight` as defined: every pattern of `_FACT_WEIGHTS` read over the line."""
    if facts.EMPTY.match(line):
        return 0.0
    return sum((weight for pattern, weight in facts._FACT_WEIGHTS if pattern.search(line)), 0.0)


# The words of every pattern, in several cases, with what they may be joined by: ASCII and not (a capital
# I with a dot, a long s and a Kelvin sign fold to i, s and k under IGNORECASE, where `lower()` differs).
_PIECES = [
    *(w for k in (*facts._ERRORISH_KEYS, *facts._CONCLUSION_KEYS) for w in (k, k.upper(), k.title())),
    "errors", "aborted", "timed out", "timeout", "unauthorized", "requires", "already exists", "the bug is",
    "root cause", "we'll use", "i chose", "TypeError", "IOException", "xError", "TS18004", "N818", "CVE-2025-1",
    "SUBMODULE_TOKEN", "src/a.py", "a.tsx", "x.json", "~/.config/x", "`ls -la`", "`x`", "$ ", "> ", "command: ",
    "fooBar", "snake_case", "a::b", "@scope/pkg", "pkg@1.2", "12", "3.14", "10:30", ":8080", "7",
    "İnvalid", "ſolution", "\u212anown", "ınvalid", "ſ", "ı", "⚠", "✗", "✘", "❌", "é",
    "٣", "AB٣٣", "CVE-٢٠٢٥-1",  # digits of another script: `\d` reads them
    " ", "  ", "\t", "-", ".", "/", ":", "_", "'", "`", "(", "#",
    "====", "exit code 1",
    # the alternatives _CODE, _PATH and _IDENT are read one by one (`facts._split`), and their edges
    "a_", "_b", "x__", "__init__", "A_B", "AB12", "ABCDEF123", "Ab", "aB", "ab", "-.py", "a-.md", "x.toolong",
    "a.b.c", "@a/b", "a@1", "a::", "::b", "CVE-", "CVE-1234-5", "ValueError", "Errors", "1.2", "12:30:45",
    "--.py", "x-.md", "_.go", "XMLHttp", "getX", "A1", "_1", "1.2.3", "a1.5", "12a", ":1", ":123456",
]  # fmt: skip


@given(st.lists(st.sampled_from(_PIECES), max_size=10).map("".join))
@settings(max_examples=800, deadline=None)
def test_the_fact_keys_agree_with_the_patterns_they_stand_for(line: str) -> None:
    """`fact_weight` and `errorish` test a line's keys before its regexes: never a different answer."""
    assert facts.fact_weight(line) == _fact_weight_by_the_regexes(line)
    assert facts.errorish(line) == bool(facts._ERRORISH.search(line))
    assert facts.capped_fact(line) == min(_fact_weight_by_the_regexes(line), facts.FACT_CAP)  # remembered
    assert facts.capped_fact(line) == min(_fact_weight_by_the_regexes(line), facts.FACT_CAP)


_FLOORS = [0.0, 0.2, 0.5, 0.9, 1.0, 1.3, 1.6]


@given(st.lists(st.sampled_from(_PIECES), max_size=10).map("".join), st.sampled_from(_FLOORS))
@settings(max_examples=800, deadline=None)
def test_a_lines_fact_cut_short_is_a_bound_below_the_floor(line: str, floor: float) -> None:
    """`facts.capped_fact(line, floor)` reads a line's tests only while it can still reach `floor`: it answers the
    fact itself, or a bound of it below `floor` (the line loses either way); remembered, the same."""
    fact = min(_fact_weight_by_the_regexes(line), facts.FACT_CAP)
    for _ in range(2):
        bound = facts.capped_fact(line, floor)
        assert bound == fact or fact <= bound < floor
    assert facts.capped_fact(line) == fact  # exact once asked without a floor, and remembered so
    assert facts.capped_fact(line, floor) == fact


def test_a_lines_remembered_facts_stay_bounded_and_drop_the_least_recently_read() -> None:
    """Past _REMEMBERED_LINES lines, the line read longest ago is dropped, not a line read again since."""
    remembered.forget_stored_text()
    lines = [f"error {i}: cannot open src/f{i}.py" for i in range(facts._REMEMBERED_LINES + 10)]
    for line in lines[: facts._REMEMBERED_LINES]:
        facts.capped_fact(line)
    assert facts.capped_fact(lines[0]) == facts.FACT_CAP  # read again: now the most recent
    for line in lines[facts._REMEMBERED_LINES :]:
        facts.capped_fact(line)
    held = facts._LINE_FACTS.exact
    assert len(held) == facts._REMEMBERED_LINES
    assert lines[0] in held and lines[1] not in held and lines[-1] in held
    assert remembered.forget_stored_text() and not held


def _collapsed_by_the_runs(content: str, lo: int, hi: int, starts: list[int]) -> tuple[str, list[int]]:
    """`_collapse`'s text and where each start lands, as defined: each `\\s+` run one space, none at the ends."""
    import re

    seg = content[lo:hi]
    runs = [m.span() for m in re.finditer(r"\s+", seg)]
    moved = [p - sum((e - s) - (0 if s == 0 else 1) for s, e in runs if e <= p) for p in starts]
    return re.sub(r"\s+", " ", seg).strip(), moved


@given(st.lists(st.sampled_from(["ab", "x", "\u00e9t\u00e9", " ", "  ", "\t", "\n", "\u00a0", "\u2003", "\x1c"]),
                max_size=12).map("".join), st.data())  # fmt: skip
@settings(max_examples=400, deadline=None)
def test_a_snippets_spaces_collapse_as_the_pattern_says(content: str, data: st.DataObject) -> None:
    """`_collapse` joins the words where the regex replaced each whitespace run: the same text, and every
    match lands where it did (Unicode spaces too: `\\s` is `str.isspace`)."""
    lo = data.draw(st.integers(0, len(content)))
    hi = data.draw(st.integers(lo, len(content)))
    words = [i for i in range(lo, hi) if not content[i].isspace()]
    found = [snippets.Match(i, i + 1, 0, 1.0) for i in words]
    text, spans = snippets._collapse(content, lo, hi, found)
    expected, moved = _collapsed_by_the_runs(content, lo, hi, [i - lo for i in words])
    head = snippets.ELLIPSIS if lo > 0 else ""
    assert text == head + expected + (snippets.ELLIPSIS if hi < len(content) else "")
    assert spans == snippets.merged((m + len(head), m + len(head) + 1) for m in moved)
