"""The time the daemon stamps on what it stores: the wall clock, except a leap ahead.

A wall clock set 400 days ahead while the daemon ran stored events 400 days in the future, where
they sort above everything and stay "recent" for as long (issue #16, finding 12). The daemon
follows the time elapsed on CLOCK_BOOTTIME (which, unlike the monotonic clock, counts suspend),
and while the wall clock runs more than LEAP_S ahead of it, stamps the elapsed-time estimate
instead: for LEAP_HOLD_S at most, after which the leap is taken for a correction (a machine that
booted with its clock behind). A clock that goes back is followed at once: a time a little old
harms nothing. A clock already wrong when the daemon starts cannot be told from a right one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

LOG = logging.getLogger("nmemd.clock")
LEAP_S: Final = 600.0  # the wall clock ahead of the elapsed time by more than this has leapt
LEAP_HOLD_S: Final = 3600.0  # a leap that lasts this long is a correction


def _boot_clock() -> float:
    return time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))


class Clock:
    """`now()`: the wall clock, or while it has leapt ahead, where it should be."""

    def __init__(self, wall: Callable[[], float] = time.time, elapsed: Callable[[], float] = _boot_clock) -> None:
        self._wall = wall
        self._elapsed = elapsed
        self._anchor = (wall(), elapsed())  # a wall reading trusted, and the elapsed clock then
        self._leapt_at: float | None = None  # elapsed clock when a leap was first seen

    def now(self) -> float:
        wall, elapsed = self._wall(), self._elapsed()
        expected = self._anchor[0] + (elapsed - self._anchor[1])
        if wall - expected <= LEAP_S:
            if self._leapt_at is not None:
                LOG.warning("the wall clock is back within %.0f s of the time elapsed", LEAP_S)
            self._anchor, self._leapt_at = (wall, elapsed), None
            return wall
        if self._leapt_at is None:
            self._leapt_at = elapsed
            LOG.warning(
                "the wall clock leapt %.0f s ahead of the time elapsed: events are stamped with the time elapsed"
                " for up to %.0f s, then the new time is taken for a correction", wall - expected, LEAP_HOLD_S
            )  # fmt: skip
        if elapsed - self._leapt_at >= LEAP_HOLD_S:
            LOG.warning("the wall clock's leap of %.0f s lasted %.0f s: taken for a correction", wall - expected,
                        LEAP_HOLD_S)  # fmt: skip
            self._anchor, self._leapt_at = (wall, elapsed), None
            return wall
        return expected


stamps = Clock()  # the daemon's one clock
