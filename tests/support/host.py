"""What the daemon lends the work that runs inside its process (nmemd.capture.host.Host), without a
daemon: its settings, the ingestor over the one write connection, and the rest as the server sets them.
The MCP server and the import methods run on it in process (tests/unit)."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from nmemd.capture.ingest import Ingestor
from nmemd.config import Settings


@dataclass
class InProcessHost:
    settings: Settings
    ingestor: Ingestor
    stopping: anyio.Event = field(default_factory=anyio.Event)
    last_activity: float = 0.0
    skip_tools: frozenset[str] = field(init=False)  # as the daemon builds it (nmemd.daemon.server)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.skip_tools = frozenset(self.settings.skip_tools)

    async def catch_up(self, project: str, budget_s: float) -> bool:
        return False  # no team sync in process
