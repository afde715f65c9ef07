"""What the daemon lends the work that runs inside its process, as a Protocol.

Recall, jobs, history and the MCP server run in the daemon but sit below it
in the layout: they type against `Host`, never against the server module, so
imports point one way (tests/unit/test_layout.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import anyio

    from nmemd.capture.ingest import Ingestor
    from nmemd.capture.quiet import QuietMoments
    from nmemd.config import Settings


class Host(Protocol):
    settings: Settings
    ingestor: Ingestor  # its `store` is the one write connection
    quiet: QuietMoments  # the pauses between hooks, for background work that loads the machine
    stopping: anyio.Event  # set once shutdown begins
    last_activity: float  # time.monotonic() of the last request: maintenance waits for quiet
    skip_tools: frozenset[str]  # tools whose events are not stored
    problems: list[str]  # what the daemon left out at start (config), said at SessionStart

    async def catch_up(self, project: str, budget_s: float) -> bool:
        """Team memory: a pull of `project`'s link before its SessionStart context, when the last one is
        old, waited for at most `budget_s` (nmemd.team.sync); False at once where nothing is shared."""
        ...
