"""RPC methods the CLI calls on a running daemon (`NMEM1 rpc` frames, JSON in and out)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import anyio

from nmemd.drain import drain_once
from nmemd.errors import NmemError
from nmemd.status import Status, database_facts

if TYPE_CHECKING:
    from nmemd.server import Daemon


class UnknownMethod(NmemError):
    """The RPC method does not exist."""


async def dispatch(daemon: Daemon, method: str, params: dict[str, Any]) -> Any:
    """Run one method; raise NmemError subclasses for anything the caller got wrong."""
    settings = daemon.settings
    if method == "status":
        db = await anyio.to_thread.run_sync(database_facts, settings.db, settings.spool)
        return Status(daemon=daemon.facts(), database=db)
    if method == "shutdown":
        daemon.stop_requested.set()
        return {"stopping": True, "pid": os.getpid()}
    if method == "drain":
        return {"drained": await drain_once(daemon.ingestor, settings)}
    raise UnknownMethod(f"unknown method {method!r}")
