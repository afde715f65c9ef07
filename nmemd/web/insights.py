"""What the viewer's pictures and home page show, read on a read-only connection of its own.

Activity per day by project and by agent (the last weeks), each session's shape (its types over
time), the projects with their last activity, the pinned rows. The daemon's read methods answer
one question each; these are the viewer's summaries, so they live beside it and never write.

Cost at a million observations: activity is counted once (the rows of the sessions active in the
window, ~0.2 s) and then kept up to date from the rows stored since; the pinned rows, the total and
`nmem status`'s counts need scans (no index holds `pinned`; counts by type), so they are kept and
counted again in a thread when they are older than their time to live: a page never waits for a
scan except the very first (and the viewer starts counting when it starts).
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from nmemd.errors import NmemError
from nmemd.model import CLAUDE_CODE

DAYS: Final = 28  # the window of the activity pictures
CACHE_S: Final = 60.0
STATUS_TTL_S: Final = 5.0
TALLY_S: Final = 3600.0  # the activity tally is counted again this often (retention removes rows)
TALLY_SLACK_DAYS: Final = 7  # counted further back, so the window may slide a week before a recount
SHAPE_ROWS: Final = 2000  # the most observations drawn in one session's shape
PINNED_ROWS: Final = 20


@dataclass
class Activity:
    """Observations stored per day (local days, oldest first) in total, by project and by agent."""

    days: list[dt.date]
    total: list[int]
    by_project: dict[str, list[int]] = field(default_factory=dict)
    by_agent: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class Project:
    project: str
    sessions: int
    last_ts: float | None


@dataclass
class _Tally:
    """Observations counted by (day, project, agent) from `first` on, up to row `last_id`."""

    first: dt.date
    counts: dict[tuple[dt.date, str, str], int]
    last_id: int
    built: float


class Insights:
    """Summaries of the store at `db`, kept fresh without making a page wait (module docstring)."""

    def __init__(self, db: str, spool: str = "") -> None:
        self.db = db
        self.spool = spool
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}
        self._refreshing: set[str] = set()
        self._tally: _Tally | None = None
        self._tally_lock = threading.Lock()

    def invalidate(self) -> None:
        """After a change through the viewer: the next page counts again."""
        with self._lock:
            self._cache.clear()
        with self._tally_lock:
            self._tally = None

    def warm(self) -> None:
        """Compute what the first pages need, so that they do not wait (run in a thread at start)."""
        try:
            self.activity()
            self.pinned()
            self.total()
            self.database()
        except (sqlite3.Error, NmemError):
            pass  # no store yet, or a bad one: the pages say so when they ask

    def _cached(self, name: str, compute: Callable[[], Any], ttl: float = CACHE_S) -> Any:
        """`compute()`'s value: at once when there is none; the kept one when it is fresh; the kept
        one while a thread computes a new one when it is older than `ttl`."""
        with self._lock:
            hit = self._cache.get(name)
            stale = hit is not None and time.monotonic() - hit[0] >= ttl and name not in self._refreshing
            if stale:
                self._refreshing.add(name)
        if hit is None:
            value = compute()
            with self._lock:
                self._cache[name] = (time.monotonic(), value)
            return value
        if stale:
            threading.Thread(target=self._refresh, args=(name, compute), daemon=True).start()
        return hit[1]

    def _refresh(self, name: str, compute: Callable[[], Any]) -> None:
        try:
            value = compute()
            with self._lock:
                self._cache[name] = (time.monotonic(), value)
        except Exception:
            pass  # the kept value stays; the next page tries again
        finally:
            with self._lock:
                self._refreshing.discard(name)

    def _connect(self) -> sqlite3.Connection:
        from nmemd.store import readers

        return readers.open_readonly(self.db)

    def activity(self, days: int = DAYS) -> Activity:
        """The last `days` days, counted once and then kept up to date from the rows stored since
        (a rowid range: cheap); counted again every TALLY_S (rows removed by retention) and after
        a change through the viewer."""
        today = dt.date.today()
        first = today - dt.timedelta(days=days - 1)
        with self._tally_lock:
            t = self._tally
            if t is None or t.first > first or time.monotonic() - t.built > TALLY_S:
                t = self._tally = self._count_from(first - dt.timedelta(days=TALLY_SLACK_DAYS))
            else:
                self._count_since(t)
            counts = dict(t.counts)
        dates = [first + dt.timedelta(days=n) for n in range(days)]
        index = {d: n for n, d in enumerate(dates)}
        result = Activity(days=dates, total=[0] * days)
        for (day, project, agent), n in counts.items():
            at = index.get(day)
            if at is None:
                continue
            result.total[at] += n
            result.by_project.setdefault(project, [0] * days)[at] += n
            result.by_agent.setdefault(agent, [0] * days)[at] += n
        return result

    def _count_from(self, first: dt.date) -> _Tally:
        tally = _Tally(first=first, counts={}, last_id=0, built=time.monotonic())
        since = dt.datetime.combine(first, dt.time()).timestamp()
        conn = self._connect()
        try:
            # Along the sessions active since then (each session's rows by its index): at a million
            # observations over a year, a scan of the table would read fourteen times as many rows.
            rows = conn.execute(
                f"SELECT o.id, o.ts, o.project, {_agent(conn)} FROM sessions s CROSS JOIN observations o"
                " ON o.session_id = s.session_id WHERE s.last_event_at >= ? AND o.ts >= ?",
                (since, since),
            )
            _add(tally, rows)
            tally.last_id = max(tally.last_id, int(conn.execute("SELECT coalesce(max(id), 0) FROM observations")
                                                    .fetchone()[0]))  # fmt: skip
        finally:
            conn.close()
        return tally

    def _count_since(self, tally: _Tally) -> None:
        conn = self._connect()
        try:
            rows = conn.execute(
                f"SELECT o.id, o.ts, o.project, {_agent(conn)} FROM observations o WHERE o.id > ?", (tally.last_id,)
            )
            _add(tally, rows)
        finally:
            conn.close()

    def total(self) -> int:
        """How many observations the store holds (a count of a million rows takes ~30 ms: kept)."""
        return int(self._cached("total", self._total, STATUS_TTL_S))

    def _total(self) -> int:
        conn = self._connect()
        try:
            return int(conn.execute("SELECT count(*) FROM observations").fetchone()[0])
        finally:
            conn.close()

    def database(self) -> Any:
        """`nmem status`'s database facts (counts by type: a scan), and when they were counted."""
        from nmemd.daemon.status import database_facts

        return self._cached("database", lambda: (time.time(), database_facts(self.db, self.spool)), STATUS_TTL_S)

    def projects(self) -> list[Project]:
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT project, count(*), max(last_event_at) FROM sessions WHERE project IS NOT NULL"
                " GROUP BY project ORDER BY 3 DESC"
            ).fetchall()
        finally:
            conn.close()
        return [Project(str(p), int(n), float(t) if t is not None else None) for p, n, t in rows]

    def pinned(self) -> list[dict[str, Any]]:
        return self._cached("pinned", self._pinned)  # type: ignore[no-any-return]  # a scan: kept

    def _pinned(self) -> list[dict[str, Any]]:
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT id, type, title, project, ts FROM observations WHERE pinned ORDER BY ts DESC LIMIT ?",
                (PINNED_ROWS,),
            ).fetchall()
        finally:
            conn.close()
        return [{"id": r[0], "type": r[1], "title": r[2], "project": r[3], "ts": r[4]} for r in rows]

    def shapes(self, sessions: Iterable[str]) -> dict[str, list[tuple[float, str]]]:
        """Each session's observations as (time, type), in order: what its shape is drawn from."""
        out: dict[str, list[tuple[float, str]]] = {}
        conn = self._connect()
        try:
            for sid in sessions:
                rows = conn.execute(
                    "SELECT ts, type FROM observations WHERE session_id = ? ORDER BY ts LIMIT ?", (sid, SHAPE_ROWS)
                ).fetchall()
                out[sid] = [(float(t), str(k)) for t, k in rows]
        finally:
            conn.close()
        return out


def _agent(conn: sqlite3.Connection) -> str:
    from nmemd.recall.queries import agent_column

    return agent_column(conn, "o")


def _add(tally: _Tally, rows: Iterable[tuple[Any, ...]]) -> None:
    """Count rows of (id, ts, project, agent) stored from the tally's first day on."""
    since = dt.datetime.combine(tally.first, dt.time()).timestamp()
    for oid, ts, project, agent in rows:
        tally.last_id = max(tally.last_id, int(oid))
        if ts is None or ts < since:
            continue
        key = (dt.date.fromtimestamp(float(ts)), str(project or "(no project)"), str(agent or CLAUDE_CODE))
        tally.counts[key] = tally.counts.get(key, 0) + 1
