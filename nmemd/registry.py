"""Every coding agent nmem knows, by name, in the order nmem lists them; the core loops over `AGENTS`.

Where it sits: below every folder that reads it (capture's extraction, recall's replies, setup's
doctor, the CLI's install), beside `config` and `model`, so those import it downward. Each built-in
agent is its folder, `nmemd/agents/<name>/`, whose `__init__` holds its `AgentSpec` (data, and `Lazy`
names of the code in its folder). That folder sits high (its code uses capture, history and setup), so
the registry imports the built-in specs when first asked (`AGENTS`), never at load: no import cycle
between folders (`tests/unit/test_layout.py`).

A new agent is one folder and one line in `BUILTIN`; `register(AgentSpec(...))` adds one at run time (a
test registers a fake one the same way).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any, Final

from nmemd.agent_spec import AgentSpec as AgentSpec
from nmemd.agent_spec import Lazy, Normalizer, Parser

# The built-in agents, by their folder in nmemd/agents/, in the order nmem lists them.
BUILTIN: Final[tuple[str, ...]] = ("claude_code", "codex", "gemini", "copilot", "cursor", "cline", "opencode")


class _Agents(MutableMapping[str, AgentSpec]):
    """A dict of specs by name whose built-in ones are imported when it is first read."""

    def __init__(self) -> None:
        self._specs: dict[str, AgentSpec] | None = None

    def load(self) -> dict[str, AgentSpec]:
        """The specs by name, the built-in ones imported now if they were not yet."""
        if self._specs is None:
            specs = [importlib.import_module(f"nmemd.agents.{folder}").SPEC for folder in BUILTIN]
            self._specs = {spec.name: spec for spec in specs}
            _ALIASES.update({alias: spec.name for spec in specs for alias in spec.aliases})
        return self._specs

    def __getitem__(self, name: str) -> AgentSpec:
        return self.load()[name]

    def __setitem__(self, name: str, spec: AgentSpec) -> None:
        self.load()[name] = spec

    def __delitem__(self, name: str) -> None:
        del self.load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.load())

    def __len__(self) -> int:
        return len(self.load())

    def __contains__(self, name: object) -> bool:
        return name in self.load()


# Every agent nmem knows, by name, in the order nmem lists them. `register` adds one.
AGENTS: Final = _Agents()
_ALIASES: Final[dict[str, str]] = {}  # filled with AGENTS
_PARSERS: Final[dict[str, tuple[Normalizer | None, Parser | None]]] = {}  # by name or alias (`parsers`)


def builtin() -> tuple[AgentSpec, ...]:
    """The built-in agents' specs, in `BUILTIN`'s order."""
    return tuple(importlib.import_module(f"nmemd.agents.{folder}").SPEC for folder in BUILTIN)


def register(spec: AgentSpec) -> AgentSpec:
    """Add an agent (or replace the one of its name); `unregister` takes it out again."""
    for alias in AGENTS[spec.name].aliases if spec.name in AGENTS else ():
        _ALIASES.pop(alias, None)
    AGENTS[spec.name] = spec
    _ALIASES.update(dict.fromkeys(spec.aliases, spec.name))
    _PARSERS.clear()
    return spec


def unregister(name: str) -> None:
    """Take an agent out of the registry (a test's fake agent, after the test)."""
    spec = AGENTS.pop(name, None)
    for alias in spec.aliases if spec else ():
        _ALIASES.pop(alias, None)
    _PARSERS.clear()


def canonical(name: str) -> str:
    """An agent's own name for a name or alias (`claude` -> `claude-code`); other names as given."""
    AGENTS.load()  # the built-in agents' aliases with them
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


def parsers(name: str) -> tuple[Normalizer | None, Parser | None]:
    """A known agent's normalizer and payload parser themselves (what their `Lazy` names, imported when
    first asked), by name or alias; (None, None) for an agent nmem does not know. Extraction asks on
    every event, so a known agent's pair is kept once found (`register` and `unregister` forget it)."""
    found = _PARSERS.get(name)
    if found is None:
        spec = get(name)
        if spec is None:  # never kept: the name comes from a payload
            return None, None
        found = _PARSERS[name] = (_loaded(spec.normalized), _loaded(spec.observations))
    return found


def _loaded(function: Lazy | Normalizer | Parser | None) -> Any:
    return function.load() if isinstance(function, Lazy) else function
