"""In-memory collapse of repeated reads, searches and commands within a window.

Only an optimisation for what the agent sees later: the events ledger, not
this map, guarantees exactly-once storage. Writes, edits, prompts and errors
carry no dedup key, so they never reach this module.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_KEYS = 20_000  # bounded memory whatever the session count

Key = tuple[str, str]


class Deduper:
    """(session, key) -> (observation id, last seen), oldest evicted first."""

    def __init__(self, window_s: float, parent: Deduper | None = None):
        self.window_s = window_s
        self._parent = parent
        self._entries: OrderedDict[Key, tuple[int, float]] = OrderedDict()

    def _get(self, key: Key) -> tuple[int, float] | None:
        hit = self._entries.get(key)
        if hit is None and self._parent is not None:
            hit = self._parent._get(key)
        return hit

    def lookup(self, session_id: str, key: str, ts: float) -> int | None:
        """The observation this event repeats, if it was seen within the window."""
        if self.window_s <= 0:
            return None
        hit = self._get((session_id, key))
        if hit is None or ts - hit[1] > self.window_s:
            return None
        self._entries[(session_id, key)] = (hit[0], ts)
        return hit[0]

    def remember(self, session_id: str, key: str, ts: float, observation_id: int) -> None:
        self._entries[(session_id, key)] = (observation_id, ts)

    def overlay(self) -> Deduper:
        """A layer for one batch: merged into this one only if the batch commits."""
        return Deduper(self.window_s, parent=self)

    def merge(self, layer: Deduper) -> None:
        for key, value in layer._entries.items():
            self._entries[key] = value
            self._entries.move_to_end(key)
        while len(self._entries) > MAX_KEYS:
            self._entries.popitem(last=False)

    def forget(self, observation_ids: set[int]) -> None:
        """Drop keys pointing at deleted observations (forget, purge, retention)."""
        for k in [k for k, (oid, _) in self._entries.items() if oid in observation_ids]:
            del self._entries[k]

    def __len__(self) -> int:
        return len(self._entries)
