"""What a query asks for: its search terms, in FTS5 syntax that cannot be injected, and its hints.

Agents and people ask in sentences ("which file did we edit to fix the CORS error?") as
often as in keywords. Words that carry no subject (stop words, question words) are
dropped, unless nothing else is left; words that name a kind of work ("edit", "error",
"command") become type hints for ranking and terms of less weight, since an error row
says "Bash failed", not "error", though its output may say it. Quoted phrases, `prefix*`,
identifiers and paths stay whole terms.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from typing import Final

from nmemd.errors import QueryError
from nmemd.store import fts, grams

MAX_TERMS: Final = 12  # a 10,000-character query is cut to its first terms, not refused
MAX_TERM_CHARS: Final = 200
MAX_PAIRS: Final = 3  # each is one more lookup
SHORT_PART: Final = 3  # a camelCase or hyphenated word's part shorter than this is matched without endings
NEAR_GAP: Final = 1  # words dropped from between two query words that may stand between them in a row too
NEAR_TERMS: Final = 3  # of a query's first words, each pair is looked for side by side (`Query.neighbours`)

STOP_WORDS: Final = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing done down during each else ever few for from further get
    got had has have having he her here hers herself him himself his how i if in into is it its itself just
    let like made make me more most my myself no nor not now of off on once only or other our ours ourselves
    out over own same she should so some such than that the their theirs them themselves then there these they
    this those through to too under until up us very was we were what when where which while who whom why will
    with would you your yours yourself yourselves again already anything something everything last recent
    recently earlier previous previously before first one ones thing things way ask asked tell told know say said see
    saw use used using need needed want wanted try tried happen happened happens exactly kind sort lot please
    show find found look looked remember mean here there today yesterday""".split()
)

# Words that name the kind of observation asked about: a hint for ranking, not a term to match.
TYPE_HINTS: Final[dict[str, tuple[str, ...]]] = {
    **dict.fromkeys(
        "edit edits edited editing change changes changed changing modify modified fix fixes fixed fixing patch"
        " patched update updated rewrite rewrote refactor refactored touch touched tweak tweaked".split(),
        ("edit", "write"),
    ),
    **dict.fromkeys("write wrote written create created creating add added new".split(), ("write", "edit")),
    **dict.fromkeys(
        "error errors fail fails failed failing failure failures exception exceptions crash crashes crashed broke"
        " broken break breaks traceback stacktrace missing wrong blocked refused rejected".split(),
        ("error",),
    ),
    **dict.fromkeys(
        "command commands run runs ran running execute executed executing invoke invoked start starts launch".split(),
        ("command",),
    ),
    **dict.fromkeys("file files".split(), ("edit", "write", "read")),
    # Not "answer": what an API or a command answered is its output, not the assistant's conclusion.
    **dict.fromkeys(
        "decided decision decide concluded conclusion summary agree agreed choose chose chosen pick picked"
        " settled".split(),
        ("stop", "assistant"),  # a decision is in the agent's words: its last reply or between its tool calls
    ),
}

# A question about a reason or a finding: the agent's own words between its tool calls answer it.
ASKS_WHY: Final = re.compile(
    r"(?i)\b(?:why|cause[sd]?|reason|how come|what (?:broke|went wrong|was wrong)|wrong with|figured? out|conclu\w*)\b"
)
_TOKEN: Final = re.compile(r'"([^"]*)"?|(\S+)')
_WORDISH: Final = re.compile(r"\w", re.UNICODE)
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")  # FTS5 reads NUL as the end of the query string
_EDGE_PUNCT: Final = re.compile(r"^[^\w./~*-]+|[^\w*]+$", re.UNICODE)  # "file?" -> "file", "(x)" -> "x"
# A word's clitic: "wasn't", "couldn't" (a negated auxiliary: a stop word, whatever it negates), and "parser's",
# "we've", "it'll" (the word before it is the term). The index splits them at the apostrophe: "wasn" and "t".
_NEGATED: Final = re.compile(r"^[A-Za-z]+n['\u2019]t$")
_CLITIC: Final = re.compile(r"^(.+?)['\u2019](?:s|re|ve|ll|d|m)$", re.IGNORECASE)
_KEBAB: Final = re.compile(r"^[^\W\d_]+(?:-[^\W\d_]+)+$", re.UNICODE)  # words-joined-by-hyphens
_CAMEL: Final = re.compile(r"[a-z][A-Z]")
_IDENT: Final = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_CAMEL_PARTS: Final = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_JOINABLE: Final = re.compile(r"^[A-Za-z][a-z]{2,}$")  # "pane", "Creation": not identifiers, not numbers
_TOKENS: Final = re.compile(r"[^\W_]+", re.UNICODE)  # what unicode61 keeps: letters and digits
_INFLECTION: Final = re.compile(r"(?:ing|ed|es|s)$")
_UNSPACED: Final = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_PLAIN_WORD: Final = re.compile(r"^[^\W_]+$", re.UNICODE)  # letters and digits only: a candidate stop word


