"""kube-scheduler's own NodeResourcesBalancedAllocation Score cases
(tests/data/upstream/noderesources_balanced_allocation.yaml) against the core's `balanced-allocation`."""

from tests.unit import upstream

TABLE = upstream.load("noderesources_balanced_allocation")


@upstream.each_case(TABLE)
def test_balanced_allocation_scores_as_kube_scheduler(case):
    upstream.check(TABLE, case)
