"""kube-scheduler's PodTopologySpread tables (filtering_test.go, scoring_test.go), ported as data."""

from tests.unit import upstream

FILTER = upstream.load("podtopologyspread_filter")
SCORE = upstream.load("podtopologyspread_score")


@upstream.each_case(FILTER)
def test_filter(case):
    upstream.check(FILTER, case)


@upstream.each_case(SCORE)
def test_score(case):
    upstream.check(SCORE, case)
