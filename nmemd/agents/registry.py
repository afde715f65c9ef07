"""One `AgentSpec` per coding agent, in the order nmem lists them; the core loops over `AGENTS`.

Where it sits: below every folder that reads it (capture's extraction, recall's replies, setup's
doctor, the CLI's install), beside `store`, so those import it downward. The behaviour a spec names
lives higher, in the agent's own modules (`nmemd.capture.<agent>`, `nmemd.setup.agent_setup`,
`nmemd.history.sources`): the
built-in specs reach them through small typed functions that import them when first called, never at
import time. The layer test lists those upward edges by name (`tests/test_layout.py` LAZY_EDGES) and
fails if one of them moves to module level, so the direction stays checked and no cycle forms at import.

A new agent is one spec: `register(AgentSpec(...))` (a test registers a fake one the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from nmemd.model import CLAUDE_CODE

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

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """What nmem knows of one coding agent."""

    name: str  # as the hook client sends it (`nmem_agent`) and the `agent` column stores it
    label: str  # as people call it
    aliases: tuple[str, ...] = ()
    # The events a session starts with, as (payload key, value): the hook client starts the daemon on them.
    start_events: tuple[tuple[str, str], ...] = (("hook_event_name", "SessionStart"),)
    # Its hooks show a reply's `systemMessage` to the user; otherwise a notice goes inside the context.
    shows_system_message: bool = False
    reply: ReplyShape | None = None  # None: Claude Code's `hookSpecificOutput` form
    normalized: Normalizer | None = None
    observations: Parser | None = None  # None: its payloads are read as Claude Code's
    # Its install, uninstall and doctor checks (nmemd.setup.agent_setup), loaded when a command needs them.
    setup: Callable[[], AgentSetup] | None = None
    # Where its history lives and how it is read (nmemd.history.sources), for `nmem import-transcripts`.
    history: Callable[[], HistorySource] | None = None


def _plain_reply(event: str, text: str) -> bytes:
    """Copilot reads only the plain form (nmemd.capture.copilot)."""
    return _encoder.encode({"additionalContext": text})


def _cursor_reply(event: str, text: str) -> bytes:
    """sessionStart's form; beforeSubmitPrompt takes no context (nmemd.capture.cursor)."""
    return _encoder.encode({"additional_context": text}) if event == "SessionStart" else b""


def _cline_reply(event: str, text: str) -> bytes:
    """nmemd.capture.cline"""
    return _encoder.encode({"cancel": False, "contextModification": text})


# The built-in agents' parsers, imported when first called (see the module's docstring).


