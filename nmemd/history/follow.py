"""The agent's own words, live: what it says between its tool calls is in its transcript only (no hook
sends it), so the daemon reads it there, never the hook client.

Each hook event that names its transcript (`transcript_path`) makes the daemon read what that file grew
by since the last read: from a remembered offset, complete lines only (a partial last line waits for the
next read), at most `READ_MAX` bytes at a time, and only the lines the agent's `words_line` lets through
are decoded. Its `HistorySource.words` reader (the importer's own reader, in words-only mode) turns them
into the same records `nmem import-transcripts` makes, with the same natural keys and event ids, so a
passage read live and imported later (or the reverse) is stored once. A file that shrank or was
replaced is read again from its start (the keys make that harmless), a missing one is left alone.
Reads run off the event loop, one at a time per file, and are gathered: the event that ends a turn (a
prompt, a Stop, a compaction, the session's end) reads at once, the others (tool calls) at most every
`READ_DELAY_S`, so a turn's words are stored in a commit or two rather than one per tool call.
"""

from __future__ import annotations

import logging
import os
import stat
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

import anyio
import msgspec

from nmemd import registry
from nmemd.errors import ShuttingDown, StorageError
from nmemd.model import CLAUDE_CODE, Extracted, clamp_ts

if TYPE_CHECKING:
    from nmemd.capture.ingest import Ingestor
    from nmemd.history.records import Record
    from nmemd.history.sources import LineReader
    from nmemd.store.batches import Incoming

LOG = logging.getLogger("nmemd.follow")
READ_MAX: Final = 4 * 1024 * 1024  # bytes read at once; a file further behind is read in several steps
FILES_MAX: Final = 64  # transcripts followed at once (the least recently named is forgotten)
READ_DELAY_S: Final = 2.0  # a tool call's read waits this long for the next events' (a turn's end reads at once)
# The events after which the transcript may hold new words (SessionStart: none yet).
_SKIP_EVENTS: Final = frozenset({"SessionStart"})
# The events that end a turn or the session: what the turn said is all written, read it now.
_TURN_ENDS: Final = frozenset({"UserPromptSubmit", "Stop", "SubagentStop", "PreCompact", "SessionEnd"})


@dataclass
class _Followed:
    path: str
    make_reader: Callable[[str], LineReader]
    wanted: Callable[[bytes], bool]
    decode: Callable[[bytes], object]
    reader: LineReader | None = None
    ident: tuple[int, int] = (0, 0)  # (dev, inode) of the file read
    offset: int = 0  # after the last complete line read
    skipping: bool = False  # inside a line longer than READ_MAX: skipped to its end
    running: bool = False
    again: bool = False  # another event named it while it was read
    wake: anyio.Event | None = None  # set: a turn ended while the read waited for more events


