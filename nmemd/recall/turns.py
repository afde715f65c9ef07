"""A turn's best events beside the prompt search found (issue #39, "events ranked with their turn").

A question put in the words of a prompt ("what went wrong when we deployed to update my github pages?")
finds that prompt: its words are the question's. What answers it is an event of the same turn (a turn:
a session's rows from one prompt up to the next), which seldom repeats those words: the failed
`gh run watch` says "run ID required", nothing about deploying or pages. So each prompt among the first
hits is preceded by its turn's best events (followed, for search words rather than a question): the
event holding most of the query's words (weighted by their idf) of the kind the question asks about,
its errors, commands and edits before the rest (never its reads), and the turn's first error (before
the others when the question asks why or what went wrong; with the turn's next error too when it asks
what came of an attempt, and the first error brought up beside its prompt when ranking found it lower).
A failure ranked first, when the question asks what was done rather than why, is followed by the
agent's next command or edit (how it got past it: `git config user.email` after a commit refused for
want of an identity); a run ranked first whose output reports failures, by the same command's next run
in its turn (after the fix: "78 passed" after "76 passed, 2 failed"). The printed line is the event's own.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any, Final

from nmemd.recall.outcomes import command_key, reports_failures
from nmemd.recall.queries import HIT_COLUMNS, Hit
from nmemd.recall.ranking import SCORED_CHARS, TYPE_WEIGHT, command_weight
from nmemd.recall.terms import Query, Term

TURN_TOP: Final = 5  # prompts among this many first hits get their turn's best event beside them
FIRST_EVENTS: Final = 2  # events surfaced for the first such prompt (one for the others)
TURN_ROWS: Final = 400  # rows of a turn looked at, at most (a turn of a long autonomous run is longer)
WHY_ERROR: Final = 1.6  # "why" / "what went wrong": an error of the turn before its other events
RERUN_CHARS: Final = 3000  # of a run's output read for the failures it reports (a summary line ends `| tail`)
NEXT_SPAN: Final = 64  # rowids after a failure looked at for the agent's next move (other sessions interleave)
OWN_WORDS: Final = 1.0  # an event's own words (idf-weighted) against its kind's weight
# What never answers for its turn: the prompt itself, todo snapshots, bookkeeping, and reads (what was looked at).
_NOT_ANSWERS: Final = ("prompt", "task", "session", "event", "notification", "read")
_QUESTION: Final = re.compile(
    r"\?\s*$|^\s*(?:what|why|how|which|when|where|who|did|does|do|was|were|is|are|can|could)\b", re.IGNORECASE
)
_OUTCOME: Final = re.compile(
    r"(?i)\b(?:why|what (?:happened|went wrong|broke|failed|stopped)|\w+n['\u2019]t|not|never|able to|managed to"
    r"|prevent\w*|stopp?ed)\b"
)


def asks_outcome(query: Query, text: str) -> bool:
    """Whether `text` asks what came of an attempt (why, what happened, what went wrong, whether the agent was
    able to, what stopped or prevented it, something that did not work): a turn's failures answer it, its
    first and its next."""
    return "error" in query.type_hints or bool(_OUTCOME.search(text))


def asks(text: str) -> bool:
    """Whether `text` is a question (what came of something), not search words (a prompt looked up by its words)."""
    return bool(_QUESTION.search(text))


def surface(
    conn: sqlite3.Connection,
    query: Query,
    hits: list[Hit],
    idf: list[float],
    why: bool,
    question: bool = True,
    twins: dict[int, list[Hit]] | None = None,
    outcome: bool = False,
) -> list[Hit]:
    """`hits` with each of the first TURN_TOP prompts beside its turn's best events (not shown already): after
    them for a question (`asks`), before them for search words. `twins`: by prompt id, the same prompt sent
    again in its session (folded into it by search): their turns are its turn too."""
    shown = {h.id for h in hits[: TURN_TOP + FIRST_EVENTS]}
    out: list[Hit] = []
    added: set[int] = set()
    first = True
    for rank, hit in enumerate(hits):
        if hit.id in added:
            continue  # surfaced earlier, beside its prompt
        if rank == 0 and hit.type == "error" and not (why or outcome or query.asks_why):
            out.append(hit)  # a failure first, asked what was done (not why): how the agent got past it
            fix = _next_move(conn, hit)
            if fix is not None and fix.id not in added:
                fix.score = hit.score
                out.append(fix)
                added.add(fix.id)
            continue
        if rank == 0 and hit.type == "command" and not (why or outcome or query.asks_why):
            out.append(hit)  # a run that reported failures: the same command run again in its turn is its outcome
            rerun = _rerun(conn, hit)
            if rerun is not None:
                rerun.score = hit.score
                out.append(rerun)
                added.add(rerun.id)
            continue
        if rank >= TURN_TOP or hit.type != "prompt":
            out.append(hit)
            continue
        if not question:
            out.append(hit)
        n = FIRST_EVENTS if first else 1
        above = {h.id for h in out}
        events = best_events(conn, query, hit, idf, why, n, twins=(twins or {}).get(hit.id), outcome=outcome)
        for k, event in enumerate(events):
            if n <= 0:
                break
            # The turn's failure found lower comes up beside its prompt; other events shown already stay.
            failure = k == 0 and event.type == "error"
            if event.id in above or event.id in added or (event.id in shown and not failure):
                continue
            event.score = hit.score
            out.append(event)
            added.add(event.id)
            n -= 1
        if question:
            out.append(hit)  # after what came of it: the prompt is the question's own words
        first = False
    return out


def _own(words: list[tuple[Term, float]], r: tuple[Any, ...]) -> float:
    """The query's words (`_words`: idf-weighted) an event holds in its title, path, command and content's head."""
    text = " ".join(filter(None, (r[5], r[6], r[8], r[9]))).lower()
    return sum(w for term, w in words if term.gate in text and term.count(text))  # most lack most: no call


def _words(query: Query, idf: list[float]) -> list[tuple[Term, float]]:
    """The query's terms that count for an event's own words (hint words do not), with their idf."""
    return [(term, w) for term, w in zip(query.terms, idf, strict=True) if not term.hint]


def best_events(
    conn: sqlite3.Connection,
    query: Query,
    prompt: Hit,
    idf: list[float],
    why: bool,
    n: int,
    twins: list[Hit] | None = None,
    outcome: bool = False,
) -> list[Hit]:
    """The turn's `n` best events (`surface`): its first error (the failure the rest of the turn worked around:
    what came of the turn, asked or not), then the best, of equally good ones its first and its last.
    `twins`: the same prompt sent again, whose turns are its turn too."""
    rows = [r for p in (prompt, *(twins or ())) for r in _turn_rows(conn, p)]
    if not rows:
        return []
    words = _words(query, idf)
    scored = [(_worth(query, words, r, why), r) for r in rows]
    top = max(s for s, _ in scored)
    tied = [r for s, r in scored if s == top]
    picked = [tied[0]] + ([tied[-1]] if len(tied) > 1 else [])
    errors = [r for _, r in scored if r[1] == "error"]
    if errors and errors[0] not in picked:  # what went wrong first: the turn's first failure
        picked.insert(0, errors[0])  # before the best: a turn's words seldom are its failure's
    if outcome and len(errors) > 1:  # what came of it: its next failure too, the one holding most of the words
        worth = {r[0]: s for s, r in scored}
        then = max(errors[1:], key=lambda r: worth[r[0]])  # of equally good ones, the first
        if then not in picked:
            picked.insert(1, then)
    if len(picked) < n:
        rest = sorted(((s, r) for s, r in scored if s < top), key=lambda sr: -sr[0])
        picked += [r for _, r in rest[: n - len(picked)]]
    return [
        Hit(id=r[0], type=r[1], project=r[2], session_id=r[3], ts=r[4], title=r[5], file_path=r[6], count=r[7])
        for r in picked[:n]
    ]


def _next_move(conn: sqlite3.Connection, failure: Hit) -> Hit | None:
    """What the agent did right after a failure (its next command, edit or write in the session, among its
    next four rows and within NEXT_SPAN rowids): how it got past it."""
    r = conn.execute(
        f"""SELECT {HIT_COLUMNS} FROM observations o
            WHERE o.id > ? AND o.id <= ? AND o.session_id = ? ORDER BY o.id LIMIT 4""",
        (failure.id, failure.id + NEXT_SPAN, failure.session_id),
    ).fetchall()
    for row in r:
        if row[1] in ("command", "edit", "write"):
            return Hit(id=row[0], type=row[1], project=row[2], session_id=row[3], ts=row[4], title=row[5],
                       file_path=row[6], count=row[7])  # fmt: skip
        if row[1] in ("prompt", "error"):
            return None
    return None


def _rerun(conn: sqlite3.Connection, run: Hit) -> Hit | None:
    """The next run of the same command (`command_key`) in the run's turn, when the run's output reports
    failures (`reports_failures`): whether what came between fixed them. None otherwise."""
    row = conn.execute("SELECT command, substr(content, 1, ?) FROM observations WHERE id = ?", (RERUN_CHARS, run.id))
    command, output = row.fetchone() or (None, None)
    if not command or not reports_failures(output or ""):
        return None
    key = command_key(command)
    for r in conn.execute(
        f"""SELECT {HIT_COLUMNS}, o.command FROM observations o
            WHERE o.session_id = ? AND o.id > ? AND o.id < coalesce(
                (SELECT min(p.observation_id) FROM prompts p WHERE p.session_id = ? AND p.observation_id > ?),
                9223372036854775807)
              AND o.type IN ('command', 'error') AND o.command IS NOT NULL
            ORDER BY o.id LIMIT ?""",
        (run.session_id, run.id, run.session_id, run.id, TURN_ROWS),
    ):
        if command_key(r[8]) == key:
            return Hit(id=r[0], type=r[1], project=r[2], session_id=r[3], ts=r[4], title=r[5], file_path=r[6],
                       count=r[7])  # fmt: skip
    return None


def _turn_rows(conn: sqlite3.Connection, prompt: Hit) -> list[tuple[Any, ...]]:
    """The rows of the prompt's turn that may answer for it (ids after it, before the session's next prompt)."""
    # Along the session's index: a turn's rows, however many other sessions stored meanwhile. Bounded by the next
    # prompt's id, not by the times of the later prompts: a prompt sent again can carry its first sending's time.
    return conn.execute(
        f"""SELECT {HIT_COLUMNS}, o.command, substr(o.content, 1, ?) FROM observations o
            WHERE o.session_id = ? AND o.ts >= ? AND o.id > ? AND o.id < coalesce(
                (SELECT min(p.observation_id) FROM prompts p WHERE p.session_id = ? AND p.observation_id > ?),
                9223372036854775807)
              AND o.type NOT IN ({",".join("?" * len(_NOT_ANSWERS))})
            ORDER BY o.ts, o.id LIMIT ?""",
        (
            SCORED_CHARS,
            prompt.session_id,
            prompt.ts,
            prompt.id,
            prompt.session_id,
            prompt.id,
            *_NOT_ANSWERS,
            TURN_ROWS,
        ),
    ).fetchall()


def _worth(query: Query, words: list[tuple[Term, float]], r: tuple[Any, ...], why: bool) -> float:
    """How well an event answers for its turn: its own words (idf-weighted), times its kind's weight."""
    own = _own(words, r)
    weight = TYPE_WEIGHT.get(r[1], 1.0)
    if r[1] == "command" and r[8]:
        weight *= command_weight(r[8])
    if r[1] in query.type_hints or (why and r[1] == "error"):
        weight *= WHY_ERROR
    return round((1.0 + OWN_WORDS * own) * weight, 6)
