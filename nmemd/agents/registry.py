"""Every coding agent nmem knows, by name, in the order nmem lists them; the core loops over `AGENTS`.

Where it sits: below every folder that reads it (capture's extraction, recall's replies, setup's
doctor, the CLI's install), beside `store`, so those import it downward. Each built-in agent is its
folder, `nmemd/agents/<name>/`, whose `__init__` holds its `AgentSpec` (data, and `Lazy` names of the
code in its folder, so importing the specs loads none of that code).

A new agent is one folder and one line below; `register(AgentSpec(...))` adds one at run time (a test
registers a fake one the same way).
"""

from __future__ import annotations

from typing import Any, Final

from nmemd.agents import claude_code, cline, codex, copilot, cursor, gemini, opencode
from nmemd.agents.spec import AgentSpec as AgentSpec
from nmemd.agents.spec import Lazy, Normalizer, Parser

BUILTIN: Final[tuple[AgentSpec, ...]] = (
    claude_code.SPEC,
    codex.SPEC,
    gemini.SPEC,
    copilot.SPEC,
    cursor.SPEC,
    cline.SPEC,
    opencode.SPEC,
)

# Every agent nmem knows, by name, in the order nmem lists them. `register` adds one.
AGENTS: Final[dict[str, AgentSpec]] = {spec.name: spec for spec in BUILTIN}
_ALIASES: Final[dict[str, str]] = {alias: spec.name for spec in BUILTIN for alias in spec.aliases}
_READERS: Final[dict[str, tuple[Normalizer | None, Parser | None]]] = {}  # by name or alias (`readers`)


def register(spec: AgentSpec) -> AgentSpec:
    """Add an agent (or replace the one of its name); `unregister` takes it out again."""
    for alias in AGENTS[spec.name].aliases if spec.name in AGENTS else ():
        _ALIASES.pop(alias, None)
    AGENTS[spec.name] = spec
    _ALIASES.update(dict.fromkeys(spec.aliases, spec.name))
    _READERS.clear()
    return spec


def unregister(name: str) -> None:
    """Take an agent out of the registry (a test's fake agent, after the test)."""
    spec = AGENTS.pop(name, None)
    for alias in spec.aliases if spec else ():
        _ALIASES.pop(alias, None)
    _READERS.clear()


def canonical(name: str) -> str:
    """An agent's own name for a name or alias (`claude` -> `claude-code`); other names as given."""
    return _ALIASES.get(name, name)


def get(name: str) -> AgentSpec | None:
    """The spec of an agent by name or alias; None for an agent nmem does not know."""
    return AGENTS.get(canonical(name))


def label(name: str) -> str:
    """How people call an agent, by its name or alias ("codex" -> "Codex"); a name nmem does not know as given."""
    spec = get(name)
    return spec.label if spec is not None else name


def names() -> tuple[str, ...]:
    """The agents' names, in the order nmem lists them."""
    return tuple(AGENTS)


def start_events() -> frozenset[tuple[str, str]]:
    """Every agent's session-start events, as (payload key, value)."""
    return frozenset(event for spec in AGENTS.values() for event in spec.start_events)


def readers(name: str) -> tuple[Normalizer | None, Parser | None]:
    """A known agent's normalizer and payload parser themselves (what their `Lazy` names, imported when
    first asked), by name or alias; (None, None) for an agent nmem does not know. Extraction asks on
    every event, so a known agent's pair is kept once found (`register` and `unregister` forget it)."""
    found = _READERS.get(name)
    if found is None:
        spec = get(name)
        if spec is None:  # never kept: the name comes from a payload
            return None, None
        found = _READERS[name] = (_loaded(spec.normalized), _loaded(spec.observations))
    return found


def _loaded(function: Lazy | Normalizer | Parser | None) -> Any:
    return function.load() if isinstance(function, Lazy) else function
