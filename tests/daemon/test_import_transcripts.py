"""`nmem import-transcripts` against a real daemon, real SQLite files and the real hook client.

Acceptance for issue #6: every transcript of tests/data gives the observations expected
of it and a second run adds nothing; a tool call seen live (nmem-send) and in its
transcript is stored once, whichever comes first; bad files are reported, never
fatal; a live hook is acked during an import; Ctrl-C leaves a state the next run
resumes from.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from support.daemon import Daemon, run_send
from support.db import db_rows, integrity_ok
from support.env import BIN
from support.fixtures import COMPACT, HEAVY, SHORT, SUBAGENT
from support.helpers import count, new_id, payload, send_frame, send_hook, wait_until
from support.replay import transcript_payloads
from support.transcript_import import nmem_import, observations, session_of

from nmem_client import protocol
from nmemd import config
from nmemd.capture import ingest
from nmemd.capture.extract import extract
from nmemd.capture.ingest import Ingestor
from nmemd.history.purge import PurgeFilter, purge
from nmemd.store.batches import Incoming
from nmemd.store.database import open_store
from nmemd.store.keys import key_digest

PARENT_SID = "7f277e19-066f-49a5-bf54-4aaa084bb6c5"  # the subagent's session (its sessionId)


def claude_projects(root: Path) -> Path:
    """The transcripts of tests/data laid out as Claude Code files them: <project>/<session>.jsonl and subagents/."""
    projects = root / "projects"
    for path in (SHORT, HEAVY, COMPACT):
        folder = projects / "-home-dev-projects-orchard"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, folder / f"{session_of(path)}.jsonl")
    sub = projects / "-home-dev-projects-orchard-worktrees-orchard-m2x" / PARENT_SID / "subagents"
    sub.mkdir(parents=True)
    shutil.copy(SUBAGENT, sub / SUBAGENT.name)
    return projects


# --- 1. the fixtures ---------------------------------------------------------------------------------


def test_fixture_transcripts_give_the_expected_observations_and_a_second_run_adds_nothing(
    daemon: Daemon, tmp_path: Path
) -> None:
    projects = claude_projects(tmp_path)
    # The transcripts are dated March 2026: the scheduled retention sweep would rightly drop their
    # reads (30 days) if it ran mid-test. What is asserted here is extraction, not retention.
    daemon.env["NMEM_MAINTENANCE_RETENTION_INTERVAL_S"] = "0"
    daemon.start()
    code, summary, _ = nmem_import(str(projects))
    assert code == 0
    assert summary["files"] == 4 and summary["bad_files"] == [] and summary["invalid_lines"] == 0
    # 4 prompts (the subagent's task is not one), 17 tool results, 2 rejected calls, 2 compaction records.
    assert (summary["prompts"], summary["tool_calls"], summary["errors"], summary["compactions"]) == (4, 17, 2, 2)
    # 3 final messages: each file's last text, the end of its (excerpted) last turn (the subagent's: SubagentStop).
    assert summary["replies"] == 3
    # 6 passages of the agent's own words between tool calls: 4 texts (2 of them the subagent's), 2 thoughts.
    assert summary["said"] == 6
    assert summary["events_sent"] == summary["events_new"] == 34
    assert summary["sessions_summarized"] == 4

    rows = observations(daemon.db)
    by_type: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_type.setdefault(row[0], []).append(row)
    assert {t: len(v) for t, v in by_type.items()} == {
        "prompt": 4, "error": 2, "command": 2, "search": 9, "read": 1, "fetch": 1, "agent": 2, "write": 1,
        "edit": 1, "tool": 1, "compact": 2, "stop": 2, "assistant": 4, "thinking": 2,
    }  # fmt: skip
    assert "Let me run the server and look at the Makefile to see what fails." in [r[1] for r in by_type["assistant"]]
    titles = [r[1] for r in rows]
    assert "make serve fails right away" in titles
    # The rejected Bash and Glob calls of the short transcript are errors, with their tool.
    assert [(r[4], r[8]) for r in by_type["error"]] == [("Bash", "PostToolUseFailure"), ("Glob", "PostToolUseFailure")]
    assert by_type["command"][0][3] == "npm run dev" and by_type["command"][0][1] == "$ npm run dev (background)"
    assert by_type["read"][0][2] == "/home/dev/projects/orchard/web/src/panel.ts"
    assert by_type["read"][0][1] == "Read web/src/panel.ts (83 lines)"
    assert by_type["fetch"][0][1].startswith("Fetch https://example.org/scrollkit/issues/212 (200 OK")
    assert by_type["write"][0][1] == "Write web/src/panel_state.ts (created, 42 lines)"
    assert by_type["edit"][0][2].endswith("web/src/panel_state.ts")
    assert [r[1] for r in by_type["agent"] if r[8] == "PostToolUse"] == [
        "Agent Explore: Explore the log panel rendering code (completed)"
    ]
    assert by_type["tool"][0][4] == "TaskOutput"
    assert [r[1] for r in by_type["compact"]] == ["Compacting (auto)", "Compacted (auto)"]
    assert [r[8] for r in by_type["compact"]] == ["PreCompact", "PostCompact"]
    # The subagent's six web searches: in its parent session, marked with its agent id.
    sub = [r for r in rows if r[5] == "c93e1a4" and r[0] != "assistant"]
    assert len([r for r in rows if r[5] == "c93e1a4" and r[0] == "assistant"]) == 2
    assert len(sub) == 7 and all(r[0] == "search" and r[7] == PARENT_SID for r in sub[:6])
    assert sub[6][0] == "agent" and sub[6][8] == "SubagentStop"  # its last text
    assert sub[0][1].startswith("Web search 'npm scrollkit latest version")
    assert all(r[6] for r in rows if r[8].startswith("PostToolUse"))  # every tool call keeps its tool_use_id

    sessions = {r[0]: r[1:] for r in db_rows(daemon.db, "SELECT session_id, cwd, git_branch, transcript_path,"
                                             " started_at FROM sessions")}  # fmt: skip
    assert len(sessions) == 4
    heavy_sid = session_of(HEAVY)
    assert sessions[heavy_sid][:2] == ("/home/dev/projects/orchard", "main")
    assert sessions[heavy_sid][2].endswith(f"{heavy_sid}.jsonl")
    assert sessions[PARENT_SID][1] == "orchard-m2x"
    assert abs(sessions[heavy_sid][3] - 1773052304.0) < 86400  # transcript time (2026-03-09), not now
    prompts = db_rows(daemon.db, "SELECT prompt_number FROM prompts p JOIN observations o ON o.id = p.observation_id"
                                 " WHERE o.session_id = ? ORDER BY p.prompt_number", (heavy_sid,))  # fmt: skip
    assert prompts == [(1,), (2,)]

    code, again, _ = nmem_import(str(projects))
    assert code == 0 and again["events_new"] == 0
    assert again["files_unchanged"] >= 3  # the subagent's unanswered WebFetch keeps its tail to re-read
    assert observations(daemon.db) == rows
    assert count(daemon.db, "events") == 34
    daemon.stop()
    integrity_ok(daemon.db)


# --- 2. live hooks and the transcript: each tool call once -------------------------------------------


@pytest.mark.parametrize("order", ["live-then-import", "import-then-live"])
def test_a_tool_call_seen_live_and_imported_is_stored_once(daemon: Daemon, tmp_path: Path, order: str) -> None:
    transcript = tmp_path / f"{session_of(HEAVY)}.jsonl"
    shutil.copy(HEAVY, transcript)
    hooks = transcript_payloads(transcript)
    calls = [p["tool_use_id"] for p in hooks if p.get("tool_use_id")]
    assert len(calls) == 6
    daemon.start()

    def live() -> None:
        for p in hooks:
            done = run_send(json.dumps(p).encode())
            assert done.returncode == 0 and done.stderr == b""

    def imported() -> int:
        code, summary, _ = nmem_import(str(transcript))
        assert code == 0 and summary["tool_calls"] == 6
        return int(summary["events_new"])

    if order == "live-then-import":
        live()
        # only the two prompts (the hook payload has no prompt id to match), the last turn's reply (no live Stop)
        # and the agent's two passages between tool calls (these payloads name no transcript to read them from)
        assert imported() == 5
    else:
        assert imported() == 11
        live()
    assert count(daemon.db, "inbox") == 0  # every live event was acked by the daemon, not left to the fallback
    sid = session_of(HEAVY)
    for tool_use_id in calls:
        # The call's observation row is its record (migration m005): the ledger keeps no key for it.
        assert count(daemon.db, "events", "natural_key = ?", (f"tool:{sid}:{tool_use_id}",)) == 0, tool_use_id
        assert count(daemon.db, "observations", "tool_use_id = ?", (tool_use_id,)) == 1, tool_use_id
    assert count(daemon.db, "observations", "hook_event LIKE 'PostToolUse%'") == 6
    daemon.stop()
    integrity_ok(daemon.db)


def test_natural_keys_within_one_batch_and_only_for_finished_calls(tmp_path: Path) -> None:
    """The store alone: same key twice in one batch is stored once; a PreToolUse does not claim the call's key."""
    base = {"session_id": "nk-1", "cwd": "/tmp/nk", "tool_name": "Bash", "tool_use_id": "toolu_nk1",
            "tool_input": {"command": "make nk"}}  # fmt: skip
    pre = extract({**base, "hook_event_name": "PreToolUse"})
    post = extract({**base, "hook_event_name": "PostToolUse", "tool_response": {"stdout": "ok"}})

    async def run() -> tuple[int, int]:
        async with open_store(config.load({})) as store:
            first = await store.commit_batch(
                [Incoming(event_id=new_id(), received_at=1.0, extracted=e) for e in (pre, post, post)]
            )
            second = await store.commit_batch([Incoming(event_id=new_id(), received_at=2.0, extracted=post)])
            return first, second

    assert anyio.run(run) == (2, 0)  # the PreToolUse and one PostToolUse
    db = Path(config.load({}).db)
    assert stored_calls(db, "nk-1") == 1
    assert count(db, "observations", "hook_event = 'PostToolUse'") == 1


