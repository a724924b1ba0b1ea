"""kube-scheduler's own NodeResourcesFit Filter cases (tests/data/upstream/noderesources_fit.yaml) against the core."""

import pytest

from tests.unit import upstream

TABLE = upstream.load("noderesources_fit")


@pytest.mark.parametrize("case", upstream.params(TABLE))
def test_node_resources_fit_gives_kube_schedulers_verdicts(case):
    assert upstream.filter_verdicts(case, TABLE["plugin"]) == case["filter"]
