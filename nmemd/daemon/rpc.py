"""RPC methods the CLI calls on a running daemon (`NMEM1 rpc` frames, JSON in and out).

Read methods live in `recall.methods` (the CLI runs the same ones itself when no daemon
answers); the rest act through the daemon: status, shutdown, drain, maintenance, purge,
import.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec

from nmem_client import protocol
from nmemd.capture.drain import drain_once
from nmemd.daemon.status import Status, database_facts
from nmemd.errors import NmemError, QueryError, UnknownMethod, rpc_kind
from nmemd.history import import_rpc, purge, transfer
from nmemd.recall.methods import QUERIES, execute, parse_params
from nmemd.store import readers

if TYPE_CHECKING:
    from nmemd.daemon.server import Daemon

INBOX_WAIT_S = 5.0  # a read right after start waits this long at most for the first inbox drain


# --- dispatch ------------------------------------------------------------------------------------


SENT: Final = object()  # `dispatch`'s result when `send` took the reply already


def start_read(daemon: Daemon, body: bytes, send: Callable[[bytes], None]) -> readers.Running | None:
    """A read request started as its frame arrives, from the connection's callback: its query runs while
    the task that waits for it is only being started (~0.1 ms sooner), and `send` has its reply from the
    worker thread (`dispatch`). None: the request goes `server.rpc_reply`'s way: not a read, a parameter
    to refuse, a team search or a context, the inbox not drained or rows not indexed yet, another query
    running, the daemon stopping."""
    store = daemon.ingestor.store
    if not daemon.inbox_drained.is_set() or store.unindexed or daemon.stopping.is_set():
        return None
    try:
        request = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(request, dict):
        return None
    method, params = request.get("method"), request.get("params") or {}
    if not isinstance(method, str) or method not in QUERIES or method == "context" or not isinstance(params, dict):
        return None
    try:
        parsed = parse_params(method, params)
    except NmemError:
        return None
    if method == "search" and getattr(parsed, "team", False):
        return None
    return readers.start(daemon.settings.db, daemon.ingestor.busy, execute, method, parsed, then=_replying(send))


def _replying(send: Callable[[bytes], None]) -> Callable[[Any], None]:
    """A query's result as its OK frame, given to `send` on the worker thread that made it."""

    def reply(result: Any) -> None:
        send(protocol.encode_ok(msgspec.json.encode(result)))

    return reply


def read_reply(daemon: Daemon, running: readers.Running) -> bytes | None:
    """`start_read`'s request, done (`readers.when_done`): None when its worker sent the reply, else the
    error's frame."""
    try:
        running.result()  # its error raised: the worker sent the answer otherwise
    except NmemError as exc:
        return error_reply(exc)
    return None


def error_reply(exc: NmemError) -> bytes:
    """`ERR <kind> <message>`: the CLI raises what was raised here (errors.RPC_KINDS)."""
    kind = rpc_kind(exc)
    return protocol.encode_error(kind.encode() if kind else protocol.ERR_INVALID, str(exc))


async def dispatch(
    daemon: Daemon, method: str, params: dict[str, Any], send: Callable[[bytes], None] | None = None
) -> Any:
    """Run one method; raise NmemError subclasses for anything the caller got wrong.

    `send`: a read's reply frame is given to it on the worker thread that made it, and SENT returned: the
    client has its answer without waiting for the event loop to wake for it (~0.17 ms a search, two
    threads each waking the next). Not a team search's: the team server is asked next, on the loop."""
    settings = daemon.settings
    if method in QUERIES:
        if method == "context" and params.get("budget") is None:
            params = {**params, "budget": settings.context_budget}
        parsed = parse_params(method, params)  # cheap; a bad param never costs a thread hop
        if not daemon.inbox_drained.is_set():  # drained once, at start: then no wait (nor its loop round)
            with anyio.move_on_after(INBOX_WAIT_S):  # what hooks left in the inbox before we started
                await daemon.inbox_drained.wait()
        started = time.monotonic()
        await daemon.ingestor.store.searchable()
        if send is not None and not (method == "search" and getattr(parsed, "team", False)):
            await readers.query(settings.db, daemon.ingestor.busy, execute, method, parsed, then=_replying(send))
            return SENT
        result = await readers.query(settings.db, daemon.ingestor.busy, execute, method, parsed)
        if method == "search" and isinstance(result, dict) and daemon.team.links:
            from nmemd.recall.methods import SearchParams
            from nmemd.team import search as team_search

            assert isinstance(parsed, SearchParams)
            result = await team_search.with_server(daemon, parsed, result, started)
        return result
    if method == "status":
        db = await anyio.to_thread.run_sync(database_facts, settings.db, settings.spool)
        return Status(daemon=daemon.facts(), database=db)
    if method == "shutdown":
        daemon.stop_requested.set()
        return {"stopping": True, "pid": os.getpid()}
    if method == "drain":
        return {"drained": await drain_once(daemon.ingestor, settings)}
    if method == "maintain":
        from nmemd.jobs import scheduler

        job = params.get("job")
        if job is not None and not isinstance(job, str):
            raise QueryError("maintain: parameter 'job' must be a string")
        return await scheduler.run_jobs(daemon, job)
    if method in purge.METHODS:  # purge, forget, pin: on the daemon's one write connection
        return await purge.call(daemon.ingestor.store, method, params)
    if method in transfer.METHODS:  # import: on the daemon's one write connection
        return await transfer.call(daemon.ingestor.store, method, params)
    if method.startswith("team_"):
        from nmemd.team import rpc as team_rpc

        return await team_rpc.call(daemon.ingestor.store, daemon.team, daemon.settings.team_window_days, method, params)
    if method in import_rpc.METHODS:  # import_events, import_state: `nmem import-transcripts`
        return await import_rpc.call(daemon, method, params)
    raise UnknownMethod(f"unknown method {method!r}")