def stored_calls(db: Path, session: str) -> int:
    """Finished tool calls the store knows in `session`: by a ledger key, or by their own observation row."""
    return int(
        db_rows(
            db,
            "SELECT count(*) FROM (SELECT natural_key FROM events WHERE natural_key LIKE 'tool:' || ? || ':%'"
            " UNION SELECT 'tool:' || session_id || ':' || tool_use_id FROM observations WHERE session_id = ?"
            " AND tool_use_id IS NOT NULL AND hook_event IN ('PostToolUse', 'PostToolUseFailure'))",
            (session, session),
        )[0][0]
    )


def test_a_tool_call_stays_known_when_merged_purged_or_keyed_by_an_older_version(tmp_path: Path) -> None:
    """A call recorded by its row alone, by the row it was merged into, after a purge of its row, or by
    a ledger key written before m005: sent again under a new event_id (as an import does), it is not new."""
    read = {"session_id": "nk-2", "cwd": "/tmp/nk", "tool_name": "Read", "hook_event_name": "PostToolUse",
            "tool_input": {"file_path": "/tmp/nk/a.py"}, "tool_response": {"type": "text", "file": {
                "filePath": "/tmp/nk/a.py", "content": "x = 1"}}}  # fmt: skip
    first, repeat, later, old = (extract({**read, "tool_use_id": f"toolu_{n}"}) for n in ("a", "b", "c", "d"))

    def again(*events: Any) -> list[Incoming]:
        return [Incoming(event_id=new_id(), received_at=9.0, extracted=e) for e in events]

    async def run() -> list[int]:
        async with open_store(config.load({})) as store:
            out = [await store.commit_batch(again(first)), await store.commit_batch(again(repeat))]
            out.append(await store.commit_batch(again(first, repeat)))  # its row; the row it merged into
            await store.conn.execute(  # a call stored by an older version: its key in the ledger only
                "INSERT INTO events(event_id, received_at, session_id, hook_event, natural_key)"
                " VALUES ('old-1', 1.0, 'nk-2', 'PostToolUse', 'tool:nk-2:toolu_d')"
            )
            await store.conn.commit()
            out.append(await store.commit_batch(again(old)))
            out.append(await store.commit_batch([Incoming(event_id=new_id(), received_at=1e6, extracted=later)]))
            counts = await purge(store, PurgeFilter(session_id="nk-2"))
            out.append(counts.observations)
            out.append(await store.commit_batch(again(first, repeat, later, old)))  # nothing comes back
            return out

    assert anyio.run(run) == [1, 1, 0, 0, 1, 2, 0]
    db = Path(config.load({}).db)
    assert count(db, "observations", "session_id = 'nk-2'") == 0
    keys = {r[0] for r in db_rows(db, "SELECT natural_key FROM events WHERE session_id = 'nk-2'")}
    # the purge moved the rows' keys into the ledger, as digests (issue #28, finding 12); the older
    # version's ledger-only key belonged to no row and stays as it was
    assert keys == {key_digest(f"tool:nk-2:toolu_{n}") for n in "abc"} | {"tool:nk-2:toolu_d"}