@dataclass(frozen=True)
class Term:
    """One thing to look for: `fts` is a quoted FTS5 string (with `*` for a prefix)."""

    text: str
    fts: str
    prefix: bool = False
    phrase: bool = False
    covers: tuple[int, ...] = ()  # a joined pair ("pane creation" as "panecreation"): the terms it stands for
    # How the term reads in stored text, for ranking: alternatives, each a set of patterns that must all
    # occur (the index's porter stems, approximated: a word and its short endings).
    alternatives: tuple[tuple[str, ...], ...] = ()
    grams: str | None = None  # unspaced script (store/grams.py): the same word anywhere inside a run
    # The word as a part of a camelCase identifier (`parts_in`): the pattern's source, compiled at its first
    # use (~0.2 ms a word, and few searches' rows hold a word only inside an identifier).
    camel: str | None = None
    hint: bool = False  # a word of TYPE_HINTS: searched too, at less weight (an error seldom says "error")

    @cached_property
    def text_lower(self) -> str:
        return self.text.lower()

    def parts_in(self, raw: str) -> int:
        """Occurrences as a camelCase part in `raw` (original case): `Client` in createServerClient or
        ServerClient, `client` in clientId; the whole word is `count`'s."""
        return sum(1 for _ in compiled(self.camel).finditer(raw)) if self.camel else 0

    def kebab_parts(self, low: str) -> int:
        """Occurrences in `low` (lowercase) joined to another word by a hyphen (skypilot-simple,
        kebab-case), the word's stems included; `count` counts them with the rest. A scan for `gate`
        in C: a regex that starts with a look-behind would be tried at every position."""
        gate = self.gate
        if not gate:
            return 0
        found = 0
        end = len(low)
        at = low.find(gate)
        while at >= 0:
            after = at + len(gate)
            while after < end and low[after].isalnum():
                after += 1
            before = low[at - 1] if at else " "
            if (before == "-" and at > 1 and low[at - 2].isalnum()) or (
                not before.isalnum() and after + 1 < end and low[after] == "-" and low[after + 1].isalnum()
            ):
                found += 1
            at = low.find(gate, after)
        return found

    @cached_property
    def matchers(self) -> tuple[tuple[tuple[str, re.Pattern[str], bool], ...], ...]:
        """`alternatives` as `matcher`s, once per query (ranking counts them in a hundred rows)."""
        return tuple(tuple(matcher(p) for p in patterns) for patterns in self.alternatives)

    @cached_property
    def gate(self) -> str:
        """Text every match of every alternative holds (their first literals' common start): most
        fields of most rows lack it, and one substring test then answers for all alternatives."""
        firsts = [patterns[0][0] for patterns in self.matchers if patterns]
        return os.path.commonprefix(firsts) if len(firsts) == len(self.matchers) else ""

    def count(self, text: str) -> int:
        """Occurrences in `text` (lowercase): the best alternative's rarest part."""
        if self.gate not in text:
            return 0
        matchers = self.matchers
        if len(matchers) == 1 and len(matchers[0]) == 1:  # most terms: one pattern
            return occurrences(matchers[0][0], text)
        best = 0
        for patterns in matchers:
            fewest = None
            for found in patterns:
                n = occurrences(found, text)
                fewest = n if fewest is None else min(fewest, n)
                if not n:
                    break
            best = max(best, fewest or 0)
        return best


