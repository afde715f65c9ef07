"""What nmem knows of one coding agent (`AgentSpec`), and `Lazy`: how a built-in agent's spec names the
code in its own folder without importing it.

The spec and the registry sit low (beside `config`): extraction, replies, the context, doctor and the
CLI read them. The code a spec names sits high, in `nmemd/agents/<name>/` (capture.py, history.py,
setup.py), above the capture, history and setup folders it uses. A built-in spec names that code by
`Lazy`, imported when first called: the daemon loads an agent's parser with the agent's first event and
never an installer; no import cycle can form. `tests/unit/test_layout.py` checks that an agent's
`__init__` reaches its own folder only.
"""

from __future__ import annotations

import importlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nmemd.history.sources import HistorySource
    from nmemd.model import Extracted, Observation
    from nmemd.setup.agent_setup import AgentSetup

# (payload, session fields read so far, project root) -> the agent's observations; None: read it as
# Claude Code's (what the agent sends under Claude Code's names and fields).
Parser = Callable[[dict[str, Any], "Extracted", "str | None"], "list[Observation] | None"]
# A payload renamed to Claude Code's events and fields before anything else reads it.
Normalizer = Callable[[dict[str, Any]], dict[str, Any]]
# (hook event, context text) -> the bytes the hook prints for its agent; b"" for none.
ReplyShape = Callable[[str, str], bytes]


@dataclass(frozen=True, kw_only=True)
class AgentHome:
    """Where an agent keeps its settings, and how nmem sees that it is on this machine: one implementation
    every installer uses (`nmemd/agents/<name>/setup.py`), fed by its spec."""

    env: str  # the variable that names the folder (with `inside`: the folder it is in)
    default: str  # else this folder, under the user's home
    inside: str = ""  # the settings folder inside the one `env` or `default` names (a dot folder)
    commands: tuple[str, ...]  # its commands: one on PATH means the agent is here
    # The agent is here when this folder exists: the settings folder, or one of its parents (1: its parent).
    sign_levels: int = 0

    def path(self) -> Path:
        """The settings folder, absolute."""
        return (Path(os.environ.get(self.env) or Path.home() / self.default) / self.inside).absolute()

    def sign(self) -> Path:
        """The folder whose presence says the agent is on this machine."""
        folder = self.path()
        for _ in range(self.sign_levels):
            folder = folder.parent
        return folder

    def found(self) -> bool:
        """Whether the agent is on this machine: its folder, or one of its commands on PATH."""
        return self.sign().is_dir() or any(shutil.which(c) is not None for c in self.commands)


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """What nmem knows of one coding agent."""

    name: str  # as the hook client sends it (`nmem_agent`) and the `agent` column stores it
    label: str  # as people call it
    aliases: tuple[str, ...] = ()
    # The hook events nmem installs for it, by its own names (its installer's table derives from these).
    hooks: tuple[str, ...] = ()
    # The events a session starts with, as (payload key, value): the hook client starts the daemon on them.
    start_events: tuple[tuple[str, str], ...] = (("hook_event_name", "SessionStart"),)
    # Its hooks show a reply's `systemMessage` to the user; otherwise a notice goes inside the context.
    shows_system_message: bool = False
    reply: ReplyShape | None = None  # None: Claude Code's `hookSpecificOutput` form
    normalized: Normalizer | None = None
    observations: Parser | None = None  # None: its payloads are read as Claude Code's
    # Its install, uninstall and doctor checks (a `setup.agent_setup.AgentSetup`), loaded when a command needs them.
    setup: Callable[[], AgentSetup] | None = None
    # Where its history lives and how it is read (a `history.sources.HistorySource`), for `nmem import-transcripts`.
    history: Callable[[], HistorySource] | None = None
    history_at: str = ""  # where that history is by default, as `nmem import-transcripts --help` says it
    home: AgentHome | None = None  # where its settings live and how nmem finds it (None: its setup knows)


class Lazy:
    """`name` in `module` (a built-in agent's own `nmemd.agents.<agent>.<module>`), imported when first
    used: a function is called with the arguments given, a value (an AgentSetup, a HistorySource) is
    returned as it is. What it names is looked up once (`load`); extraction calls that directly."""

    __slots__ = ("module", "name", "_found")

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name
        self._found: Any = None

    def __repr__(self) -> str:
        return f"Lazy({self.module!r}, {self.name!r})"

    def load(self) -> Any:
        """What it names, imported now if it was not yet."""
        if self._found is None:
            self._found = getattr(importlib.import_module(self.module), self.name)
        return self._found

    def __call__(self, *args: Any) -> Any:
        found = self.load()
        return found(*args) if callable(found) else found
