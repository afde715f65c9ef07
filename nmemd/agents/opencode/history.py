"""Read OpenCode's session database (`~/.local/share/opencode/opencode.db`, OpenCode 1.2+) as the events
nmem's OpenCode plugin would have sent, for `nmem import-transcripts` (the format: README.md).

The database is opened read-only (`mode=ro`: OpenCode may be writing it; WAL lets it). What becomes a
payload (each with `nmem_agent: opencode`, read by the daemon as live OpenCode events are):

* a user message's text parts (not OpenCode's own `synthetic` ones) -> UserPromptSubmit with the
  message's id as `prompt_id`, as the plugin's `chat.message` sends it;
* a tool part, `completed` -> PostToolUse, `error` -> PostToolUseFailure, with its `callID` as
  `tool_use_id`, as the plugin's `tool.execute.after` and its error parts send them;
* a turn's last assistant text -> Stop with `last_assistant_message`, keyed by `reply_key` (the plugin's
  `session.idle` sends the same text);
* the text parts of an assistant message that calls a tool (the agent's own words between its tool
  calls) -> AssistantText, and its `reasoning` parts' plain text -> AssistantThinking, keyed by
  `words_key` with the part's id.

So a session seen by both is stored once. Incremental: a run reads only sessions changed after the newest
change the last one read (`session.time_updated`, or a part's, in ms), and records that time as the
database's offset in `import_files`; a session read again adds nothing (natural keys). A change written in
the same millisecond as that newest change, after the run read it, waits for the session's next change.
A compaction's summary message, step and patch parts, and running tool parts are skipped.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from nmemd.agents.opencode import SPEC
from nmemd.agents.opencode.capture import database
from nmemd.capture.fields import dict_or_empty
from nmemd.history.records import STRING_MAX, Counts, Record, bound, nonempty_str
from nmemd.history.sources import HistorySource
from nmemd.model import reply_key, words_key

AGENT: Final = SPEC.name
NAME: Final = "opencode.db"
_TABLES: Final = ("session", "message", "part")


class Unreadable(Exception):
    """The file is not an OpenCode database nmem can read."""


def is_database(path: str) -> bool:
    return os.path.basename(path) == NAME


def _json(raw: object) -> dict[str, Any]:
    if not isinstance(raw, str | bytes):
        return {}
    try:
        return dict_or_empty(json.loads(raw))
    except ValueError:
        return {}


@dataclass
class DatabaseReader:
    """The records of every session of one opencode.db changed since `since` (ms), in order."""

    path: str
    since: int = -1
    counts: Counts = field(default_factory=Counts)
    watermark: int = 0  # the newest change read (ms): the next run's `since`

    def records(self) -> Iterator[Record]:
        """Raise Unreadable when the file cannot be opened as an OpenCode database."""
        self.watermark = self.since
        try:
            conn = sqlite3.connect(f"file:{quote(os.path.abspath(self.path))}?mode=ro", uri=True, timeout=5.0)
        except sqlite3.Error as exc:
            raise Unreadable(f"cannot open: {exc}") from exc
        try:
            try:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            except sqlite3.Error as exc:
                raise Unreadable(f"not an SQLite database: {exc}") from exc
            if missing := [t for t in _TABLES if t not in tables]:
                raise Unreadable(f"not an OpenCode database (no table {missing[0]})")
            try:
                sessions = conn.execute(
                    "SELECT id, directory, time_updated FROM session WHERE time_updated > ?1"
                    " OR id IN (SELECT session_id FROM part WHERE time_updated > ?1)"
                    " ORDER BY time_created, id",
                    (self.since,),
                ).fetchall()
                for sid, directory, updated in sessions:
                    if not isinstance(sid, str) or not sid:
                        self.counts.skipped += 1
                        continue
                    yield from self._session(conn, sid, directory if isinstance(directory, str) else None)
                    newest = conn.execute("SELECT max(time_updated) FROM part WHERE session_id = ?", (sid,)).fetchone()
                    for t in (updated, newest[0] if newest else None):
                        if isinstance(t, int) and t > self.watermark:
                            self.watermark = t
            except sqlite3.Error as exc:
                raise Unreadable(f"read failed: {exc}") from exc
        finally:
            conn.close()

    def _session(self, conn: sqlite3.Connection, sid: str, cwd: str | None) -> Iterator[Record]:
        parts: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for mid, created, data in conn.execute(
            "SELECT message_id, time_created, data FROM part WHERE session_id = ? ORDER BY time_created, id", (sid,)
        ):
            parts.setdefault(mid, []).append((created if isinstance(created, int) else 0, _json(data)))
        reply: tuple[str, float] | None = None
        for mid, created, data in conn.execute(
            "SELECT id, time_created, data FROM message WHERE session_id = ? ORDER BY time_created, id", (sid,)
        ):
            self.counts.lines += 1
            info = _json(data)
            ts = (created if isinstance(created, int) else 0) / 1000
            role = info.get("role")
            mine = parts.get(mid, [])
            if role == "user":
                text = "\n".join(p["text"] for _, p in mine if p.get("type") == "text"
                                 and isinstance(p.get("text"), str) and not p.get("synthetic")
                                 and not p.get("ignored"))  # fmt: skip
                if not text.strip():
                    self.counts.skipped += 1
                    continue
                if reply is not None:
                    yield self._stop(sid, cwd, *reply)
                    reply = None
                payload = self._payload(sid, cwd, "UserPromptSubmit")
                payload.update(prompt=bound(text, STRING_MAX, 0), prompt_id=mid)
                model = dict_or_empty(info.get("model"))
                if nonempty_str(model.get("providerID")) and nonempty_str(model.get("modelID")):
                    payload["model"] = f"{model['providerID']}/{model['modelID']}"
                self.counts.prompts += 1
                yield Record(key=f"prompt:{sid}:{mid}", ts=ts, payload=payload)
            elif role == "assistant" and not info.get("summary"):
                self.counts.messages += 1
                calls = any(p.get("type") == "tool" for _, p in mine)
                for index, (pts, part) in enumerate(mine):
                    kind = part.get("type")
                    said = kind == "reasoning" or (kind == "text" and calls)
                    if said and nonempty_str(part.get("text")) and part["text"].strip() and not part.get("synthetic"):
                        own = nonempty_str(part.get("id")) or f"{mid}:{index}"
                        yield self._words(sid, cwd, own, kind == "reasoning", part["text"], pts / 1000 or ts)
                    if kind == "tool":
                        if (record := self._tool(sid, cwd, part, pts / 1000 or ts)) is not None:
                            yield record
                    elif kind == "text" and nonempty_str(part.get("text")) and not part.get("synthetic"):
                        reply = (part["text"], pts / 1000 or ts)
            else:
                self.counts.skipped += 1
        if reply is not None:
            yield self._stop(sid, cwd, *reply)

    def _payload(self, sid: str, cwd: str | None, event: str) -> dict[str, Any]:
        p: dict[str, Any] = {"nmem_agent": AGENT, "session_id": sid, "hook_event_name": event}
        if cwd:
            p["cwd"] = cwd
        return p

    def _tool(self, sid: str, cwd: str | None, part: dict[str, Any], ts: float) -> Record | None:
        state, call = dict_or_empty(part.get("state")), nonempty_str(part.get("callID"))
        status = state.get("status")
        if call is None or status not in ("completed", "error"):
            self.counts.skipped += 1
            return None
        payload = self._payload(sid, cwd, "PostToolUse" if status == "completed" else "PostToolUseFailure")
        payload.update(tool_name=nonempty_str(part.get("tool")) or "unknown", tool_use_id=call,
                       tool_input=bound(dict_or_empty(state.get("input")), STRING_MAX, 0))  # fmt: skip
        if status == "completed":
            response = {"title": state.get("title"), "output": state.get("output"), "metadata": state.get("metadata")}
            payload["tool_response"] = bound(response, STRING_MAX, 0)
        else:
            payload["error"] = bound(str(state.get("error") or "failed"), STRING_MAX, 0)
            self.counts.errors += 1
        self.counts.tools += 1
        return Record(key=f"tool:{sid}:{call}", ts=ts, payload=payload)

    def _words(self, sid: str, cwd: str | None, own: str, thinking: bool, text: str, ts: float) -> Record:
        payload = self._payload(sid, cwd, "AssistantThinking" if thinking else "AssistantText")
        payload["thinking" if thinking else "text"] = bound(text, STRING_MAX, 0)
        self.counts.said += 1
        return Record(key=words_key(sid, own, 0), ts=ts, payload=payload)

    def _stop(self, sid: str, cwd: str | None, text: str, ts: float) -> Record:
        payload = self._payload(sid, cwd, "Stop")
        payload.update(stop_hook_active=False, last_assistant_message=bound(text, STRING_MAX, 0))
        self.counts.replies += 1
        return Record(key=reply_key(sid, text), ts=ts, payload=payload)


SOURCE: Final = HistorySource(
    roots=lambda: [database()] if os.path.isfile(database()) else [],
    claims=is_database,
    database=lambda path, since: DatabaseReader(path, since=since),
    unreadable=Unreadable,
    where=database,
)
