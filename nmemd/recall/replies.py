"""What the daemon says back to hooks, and the work it does after a commit.

SessionStart gets the project's context (`nmemd.recall.context`); UserPromptSubmit,
when `prompt_recall` is on, gets the few past observations most relevant to
the prompt; Stop and SessionEnd store the session summary. Replies are
computed on reader threads, after the event is committed, so they see it.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from typing import TYPE_CHECKING, Final

import msgspec

from nmemd import registry
from nmemd.config import Settings, tunable
from nmemd.errors import QueryError
from nmemd.model import CLAUDE_CODE, Extracted
from nmemd.recall.context import CLOSE, HARD_CAP, OPEN, build_context
from nmemd.recall.handoff import NOT_WORK, summarize_session
from nmemd.recall.queries import Filters, Hit
from nmemd.recall.search import search
from nmemd.recall.text import clip
from nmemd.store import readers
from nmemd.wording import ago

if TYPE_CHECKING:
    from nmemd.capture.host import Host

LOG = logging.getLogger("nmemd.recall")
SUMMARY_EVENTS: Final = ("Stop", "SessionEnd")
# SessionStart's context must reach a client that waits 500 ms for the whole round trip
# (nmem_client.send): sections not built within this much are left out.
CONTEXT_TIME_BUDGET_S: Final = 0.3
# Of which a SessionStart in a shared project may wait this long for a pull first, when the last is old.
TEAM_CATCH_UP_S = tunable("TEAM_CATCH_UP_S", CONTEXT_TIME_BUDGET_S / 2, 0.0)

_encoder = msgspec.json.Encoder()


def shaped_reply(event: str, text: str, agent: str | None = None, notice: str = "") -> bytes:
    """The hook's reply in its agent's shape (`AgentSpec.reply`); Claude Code's form for an agent nmem
    does not know. An agent whose hooks do not show `systemMessage` gets the notice inside the context,
    where only the model reads it."""
    spec = registry.get(agent or CLAUDE_CODE)
    if notice and not (spec is not None and spec.shows_system_message):
        text = f"{notice}\n{text}" if text else notice
    if spec is not None and spec.reply is not None:
        return spec.reply(event, text)
    # Some agents refuse a SessionStart reply without hookSpecificOutput: it goes with the notice too.
    reply: dict[str, object] = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    if notice and (spec is None or spec.shows_system_message):
        reply["systemMessage"] = notice
    return _encoder.encode(reply)


def notice_of(problems: list[str]) -> str:
    """The one line a session's user is shown about what the daemon left out (config problems)."""
    if not problems:
        return ""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"nmem: {clip(problems[0], 300)}{more}. Run `nmem doctor`."


async def hook_reply(daemon: Host, extracted: Extracted) -> bytes:
    """The bytes `nmem-send` prints on the hook's stdout (empty: nothing to say)."""
    settings = daemon.settings
    if extracted.hook_event == "SessionStart" and (notice := notice_of(daemon.problems)):
        text = await session_context(settings, extracted, daemon) if extracted.project else ""
        return shaped_reply("SessionStart", text, extracted.agent, notice)
    if not extracted.project:
        return b""
    if extracted.hook_event == "SessionStart" and settings.context_budget > 0:
        text = await session_context(settings, extracted, daemon)
        return shaped_reply("SessionStart", text, extracted.agent) if text else b""
    if extracted.hook_event == "UserPromptSubmit" and settings.prompt_recall and settings.prompt_recall_budget > 0:
        prompt = next((o.content for o in extracted.observations if o.type == "prompt"), "")
        await daemon.ingestor.store.searchable()
        text = await readers.run(
            settings.db, prompt_context, extracted.project, extracted.session_id, prompt,
            budget=settings.prompt_recall_budget, min_score=settings.prompt_recall_min_score,
            max_hits=settings.prompt_recall_max_hits,
        )  # fmt: skip
        return shaped_reply("UserPromptSubmit", text, extracted.agent) if text else b""
    return b""


async def session_context(settings: Settings, extracted: Extracted, daemon: Host | None = None) -> str:
    """The context, built within CONTEXT_TIME_BUDGET_S; in a shared project whose last pull is old (the
    daemon just started, a laptop back from sleep) a pull goes first, within the first half of it
    (team memory's `catch_up`), so the teammates' section shows what they did meanwhile."""
    if settings.context_budget <= 0 or not extracted.project:
        return ""
    began = time.monotonic()
    if daemon is not None:
        await daemon.catch_up(extracted.project, TEAM_CATCH_UP_S)
    deadline = max(began + CONTEXT_TIME_BUDGET_S, time.monotonic() + CONTEXT_TIME_BUDGET_S / 2)
    return await readers.run(
        settings.db, build_context, extracted.project, session_id=extracted.session_id,
        source=extracted.source or "startup", budget=settings.context_budget, deadline=deadline,
    )  # fmt: skip


def replies_to(settings: Settings, extracted: Extracted, *, notices: bool = False) -> bool:
    """Whether `hook_reply` may have something to say; every other event is answered without a task."""
    if notices and extracted.hook_event == "SessionStart":
        return True
    if not extracted.project:
        return False
    if extracted.hook_event == "SessionStart":
        return settings.context_budget > 0
    if extracted.hook_event == "UserPromptSubmit":
        return settings.prompt_recall and settings.prompt_recall_budget > 0
    return False


