"""The team sync protocol against its model (tests/support/team_model.py): a fixed seed and a few
bounded steps here; bench/bench_team_model.py runs more seeds and steps."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import run_state_machine_as_test
from support.pg_cluster import Cluster
from support.team_model import TeamSyncModel

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]


@seed(36)
class SeededModel(TeamSyncModel):
    pass


def test_every_members_view_equals_the_models_after_random_captures_deletes_and_faults(
    pg_cluster: Cluster,
) -> None:
    TeamSyncModel.cluster = pg_cluster
    run_state_machine_as_test(
        SeededModel,
        settings=settings(
            max_examples=1,
            stateful_step_count=14,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        ),  # fmt: skip
    )
