"""The agent's own words in a Claude Code transcript (issue #39): every text and thinking block a message
says before its tool calls becomes an observation of its own, at its line's time, keyed by its line's
uuid and place; the message that calls no tool is the turn's reply (its Stop), not repeated. The reader
the daemon follows live (words only) gives the same records with the same keys. A slash command given
arguments is a prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fixtures import WORDS

from nmemd.agents.claude_code.history import TranscriptReader, assistant_line, decode_line
from nmemd.capture.extract import extract
from nmemd.history.records import Record

SID = "5b1e0c7a-2f44-4d8e-9a61-0c3d7e9f4a12"


def _records(path: Path, reader: TranscriptReader, wanted: bool = True) -> list[Record]:
    records, offset = [], 0
    with path.open("rb") as f:
        for raw in f:
            if wanted or assistant_line(raw):
                records += reader.feed(decode_line(raw), offset, len(raw), raw)
            offset += len(raw)
    return records + reader.finish()


def test_every_block_said_between_tool_calls_is_an_observation_in_its_place() -> None:
    records = _records(WORDS, TranscriptReader.for_file(str(WORDS)))
    events = [r.payload["hook_event_name"] for r in records]
    assert events == [
        "UserPromptSubmit", "AssistantThinking", "AssistantText", "PostToolUseFailure", "AssistantText",
        "PostToolUse", "Stop", "UserPromptSubmit",
    ]  # fmt: skip
    said = [r for r in records if r.key.startswith("said:")]
    assert [r.key for r in said] == [f"said:{SID}:9c0d{n:04d}-6a1b-4c2d-8e3f-5a6b7c8d9e0f:0" for n in (2, 3, 6)]
    assert [r.ts for r in records] == sorted(r.ts for r in records)  # each at its own line's time
    assert all(r.payload["session_id"] == SID and r.payload["transcript_path"] == str(WORDS) for r in said)
    assert "signature" not in json.dumps([r.payload for r in records])  # the thinking's plain text only

    observations = [o for r in said for o in extract(r.payload).observations]
    assert [(o.type, o.title) for o in observations] == [
        ("thinking", "The export probably chokes on rows whose shipped_at is NULL."),
        ("assistant", "It fails because `export/2` returns the bare list: the caller expects the result wrapped in"
                      " `{:ok, rows}`."),
        ("assistant", "SQLite cannot change a column's nullability in place, so the migration rebuilds the orders"
                      " table."),
    ]  # fmt: skip
    # The final message is the turn's Stop, once.
    stop = next(r for r in records if r.payload["hook_event_name"] == "Stop")
    assert stop.payload["last_assistant_message"].startswith("Fixed: `export/2`")


def test_the_live_reader_gives_the_same_words_with_the_same_keys_and_nothing_else() -> None:
    whole = [r for r in _records(WORDS, TranscriptReader.for_file(str(WORDS))) if r.key.startswith("said:")]
    live = _records(WORDS, TranscriptReader.words_of(str(WORDS)), wanted=False)
    assert [(r.key, r.ts, r.payload) for r in live] == [(r.key, r.ts, r.payload) for r in whole]


def test_words_wait_for_their_message_to_call_a_tool(tmp_path: Path) -> None:
    """Read line by line as the file grows: a text is stored once its message's tool call is written, and
    never when its message calls none (the turn's reply)."""
    reader = TranscriptReader.words_of(str(WORDS))
    lines = WORDS.read_bytes().splitlines(keepends=True)
    got = [len(reader.feed(decode_line(raw), 0, len(raw), raw)) for raw in lines if assistant_line(raw)]
    assert got == [0, 0, 2, 0, 1, 0]  # thinking, text, tool_use; text, tool_use; the final text


def test_a_slash_command_with_arguments_is_a_prompt() -> None:
    records = _records(WORDS, TranscriptReader.for_file(str(WORDS)))
    prompts = [r for r in records if r.payload["hook_event_name"] == "UserPromptSubmit"]
    assert [(r.key, r.payload["prompt"]) for r in prompts][1:] == [
        (f"prompt:{SID}:p-compact-1", "/compact keep the orders export fix and the SQLite table rebuild")
    ]  # `/clear`, without arguments, asked nothing
    (o,) = extract(prompts[1].payload).observations
    assert (o.type, o.title) == ("prompt", "/compact keep the orders export fix and the SQLite table rebuild")


@pytest.mark.parametrize(
    "block",
    [
        {"type": "text", "text": 7},
        {"type": "thinking", "thinking": None},
        {"type": "text", "text": "   "},
        {"type": {"nested": 1}},
        {"type": "redacted_thinking", "data": "EqQBCkgIARABGAIiQL"},
    ],
)
def test_odd_blocks_give_no_words(block: dict[str, object]) -> None:
    reader = TranscriptReader.for_file("/tmp/odd.jsonl")
    call = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}
    line = {"type": "assistant", "sessionId": "odd", "uuid": "u1", "timestamp": "2026-03-12T14:10:00Z",
            "message": {"id": "m1", "content": [block, call]}}  # fmt: skip
    assert reader.feed(line, 0, 100) == []


def test_the_agents_words_are_redacted_like_everything_else() -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    text = f"The deploy fails because GITHUB_TOKEN={token} has expired. <private>the vault path</private>"
    payload = {"hook_event_name": "AssistantText", "session_id": SID, "cwd": "/tmp/x", "text": text}
    (o,) = extract(payload).observations
    assert token not in o.title + o.content and "vault path" not in o.title + o.content
    assert "has expired" in o.title
