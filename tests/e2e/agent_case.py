"""What the one real-agent scenario (test_agent_cli.py) needs to know of each agent CLI it drives: an
`AgentCase` per agent (`codex_cli.CASE`, ...), and the `Scenario` it plays once per agent.

The scenario, the same for every agent:
1. Claude Code's hook client stores a prompt, a file write and a reply in the project (another agent,
   same memory);
2. an agent session, started with no daemon running, runs a shell command, edits notes.txt, runs a
   failing command, and answers;
3. a second session, whose first request must hold the context of both agents' work;
4. a third that calls nmem's MCP `search` tool, which the agent offers its model;
5. `nmem import-transcripts` over the agent's session files: nothing new.
Checked from nmem's side (what was stored, with which agent, once) and from the API's side (what the
model was sent). What differs by agent (its fake API, its world, its tools' names, what it stores for
them, where its context goes) is the case's.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_world import AgentWorld
from support.agent_clis import AgentCli

SEEDED = "the deploy script lives in scripts/release_deploy.sh"
PATCH = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-hello\n+hello world\n*** End Patch\n"
EDIT_PROMPT = "E2E-edit: write hello to notes.txt, then make it say hello world"
Row = tuple[Any, ...]


class FakeApi(Protocol):
    url: str
    scripts: dict[str, Any]
    requests: list[dict[str, Any]]

    def __enter__(self) -> Any: ...
    def __exit__(self, *exc: object) -> None: ...


@dataclass
class Scenario:
    case: AgentCase
    world: Any  # the case's AgentWorld
    api: Any  # the case's fake API
    install_out: str = ""
    first: list[dict[str, Any]] = field(default_factory=list)  # the requests of the first session
    second: list[dict[str, Any]] = field(default_factory=list)
    mcp: list[dict[str, Any]] = field(default_factory=list)
    runs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)  # each session's process
    session: str = ""
    before_import: int = 0
    import_report: dict[str, Any] = field(default_factory=dict)


class AgentCase:
    """One agent CLI in the shared scenario; a subclass says what differs for its agent."""

    cli: AgentCli  # its marker, binary and pinned version (tests/support/agent_clis.txt)
    agent: str  # the registry's name, as the store records it
    events_sent: int  # what `nmem import-transcripts` reads back from its three sessions (all seen live)
    wait_every_session: bool = False  # wait for each session's SessionEnd (not only the first's)
    unordered_head: int = 0  # how many of the first rows the agent may store in any order

    def binary(self) -> str | None:
        return self.cli.binary()

    def skip_reason(self) -> str:
        return self.cli.skip_reason()

    def api(self) -> FakeApi:
        raise NotImplementedError

    def world(self, binary: str, api_url: str) -> AgentWorld:
        raise NotImplementedError

    def session(self, world: Any, prompt: str) -> subprocess.CompletedProcess[str]:
        """One session of the agent in print mode, to its end."""
        raise NotImplementedError

    def edit_script(self, world: Any) -> list[Any]:
        """The first session's turns: a shell command, an edit of notes.txt, a failing command, a reply."""
        raise NotImplementedError

    def mcp_script(self) -> list[Any]:
        """The third session's turns: nmem's MCP `search` for release_deploy, then a reply."""
        raise NotImplementedError

    def first_rows(self, world: Any) -> list[Row]:
        """(hook_event, type, title, file_path, agent) of the first session's observations, in order."""
        raise NotImplementedError

    def contexts(self, request: dict[str, Any]) -> list[str]:
        """The texts of a request that carry nmem's SessionStart context."""
        raise NotImplementedError

    def check_install(self, s: Scenario) -> None:
        """What `nmem install --agent <agent>` wrote, and the user's settings kept."""

    def check_rows(self, s: Scenario) -> None:
        """Anything more of the first session's rows."""

    def check_context(self, s: Scenario) -> None:
        """Anything more of where the context reached the model."""

    def check_mcp(self, s: Scenario) -> None:
        """That the agent offered nmem's tools and its model got `search`'s answer."""

    def own_checks(self) -> list[Callable[[Scenario], None]]:
        """Checks of what only this agent does, each a test of its own."""
        return []