def test_the_daemon_skip_list_governs_extraction_in_the_importer(daemon: Daemon, tmp_path: Path) -> None:
    """The importer extracts on its side, with the skip list the daemon names (not the CLI's own environment)."""
    transcript = tmp_path / f"{session_of(HEAVY)}.jsonl"
    shutil.copy(HEAVY, transcript)
    daemon.env["NMEM_SKIP_TOOLS"] = "Bash,WebSearch"
    daemon.start()
    done = subprocess.run(
        [str(BIN / "nmem"), "import-transcripts", "--json", str(transcript)],
        capture_output=True, text=True, timeout=60, env={**daemon.env, "NMEM_SKIP_TOOLS": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # skipped calls are still events, with no observation (2 prompts, 6 calls, the first turn's reply, 2 passages)
    assert json.loads(done.stdout)["events_new"] == 11
    assert count(daemon.db, "observations", "tool_name IN ('Bash', 'WebSearch')") == 0
    assert count(daemon.db, "observations", "tool_name IN ('Glob', 'Read', 'WebFetch')") == 3


def test_a_malformed_import_batch_is_refused_whole_with_its_reason(daemon: Daemon) -> None:
    daemon.start()

    def rpc(params: Any) -> tuple[bytes, bytes]:
        body = json.dumps({"method": "import_events", "params": params}).encode()
        return send_frame(daemon.socket, protocol.KIND_RPC, protocol.NO_EVENT_ID, body)

    good = {"key": "prompt:s:1", "ts": 1.0, "extracted": {"hook_event": "UserPromptSubmit", "session_id": "s"}}
    bad_ts = {**good, "key": "prompt:s:2", "ts": "yesterday"}
    for params, reason in [
        ({"items": []}, b'expected params {"batch"'),  # the old, raw-payload form
        ({"batch": "{not json"}, b"JSON is malformed"),
        ({"batch": json.dumps({"events": [good, bad_ts]})}, b"$.events[1].ts"),
        ({"batch": json.dumps({"events": [{**good, "extracted": {"observations": []}}]})}, b"hook_event"),
        ({"batch": json.dumps({"events": [], "files": [], "extra": 1})}, b"extra"),
    ]:
        status, reply = rpc(params)
        assert status == b"ERR" and reply.startswith(b"ImportParamsError "), (params, reply)  # its kind
        assert reason in reply, reply
    assert count(daemon.db, "events") == 0  # nothing of a refused batch is stored, not even its good events
    status, reply = rpc({"batch": json.dumps({"events": [good, good]})})
    assert status == b"OK" and json.loads(reply) == {"received": 2, "new": 1}
    daemon.stop()
    integrity_ok(daemon.db)


def test_batches_and_single_events_share_commits_and_each_entry_gets_its_new_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ingestor alone: a batch is one queue entry, committed with whatever else is queued."""
    monkeypatch.setattr(ingest, "BATCH_MAX_EVENTS", 4)

    def event(n: int, key: str | None = None) -> Incoming:
        ex = extract({"hook_event_name": "UserPromptSubmit", "session_id": "mix", "prompt": f"prompt {n}"})
        return Incoming(event_id=f"mix{n:05d}", received_at=float(n), extracted=ex, natural_key=key)

    async def run() -> tuple[list[int], int, int]:
        async with open_store(config.load()) as store:
            ingestor = Ingestor(store)  # batches of 4 at most
            results: list[int] = [0, 0, 0]

            async def many(slot: int, items: list[Incoming]) -> None:
                results[slot] = await ingestor.submit_many(items)

            async with anyio.create_task_group() as tg:
                tg.start_soon(ingestor.run)
                async with anyio.create_task_group() as senders:  # queued before the first batch closes
                    senders.start_soon(many, 0, [event(1), event(2, "k"), event(3, "k"), event(1)])
                    senders.start_soon(ingestor.submit, event(4))
                    senders.start_soon(many, 1, [event(5), event(2)])
                    senders.start_soon(many, 2, [])
                ingestor.close()
            return results, ingestor.committed, ingestor.queued

    results, committed, queued = anyio.run(run)
    assert results == [2, 1, 0] and committed == 4 and queued == 0  # a key or an id seen before is not new
    assert count(Path(config.load({}).db), "events", "session_id = 'mix'") == 4


# --- 3. bad files, incremental runs ------------------------------------------------------------------


def test_bad_files_are_reported_per_file_and_new_lines_are_imported_once(daemon: Daemon, tmp_path: Path) -> None:
    root = tmp_path / "projects" / "p"
    root.mkdir(parents=True)
    lines = HEAVY.read_text().splitlines(keepends=True)
    good = root / "good.jsonl"
    # an invalid JSON line in the middle, and the last line cut in half (a session still being written)
    good.write_text("".join(lines[:20]) + "{not json\n" + "".join(lines[20:31]) + lines[31][:100])
    (root / "binary.jsonl").write_bytes(b"\x00\x01\x02" * 100)
    denied = root / "denied.jsonl"
    shutil.copy(SHORT, denied)
    denied.chmod(0)
    (root / "dangling.jsonl").symlink_to(root / "gone.jsonl")
    daemon.start()

    code, summary, _ = nmem_import(str(tmp_path / "projects"))
    assert code == 0
    bad = {Path(b["path"]).name: b["reason"] for b in summary["bad_files"]}
    assert "binary" in bad["binary.jsonl"]
    assert "No such file" in bad["dangling.jsonl"]
    assert "1 invalid JSON line" in bad["good.jsonl"] and "truncated last line" in bad["good.jsonl"]
    if os.geteuid() != 0:  # root reads a mode-000 file
        assert "Permission denied" in bad["denied.jsonl"]
    assert summary["invalid_lines"] == 1
    heavy_sid = session_of(HEAVY)
    # Lines 0-30 hold 2 prompts, the results of 2 Bash calls, the first turn's final text (a Stop at the
    # second prompt) and 2 passages between tool calls; line 31 (a result) is cut: a file being written, so
    # no reply is taken at its end.
    assert count(daemon.db, "observations", "session_id = ?", (heavy_sid,)) == 7
    assert count(daemon.db, "observations", "type = 'read'") == 0

    with good.open("a") as f:  # the session goes on: the cut line is finished, more lines follow
        f.write(lines[31][100:] + "".join(lines[32:]))
    code, summary, _ = nmem_import(str(tmp_path / "projects"))
    assert code == 0
    assert summary["events_new"] == 4  # the Glob, WebSearch, Read and WebFetch results
    assert "good.jsonl" not in {Path(b["path"]).name for b in summary["bad_files"]}
    assert count(daemon.db, "observations", "session_id = ?", (heavy_sid,)) == 11

    # Replaced (new inode, other content) and shrunk files are read again from the start, safely.
    replaced = root / "good.jsonl.new"
    replaced.write_text("".join(lines[:12]))
    os.replace(replaced, good)
    code, summary, _ = nmem_import(str(good))
    # a prompt, a Bash call, and the text before the end of the file: the first turn's reply, known too
    assert code == 0 and summary["events_sent"] == 3 and summary["events_new"] == 0
    shutil.copy(COMPACT, good)
    with good.open("r+") as f:
        f.truncate(5000)
    code, summary, _ = nmem_import(str(good))
    assert code == 0 and summary["bad_files"][0]["reason"].startswith("truncated last line")
    assert count(daemon.db, "observations", "session_id = ?", (heavy_sid,)) == 11
    daemon.stop()
    integrity_ok(daemon.db)


def test_a_missing_path_is_one_line_and_exit_2(daemon: Daemon, tmp_path: Path) -> None:
    code, summary, err = nmem_import(str(tmp_path / "nope"))
    assert code == 2 and summary == {}
    assert len(err.strip().splitlines()) == 1 and "nope" in err


# --- 4. a long import: live hooks keep working; Ctrl-C, then resume ----------------------------------


def synthetic_transcript(path: Path, session: str, calls: int) -> None:
    """A transcript shaped like those of tests/data: a prompt, then `calls` Bash tool_use/tool_result pairs.

    Its times are of the last hour: older history may meet the daemon's retention sweep mid-test.
    """
    start = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    env = {"sessionId": session, "cwd": "/tmp/nmem-synthetic", "gitBranch": "main", "isSidechain": False,
           "userType": "external", "version": "2.1.39"}  # fmt: skip
    with path.open("w") as f:
        f.write(json.dumps({**env, "type": "user", "uuid": f"{session}-p", "timestamp": start.isoformat(),
                            "message": {"role": "user", "content": "run the synthetic commands"}}) + "\n")  # fmt: skip
        for i in range(calls):
            tid = f"toolu_{session}_{i:06d}"
            ts = (start + dt.timedelta(milliseconds=100 * i)).isoformat()
            use = {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": f"echo step {i}"}}
            f.write(
                json.dumps(
                    {
                        **env,
                        "type": "assistant",
                        "uuid": f"{tid}-a",
                        "timestamp": ts,
                        "message": {"id": f"msg_{i}", "role": "assistant", "content": [use]},
                    }
                )
                + "\n"
            )
            result = {"type": "tool_result", "tool_use_id": tid, "content": f"step {i}"}
            f.write(
                json.dumps(
                    {
                        **env,
                        "type": "user",
                        "uuid": f"{tid}-r",
                        "timestamp": ts,
                        "message": {"role": "user", "content": [result]},
                        "toolUseResult": {"stdout": f"step {i}", "stderr": "", "interrupted": False},
                    }
                )
                + "\n"
            )


@pytest.mark.timeout(90)
def test_live_hooks_are_acked_during_an_import_and_ctrl_c_resumes_exactly(daemon: Daemon, tmp_path: Path) -> None:
    calls = 20_000
    transcript = tmp_path / "synthetic-session.jsonl"
    synthetic_transcript(transcript, "syn", calls)
    daemon.start()
    proc = subprocess.Popen(
        [str(BIN / "nmem"), "import-transcripts", "--json", str(transcript)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Ctrl-C as a terminal delivers it: a suite started in the background inherits SIGINT ignored,
        # and Python then never raises KeyboardInterrupt (the import ran to its end, exit 0).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        wait_until(lambda: count(daemon.db, "events", "session_id = 'syn'") > 0, 30, "the import to begin committing")
        status, _ = send_hook(daemon.socket, new_id(), payload("mid-import-hook"), timeout=10)  # bounded wait
        assert status == b"OK"
        assert proc.poll() is None, "the import ended before the live hook was acked: make it longer"
        assert count(daemon.db, "observations", "session_id = 'mid-import-hook'") == 1
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    partial = json.loads(out)
    assert partial["interrupted"] is True
    stored = count(daemon.db, "events", "session_id = 'syn'")
    offset = db_rows(daemon.db, "SELECT offset FROM import_files")[0][0]
    assert 0 < stored and offset < transcript.stat().st_size
    # The recorded offset never runs ahead of what is committed: every call before it is stored.
    before = transcript.read_bytes()[:offset].count(b'"tool_result"')
    assert stored_calls(daemon.db, "syn") >= before

    code, summary, _ = nmem_import(str(transcript), timeout=60)
    assert code == 0 and not summary["interrupted"]
    assert stored_calls(daemon.db, "syn") == calls
    assert count(daemon.db, "observations", "session_id = 'syn' AND type = 'command'") == calls
    assert count(daemon.db, "observations", "session_id = 'syn' AND type = 'prompt'") == 1
    daemon.stop()
    integrity_ok(daemon.db)


# --- 5. nmem install offers the import ---------------------------------------------------------------


def test_install_with_import_imports_and_never_prompts_without_a_terminal(
    daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude = tmp_path / "claude"
    claude.mkdir()
    claude_projects(claude)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    daemon.start()
    quiet = subprocess.run([str(BIN / "nmem"), "install", "--no-mcp"], capture_output=True, text=True,
                           stdin=subprocess.DEVNULL, timeout=60)  # fmt: skip
    assert quiet.returncode == 0 and "import" in quiet.stdout.lower()  # says how, does not ask nor run it
    assert count(daemon.db, "observations") == 0
    done = subprocess.run([str(BIN / "nmem"), "install", "--no-mcp", "--import"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert count(daemon.db, "events") == 34


# --- 6. what answers questions (issue #14): a turn's final message, summaries --------------------------

CONCLUSION = "The flaky test was a race in the wombat scheduler; it now waits for the lock.\n\nAll 42 tests pass."


def _turn_transcript(path: Path, sid: str, cwd: str) -> None:
    """One turn as Claude Code writes it: the prompt, a text + tool_use message, its result, the final text."""

    def line(kind: str, n: int, message: dict[str, Any], **extra: Any) -> str:
        return json.dumps({"type": kind, "sessionId": sid, "uuid": f"u-{n}", "cwd": cwd, "gitBranch": "main",
                           "timestamp": f"2026-03-01T10:00:0{n}.000Z", "message": message, **extra})  # fmt: skip

    path.write_text("\n".join([
        line("user", 1, {"role": "user", "content": "why does test_scheduler flake?"}),
        line("assistant", 2, {"id": "msg_1", "role": "assistant", "content": [{"type": "text", "text": "Look."}]}),
        line("assistant", 3, {"id": "msg_1", "role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_t1", "name": "Bash", "input": {"command": "pytest -q"}}]}),
        line("user", 4, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_t1",
                                                      "content": "42 passed"}]},
             toolUseResult={"stdout": "42 passed", "stderr": "", "interrupted": False}),
        line("assistant", 5, {"id": "msg_2", "role": "assistant", "content": [{"type": "text", "text": CONCLUSION}]}),
    ]) + "\n")  # fmt: skip


@pytest.mark.parametrize("order", ["live-then-import", "import-then-live"])
def test_a_turns_final_message_is_searchable_and_stored_once_live_and_imported(
    daemon: Daemon, tmp_path: Path, order: str
) -> None:
    sid = f"turn-{order}"
    cwd = str(tmp_path / "proj")
    os.makedirs(cwd)
    transcript = tmp_path / f"{sid}.jsonl"
    _turn_transcript(transcript, sid, cwd)
    daemon.start()
    stop = {"session_id": sid, "transcript_path": str(transcript), "cwd": cwd, "hook_event_name": "Stop",
            "stop_hook_active": False, "last_assistant_message": CONCLUSION}  # fmt: skip

    def live() -> None:
        done = run_send(json.dumps(stop).encode())
        assert done.returncode == 0 and done.stderr == b""

    def imported() -> dict[str, Any]:
        code, summary, _ = nmem_import(str(transcript))
        assert code == 0 and summary["replies"] == 1 and summary["sessions_summarized"] == 1
        return summary

    if order == "live-then-import":
        live()
        # the prompt and the Bash call: the Stop is known by its key, and "Look." was read live by the daemon
        assert imported()["events_new"] == 2
    else:
        assert imported()["events_new"] == 4  # the prompt, the Bash call, "Look." and the Stop
        live()
    assert count(daemon.db, "inbox") == 0
    stops = db_rows(daemon.db, "SELECT title, content, hook_event FROM observations WHERE type = 'stop'")
    assert stops == [(f"Stop: {CONCLUSION.splitlines()[0]}", CONCLUSION, "Stop")]
    assert count(daemon.db, "events", "natural_key LIKE ?", (f"reply:{sid}:%",)) == 1
    found = subprocess.run([str(BIN / "nmem"), "search", "wombat scheduler", "--all", "--json"],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert [json.loads(x)["type"] for x in found.stdout.splitlines()][:1] == ["stop"]
    # The imported session has the summary a live Stop writes, its conclusion included.
    summary = wait_until(lambda: db_rows(daemon.db, "SELECT summary FROM sessions WHERE session_id = ?", (sid,))[0][0])
    assert str(summary).startswith('Asked: "why does test_scheduler flake?" (#')
    assert "\nConcluded: The flaky test was a race in the wombat scheduler" in str(summary)
    daemon.stop()
    integrity_ok(daemon.db)


def test_an_imported_session_without_a_stop_gets_a_summary(daemon: Daemon, tmp_path: Path) -> None:
    projects = claude_projects(tmp_path)
    daemon.start()
    code, summary, _ = nmem_import(str(projects))
    assert code == 0 and summary["sessions_summarized"] == 4
    rows = dict(db_rows(daemon.db, "SELECT session_id, summary FROM sessions"))
    heavy = str(rows[session_of(HEAVY)])
    assert heavy.startswith('Asked: "') and "\nLast run: `npm run dev` passed (#" in heavy
    assert all(rows.values())
    daemon.stop()


def test_an_import_with_no_daemon_starts_one_that_exits_when_idle(nmem_env: dict[str, str], tmp_path: Path) -> None:
    """The daemon an import starts is an on-demand one, like a hook's (it used to run forever)."""
    from nmemd.control import control

    settings = config.load()
    try:
        code, summary, _ = nmem_import(str(claude_projects(tmp_path)))
        assert code == 0 and summary["events_new"] > 0
        facts = control.ping()
        assert facts is not None and facts.started_by == "client"
        if not Path("/proc").is_dir():
            pytest.skip("no /proc here to read the daemon's command line")
        cmdline = Path(f"/proc/{facts.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[cmdline.index(b"--idle-timeout") + 1] == b"900"
    finally:
        control.stop(settings)
