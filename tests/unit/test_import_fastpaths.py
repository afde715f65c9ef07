"""The importer's fast paths give what the plain ones gave.

`decode_line` (a typed decode that skips what the reader never reads) must
make the reader produce the same records as a whole-line decode, for
transcript lines and for lines of odd shapes; the redaction gate (a regex led by each
needle's rarest character) must find exactly the strings that hold a needle
(curl's `-u` / `--user` only where the password family can match them), and
redacting through it must give what redacting without it gives.
"""

from __future__ import annotations

import random
import re
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fixtures import TRANSCRIPTS as TRANSCRIPT_DIR
from support.fixtures import shared_transcripts

from nmemd.agents.claude_code.history import TranscriptReader, decode_line
from nmemd.capture import redact as redact_module
from nmemd.capture.fields import _nth_newline, clean_line, short_field
from nmemd.capture.redact import _CURL_USER_GATE, _GATE, _NEEDLES, _redact_all, redact
from nmemd.capture.secret_patterns import CURL_USER
from nmemd.history.records import Record

TRANSCRIPTS = sorted(TRANSCRIPT_DIR.glob("*.jsonl"))
_whole = msgspec.json.Decoder().decode


def _records(path: str, lines: list[bytes], *, fast: bool) -> tuple[list[Record], dict[str, int], int]:
    reader = TranscriptReader.for_file(path)
    records: list[Record] = []
    offset = 0
    for raw in lines:
        try:
            line = decode_line(raw) if fast else _whole(raw)
        except msgspec.DecodeError:
            line = None
        if line is not None:
            records += reader.feed(line, offset, len(raw), raw) if fast else reader.feed(line, offset, len(raw))
        offset += len(raw)
    records += reader.finish()  # the file's end: a held compact boundary, the last turn's reply
    return records, vars(reader.counts), reader.safe_offset(offset)


def _same(path: str, lines: list[bytes]) -> None:
    fast = _records(path, lines, fast=True)
    whole = _records(path, lines, fast=False)
    assert msgspec.json.encode(fast[0]) == msgspec.json.encode(whole[0])
    assert fast[1:] == whole[1:]


def _mutate(value: Any, rng: random.Random) -> Any:
    """`value` with keys dropped and values of other types here and there."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            r = rng.random()
            if r < 0.05:
                continue
            if r < 0.08:
                v = rng.choice([None, 1, "", "x", [], {}, True, [1, "a"], {"a": 1}])
            out[k] = _mutate(v, rng)
        return out
    if isinstance(value, list):
        out_list = [_mutate(v, rng) for v in value if rng.random() > 0.05]
        if rng.random() < 0.05:
            out_list.append(rng.choice([None, 1, "s", [], {"type": "text", "text": "hi"}]))
        return out_list
    return value


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.name)
def test_typed_line_decoding_gives_the_records_of_whole_lines(path: Any) -> None:
    check_typed_decoding(path)


def check_typed_decoding(path: Any) -> None:
    """The file's records through `decode_line` and through whole-line decodes, as is and mutated 20 ways."""
    lines = path.read_bytes().splitlines(keepends=True)
    _same(str(path), lines)
    for seed in range(20):
        rng = random.Random(seed)
        _same(str(path), [msgspec.json.encode(_mutate(_whole(raw), rng)) + b"\n" for raw in lines])


@pytest.mark.shared
def test_typed_line_decoding_gives_the_records_of_whole_lines_over_real_transcripts() -> None:
    paths = shared_transcripts()
    assert paths
    for path in paths:
        check_typed_decoding(path)


def test_a_line_without_uuid_is_named_by_all_its_content() -> None:
    """The natural key of a uuid-less line hashes the whole line, not the keys the typed decode kept."""
    line = {"type": "system", "subtype": "compact_boundary", "sessionId": "s", "data": "x" * 100}
    raw = msgspec.json.encode(line) + b"\n"
    _same("/p/s.jsonl", [raw])
    other = msgspec.json.encode({**line, "data": "y" * 100}) + b"\n"
    assert _records("/p/s.jsonl", [raw], fast=True)[0][0].key != _records("/p/s.jsonl", [other], fast=True)[0][0].key


def test_a_line_read_only_thanks_to_the_typed_decode_still_gets_a_key() -> None:
    """Invalid UTF-8 where the reader never looks: the line is read, named by its bytes, never an error."""
    raw = b'{"type":"system","subtype":"compact_boundary","sessionId":"s","data":"\xff"}\n'
    with pytest.raises((UnicodeDecodeError, msgspec.DecodeError)):  # msgspec >= 0.23: a DecodeError
        _whole(raw)
    reader = TranscriptReader.for_file("/p/s.jsonl")
    [record] = reader.feed(decode_line(raw), 0, len(raw), raw) + reader.finish()
    assert record.key.startswith("compact:s:h")