def _codex(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    from nmemd.capture import codex

    return codex.observations(p, ex, root)


def _gemini(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    from nmemd.capture import gemini

    return gemini.observations(p, ex, root)


def _gemini_normalized(p: dict[str, Any]) -> dict[str, Any]:
    from nmemd.capture import gemini

    return gemini.normalized(p)


def _copilot(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    from nmemd.capture import copilot

    return copilot.observations(p, ex, root)


def _cursor(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    from nmemd.capture import cursor

    return cursor.observations(p, ex, root)


def _cursor_normalized(p: dict[str, Any]) -> dict[str, Any]:
    from nmemd.capture import cursor

    return cursor.normalized(p)


def _cline(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    from nmemd.capture import cline

    return cline.observations(p, ex, root)


def _cline_normalized(p: dict[str, Any]) -> dict[str, Any]:
    from nmemd.capture import cline

    return cline.normalized(p)


def _opencode(p: dict[str, Any], ex: Extracted, root: str | None) -> list[Observation] | None:
    from nmemd.capture import opencode

    return opencode.observations(p, ex, root)


def _claude_setup() -> AgentSetup:
    from nmemd.setup.agent_setup import CLAUDE_CODE

    return CLAUDE_CODE


def _codex_setup() -> AgentSetup:
    from nmemd.setup.agent_setup import CODEX

    return CODEX


def _gemini_setup() -> AgentSetup:
    from nmemd.setup.agent_setup import GEMINI

    return GEMINI


def _copilot_setup() -> AgentSetup:
    from nmemd.setup.agent_setup import COPILOT

    return COPILOT


def _cursor_setup() -> AgentSetup:
    from nmemd.setup.agent_setup import CURSOR

    return CURSOR


def _cline_setup() -> AgentSetup:
    from nmemd.setup.agent_setup import CLINE

    return CLINE


def _opencode_setup() -> AgentSetup:
    from nmemd.setup.agent_setup import OPENCODE

    return OPENCODE


def _claude_history() -> HistorySource:
    from nmemd.history.sources import CLAUDE_CODE

    return CLAUDE_CODE


def _codex_history() -> HistorySource:
    from nmemd.history.sources import CODEX

    return CODEX


def _gemini_history() -> HistorySource:
    from nmemd.history.sources import GEMINI

    return GEMINI


def _copilot_history() -> HistorySource:
    from nmemd.history.sources import COPILOT

    return COPILOT


def _cline_history() -> HistorySource:
    from nmemd.history.sources import CLINE

    return CLINE


def _opencode_history() -> HistorySource:
    from nmemd.history.sources import OPENCODE

    return OPENCODE


BUILTIN: Final[tuple[AgentSpec, ...]] = (
    AgentSpec(
        name=CLAUDE_CODE,
        label="Claude Code",
        aliases=("claude",),
        shows_system_message=True,
        setup=_claude_setup,
        history=_claude_history,
    ),
    AgentSpec(
        name="codex",
        label="Codex",
        shows_system_message=True,
        observations=_codex,
        setup=_codex_setup,
        history=_codex_history,
    ),
    AgentSpec(
        name="gemini",
        label="Gemini CLI",
        shows_system_message=True,
        normalized=_gemini_normalized,
        observations=_gemini,
        setup=_gemini_setup,
        history=_gemini_history,
    ),
    AgentSpec(
        name="copilot",
        label="Copilot CLI",
        reply=_plain_reply,
        observations=_copilot,
        setup=_copilot_setup,
        history=_copilot_history,
    ),
    AgentSpec(
        name="cursor",
        label="Cursor",
        start_events=(("hook_event_name", "sessionStart"),),
        reply=_cursor_reply,
        normalized=_cursor_normalized,
        observations=_cursor,
        setup=_cursor_setup,
    ),
    AgentSpec(
        name="cline",
        label="Cline",
        start_events=(("hookName", "TaskStart"), ("hookName", "TaskResume")),
        reply=_cline_reply,
        normalized=_cline_normalized,
        observations=_cline,
        setup=_cline_setup,
        history=_cline_history,
    ),
    AgentSpec(
        name="opencode", label="OpenCode", observations=_opencode, setup=_opencode_setup, history=_opencode_history
    ),
)

# Every agent nmem knows, by name, in the order nmem lists them. `register` adds one.
AGENTS: Final[dict[str, AgentSpec]] = {spec.name: spec for spec in BUILTIN}
_ALIASES: Final[dict[str, str]] = {alias: spec.name for spec in BUILTIN for alias in spec.aliases}


def register(spec: AgentSpec) -> AgentSpec:
    """Add an agent (or replace the one of its name); `unregister` takes it out again."""
    for alias in AGENTS[spec.name].aliases if spec.name in AGENTS else ():
        _ALIASES.pop(alias, None)
    AGENTS[spec.name] = spec
    _ALIASES.update(dict.fromkeys(spec.aliases, spec.name))
    return spec


def unregister(name: str) -> None:
    """Take an agent out of the registry (a test's fake agent, after the test)."""
    spec = AGENTS.pop(name, None)
    for alias in spec.aliases if spec else ():
        _ALIASES.pop(alias, None)


def canonical(name: str) -> str:
    """An agent's own name for a name or alias (`claude` -> `claude-code`); other names as given."""
    return _ALIASES.get(name, name)


def get(name: str) -> AgentSpec | None:
    """The spec of an agent by name or alias; None for an agent nmem does not know."""
    return AGENTS.get(canonical(name))


def names() -> tuple[str, ...]:
    """The agents' names, in the order nmem lists them."""
    return tuple(AGENTS)


def start_events() -> frozenset[tuple[str, str]]:
    """Every agent's session-start events, as (payload key, value)."""
    return frozenset(event for spec in AGENTS.values() for event in spec.start_events)
