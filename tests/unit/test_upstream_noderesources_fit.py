"""kube-scheduler's own NodeResourcesFit Filter cases (tests/data/upstream/noderesources_fit.yaml) against the core."""

from tests.unit import upstream

TABLE = upstream.load("noderesources_fit")


@upstream.each_case(TABLE)
def test_node_resources_fit_gives_kube_schedulers_verdicts(case):
    upstream.check(TABLE, case)
