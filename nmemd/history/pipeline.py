"""The import's batches on their way to the daemon: `import_events` RPCs, up to IN_FLIGHT at once, each on
its own thread and connection, so the next batch is read and extracted while the daemon commits the last
ones; and the files' states (how far each was read), recorded only once what they cover is committed."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from nmemd.history.import_rpc import IN_FLIGHT, RPC_TIMEOUT_S, FileState, encode_batch

LOG = logging.getLogger("nmemd.import_transcripts")


class Sent(Protocol):
    """Where the daemon's counts of what it received go (the run's `Summary`)."""

    events_sent: int
    events_new: int


class Pipeline:
    """Sends batches, up to IN_FLIGHT at once (each on its own thread and connection).

    Replies are taken in sending order. A batch's file states become safe to
    record once it and every batch before it are committed; they are sent with
    the next RPC (or a last one of their own), never sooner.
    """

    def __init__(self, ask: Callable[[str, dict[str, Any], float], Any], summary: Sent):
        self.ask = ask
        self.summary = summary
        self.flight: deque[tuple[Future[Any], list[FileState]]] = deque()
        self.settled: dict[str, FileState] = {}  # path -> latest safe state, not yet sent

    def send(self, events: list[bytes], files: list[FileState]) -> None:
        while len(self.flight) >= IN_FLIGHT:
            self._settle_oldest(RPC_TIMEOUT_S)
        body = encode_batch(events, self._take_settled())
        self.flight.append((self._start(body), files))

    def finish(self) -> None:
        """Wait for every batch; record the last states. Raise what the daemon refused."""
        while self.flight:
            self._settle_oldest(RPC_TIMEOUT_S)
        self._record_settled()

    def abandon(self, timeout: float) -> None:
        """Ctrl-C or an error: let the batches in flight finish, record the states they make safe, quietly."""
        try:
            while self.flight:
                self._settle_oldest(timeout)
        except Exception:  # a later batch may be committed, but its states must not run ahead of this one
            self.flight.clear()
        try:
            self._record_settled()
        except Exception:
            LOG.debug("could not record the import state", exc_info=True)

    def _start(self, body: str) -> Future[Any]:
        future: Future[Any] = Future()

        def run() -> None:
            try:
                future.set_result(self.ask("import_events", {"batch": body}, RPC_TIMEOUT_S))
            except BaseException as exc:  # given to the main thread, which raises it
                future.set_exception(exc)

        threading.Thread(target=run, name="nmem-import-rpc", daemon=True).start()
        return future

    def _settle_oldest(self, timeout: float) -> None:
        future, files = self.flight[0]
        reply = future.result(timeout)
        self.flight.popleft()
        self.summary.events_sent += int(reply.get("received", 0))
        self.summary.events_new += int(reply.get("new", 0))
        for f in files:
            self.settled[f.path] = f

    def _take_settled(self) -> list[FileState]:
        files = list(self.settled.values())
        self.settled.clear()
        return files

    def _record_settled(self) -> None:
        if self.settled:
            self.ask("import_events", {"batch": encode_batch([], list(self.settled.values()))}, RPC_TIMEOUT_S)
            self.settled.clear()
