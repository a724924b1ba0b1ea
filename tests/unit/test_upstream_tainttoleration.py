"""kube-scheduler's own TaintToleration cases (tests/data/upstream/tainttoleration.yaml) against the core's
TaintToleration filter and taint-toleration score."""

from tests.unit import upstream

TABLE = upstream.load("tainttoleration")


@upstream.each_case(TABLE)
def test_taint_toleration_as_upstream(case):
    upstream.check(TABLE, case)
