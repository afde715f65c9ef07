"""`nmem import-transcripts` on the daemon's side: the wire (`import_events`, `import_state`,
`import_summaries`) and the RPC handler (`call`); the CLI's side, which finds and reads the files, is
`nmemd.history.importer`.

`call` decodes a batch with its types (a malformed one is refused whole, with the reason), then runs
one `Ingestor.submit_many`: the same group commit as live hooks, with each record's transcript
timestamp and natural key; the reply comes after the commit. How far each file was read is recorded
in `import_files` only once every batch before that offset is committed (the state travels with a
later RPC), so an interrupted run resumes where it stopped (events sent twice are harmless: their
natural keys are known).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from nmemd.errors import ImportParamsError
from nmemd.model import Extracted, clamp_ts

if TYPE_CHECKING:
    from nmemd.capture.host import Host

METHODS: Final = ("import_events", "import_state", "import_summaries")
BATCH_EVENTS: Final = 1024  # events per RPC: one commit of ~30 ms, so a live hook meanwhile waits little
BATCH_WIRE_BYTES: Final = 8 * 1024 * 1024  # encoded events per RPC (max_frame_bytes is 32 MB)
BATCH_BYTES: Final = 16 * 1024 * 1024  # transcript bytes behind one RPC: states are recorded at least this often
IN_FLIGHT: Final = 2  # RPCs the importer keeps in flight
RPC_TIMEOUT_S: Final = 300.0
SUMMARY_SESSIONS: Final = 500  # sessions per `import_summaries` RPC


# --- the wire ------------------------------------------------------------------------------------


class FileState(msgspec.Struct, kw_only=True):
    """How far one transcript was read: only complete lines before `offset` are done."""

    path: str
    dev: int
    inode: int
    size: int
    mtime: float
    offset: int
    head_hash: str
    events: int = 0  # records sent from this file, all runs

    def row(self) -> tuple[Any, ...]:
        return (self.path, self.dev, self.inode, self.size, self.mtime, self.offset, self.head_hash, self.events)


class ImportEvent(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One transcript record, extracted by the importer."""

    key: str  # natural idempotency key (a tool call's is recomputed from `extracted` by the daemon)
    ts: float  # when it happened (the line's timestamp)
    extracted: Extracted
    git_branch: str | None = None


class ImportBatch(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `batch` param of `import_events`: a JSON document of its own, decoded typed by the daemon."""

    events: list[ImportEvent] = []
    files: list[FileState] = []  # states whose every earlier batch is committed


class StateParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    paths: list[str]


class SummariesParams(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    sessions: list[str]


class StateReply(msgspec.Struct, kw_only=True):
    files: list[FileState]
    skip_tools: list[str]  # the daemon's: the importer extracts with exactly these


_batch_decoder = msgspec.json.Decoder(ImportBatch)


# --- daemon side ---------------------------------------------------------------------------------


def event_id_for(key: str, ts: float) -> str:
    """A ledger id derived from the record: the same record always gets the same id.

    Its milliseconds come first, so a batch's ids (a few sessions, in time order) land on a few
    neighbouring pages of the ledger's and the observations' event_id indexes instead of a
    random page each: WAL pages per imported event 2.1 -> 1.1 (BENCHMARKS.md). The natural key
    stays the idempotency key (ids of older versions were the hash alone).
    """
    millis = min(max(int(ts * 1000), 0), 0xFFFF_FFFF_FFFF)
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=10).hexdigest()
    return f"imp{millis:012x}{digest}"


def encode_batch(events: Sequence[bytes], files: Sequence[FileState]) -> str:
    """The `batch` param from events already encoded one by one (`msgspec.json.encode(ImportEvent)`)."""
    return (b'{"events":[' + b",".join(events) + b'],"files":' + msgspec.json.encode(files) + b"}").decode()


async def call(daemon: Host, method: str, params: dict[str, Any]) -> Any:
    """Run `import_events` or `import_state` for the CLI."""
    from nmemd.store.batches import Incoming
    from nmemd.store.keys import natural_key

    store = daemon.ingestor.store
    if method == "import_summaries":
        try:
            sessions = msgspec.convert(params, SummariesParams).sessions
        except msgspec.ValidationError as exc:
            raise ImportParamsError(f"{method}: {exc}") from exc
        from nmemd.recall.replies import store_summaries

        return {"summarized": await store_summaries(daemon, sessions)}
    if method == "import_state":
        try:
            paths = msgspec.convert(params, StateParams).paths
        except msgspec.ValidationError as exc:
            raise ImportParamsError(f"{method}: {exc}") from exc
        rows = await store.import_files(paths)
        files = [FileState(**dict(zip(FileState.__struct_fields__, r, strict=True))) for r in rows]
        return StateReply(files=files, skip_tools=sorted(daemon.skip_tools))
    raw = params.get("batch")
    if not isinstance(raw, str) or len(params) != 1:
        raise ImportParamsError(f'{method}: expected params {{"batch": "<JSON of events and files>"}}')
    try:
        batch = _batch_decoder.decode(raw)
    except msgspec.DecodeError as exc:  # ValidationError included: names the field, e.g. `$.events[3].ts`
        raise ImportParamsError(f"{method}: {exc}") from exc
    incoming = []
    for e in batch.events:
        key = natural_key(e.extracted) or e.key
        ts = clamp_ts(e.ts)  # year 1, year 9999, NaN from any client: a time the readers can show
        incoming.append(
            Incoming(
                event_id=event_id_for(key, ts), received_at=ts, extracted=e.extracted, natural_key=key,
                git_branch=e.git_branch,
            )
        )  # fmt: skip
    # The files' read states commit in the same transaction as the events read from them.
    new = await daemon.ingestor.submit_many(incoming, [f.row() for f in batch.files])
    return {"received": len(incoming), "new": new}
