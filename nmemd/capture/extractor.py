"""The event loop's side of the extraction worker (`nmemd.capture.extract_worker`): send, match, fall back.

`submit` hands a hook payload to the worker and calls back with its `Extracted` (or the
InvalidEvent that refuses it) from the event loop, without a task. Whenever the worker is
not there (starting, restarting, gone at shutdown) or has too much in flight, `submit`
returns False and the caller extracts in the loop as before; payloads the worker still
held when it died are extracted in the loop too, and a worker that answers nothing for
`STALL_S` is killed. So the worker only ever adds speed: no event waits on it for longer
than it lives or that stall limit, none is lost or extracted twice.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Final, cast

import anyio
import msgspec

from nmemd.capture.extract import extract_event
from nmemd.capture.extract_worker import FAILED, INVALID, OK, REPLY, REQUEST
from nmemd.errors import InvalidEvent
from nmemd.model import Extracted, WorkerFacts

LOG = logging.getLogger("nmemd.extractor")
MAX_IN_FLIGHT: Final = 4096  # beyond this the loop extracts itself rather than queue behind the worker
RESTART_DELAY_S: Final = 1.0  # a worker that dies is started again after this pause
STOP_GRACE_S: Final = 2.0  # at shutdown the worker answers what it holds, then exits on EOF
# An event takes ~30 us to extract (a 1 MB payload a few ms): a request unanswered this long
# means a frozen or stuck worker. It is killed and the loop extracts what it held; meanwhile
# hook clients fall back to the inbox after their own timeout, so nothing waits longer.
STALL_S: Final = 2.0

Result = Extracted | InvalidEvent
Done = Callable[[Result], None]


class Extractor:
    """One worker process at a time; requests are answered in order."""

    def __init__(self, skip_tools: frozenset[str]):
        self.skip_tools = skip_tools
        self.ready = False  # the worker announced it is done importing
        self.extracted = 0  # by the worker since start (for status and tests)
        self.restarts = 0
        self._transport: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._pending: dict[int, tuple[bytes, Done, float]] = {}  # seq -> (body, done, sent at)
        self._seq = 0
        self._buf = bytearray()
        self._out: list[bytes] = []
        self._exited = anyio.Event()
        self._decode = msgspec.msgpack.Decoder(Extracted).decode

    @property
    def pid(self) -> int | None:
        return self._transport.get_pid() if self._transport is not None else None

    def facts(self) -> WorkerFacts:
        return WorkerFacts(pid=self.pid, ready=self.ready, extracted=self.extracted, restarts=self.restarts)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def submit(self, body: bytes, done: Done) -> bool:
        """Queue `body` for the worker (True: `done` runs later, on the loop) or refuse it (False)."""
        if not self.ready or len(self._pending) >= MAX_IN_FLIGHT or self._stdin is None:
            return False
        self._seq += 1
        self._pending[self._seq] = (body, done, time.monotonic())
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)  # one pipe write per loop turn
        self._out.append(REQUEST.pack(len(body), self._seq))
        self._out.append(body)
        return True

    def _flush(self) -> None:
        if self._out and self._stdin is not None and not self._stdin.is_closing():
            self._stdin.write(b"".join(self._out))
        self._out.clear()

    # --- lifecycle --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep a worker running until cancelled; then let it finish what it holds and exit."""
        try:
            while True:
                try:
                    await self._start()
                except OSError as exc:
                    LOG.error("extraction worker not started: %s; extracting in the event loop", exc)
                else:
                    while not self._exited.is_set():
                        with anyio.move_on_after(STALL_S / 2):
                            await self._exited.wait()
                        self._check_stalled()
                await anyio.sleep(RESTART_DELAY_S)
                self.restarts += 1
        finally:
            with anyio.CancelScope(shield=True):
                await self._stop()

    async def _start(self) -> None:
        self._exited = anyio.Event()
        self._buf.clear()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.subprocess_exec(
            lambda: _WorkerProtocol(self),
            sys.executable, "-P", "-m", "nmemd.capture.extract_worker", *sorted(self.skip_tools),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, close_fds=True,  # tracebacks: ours
        )  # fmt: skip
        self._transport = transport
        self._stdin = cast(asyncio.WriteTransport, transport.get_pipe_transport(0))

    def _check_stalled(self) -> None:
        if not self._pending or self._transport is None:
            return
        _, _, sent_at = next(iter(self._pending.values()))  # the oldest: replies come in order
        waited = time.monotonic() - sent_at
        if waited > STALL_S and not self._exited.is_set():
            LOG.error(
                "extraction worker (pid %s) answered nothing for %.1f s with %d events waiting; killing it",
                self.pid, waited, len(self._pending),
            )  # fmt: skip
            self.ready = False
            self._transport.kill()  # _exit follows: the loop extracts what it held

    async def _stop(self) -> None:
        self.ready = False
        self._flush()
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()  # EOF: the worker answers what it read, then exits
        if self._transport is not None:
            with anyio.move_on_after(STOP_GRACE_S):
                await self._exited.wait()
            if not self._exited.is_set():
                self._transport.kill()
            self._transport.close()
        self._fall_back()

    # --- replies ----------------------------------------------------------------------------------

    def _data(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos = 0
        while len(buf) - pos >= REPLY.size:
            length, seq, status = REPLY.unpack_from(buf, pos)
            end = pos + REPLY.size + length
            if len(buf) < end:
                break
            payload = bytes(buf[pos + REPLY.size : end])
            pos = end
            if seq == 0:  # the worker's hello: imports done, requests now answered at once
                self.ready = True
                LOG.info("extraction worker ready (pid %s)", self.pid)
                continue
            entry = self._pending.pop(seq, None)
            if entry is None:  # already extracted here (a reply that came after the worker was given up)
                continue
            body, done, _ = entry
            if status == OK:
                self.extracted += 1
                done(self._decode(payload))
            elif status == INVALID:
                done(InvalidEvent(payload.decode("utf-8", "replace")))
            else:
                if status != FAILED:
                    LOG.error("extraction worker sent status %d", status)
                LOG.error("extraction worker failed on an event (%s); extracting it here", payload[:200])
                done(self._here(body))
        del buf[:pos]

    def _exit(self) -> None:
        code = self._transport.get_returncode() if self._transport is not None else None
        if self.ready or self._pending:
            LOG.warning("extraction worker exited (code %s)", code)
        self.ready = False
        self._stdin = None
        self._fall_back()
        self._exited.set()

    def _fall_back(self) -> None:
        """Extract here whatever the worker will never answer."""
        pending, self._pending = self._pending, {}
        self._out.clear()
        for body, done, _ in pending.values():
            done(self._here(body))

    def _here(self, body: bytes) -> Result:
        try:
            return extract_event(body, self.skip_tools)
        except InvalidEvent as exc:
            return exc


class _WorkerProtocol(asyncio.SubprocessProtocol):
    def __init__(self, owner: Extractor):
        self.owner = owner

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.owner._data(data)

    def connection_lost(self, exc: Exception | None) -> None:  # the process exited and its pipes closed
        self.owner._exit()
