"""Caches of stored text (a command's kind, a folded title, a snippet line's facts), listed in one place
so that a purge can empty them all: words the user asked nmem to forget must not stay in the daemon's
memory as cache keys until they happen to be evicted.

Caches of what a query asks (its patterns, its FTS5 expression) stay plain `functools.lru_cache`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, NamedTuple, Protocol, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])


class _Cache(Protocol):
    def cache_clear(self) -> None: ...
    def cache_info(self) -> Any: ...


_CACHES: list[_Cache] = []


def remembered(maxsize: int) -> Callable[[_F], _F]:
    """`functools.lru_cache(maxsize)` for a function of stored text, emptied by `forget_stored_text`."""

    def wrap(function: _F) -> _F:
        cached = lru_cache(maxsize=maxsize)(function)
        _CACHES.append(cached)
        return cached  # type: ignore[return-value]  # the same call signature, plus cache_clear

    return wrap


class Held(NamedTuple):
    """What `cache_info` tells of a cache of one's own (`keep_cache`): the entries it holds."""

    currsize: int


_C = TypeVar("_C", bound=_Cache)


def keep_cache(cache: _C) -> _C:
    """A cache of stored text that is not an lru_cache, emptied by `forget_stored_text` too."""
    _CACHES.append(cache)
    return cache


def forget_stored_text() -> int:
    """Empty every cache of stored text (after a purge or a forget); returns how many there are."""
    for cache in _CACHES:
        cache.cache_clear()
    return len(_CACHES)


def held() -> int:
    """How many entries of stored text the caches hold now (0 right after `forget_stored_text`)."""
    return sum(cache.cache_info().currsize for cache in _CACHES)