@dataclass(frozen=True)
class Query:
    """A parsed query; shared by the searches that ask the same text (`parse`), so never modified."""

    terms: list[Term]
    type_hints: set[str] = field(default_factory=set)
    # Each term's place among the words typed, dropped ones counted: "npm run dev" keeps npm and dev,
    # one word apart (`neighbours`).
    places: list[int] = field(default_factory=list)
    # It asks for a reason or a finding ("why", "what was wrong with"): what the agent said answers it.
    asks_why: bool = False

    @cached_property
    def words(self) -> int:
        """How many terms coverage counts (joined pairs stand for two of them)."""
        return sum(1 for t in self.terms if not t.covers)

    @cached_property
    def word_indexes(self) -> frozenset[int]:
        return frozenset(range(self.words))

    @cached_property
    def hints(self) -> tuple[str, ...]:
        """Each term's text in lowercase when it is a hint word ("edit", "error"), else "" (ranking asks per row)."""
        return tuple(t.text_lower if t.hint else "" for t in self.terms)

    @cached_property
    def matchers(self) -> tuple[tuple[int, float, str, re.Pattern[str], bool], ...]:
        """Every pattern of every term (`Term.matchers`) in one loop, for snippets: (the term's index, its weight
        in a snippet (a hint word's half), the pattern's literal, the pattern, whether its edge is checked)."""
        return tuple(
            (i, 0.5 if term.hint else 1.0, key, tail, edged)
            for i, term in enumerate(self.terms)
            for patterns in term.matchers
            for key, tail, edged in patterns
        )

    @cached_property
    def neighbours(self) -> tuple[tuple[int, int, tuple[str, re.Pattern[str], bool]], ...]:
        """Pairs of the query's words as they would stand side by side in text, in the query's order,
        with only spaces or punctuation between: "submodule workflow token" in SUBMODULE_TOKEN, "nix
        build" in `nix build .#x`; with the indexes of their two terms, as a `matcher`."""
        out = []
        n = min(self.words, NEAR_TERMS)
        for i in range(n):
            for j in range(i + 1, n):
                a, b = self.terms[i], self.terms[j]
                # the words typed between them that are not terms ("run" in "npm run dev")
                between = self.places[j] - self.places[i] - (j - i) if len(self.places) > j else 0
                between = min(max(between, 0), NEAR_GAP)
                if a.alternatives and b.alternatives and not (a.grams or b.grams):
                    gap = rf"(?:[\W_]+[^\W_]+){{0,{between}}}" if between else ""
                    out.append((i, j, matcher(a.alternatives[0][0] + gap + r"[\W_]+" + b.alternatives[0][0])))
        return tuple(out)


