"""kube-scheduler's PodTopologySpread tables (filtering_test.go, scoring_test.go, and helper/spread_test.go for the
default selector), ported as data."""

from tests.unit import upstream

test_filter = upstream.test_of("podtopologyspread_filter")
test_score = upstream.test_of("podtopologyspread_score")
test_default_selector = upstream.test_of("podtopologyspread_default_selector")
