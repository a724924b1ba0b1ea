"""kube-scheduler's own NodePorts cases (tests/data/upstream/nodeports.yaml) against the core's NodePorts filter."""

from tests.unit import upstream

TABLE = upstream.load("nodeports")


@upstream.each_case(TABLE)
def test_node_ports_as_upstream(case):
    upstream.check(TABLE, case)
