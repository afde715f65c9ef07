"""The pauses between hooks (capture.quiet), which team sync's paced push waits for and sizes its slices to."""

from __future__ import annotations

import anyio
import pytest

from nmemd.capture.quiet import QuietMoments
from nmemd.team.sync import PACE_FIRST_ROWS, PACE_MIN_ROWS, PUSH_BATCH, _Pace

pytestmark = pytest.mark.anyio
WAIT_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_pause_is_judged_by_the_short_ones_before_it() -> None:
    clock = Clock()
    quiet = QuietMoments(clock)
    assert quiet.left() == 0.0  # no pause seen yet: nothing promised
    for gap in (0.005, 0.2, 0.006, 0.3):  # a hook's connection opens `gap` after the last one was answered
        clock.now += gap
        quiet.hook_started()
        assert quiet.quiet_for() is None and quiet.left() == 0.0  # a hook in flight
        clock.now += 0.001
        quiet.all_done()
    assert quiet.quiet_for() == 0.0
    assert quiet.left() == pytest.approx(0.006)  # the second shortest: one short pause is no pattern
    clock.now += 0.004
    assert quiet.left() == pytest.approx(0.002)
    clock.now += 0.1
    assert quiet.left() == 0.0  # longer than expected already: nothing left to promise


async def test_next_returns_at_the_next_pause_or_after_its_wait() -> None:
    quiet = QuietMoments()
    quiet.hook_started()
    got: list[bool] = []

    async def waiter() -> None:
        got.append(await quiet.next(WAIT_S))

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            quiet.all_done()
    assert got == [True]
    assert await quiet.next(0.001) is False  # no hook answered meanwhile


def test_a_paced_push_fits_its_slices_to_the_budget_by_the_last_ones_pace() -> None:
    pace = _Pace()
    assert pace.rows_for(0.003) == PACE_FIRST_ROWS  # nothing measured yet
    pace.took(20, 0.004)  # 0.2 ms a row
    assert pace.rows_for(0.003) == 15
    pace.took(20, 0.002)  # faster: believed a quarter at a time (0.175 ms a row)
    assert pace.rows_for(0.0036) == 20
    pace.took(10, 0.004)  # slower: believed at once
    assert pace.rows_for(0.004) == 10
    assert pace.rows_for(0.0001) == PACE_MIN_ROWS  # a push goes on, however short the pauses
    assert pace.rows_for(10.0) == PUSH_BATCH  # a long pause: a whole batch, no more