def test_a_line_of_another_shape_is_decoded_whole_and_json_errors_still_raise() -> None:
    odd = b'{"type":"user","message":{"content":[1,"a",{"type":"text","text":"hi"}]},"x":[1,2]}'
    assert decode_line(odd) == _whole(odd)
    assert decode_line(b"[1, 2]") == [1, 2]
    for bad in (b"{not json", b'{"type":"x","a":tru}', b""):
        with pytest.raises(msgspec.DecodeError):
            decode_line(bad)


_FRAGMENTS = st.sampled_from(
    [*_NEEDLES, *(n[:-1] for n in _NEEDLES), *(n[1:] for n in _NEEDLES), " ", "k", "a", "\n", "\u212a", "\u0130", "_"]
)
_CURL_USER_AT = re.compile(_CURL_USER_GATE)


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(st.one_of(_FRAGMENTS, st.text(max_size=6)), max_size=12))
def test_the_redaction_gate_finds_exactly_the_needles(parts: list[str]) -> None:
    low = "".join(parts).lower()
    others = any(n in low for n in _NEEDLES if n not in CURL_USER)
    assert (_GATE.search(low) is not None) == (others or _CURL_USER_AT.search(low) is not None)


_SECRETS = st.sampled_from(
    [" -u admin:hunter2pass", "--user=bob:s3cretpw", "curl -u me:pw12345678", " --user 'a:b12345678'", "\\n", "-", "K",
     # issue #16, finding 6: tools' own credential syntax
     "PGPASSWORD=hunter2pg", ";AccountKey=abcdEFGH1234abcdEFGH12==", "mysql -u root -pS3cretPw", "sshpass -p Pa55wd ",
     "machine h login bob password Zx9pw", '"auth": "Ym9iOnMzY3JldA=="', "hooks.slack.com/services/T0/B0/XXXXXXXX",
     "client-key-data: LS0tLS1CRUdJTiBSU0E=", "db:5432:app:alice:pgS3cret", "\n"]
)  # fmt: skip


@settings(max_examples=1000, deadline=None, database=None)
@given(st.lists(st.one_of(_FRAGMENTS, _SECRETS, st.text(max_size=6)), max_size=14))
def test_the_redaction_gate_never_changes_what_is_redacted(parts: list[str]) -> None:
    text = "".join(parts)
    assert redact(text) == (text if len(text) < 8 else _redact_all(text, text.lower()))


@settings(max_examples=1000, deadline=None, database=None)
@given(st.lists(st.one_of(_FRAGMENTS, _SECRETS, st.text(max_size=6)), max_size=14))
def test_the_family_gate_never_changes_what_is_redacted(parts: list[str]) -> None:
    text = "".join(parts)
    gated = _redact_all(text, text.lower())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(redact_module, "_FAMILY_GATE", re.compile(""))  # every family checked, as before the gate
        assert _redact_all(text, text.lower()) == gated


def test_a_dash_u_in_prose_passes_the_gate_only_where_curl_could_mean_it() -> None:
    assert _GATE.search("a follow-up and a pop-up, re-used") is None
    for text in ("curl -u me:pw12345678", "x\t--user=me:pw12345678", "\u212a-u me:pw12345678", "-u me:pw12345678"):
        assert _GATE.search(text.lower()) is not None
        assert redact(text) == _redact_all(text, text.lower()) != text


def _nth_newline_plain(s: str, count: int, bound: int) -> int:
    idx = -1
    for _ in range(count):
        idx = s.find("\n", idx + 1, bound)
        if idx < 0:
            return len(s)
    return idx


@settings(max_examples=500, deadline=None, database=None)
@given(st.text(alphabet="ab\n", max_size=40), st.integers(0, 12), st.integers(-2, 45))
def test_the_nth_newline_shortcut_finds_what_the_loop_finds(s: str, count: int, bound: int) -> None:
    assert _nth_newline(s, count, bound) == _nth_newline_plain(s, count, bound)


_FIELDS = st.one_of(st.none(), st.integers(), st.text(max_size=20), st.text(min_size=500, max_size=700))


@settings(max_examples=300, deadline=None, database=None)
@given(_FIELDS, st.integers(1, 300))
def test_a_short_field_is_its_cleaned_line(value: object, limit: int) -> None:
    assert short_field({"k": value}, "k", limit) == (clean_line(value, limit) or None)