def plain(text: str) -> str:
    """Control characters become spaces; lone surrogates (from undecodable argv bytes) become '?'."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return _CONTROL.sub(" ", text)


@lru_cache(maxsize=512)
def compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@lru_cache(maxsize=512)
def matcher(pattern: str) -> tuple[str, re.Pattern[str], bool]:
    """The literal text every match starts with (after its word-edge look-behind): a text without it
    holds no match; and the pattern without that look-behind, compiled: starting with a literal, the
    regex engine scans for it in C instead of trying the look-behind at every position. The caller
    checks the edge (`Term.count`)."""
    body = pattern.removeprefix(_EDGE)
    key = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and not body[i + 1].isalnum():
            key.append(body[i + 1])  # re.escape escapes only punctuation and spaces
            i += 2
        elif c.isalnum() or c in " _-/'\"":
            key.append(c)
            i += 1
        else:
            break
    return "".join(key), re.compile(body), body != pattern


_EDGE: Final = r"(?<![^\W_])"


def occurrences(found: tuple[str, re.Pattern[str], bool], text: str) -> int:
    """How often a `matcher` matches in `text`."""
    key, tail, edged = found
    if key not in text:  # the substring test is ~50x cheaper than the regex
        return 0
    if not edged:
        return len(tail.findall(text))  # one item a match, as finditer's
    n = 0
    for m in tail.finditer(text):
        at = m.start()
        if not (at and text[at - 1].isalnum()):
            n += 1
    return n


def _word(word: str, ending: int = 4) -> str:
    """A word as the tokenizer sees it, less an inflection, with up to `ending` more letters (tests: test)."""
    low = word.lower()
    base = _INFLECTION.sub("", low) if len(low) > 4 else low
    more = rf"[^\W_]{{0,{ending}}}" if ending else ""
    if base != low and base.endswith("i") and len(base) > 2:  # verified, tries: verify, try (the index's stem)
        return rf"(?<![^\W_]){re.escape(base[:-1])}[iy]{more}(?![^\W_])"
    return rf"(?<![^\W_]){re.escape(base)}{more}(?![^\W_])"


def _part(part: str) -> str:
    """A part of a camelCase or hyphenated word, as `_word`; one or two letters as they are (the index
    holds iPhone's `i` as the token "i": with endings, the pattern would count every "in", "is" and "it")."""
    return _word(part, 0) if len(part) < SHORT_PART else _word(part)


def _sequence(raw: str, prefix: bool = False) -> str:
    """A phrase, identifier or path: its tokens in order, anything between them (save_hook, src/auth.ts)."""
    tokens = [re.escape(t) for t in _TOKENS.findall(raw.lower())]
    tail = r"[^\W_]*" if prefix else r"[^\W_]{0,4}(?![^\W_])"
    return r"(?<![^\W_])" + r"[\W_]+".join(tokens) + tail


def _term(raw: str, *, phrase: bool) -> Term | None:
    term = _term_fts(raw, phrase=phrase)
    if term is None:
        return None
    if not phrase and not term.prefix and _UNSPACED.search(raw):
        # Chinese, Japanese, Thai...: unicode61 keeps a whole unspaced run as one token, so the main
        # index finds a word where a run starts with it (東京 in 東京サーバー); the pairs index inside.
        return Term(term.text, term.fts + "*", True, False, (), ((re.escape(raw.lower()),),), grams.match(raw))
    return Term(term.text, term.fts, term.prefix, term.phrase, term.covers, _alternatives(term), camel=_camel(term))


def _camel(term: Term) -> str | None:
    """A plain lowercase word of 3+ letters as it stands inside camelCase: capitalized after a lowercase
    letter or a digit, or leading an identifier whose next part starts with a capital."""
    word = term.text
    if term.prefix or term.phrase or len(word) < 3 or not (word.isascii() and word.isalpha() and word.islower()):
        return None
    cap = word.capitalize()
    return rf"(?<=[a-z0-9]){cap}(?![a-z])|(?<![A-Za-z0-9])[{cap[0]}{word[0]}]{word[1:]}(?=[A-Z0-9])"


def _alternatives(term: Term) -> tuple[tuple[str, ...], ...]:
    raw = term.text
    if term.prefix or term.phrase or not _PLAIN_WORD.match(raw.replace("-", "")):
        return ((_sequence(raw, term.prefix),),)
    alts: list[tuple[str, ...]] = [(_word(raw),)]
    root = _root(raw)
    if root:
        alts.append((_word(root, 6),))
    if _CAMEL.search(raw) and _IDENT.match(raw):
        alts.append(tuple(map(_part, _CAMEL_PARTS.findall(raw))))
    if _KEBAB.match(raw):
        parts = raw.split("-")
        alts = [tuple(map(_part, parts)), (_word("".join(parts)),)]
    return tuple(alts)


def _term_fts(raw: str, *, phrase: bool) -> Term | None:
    prefix = not phrase and raw.endswith("*") and len(raw.rstrip("*")) > 0
    raw = raw.rstrip("*") if prefix else raw
    raw = raw[:MAX_TERM_CHARS]
    if not _WORDISH.search(raw):
        return None
    quoted = '"' + raw.replace('"', '""') + '"'
    root = _root(raw) if not phrase and not prefix and _PLAIN_WORD.match(raw) else None
    if root:
        # "resolution" also finds "resolve" and "resolving": other forms of its root, each an exact
        # token (FTS5 stems them as it stems the index); a prefix would cost a scan of every token under it.
        forms = dict.fromkeys([raw.lower(), *(root + end for end in _ENDINGS)])
        if root.endswith("v"):  # resolving -> resolution
            forms[root[:-1] + "ution"] = None
        # FTS5 stems each form as it stemmed the index: one form per stem, or the index reads the
        # same token's rows once per form (service, services, serviced, servicing: all `servic`)
        stem_of = dict(zip(forms, _stems(list(forms)), strict=True))
        stems = {stem_of[f]: f for f in reversed(forms)}
        return Term(text=raw, fts="(" + " OR ".join(f'"{f}"' for f in forms if stems.get(stem_of[f]) == f) + ")")
    if not phrase and not prefix and _CAMEL.search(raw) and _IDENT.match(raw):
        # paneCreation also finds "pane creation" and pane_creation (the index splits on _ only)
        pieces = " AND ".join(f'"{p}"' for p in _CAMEL_PARTS.findall(raw))
        return Term(text=raw, fts=f"({quoted} OR ({pieces}))")
    if not phrase and not prefix and _KEBAB.match(raw):
        # "server-side", "type-checks": both words anywhere, or written as one ("typecheck")
        parts = raw.split("-")
        both = " AND ".join(f'"{p}"' for p in parts)
        return Term(text=raw, fts=f'(({both}) OR "{"".join(parts)}")')
    return Term(text=raw, fts=quoted + ("*" if prefix else ""), prefix=prefix, phrase=phrase)


_SUFFIXES: Final = sorted(
    """ations ation utions ution itions ition ments ment ings ing ions ion ers er ed ies es able ible ally ness
    ities ity ives ive izes ized ize ises ised ise ators ator ures ure""".split(),
    key=len,
    reverse=True,
)
MIN_ROOT: Final = 4
_ENDINGS: Final = ("", "e", "es", "ed", "ing", "ion", "ation", "ution", "er", "ment", "ve", "ving")


def _stem(word: str) -> str:
    """The token the index holds for a word (its porter stem)."""
    toks = fts.words(word)
    return toks[0][1] if len(toks) == 1 else word


def _stems(words: list[str]) -> list[str]:
    """`_stem` of each word, from one pass of the tokenizer over them all (a word's dozen forms cost one
    pass, not twelve: ~60 us each). ASCII letters and digits make one token each, stemmed alone."""
    if all(map(fts.one_token, words)):
        toks = fts.words(" ".join(words))
        if len(toks) == len(words):
            return [stem for _, stem in toks]
    return [_stem(w) for w in words]


def _root(word: str) -> str | None:
    """The word less its derivational ending, when that leaves a root worth a prefix search."""
    low = word.lower()
    if len(low) < MIN_ROOT + 2 or not low.isascii() or not word[1:].islower():  # not an identifier
        return None
    for suffix in _SUFFIXES:
        if low.endswith(suffix) and len(low) - len(suffix) >= MIN_ROOT:
            return low[: len(low) - len(suffix)]
    return None


@lru_cache(maxsize=256)
def parse(text: str) -> Query:
    """Terms and hints from what a person or a model typed. Raises QueryError when nothing is searchable.

    Remembered, with what the query's terms compile once (`Term.matchers`, `Query.neighbours`): a query is
    asked again (in another project, a next page, by a hook's reply and a tool call)."""
    kept: list[Term] = []
    dropped: list[Term] = []
    places: list[int] = []
    hints: set[str] = set()
    seen: set[str] = set()
    for place, match in enumerate(_TOKEN.finditer(plain(text))):
        phrase = match.group(1) is not None
        raw = match.group(1) if phrase else _EDGE_PUNCT.sub("", match.group(2))
        negated = not phrase and bool(_NEGATED.match(raw))
        if not phrase and (clitic := _CLITIC.match(raw)):
            raw = clitic.group(1)
        term = _term(raw, phrase=phrase)
        if term is None or term.fts.lower() in seen:
            continue
        seen.add(term.fts.lower())
        lower = term.text.lower()
        if not phrase and not term.prefix and _PLAIN_WORD.match(term.text):
            if lower in TYPE_HINTS:
                hints.update(TYPE_HINTS[lower])
                term = replace(term, hint=True)
            if lower in STOP_WORDS or len(lower) == 1:
                dropped.append(term)
                continue
        if negated:
            dropped.append(term)
            continue
        kept.append(term)
        places.append(place)
    if not kept:
        kept, places = dropped, []  # "what failed?" still searches for something
    if not kept:
        raise QueryError("the query has nothing to search for (no letters or digits)")
    kept = kept[:MAX_TERMS]
    terms = kept + _joined_pairs(kept)
    return Query(terms=terms, type_hints=hints, places=places[:MAX_TERMS], asks_why=bool(ASKS_WHY.search(text)))


def _joined_pairs(terms: list[Term]) -> list[Term]:
    """ "pane creation" may be written paneCreation, indexed as one token: look for the pair joined too."""
    pairs = []
    for i in range(len(terms) - 1):
        a, b = terms[i].text, terms[i + 1].text
        if _JOINABLE.match(a) and _JOINABLE.match(b) and not (terms[i].phrase or terms[i + 1].phrase):
            joined = (a + b).lower()
            pairs.append(Term(text=a + b, fts=f'"{joined}"', covers=(i, i + 1), alternatives=((_word(joined),),)))
    return pairs[:MAX_PAIRS]
