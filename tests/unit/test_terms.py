"""What a query's words match (nmemd.recall.terms, nmemd.store.fts, .grams): identifiers and paths as typed
between word edges, a word as a part of a kebab-case name or a camelCase identifier, a word of an unspaced
script as the phrase of its character pairs. Ranking with them:
tests/unit/test_ranking.py, and over a daemon's corpus: tests/daemon/test_search.py."""

from __future__ import annotations

import pytest

from nmemd.recall import terms
from nmemd.store import fts, grams


def test_an_identifier_or_path_is_found_as_typed_between_word_edges() -> None:
    """`fts.literal`: SQLite's LIKE finds the rows, the edges are checked after (not `ctypes/`, not `.tsx`)."""
    relaxed = fts.relax('"types/index.ts" "50%_off"')
    assert relaxed is not None
    path, odd = (fts.literal(p) for p in relaxed.phrases)
    assert path is not None and odd is not None
    assert path.like == "%types/index.ts%" and odd.like == "%50\\%\\_off%"  # LIKE's wildcards escaped
    assert path.holds("see src/types/index.ts:3") and path.holds("src/types/index.ts")
    assert not path.holds("ctypes/index.ts") and not path.holds("types/index.tsx") and not path.holds(None)
    assert odd.holds("now 50%_off!") and not odd.holds("50 off") and not odd.holds("50%_offer")
    prefix = fts.relax('"src/auth"*')
    assert prefix is not None
    lit = fts.literal(prefix.phrases[0])
    assert lit is not None and lit.holds("src/authority.ts") and not lit.holds("xsrc/authority.ts")
    café = fts.relax('"café_bar"')
    assert café is not None and fts.literal(café.phrases[0]) is None  # LIKE folds ASCII only: the general check


def parse_terms(text: str) -> list[terms.Term]:
    return terms.parse(text).terms


def test_a_word_counts_as_a_part_of_a_kebab_case_name() -> None:
    """Ranking counts "wombat" joined by a hyphen (at PART_WEIGHT) apart from the word standing alone."""
    wombat = parse_terms("wombat")[0]
    found = {
        text: wombat.kebab_parts(text)
        for text in (".#wombat-simple", "x-wombat", "wombats-lib", ".#wombat", "xwombat-y")
    }
    assert found == {".#wombat-simple": 1, "x-wombat": 1, "wombats-lib": 1, ".#wombat": 0, "xwombat-y": 0}


def test_a_word_counts_as_a_part_of_a_camelcase_identifier() -> None:
    """Ranking counts "client" in createServerClient (at PART_WEIGHT), not in "clientside"."""
    client = parse_terms("client")[0]
    found = {text: client.parts_in(text) for text in ("createServerClient()", "ServerClient", "clientId", "myClientID")}
    assert found == {"createServerClient()": 1, "ServerClient": 1, "clientId": 1, "myClientID": 1}
    for text in ("client", "Client", "Clients", "clientside"):  # the word itself is `count`'s
        assert client.parts_in(text) == 0, text
    assert parse_terms("client*")[0].camel is None and parse_terms("clientId")[0].camel is None  # words only


def test_a_short_part_of_an_identifier_counts_only_as_itself() -> None:
    """iPhone's `i` is the index's token "i": "in", "is" and "it" are not it (nor `is` of isOpen "issue")."""
    iphone = parse_terms("iPhone")[0]
    assert iphone.count("i phone") == 1 and iphone.count("is the phone in it") == 0
    assert iphone.count("iphones") == 1
    assert parse_terms("isOpen")[0].count("issue: open") == 0
    assert parse_terms("e-mail")[0].count("e mail") == 1 and parse_terms("e-mail")[0].count("every mail") == 0
    assert parse_terms("getX")[0].count("get x") == 1  # a part of three letters or more keeps its endings
    assert parse_terms("paneCreation")[0].count("panes creation") == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("東京", '"東京"'),
        ("サーバ", '"サー ーバ"'),
        ("設", '"設"*'),
        ("API设计", '"设计"'),
        ("plain", None),
    ],
)
def test_a_word_becomes_the_phrase_of_its_pairs(text: str, expected: str | None) -> None:
    assert grams.match(text) == expected


def test_pairs_of_a_row() -> None:
    assert grams.pairs("ascii only", None) is None
    assert grams.pairs("東京 ok", "→ サーバ") == "東京 京 サー ーバ バ"  # a run's last character stands alone too


def test_a_negated_auxiliary_is_a_stop_word_and_a_clitic_leaves_its_word() -> None:
    """ "wasn't" is no subject (the index holds "wasn" and "t"); "test_tier_detector's" is the identifier."""
    assert [t.text for t in terms.parse("why wasn't the report_total column populating?").terms][:3] == [
        "report_total",
        "column",
        "populating",
    ]
    assert [t.text for t in terms.parse("why did pytest skip test_tier_detector's test?").terms][:3] == [
        "pytest",
        "skip",
        "test_tier_detector",
    ]
    assert [t.text for t in terms.parse("what broke in codex’s work").terms][:3] == ["broke", "codex", "work"]
    assert [t.text for t in terms.parse("didn't").terms] == ["didn't"]  # nothing else: still searched


def test_a_word_whose_inflection_ends_in_i_counts_its_y_form() -> None:
    """ "verified" is counted in "verify it fully" as the index stems both (`verifi`)."""
    verified, copies = terms.parse("verified copies").terms[:2]
    assert verified.count("verify it fully, then verifying") == 2 and copies.count("copy the copy") == 2
    assert verified.count("a verifying step") == 1 and copies.count("the copyright") == 0


def test_a_words_forms_are_stemmed_in_one_pass_as_each_alone() -> None:
    """`terms._stems` tokenizes a word's forms together: each stem is the one the word gets alone, and text
    that is not one ASCII token each (a dotted i, a hyphen) is stemmed word by word."""
    forms = ["resolution", "resolve", "resolving", "services", "serviced", "utf8encoding", "relational", "happy"]
    assert terms._stems(forms) == [terms._stem(f) for f in forms]
    odd = ["İstanbul", "well-known", "café", ""]
    assert terms._stems(odd) == [terms._stem(f) for f in odd]


@pytest.mark.parametrize("text", ["status", "utf8", "X11", "a b", "save_hook", "café", "x-y", "", "İ", "١٢"])
def test_one_token_is_what_the_tokenizer_keeps_whole(text: str) -> None:
    """`fts.one_token`: the tokenizer need not be asked about ASCII letters and digits (a single token)."""
    assert not fts.one_token(text) or len(fts.words(text)) == 1
