"""The team sync protocol against its model (tests/support/team_model.py): fixed seeds and a few
bounded steps here; bench/bench_team_model.py runs more seeds and steps."""

from __future__ import annotations

import pytest
from support.pg_cluster import Cluster
from support.team_model import run

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(900)]
STEPS = 16


@pytest.mark.parametrize("seed", [59, 63])  # between them every operation, and the planted bugs caught
def test_every_view_and_store_file_equals_the_models_after_random_captures_deletes_and_faults(
    pg_cluster: Cluster, seed: int
) -> None:
    run(pg_cluster, seed, STEPS)
