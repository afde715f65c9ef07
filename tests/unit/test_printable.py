"""Control characters never leave through an output (issue #36, finding 10): the function every output
uses, and the viewer's rows, whose strings pass through it."""

from __future__ import annotations

import pytest
from support.team_hostile import CONTROL, HOSTILE

from nmemd.printable import deep, printable, printable_line
from nmemd.web import pages


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain text, unchanged", "plain text, unchanged"),
        ("keeps\nnewlines\tand tabs", "keeps\nnewlines\tand tabs"),
        ("a\x1b[2Jb", "ab"),  # a screen clear, parameters and all
        ("x\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\y", "xdocsy"),  # an OSC 8 link: its text only
        ("\x9b31mred\x9d8;;u\x9cz", "redz"),  # 8-bit CSI and OSC
        ("a\x07b\rc\x00d\x7fe\x85f", "abcdef"),
        ("\u202eevil\u2066", "evil"),  # bidi overrides
        ("tail ESC\x1b", "tail ESC"),
    ],
)
def test_printable_strips_sequences_and_controls(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_deep_and_one_line() -> None:
    assert deep({"t\x1b[1m": ["a\x07", 3, {"b": "c\x9b"}]}) == {"t": ["a", 3, {"b": "c"}]}
    assert printable_line("error:\n  two\x1b[2J lines") == "error: two lines"
    assert not CONTROL.search(printable(HOSTILE))


def test_the_viewers_rows_carry_no_control_characters() -> None:
    hit = {"id": 7, "type": "command", "title": "t" + HOSTILE, "project": "p" + HOSTILE, "author": "al" + HOSTILE,
           "agent": "codex" + HOSTILE, "snippet": "s" + HOSTILE, "ts": 0.0}  # fmt: skip
    html = pages.hit_row(hit) + pages.detail({**hit, "content": HOSTILE, "machine": "box" + HOSTILE}, [hit], "tok")
    assert not CONTROL.search(html), html
    assert "evil.example" not in html
