"""What the viewer's pictures and home page show, read on a read-only connection of its own.

Activity per day by project and by agent (the last weeks), each session's shape (its types over
time), the projects with their last activity, the pinned rows. The daemon's read methods answer
one question each; these are the viewer's summaries, so they live beside it and never write.

Cost at a million observations: activity walks the (session_id, ts) index of the sessions active
in the window only, and the pinned rows need a scan of the table (no index holds `pinned`), so
both are kept for CACHE_S and recomputed when the viewer changes something (pin, forget, purge).
"""

from __future__ import annotations

import bisect
import datetime as dt
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from nmemd.model import CLAUDE_CODE

DAYS: Final = 28  # the window of the activity pictures
CACHE_S: Final = 60.0
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


class Insights:
    """Summaries of the store at `db`, a few of them cached (see the module docstring)."""

    def __init__(self, db: str) -> None:
        self.db = db
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}

    def invalidate(self) -> None:
        with self._lock:
            self._cache.clear()

    def _cached(self, name: str, compute: Any) -> Any:
        now = time.monotonic()
        with self._lock:
            hit = self._cache.get(name)
            if hit is not None and now - hit[0] < CACHE_S:
                return hit[1]
        value = compute()
        with self._lock:
            self._cache[name] = (now, value)
        return value

    def _connect(self) -> sqlite3.Connection:
        from nmemd.store import readers

        return readers.open_readonly(self.db)

    def activity(self, days: int = DAYS, today: dt.date | None = None) -> Activity:
        return self._cached(f"activity:{days}:{today}", lambda: self._activity(days, today))  # type: ignore[no-any-return]

    def _activity(self, days: int, today: dt.date | None) -> Activity:
        today = today or dt.date.today()
        first = today - dt.timedelta(days=days - 1)
        dates = [first + dt.timedelta(days=n) for n in range(days)]
        starts = [dt.datetime.combine(d, dt.time()).timestamp() for d in dates]
        result = Activity(days=dates, total=[0] * days)
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT s.project, s.agent, o.ts FROM sessions s JOIN observations o"
                " ON o.session_id = s.session_id AND o.ts >= ? WHERE s.last_event_at >= ?",
                (starts[0], starts[0]),
            )
            for project, agent, ts in rows:
                n = _day(starts, float(ts))
                if n is None:
                    continue
                result.total[n] += 1
                result.by_project.setdefault(str(project or "(no project)"), [0] * days)[n] += 1
                result.by_agent.setdefault(str(agent or CLAUDE_CODE), [0] * days)[n] += 1
        except sqlite3.OperationalError:
            pass  # a store from before the agent column (m011): nothing to draw
        finally:
            conn.close()
        return result

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
        return self._cached("pinned", self._pinned)  # type: ignore[no-any-return]

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


def _day(starts: list[float], ts: float) -> int | None:
    """The index of the day `ts` falls in (`starts`: each day's first second), or None outside."""
    n = bisect.bisect_right(starts, ts) - 1
    if n < 0 or ts >= starts[-1] + 90000:  # before the window, or in the future (a clock that leapt)
        return None
    return n
