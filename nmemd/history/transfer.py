"""Export and import: a store as JSON lines, and back, idempotent by `event_id`.

The file is a header line, then one line per session, then one per
observation (oldest first), each an object tagged by `kind`. Observations
carry everything needed to restore them except their local row id, which the
importing store assigns; sessions carry their summaries. Import skips every
observation whose `event_id` is already stored and every session already
known, so importing a file twice, or into the store it came from, changes
nothing. Imported text goes through the same privacy filter as captured text.

Export reads a read-only snapshot (WAL readers never block the daemon). Import
writes through `Store.write`: on a running daemon it is an RPC method on its
one write connection (`METHODS`, dispatched by nmemd.daemon.rpc), otherwise the CLI
opens the store itself and calls the same `import_records`. The CLI sends a
file in chunks of `CHUNK` records, each one transaction: ingestion waits for
at most one chunk, and an interrupted import is completed by running it again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

import msgspec

from nmemd import __version__
from nmemd.capture.redact import redact, strip_private
from nmemd.errors import TransferError
from nmemd.model import ObservationType, stored_agent
from nmemd.recall.queries import convert_params
from nmemd.store.database import SQL_CHUNK, Store

FORMAT = 1
CHUNK = 500  # records per import transaction (and per RPC frame: ~2.5 MB at most)

Timestamp = Annotated[float, msgspec.Meta(ge=0, le=1e11)]
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
Title = Annotated[str, msgspec.Meta(max_length=10_000)]  # generous: refuse garbage, never what nmem wrote
Text = Annotated[str, msgspec.Meta(max_length=1_000_000)]


class Header(msgspec.Struct, tag="header", tag_field="kind", kw_only=True, forbid_unknown_fields=True):
    format: int
    exported_at: float
    nmem: str = ""
    project: str | None = None  # the --project the file was exported with


class SessionRecord(msgspec.Struct, tag="session", tag_field="kind", kw_only=True, forbid_unknown_fields=True):
    session_id: Key
    project: str | None = None
    cwd: str | None = None
    started_at: Timestamp | None = None
    ended_at: Timestamp | None = None
    last_event_at: Timestamp | None = None
    source: str | None = None
    end_reason: str | None = None
    model: str | None = None
    transcript_path: str | None = None
    last_assistant_message: Text | None = None
    summary: Text | None = None
    event_count: Annotated[int, msgspec.Meta(ge=0)] = 0
    agent: str | None = None  # None: Claude Code (migration m011)


class ObservationRecord(msgspec.Struct, tag="observation", tag_field="kind", kw_only=True, forbid_unknown_fields=True):
    event_id: Key  # "<event_id>" or "<event_id>:<n>" for the n-th observation of one event
    session_id: Key
    project: str | None = None
    ts: Timestamp
    last_ts: Timestamp | None = None  # None: ts
    count: Annotated[int, msgspec.Meta(ge=1)] = 1
    hook_event: str = "unknown"
    type: ObservationType
    title: Title
    content: Text = ""
    tool_name: str | None = None
    file_path: str | None = None
    command: Text | None = None
    tool_use_id: str | None = None
    agent_id: str | None = None
    pinned: bool = False
    prompt_number: Annotated[int, msgspec.Meta(ge=1)] | None = None
    agent: str | None = None  # None: Claude Code (migration m011)


Record = Header | SessionRecord | ObservationRecord
Restorable = SessionRecord | ObservationRecord


class Imported(msgspec.Struct, kw_only=True):
    """What an import added; `present` counts records it skipped because they were already stored."""

    observations: int = 0
    sessions: int = 0
    present: int = 0

    def add(self, other: Imported) -> None:
        self.observations += other.observations
        self.sessions += other.sessions
        self.present += other.present


# --- export --------------------------------------------------------------------------------------

_SESSION_COLUMNS = (
    "session_id, project, cwd, started_at, ended_at, last_event_at, source, end_reason, model,"
    " transcript_path, last_assistant_message, summary, event_count, agent"
)
_OBSERVATION_COLUMNS = (
    "o.event_id, o.session_id, o.project, o.ts, o.last_ts, o.count, o.hook_event, o.type, o.title, o.content,"
    " o.tool_name, o.file_path, o.command, o.tool_use_id, o.agent_id, o.pinned, p.prompt_number, o.agent"
)


def export_lines(conn: sqlite3.Connection, project: str | None = None) -> Iterator[bytes]:
    """The export of `conn` (one project, or all) as JSON lines, from one read snapshot."""
    encoder = msgspec.json.Encoder()
    conn.execute("BEGIN")  # one snapshot for sessions and observations
    try:
        yield encoder.encode(Header(format=FORMAT, exported_at=time.time(), nmem=__version__, project=project))
        params: tuple[str, ...] = () if project is None else (project,)
        where = "" if project is None else "WHERE project = ?"
        session_sql = f"SELECT {_SESSION_COLUMNS} FROM sessions {where}"
        if project is not None:  # and the sessions its observations belong to, wherever they started
            session_sql += " OR session_id IN (SELECT DISTINCT session_id FROM observations WHERE project = ?)"
            params = (project, project)
        for r in conn.execute(session_sql + " ORDER BY started_at, session_id", params):
            yield encoder.encode(SessionRecord(**dict(zip(_SESSION_COLUMNS.split(", "), r, strict=True))))
        obs_where = "" if project is None else "WHERE o.project = ?"
        rows = conn.execute(
            f"SELECT {_OBSERVATION_COLUMNS} FROM observations o LEFT JOIN prompts p ON p.observation_id = o.id"
            f" {obs_where} ORDER BY o.id",
            () if project is None else (project,),
        )
        names = [c.removeprefix("o.").removeprefix("p.") for c in _OBSERVATION_COLUMNS.split(", ")]
        for r in rows:
            fields = dict(zip(names, r, strict=True))
            fields["pinned"] = bool(fields["pinned"])
            yield encoder.encode(ObservationRecord(**fields))
    finally:
        conn.execute("ROLLBACK")


# --- reading a file ------------------------------------------------------------------------------


class BadLine(msgspec.Struct, frozen=True):
    line: int
    reason: str


class Parsed(msgspec.Struct, kw_only=True):
    records: list[Restorable] = []
    bad: list[BadLine] = []


_DECODER = msgspec.json.Decoder(Record)


def parse_lines(lines: Iterator[bytes]) -> Parsed:
    """Decode every line; bad ones are kept with their 1-based number and the reason, never raised."""
    out = Parsed()
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            record = _DECODER.decode(raw)
        except msgspec.ValidationError as exc:
            out.bad.append(BadLine(number, str(exc)))
            continue
        except msgspec.DecodeError as exc:
            out.bad.append(BadLine(number, f"not a JSON record ({exc})"))
            continue
        except RecursionError:
            out.bad.append(BadLine(number, "nested too deeply"))
            continue
        if isinstance(record, Header):
            if record.format != FORMAT:
                out.bad.append(BadLine(number, f"export format {record.format} (this nmem reads format {FORMAT})"))
            continue
        out.records.append(record)
    return out


def read_file(path: str) -> Parsed:
    """Parse an export file (`-`: stdin); a file that cannot be read is a TransferError."""
    import sys

    if path == "-":
        return parse_lines(iter(sys.stdin.buffer))
    try:
        with open(path, "rb") as fh:
            return parse_lines(iter(fh))
    except OSError as exc:
        raise TransferError(f"cannot read {path}: {exc.strerror or exc}") from None


def describe_bad(bad: Sequence[BadLine], shown: int = 3) -> str:
    """`3 bad lines: line 2: ...; line 9: ...` in one line."""
    parts = [f"line {b.line}: {b.reason}" for b in bad[:shown]]
    more = f"; and {len(bad) - shown} more" if len(bad) > shown else ""
    return f"{len(bad)} bad line{'s' if len(bad) != 1 else ''}: {'; '.join(parts)}{more}"


# --- import --------------------------------------------------------------------------------------


def _clean(text: str | None) -> str | None:
    """The privacy filter capture applies: nothing reaches the FTS index unredacted."""
    return None if text is None else redact(strip_private(text))


def _base_event(event_id: str) -> str:
    return event_id.partition(":")[0]


async def _known(store: Store, sql: str, keys: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(keys), SQL_CHUNK):
        chunk = keys[start : start + SQL_CHUNK]
        rows = await store.conn.execute_fetchall(sql.format(marks=",".join("?" * len(chunk))), chunk)
        found.update(str(r[0]) for r in rows)
    return found


async def import_records(store: Store, records: Sequence[Restorable]) -> Imported:
    """Store the records not yet present, in one transaction; see the module docstring."""
    first_sessions: dict[str, SessionRecord] = {}
    first_obs: dict[str, ObservationRecord] = {}
    for r in records:  # a repeat within the file: the first one counts, in file order
        if isinstance(r, SessionRecord):
            first_sessions.setdefault(r.session_id, r)
        else:
            first_obs.setdefault(r.event_id, r)
    sessions, observations = list(first_sessions.values()), list(first_obs.values())
    result = Imported(present=len(records) - len(sessions) - len(observations))  # repeats within the chunk
    next_id = store.next_observation_id
    async with store.write() as conn:
        have_sessions = await _known(
            store, "SELECT session_id FROM sessions WHERE session_id IN ({marks})", [s.session_id for s in sessions]
        )
        have_obs = await _known(
            store, "SELECT event_id FROM observations WHERE event_id IN ({marks})", [o.event_id for o in observations]
        )
        new_sessions = [s for s in sessions if s.session_id not in have_sessions]
        new_obs = [o for o in observations if o.event_id not in have_obs]
        result.present += len(sessions) - len(new_sessions) + len(observations) - len(new_obs)
        await conn.executemany(
            f"INSERT INTO sessions({_SESSION_COLUMNS}) VALUES ({','.join('?' * 14)})",
            [
                (s.session_id, s.project, s.cwd, s.started_at, s.ended_at, s.last_event_at, s.source, s.end_reason,
                 s.model, s.transcript_path, _clean(s.last_assistant_message), _clean(s.summary), s.event_count,
                 stored_agent(s.agent))
                for s in new_sessions
            ],
        )  # fmt: skip
        rows, prompts, ledger = [], [], []
        for o in new_obs:
            oid, next_id = next_id, next_id + 1
            rows.append(
                (oid, o.event_id, o.session_id, o.project, o.ts, o.ts if o.last_ts is None else o.last_ts, o.count,
                 o.hook_event, o.type, _clean(o.title), _clean(o.content), o.tool_name, o.file_path,
                 _clean(o.command), o.tool_use_id, o.agent_id, int(o.pinned), stored_agent(o.agent))
            )  # fmt: skip
            if o.type == "prompt":
                prompts.append((oid, o.session_id, o.prompt_number, o.session_id, o.ts))
            ledger.append((_base_event(o.event_id), o.ts, o.session_id, o.hook_event, oid))
        await conn.executemany(
            "INSERT INTO observations(id, event_id, session_id, project, ts, last_ts, count, hook_event, type, title,"
            " content, tool_name, file_path, command, tool_use_id, agent_id, pinned, agent)"
            f" VALUES ({','.join('?' * 18)})",
            rows,
        )
        if rows:
            await store.index_within(conn, next_id)
        await conn.executemany(
            "INSERT INTO prompts(observation_id, session_id, prompt_number, ts) VALUES (?, ?,"
            " coalesce(?, (SELECT coalesce(max(prompt_number), 0) + 1 FROM prompts WHERE session_id = ?)), ?)",
            prompts,
        )
        # The ledger learns these events too, so a replay of one (inbox, spool) is not stored again.
        await conn.executemany(
            "INSERT INTO events(event_id, received_at, session_id, hook_event, observation_id)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT(event_id) DO NOTHING",
            ledger,
        )
    store.next_observation_id = max(store.next_observation_id, next_id)
    result.observations, result.sessions = len(new_obs), len(new_sessions)
    return result


# --- RPC method (the daemon's dispatch and the CLI's no-daemon path share it) -------------------


class ImportParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    records: Annotated[list[Restorable], msgspec.Meta(max_length=4 * CHUNK)]


METHODS: dict[str, type[msgspec.Struct]] = {"import": ImportParams}


async def call(store: Store, method: str, params: dict[str, Any]) -> Any:
    """Run one of `METHODS` on the store; returns plain data for the wire."""
    p = convert_params(method, params, ImportParams)
    return msgspec.to_builtins(await import_records(store, p.records))
