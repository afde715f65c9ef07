"""The agent's own words in every agent's history (issue #39): what each agent says between its tool calls,
and the plain text of its thinking, read from its own files by its own reader and extracted as the daemon
extracts it: `assistant` and `thinking` observations keyed `said:...`, never the turn's last message (its
Stop) again. Codex's faults: a patch it did not apply is a failure with its message; a code-mode `exec`
call keeps its source whole. Each agent's recorded session of tests/data, with words added where its
recording had none (the scripted APIs said nothing between calls)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import DATA
from support.payloads import copilot, gemini, opencode

from nmemd import registry
from nmemd.capture.extract import extract
from nmemd.history.records import Record
from nmemd.history.sources import HistorySource

CODEX_WORDS = next((DATA / "codex").glob("rollout-2026-11-26T09-00-00-*.jsonl"))
SAID, THOUGHT = gemini.SAID, gemini.THOUGHT
assert copilot.SAID == SAID and copilot.REASONING.startswith(THOUGHT)


def _source(agent: str) -> HistorySource:
    spec = registry.get(agent)
    assert spec is not None and spec.history is not None
    return spec.history()


def _lines(agent: str, path: Path, words_only: bool = False) -> list[Record]:
    source = _source(agent)
    make = source.words if words_only else source.lines
    assert make is not None and source.decode is not None
    reader, records, offset = make(str(path)), [], 0
    with path.open("rb") as f:
        for raw in f:
            if not words_only or (source.words_line is not None and source.words_line(raw)):
                records += reader.feed(source.decode(raw), offset, len(raw), raw)
            offset += len(raw)
    return records + ([] if words_only else reader.finish())


def _said(records: list[Record]) -> list[tuple[str, str]]:
    return [(o.type, o.title) for r in records if r.key.startswith("said:") for o in extract(r.payload).observations]


# --- each agent's history, with its words ------------------------------------------------------------------


def _gemini(tmp: Path) -> list[Record]:
    (tmp / "chats").mkdir()
    path = gemini.with_words(tmp / "chats" / gemini.SESSION_FILE.name)
    records = _lines("gemini", path)
    assert [r.key for r in _lines("gemini", path, words_only=True)] == [r.key for r in records if r.key[:5] == "said:"]
    return records


def _copilot(tmp: Path) -> list[Record]:
    (tmp / copilot.SESSION).mkdir()
    path = copilot.with_words(tmp / copilot.SESSION / "events.jsonl")
    records = _lines("copilot", path)
    assert [r.key for r in _lines("copilot", path, words_only=True)] == [r.key for r in records if r.key[:5] == "said:"]
    return records


def _cline(tmp: Path) -> list[Record]:
    task = next((DATA / "cline" / "sessions").iterdir())
    shutil.copytree(task, tmp / task.name)
    path = tmp / task.name / f"{task.name}.messages.json"
    doc = json.loads(path.read_text())
    first = next(m for m in doc["messages"] if m["role"] == "assistant")
    first["content"][:0] = [{"type": "thinking", "thinking": f"{THOUGHT}.", "signature": "EqQBsignature"},
                            {"type": "text", "text": SAID}]  # fmt: skip
    path.write_text(json.dumps(doc))
    reader = _source("cline").document
    assert reader is not None
    return list(reader(str(path)).records())


def _opencode(tmp: Path) -> list[Record]:
    (tmp / "proj").mkdir()
    db = tmp / "opencode.db"
    opencode.build_db(db, tmp / "proj")
    conn = sqlite3.connect(db)
    try:
        tool = conn.execute(
            "SELECT id, message_id, session_id, time_created, time_updated, data FROM part"
            ' WHERE data LIKE \'%"type":"tool"%\' ORDER BY time_created LIMIT 1'
        ).fetchone()
        for n, (kind, text) in enumerate((("reasoning", f"{THOUGHT}."), ("text", SAID))):
            data = {"id": f"prt_words{n}", "messageID": tool[1], "sessionID": tool[2], "type": kind, "text": text}
            conn.execute("INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                         (f"prt_words{n}", tool[1], tool[2], tool[3] - 2 + n, tool[4], json.dumps(data)))  # fmt: skip
        conn.commit()
    finally:
        conn.close()
    read = _source("opencode").database
    assert read is not None
    return list(read(str(db), 0).records())


def _codex(tmp: Path) -> list[Record]:
    path = Path(shutil.copy(CODEX_WORDS, tmp / CODEX_WORDS.name))
    records = _lines("codex", path)
    assert [r.key for r in _lines("codex", path, words_only=True)] == [r.key for r in records if r.key[:5] == "said:"]
    return records


AGENTS: dict[str, Callable[[Path], list[Record]]] = {
    "gemini": _gemini,
    "copilot": _copilot,
    "cline": _cline,
    "opencode": _opencode,
}


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_an_agents_words_between_tool_calls_are_imported(agent: str, tmp_path: Path) -> None:
    records = AGENTS[agent](tmp_path)
    said = _said(records)
    assert ("assistant", SAID) in said, said
    assert [t for t, title in said if title.startswith(THOUGHT)] == ["thinking"], said
    assert len({r.key for r in records if r.key.startswith("said:")}) == len(said) == 2
    assert all(r.payload["session_id"] for r in records if r.key.startswith("said:"))
    assert "signature" not in json.dumps([r.payload for r in records]) and "Opaque" not in json.dumps(
        [r.payload for r in records]
    )


def test_codex_words_a_failed_patch_and_an_exec_call(tmp_path: Path) -> None:
    records = _codex(tmp_path)
    said = _said(records)
    assert [t for t, _ in said] == ["thinking", "assistant", "assistant"]  # the final message is the Stop
    assert said[1][1].startswith("The report sums `sales` and `refunds`")
    observations = {r.key.rsplit(":", 1)[-1]: extract(r.payload).observations for r in records}
    (patch,) = observations["call_p1"]
    assert (patch.type, patch.tool_name) == ("error", "apply_patch")
    assert patch.title.startswith("apply_patch failed: verification failed: Failed to find expected lines")
    assert "total = sales + refunds" in patch.content and patch.file_path == "/home/dev/projects/tally/tally/report.py"
    (run,) = observations["call_e1"]
    assert (run.type, run.title) == ("command", "exec: grep -n 'refunds' tally/report.py")
    assert run.command is not None and run.command.endswith("two rows per refund id")  # whole, not cut
    assert "refund r-17 counted 2 times" in run.content
    assert "gAAAA" not in json.dumps([r.payload for r in records])  # the reasoning's encrypted content


def test_a_codex_patch_that_applied_is_still_an_edit() -> None:
    from nmemd.agents.codex.capture import patch_failure

    assert patch_failure("Success. Updated the following files:\nM notes.txt\n") is None
    assert patch_failure("Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated ...") is None
    assert patch_failure("Exit code: 1\nOutput:\nerror") == "exit 1"
    assert patch_failure({"output": "patch rejected: empty patch"}) == "patch rejected: empty patch"


# --- Cline's VS Code extension ------------------------------------------------------------------------------

TASKS = DATA / "cline" / "extension" / "tasks"


def _task(name: str) -> list[Record]:
    reader = _source("cline").document
    assert reader is not None
    return list(reader(str(TASKS / name / "api_conversation_history.json")).records())


def test_a_cline_extension_task_with_tools_in_xml_is_imported() -> None:
    records = _task("1773478931000")
    found = [(r.ts, o.type, o.title) for r in records for o in extract(r.payload).observations]
    kinds = ["prompt", "thinking", "assistant", "read", "assistant", "edit", "command", "stop"]
    assert [t for _, t, _ in found] == kinds
    assert found[0][2] == "the cart total is wrong when a coupon is applied twice"  # not its environment details
    assert found[4][2].startswith("The coupon is applied twice: once per line inside `map`")
    assert found[6][2] == "$ npm test -- cart"
    assert [ts for ts, *_ in found] == sorted(ts for ts, *_ in found) and found[3][0] == 1773478936.48  # ui_messages
    assert {extract(r.payload).session_id for r in records} == {"1773478931000"}
    assert {extract(r.payload).cwd for r in records} == {"/home/dev/projects/basket"}


def test_a_cline_extension_task_with_native_tools_is_imported() -> None:
    records = _task("1773482400000")
    found = [(o.type, o.title) for r in records for o in extract(r.payload).observations]
    assert [t for t, _ in found] == ["prompt", "thinking", "assistant", "command", "stop"]
    assert found[2][1].startswith("The migration reads `schema_version` before creating it")
    assert "signature" not in json.dumps([r.payload for r in records])


def test_the_extensions_tasks_are_found_where_vs_code_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmemd.agents.cline import extension

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    tasks = tmp_path / ".config" / "Code" / "User" / "globalStorage" / "saoudrizwan.claude-dev" / "tasks"
    shutil.copytree(TASKS, tasks)
    assert extension.roots() == [str(tasks)]
    assert str(tasks) in _source("cline").roots()
    assert extension.is_task_history(str(tasks / "1773478931000" / "api_conversation_history.json"))
    assert not extension.is_task_history(str(tasks / "1773478931000" / "ui_messages.json"))
