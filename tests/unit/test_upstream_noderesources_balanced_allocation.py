"""kube-scheduler's own NodeResourcesBalancedAllocation Score cases
(tests/data/upstream/noderesources_balanced_allocation.yaml) against the core's `balanced-allocation`."""

import pytest

from tests.unit import upstream

TABLE = upstream.load("noderesources_balanced_allocation")


@pytest.mark.parametrize("case", upstream.params(TABLE))
def test_balanced_allocation_scores_as_kube_scheduler(case):
    assert upstream.scores(case, TABLE["plugin"]) == case["score"]