def has_after_commit_work(extracted: Extracted) -> bool:
    return extracted.hook_event in SUMMARY_EVENTS and extracted.session_id != "unknown"


async def after_commit(daemon: Host, extracted: Extracted) -> None:
    """Work triggered by a committed event, run in the background (never inside the hook's time).

    Stop fires after every turn and SessionEnd once (with a 1.5 s budget for
    all its hooks), so the summary is recomputed here, after the reply.
    """
    if not has_after_commit_work(extracted):
        return
    await store_summaries(daemon, [extracted.session_id])


def _summaries(conn: sqlite3.Connection, session_ids: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for sid in session_ids:
        text = summarize_session(conn, sid)
        if text:
            out.append((text, sid, text))
    return out


async def store_summaries(daemon: Host, session_ids: list[str]) -> int:
    """Compute the sessions' summaries on a reader thread and store them in one write; return how many.

    Live Stop/SessionEnd summarize their session; a transcript import (which has neither) all the
    sessions it touched, with this same code.
    """
    store = daemon.ingestor.store
    purges_before = store.purges
    rows = await readers.run(daemon.settings.db, _summaries, session_ids)
    if not rows:
        return 0
    async with store.write() as conn:
        if store.purges != purges_before:
            return 0  # a purge ran meanwhile: these summaries may quote what it removed
        await conn.executemany("UPDATE sessions SET summary = ? WHERE session_id = ? AND summary IS NOT ?", rows)
    return len(rows)


# --- prompt-time recall ---------------------------------------------------------------------

MAX_KEYWORDS: Final = 8
PER_KEYWORD: Final = 20  # best hits kept per keyword
_WORD: Final = re.compile(r"[A-Za-z_][\w./-]*[\w]")
_CAMEL: Final = re.compile(r"[a-z][A-Z]")
_STOP: Final = frozenset(
    "about above after again also because been before being below between both cannot could does doing down"
    " during each else every from further have having here into itself just like make more most much must"
    " need only other ought over please same should some such than that their them then there these they this"
    " those through under until very want what when where which while will with would your yours the and for"
    " are but not you all any can had her was one our out has him his how its may new now old see two way who"
    " did get got let put say she too use using used still does work works working again thing things look"
    " check change changes file files code make sure try fix issue problem error errors".split()
)


def keywords(prompt: str, limit: int = MAX_KEYWORDS) -> list[tuple[str, float]]:
    """The prompt's most specific words with their weight: identifiers and paths (2.0) first,
    then long words, then the rest (1.0), each group in prompt order."""
    found: dict[str, int] = {}
    for word in _WORD.findall(prompt[:4000]):
        key = word.lower()
        if len(key) < 4 or key in _STOP or key in found:
            continue
        identifier = any(c in word for c in "._/-") or any(c.isdigit() for c in word) or _CAMEL.search(word)
        found[key] = 2 if identifier else 1 if len(key) >= 7 else 0
    ranked = sorted(found, key=lambda k: -found[k])[:limit]  # stable: ties keep prompt order
    return [(k, 2.0 if found[k] == 2 else 1.0) for k in ranked]


def prompt_context(
    conn: sqlite3.Connection,
    project: str,
    session_id: str,
    prompt: str,
    *,
    budget: int = 1500,
    min_score: float = 2.0,
    max_hits: int = 5,
    now: float | None = None,
) -> str:
    """Past observations of other sessions in `project` relevant to `prompt`, or "".

    Each keyword is searched alone (FTS5 AND over a whole prompt rarely matches)
    and an observation's relevance is the summed weight of the keywords among
    whose best PER_KEYWORD hits it is: one identifier or path (2), or two plain
    words. BM25 magnitudes are not used as the threshold, since they depend on
    the size of the corpus; they only order hits of equal relevance.
    """
    now = time.time() if now is None else now
    relevance: dict[int, float] = {}
    bm25: dict[int, float] = {}
    hits: dict[int, Hit] = {}
    for word, weight in keywords(prompt):
        try:
            found = search(conn, word, Filters(project=project), limit=PER_KEYWORD, now=now, budget_s=0.1)
        except QueryError:
            continue
        for hit in found:
            if hit.session_id == session_id or hit.type in NOT_WORK:
                continue
            relevance[hit.id] = relevance.get(hit.id, 0.0) + weight
            bm25[hit.id] = bm25.get(hit.id, 0.0) - (hit.score or 0.0)
            hits[hit.id] = hit
    best = sorted((oid for oid, score in relevance.items() if score >= min_score),
                  key=lambda oid: (-relevance[oid], -bm25[oid], -oid))[:max_hits]  # fmt: skip
    if not best:
        return ""
    head = "nmem: past observations in this project sharing terms with this prompt (ids work with get_observations):"
    lines: list[str] = []
    size = len(OPEN) + len(CLOSE) + len(head) + 3
    for oid in best:
        hit = hits[oid]
        line = clip(f"- #{oid} {ago(hit.ts, now)}, {hit.type}: {hit.title}", 300).replace("<", "‹")
        if size + len(line) + 1 > min(budget, HARD_CAP):
            break
        size += len(line) + 1
        lines.append(line)
    return "\n".join([OPEN, head, *lines, CLOSE]) if lines else ""
