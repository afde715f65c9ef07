"""Search a team's observations on the server, for the history older than the local window.

Words go through `websearch_to_tsquery('simple', ...)` over the stored tsvector (GIN); a term that
looks like an identifier or a path (`parse_config`, `routes.py`, `src/api`) is also looked up as a
substring of titles and file paths (pg_trgm GIN), which the word index cannot do. Each branch takes
at most CANDIDATES matching rows *before* anything is ranked, so a common word costs the same as a
rare one (ts_rank reads every row it ranks). The server's own `statement_timeout` is set below the
caller's budget (SERVER_SHARE of it), so the server gives up first and says so (TeamTimeout): the
caller still has time to show its local hits with a word that the team's part timed out.
The work is done by the server's `nmem.search()` (schema.py), a SECURITY DEFINER function that
checks the team against the caller's memberships: under row-level security the member's own query
could not use those indexes (`@@` and `ILIKE` are not LEAKPROOF).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

import msgspec

from nmemd.errors import QueryError, TeamError, TeamTimeout

if TYPE_CHECKING:
    import psycopg

CANDIDATES: Final = 500  # matching rows each branch hands to ranking, at most
SNIPPET_CHARS: Final = 240
MAX_LIMIT: Final = 200
SERVER_SHARE: Final = 0.75  # of the caller's budget the server's statement may take
# A term with one of these inside, or a lower-to-upper case change, names code or a file.
CODEISH: Final = re.compile(r"\w[_./:\\-]\w|[a-z][A-Z]|\w\.\w")
TERM: Final = re.compile(r'[^\s"()]+')


class TeamHit(msgspec.Struct, kw_only=True):
    """One observation found on the server; `created_at` in seconds since the epoch, as the local store."""

    seq: int
    event_id: str
    author: str
    agent: str
    machine: str
    session_id: str
    kind: str
    title: str
    snippet: str
    files: list[str]
    created_at: float
    rank: float
    project: str = ""


def substring_term(query: str) -> str | None:
    """The longest term of `query` that looks like an identifier or a path (>= 3 characters), if any."""
    terms = [t.strip(".,;:!?'`") for t in TERM.findall(query) if not t.startswith("-")]
    codeish = [t for t in terms if len(t) >= 3 and CODEISH.search(t)]
    return max(codeish, key=len) if codeish else None


def like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def snippet(body: str, query: str) -> str:
    """Up to SNIPPET_CHARS of `body` from a little before the first query word it holds."""
    low = body.lower()
    found = [i for t in TERM.findall(query.lower()) if len(t) > 2 and (i := low.find(t.strip('"'))) >= 0]
    start = max(0, min(found) - 60) if found else 0
    if start:
        space = body.find(" ", start)
        start = space + 1 if 0 <= space < start + 20 else start
    text = " ".join(body[start : start + SNIPPET_CHARS].split())
    return ("…" if start else "") + text + ("…" if start + SNIPPET_CHARS < len(body) else "")


SEARCH_SQL: Final = (
    "SELECT seq, event_id, author::text, agent, machine, session_id, kind, title, body, files,"
    " extract(epoch FROM created_at)::float8, project, rank"
    " FROM nmem.search(%(team)s, %(project)s, %(query)s, %(pattern)s, %(author)s, %(candidates)s, %(limit)s)"
)
FLAG: Final = re.compile(r"(^|\s)-+(?=\w)")


def statement_ms(budget_ms: int) -> int:
    """The server's statement_timeout for a search the caller waits `budget_ms` for: below it."""
    return max(20, int(budget_ms * SERVER_SHARE))


def words_query(query: str) -> str:
    """The query for websearch_to_tsquery: `-k` is a command's flag here, not a negation."""
    return FLAG.sub(r"\1", query)


async def search_team(
    conn: psycopg.AsyncConnection[Any],
    *,
    team: str,
    project: str | None,
    query: str,
    limit: int,
    author: str | None,
    timeout_ms: int,
) -> list[TeamHit]:
    """The best `limit` observations of `team` (of `project`, by `author`, when given) for `query`,
    within `timeout_ms`: the server stops at `statement_ms(timeout_ms)` (TeamTimeout); TeamError when
    it fails otherwise."""
    import psycopg

    if not query.strip():
        raise QueryError("an empty query")
    substring = substring_term(query)
    params: dict[str, object] = {
        "team": team,
        "project": project,
        "author": author,
        "query": words_query(query),
        "candidates": CANDIDATES,
        "pattern": like_pattern(substring) if substring else None,
        "limit": max(1, min(limit, MAX_LIMIT)),
        "timeout": str(statement_ms(timeout_ms)),
    }
    try:
        async with conn.transaction():
            # bounded statements: compiling them (JIT) would cost more than it saves
            await conn.execute(
                "SELECT set_config('statement_timeout', %(timeout)s, true), set_config('jit', 'off', true)", params
            )
            cur = await conn.execute(SEARCH_SQL, params)
            rows = await cur.fetchall()
    except psycopg.errors.QueryCanceled:
        raise TeamTimeout(f"the team server's search timed out after {params['timeout']} ms") from None
    except psycopg.Error as exc:
        raise TeamError(f"the team server's search failed: {' '.join(str(exc).split())}") from None
    return [
        TeamHit(
            seq=r[0],
            event_id=r[1],
            author=r[2],
            agent=r[3],
            machine=r[4],
            session_id=r[5],
            kind=r[6],
            title=r[7],
            snippet=snippet(r[8], query),
            files=list(r[9]),
            created_at=float(r[10]),
            project=r[11],
            rank=float(r[12]),
        )
        for r in rows
    ]
