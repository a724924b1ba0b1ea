"""kube-scheduler's own NodeAffinity cases (tests/data/upstream/nodeaffinity.yaml) against the core's NodeAffinity
filter and node-affinity score."""

from tests.unit import upstream

TABLE = upstream.load("nodeaffinity")


@upstream.each_case(TABLE)
def test_node_affinity_as_upstream(case):
    upstream.check(TABLE, case)
    if "score_error" in case:  # PreScore fails: the core keeps why, and refuses the pod when it must score
        _, cycle = upstream.cycle_of(case)
        assert case["score_error"] in (cycle.pod.preferred_problem or "")
