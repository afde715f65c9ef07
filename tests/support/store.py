"""A store filled in process: payloads through the real extractor into a real SQLite file (the test's
NMEM_HOME), one batch each, as the daemon's ingest would commit them, with no daemon. Each call adds to
the test's one database."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from nmemd import config
from nmemd.capture.extract import extract
from nmemd.model import Extracted, Observation
from nmemd.store.batches import Incoming
from nmemd.store.database import Store, open_store

STEP_S = 10.0  # between two payloads' receive times
DAY = 86400.0
NOW = time.time()


async def commit_all(store: Store, payloads: Sequence[dict[str, Any]], start: float) -> None:
    for n, payload in enumerate(payloads):
        item = Incoming(event_id=uuid.uuid4().hex, received_at=start + STEP_S * n, extracted=extract(payload))
        await store.commit_batch([item])


@asynccontextmanager
async def filled(payloads: Sequence[dict[str, Any]], start: float | None = None) -> AsyncIterator[Store]:
    """The open store holding `payloads`, received `STEP_S` apart from `start` (default: an hour ago)."""
    async with open_store(config.load()) as store:
        await commit_all(store, payloads, time.time() - 3600 if start is None else start)
        yield store


def stored(payloads: Sequence[dict[str, Any]], start: float | None = None) -> str:
    """The path of the database holding `payloads` (closed: read it with sqlite3)."""

    async def run() -> str:
        async with filled(payloads, start) as store:
            return store.settings.db

    return anyio.run(run)


def aged_event(n: int, kind: str, age_days: float, session: str = "s1") -> Incoming:
    """Observation `n` of one kind, received `age_days` ago (retention's tests)."""
    obs = Observation(type=kind, title=f"{kind} number{n}", content=f"body{n} of the {kind} lemming{n}")  # type: ignore[arg-type]
    hook = "UserPromptSubmit" if kind == "prompt" else "PostToolUse"
    ex = Extracted(hook_event=hook, session_id=session, cwd="/p", project="/p", observations=[obs])
    return Incoming(event_id=f"ev{kind}{n:06d}", received_at=NOW - age_days * DAY, extracted=ex)


async def fill_by_age(settings: config.Settings) -> None:
    """Per type: 40 old (100 days) and 5 fresh (1 day) observations."""
    async with open_store(settings) as store:
        items = []
        for kind in ("read", "search", "command", "prompt", "edit", "error"):
            items += [aged_event(n, kind, 100.0) for n in range(40)]
            items += [aged_event(n, kind, 1.0) for n in range(40, 45)]
        await store.commit_batch(items)
