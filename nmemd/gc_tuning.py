"""Keep Python's full collections off queries and hooks: what start-up built lives as long as the daemon.

A full (generation 2) collection walks every object the collector tracks, and the daemon's modules,
and later its MCP server's (mcp, pydantic), are most of them and never become garbage. Such a
collection came about once every few hundred searches, 5-16 ms each at start-up's ~27,000 objects,
charged to whichever search or hook was running when it fell due. `gc.freeze()` moves them to a
generation the collector never walks; what is allocated afterwards is collected as before.

Only in `nmemd`'s own process: a program that runs `serve()` itself (the tests do) keeps its collector
as it is, since objects frozen alive and dropped later in a cycle are never freed.
"""

from __future__ import annotations

import gc

_process = {"own": False}


def own_process() -> None:
    """This process is `nmemd`'s (its entry point calls this): `freeze_long_lived` takes effect."""
    _process["own"] = True


def freeze_long_lived() -> None:
    """Exclude every object alive now from later collections (at start-up's end, once the MCP server a
    session start has the daemon build is ready, after team sync's import of psycopg); nothing in a
    process that is not `nmemd`'s.

    No full collection first: it would hold the event loop as long as the one it saves; the few
    cycles that start-up left unreachable stay allocated."""
    if _process["own"]:
        gc.freeze()
