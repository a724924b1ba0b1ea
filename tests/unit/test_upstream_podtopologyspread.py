"""kube-scheduler's PodTopologySpread tables (filtering_test.go, scoring_test.go), ported as data."""

from tests.unit import upstream

test_filter = upstream.test_of("podtopologyspread_filter")
test_score = upstream.test_of("podtopologyspread_score")
