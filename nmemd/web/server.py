"""The viewer's HTTP server: uvicorn with the two bounds it lacks against a local slow-loris.

Any user of the machine can open connections to 127.0.0.1 and send half a request. uvicorn has
no time limit on a request's head and no cap on connections: a thousand half-open sockets took
the process to its file limit, after which every accept failed and logged a traceback (129 MB of
stderr in 9 s) and a page took 20 s. Here a connection must complete each request's head within
HEAD_TIMEOUT_S, and at the cap a new connection closes the oldest one that is only waiting for
a head (a browser's request completes its head in a moment, so the attacker's go first).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import time
from typing import Any, Final

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT_S: Final = 10.0  # from a connection's (or a request's) first byte to the end of its head
MAX_CONNECTIONS: Final = 200  # a browser opens ~6 per host, plus the live feed
MAX_BACKLOG: Final = 64
FD_RESERVE: Final = 64  # files the process needs beside connections (the daemon's socket, the store, logs)
WANTED_FILES: Final = 4096  # the soft file limit asked for, when the hard one allows it
ACCEPT_LOG_EVERY_S: Final = 60.0
FILE_LIMIT_MESSAGE: Final = "nmem ui: at the file limit, new connections wait (a flood of connections?)"


def limits() -> tuple[int, int]:
    """(connections, backlog) within the file limit, raised first as far as allowed. asyncio
    accepts up to `backlog` connections at a time before any is counted, and a closed one frees
    its file a moment later, so both together stay well below it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < WANTED_FILES:
        soft = WANTED_FILES if hard == resource.RLIM_INFINITY else min(hard, WANTED_FILES)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    budget = 4 * MAX_CONNECTIONS if soft == resource.RLIM_INFINITY else soft - FD_RESERVE
    backlog = max(4, min(MAX_BACKLOG, budget // 8))
    return max(4, min(MAX_CONNECTIONS, budget // 2)), backlog


class _AcceptFailures(logging.Filter):
    """asyncio logs each failed accept (the file limit) with a traceback: one line a minute instead."""

    def __init__(self) -> None:
        super().__init__()
        self.last = -ACCEPT_LOG_EVERY_S

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("socket.accept() out of system resource"):
            return True
        now = time.monotonic()
        if now - self.last < ACCEPT_LOG_EVERY_S:
            return False
        self.last = now
        record.msg, record.args, record.exc_info, record.exc_text = FILE_LIMIT_MESSAGE, (), None, None
        return True


class BoundedH11(H11Protocol):
    """uvicorn's HTTP/1.1 connection with a deadline on each request's head and a connection cap."""

    cap: int = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._opened = self.loop.time()
        self._head_timer: asyncio.TimerHandle | None = None
        self._watch_head()
        open_ = [c for c in self.connections if not c.transport.is_closing()]  # a closed one leaves soon
        if len(open_) > self.cap:
            waiting = [c for c in open_ if isinstance(c, BoundedH11) and c is not self and c._waiting()]
            victim = min(waiting, key=lambda c: c._opened) if waiting else self
            victim.transport.close()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _waiting(self) -> bool:
        """No request in progress: the connection waits for (the rest of) a request's head."""
        return self.cycle is None or self.cycle.response_complete

    def _watch_head(self) -> None:
        if not self._waiting():
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
        elif self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self._waiting() and not self.transport.is_closing():
            self.transport.close()


def serve(app: ASGIApp, listener: socket.socket, **config: Any) -> None:
    """Serve `app` on `listener` until stopped (SIGINT, SIGTERM)."""
    BoundedH11.cap, backlog = limits()
    logging.getLogger("asyncio").addFilter(_AcceptFailures())
    settings = uvicorn.Config(
        app, http=BoundedH11, backlog=backlog, log_level="warning", lifespan="off", access_log=False,
        timeout_keep_alive=5, **config,
    )  # fmt: skip
    uvicorn.Server(settings).run(sockets=[listener])