@dataclass
class Follower:
    """Reads the words of the transcripts hook events name, and queues them like an import batch."""

    ingestor: Ingestor
    skip_tools: frozenset[str]
    spawn: Callable[..., bool]  # starts a task in the daemon's handler group; False once it stopped
    files: OrderedDict[str, _Followed] = field(default_factory=OrderedDict)
    stored: int = 0  # passages newly stored

    def note(self, ex: Extracted) -> None:
        """An event was committed: read its transcript's new lines (and a subagent's own, at its end), if its
        agent's transcript has words."""
        if ex.hook_event in _SKIP_EVENTS or ex.session_id == "unknown":
            return
        now = ex.hook_event in _TURN_ENDS
        for path in (ex.transcript_path or self._live_file(ex), ex.agent_transcript_path):
            if path:
                self._note(path, ex.agent, now)

    @staticmethod
    def _live_file(ex: Extracted) -> str | None:
        """The file of an agent whose hooks name none, found by the session's id (Copilot's events.jsonl)."""
        spec = registry.get(ex.agent) if ex.agent else None
        source = spec.history() if spec is not None and spec.history is not None else None
        return source.live_file(ex.session_id) if source is not None and source.live_file is not None else None

    def _note(self, path: str, agent: str | None, now: bool) -> None:
        """A `stat` here, on the loop, spares the thread a file that did not grow (or is not there)."""
        followed = self.files.get(path)
        if followed is not None and followed.running:
            if followed.wake is None:
                followed.again = True
            elif now:
                followed.wake.set()
            return
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return
        if followed is None:
            followed = self._follow(path, agent)
            if followed is None:
                return
        else:
            self.files.move_to_end(path)
            if st.st_size == followed.offset and (st.st_dev, st.st_ino) == followed.ident:
                return
        if self.spawn(self._run, followed, now):
            followed.running = True

    def _follow(self, path: str, agent: str | None) -> _Followed | None:
        spec = registry.get(agent or CLAUDE_CODE)
        source = spec.history() if spec is not None and spec.history is not None else None
        if source is None or source.words is None or source.words_line is None or source.decode is None:
            return None
        if not os.path.isabs(path):
            return None
        followed = _Followed(path, source.words, source.words_line, source.decode)
        self.files[path] = followed
        while len(self.files) > FILES_MAX:
            oldest = next(iter(self.files.values()))
            if oldest.running:
                break
            self.files.popitem(last=False)
        return followed

    async def _run(self, followed: _Followed, now: bool) -> None:
        try:
            while True:
                if not now:  # gather the events of the next READ_DELAY_S (a turn's end cuts it short)
                    followed.wake = anyio.Event()
                    with anyio.move_on_after(READ_DELAY_S):
                        await followed.wake.wait()
                followed.wake, followed.again = None, False
                items, more = await anyio.to_thread.run_sync(self._read_items, followed)
                if items:
                    self.stored += await self.ingestor.submit_many(items)
                if not (more or followed.again):
                    return
                now = more
        except (ShuttingDown, StorageError) as exc:  # read again at the next event: the offset is past them
            LOG.warning("the agent's words in %s were not stored: %s", followed.path, exc)
            followed.reader, followed.offset = None, 0
        except Exception:  # a bug must not take the daemon down; the next event starts over
            LOG.exception("reading %s failed", followed.path)
            followed.reader, followed.offset = None, 0
        finally:
            followed.running, followed.wake = False, None

    def _read_items(self, followed: _Followed) -> tuple[list[Incoming], bool]:
        """On a thread, in one hop: `_read`'s records as the events to store."""
        records, more = self._read(followed)
        return (self._incoming(records) if records else []), more

    def _read(self, followed: _Followed) -> tuple[list[Record], bool]:
        """On a thread: the records of the complete lines the file grew by (at most READ_MAX bytes of
        them), and whether more is there to read."""
        try:
            fd = os.open(followed.path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the thread
        except OSError:
            return [], False  # not there (yet, or any more): the next event tries again
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return [], False
            ident = (st.st_dev, st.st_ino)
            if followed.reader is None or ident != followed.ident or st.st_size < followed.offset:
                followed.reader = followed.make_reader(followed.path)  # new, replaced or cut: from its start
                followed.ident, followed.offset, followed.skipping = ident, 0, False
            if st.st_size <= followed.offset:
                return [], False
            chunk = os.pread(fd, min(READ_MAX, st.st_size - followed.offset), followed.offset)
        finally:
            os.close(fd)
        return self._lines(followed, chunk), followed.offset < st.st_size and len(chunk) == READ_MAX

    def _lines(self, followed: _Followed, chunk: bytes) -> list[Record]:
        end = chunk.rfind(b"\n") + 1
        if end == 0:  # a partial last line waits; one longer than READ_MAX is skipped
            if len(chunk) == READ_MAX:
                followed.offset += len(chunk)
                followed.skipping = True
            return []
        reader, wanted, decode = followed.reader, followed.wanted, followed.decode
        assert reader is not None
        records: list[Record] = []
        start, base = 0, followed.offset
        if followed.skipping:  # the rest of an overlong line
            start, followed.skipping = chunk.index(b"\n") + 1, False
        while start < end:
            stop = chunk.index(b"\n", start) + 1
            raw = chunk[start:stop]
            if wanted(raw):
                try:
                    line = decode(raw)
                except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, ValueError):
                    line = None
                if line is not None:
                    records += reader.feed(line, base + start, stop - start, raw)
            start = stop
        followed.offset = base + end
        return records

    def _incoming(self, records: list[Record]) -> list[Incoming]:
        """On a thread: the records extracted as a live event would be, keyed as the importer keys them."""
        from nmemd.capture.extract import extract
        from nmemd.history.import_rpc import event_id_for
        from nmemd.store.batches import Incoming
        from nmemd.store.keys import natural_key

        items = []
        for record in records:
            ex = extract(record.payload, skip_tools=self.skip_tools)
            if not ex.observations:
                continue
            key, ts = natural_key(ex) or record.key, clamp_ts(record.ts)
            items.append(
                Incoming(event_id=event_id_for(key, ts), received_at=ts, extracted=ex, natural_key=key,
                         git_branch=record.git_branch)
            )  # fmt: skip
        return items
