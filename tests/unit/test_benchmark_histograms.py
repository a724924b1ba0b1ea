"""The apiserver-histogram arithmetic of benchmarks/webhook_apiserver.py: the figures of issue 17 rest on it."""

from __future__ import annotations

import pytest

from benchmarks import webhook_apiserver as bench

SCRAPE = """\
# HELP apiserver_admission_webhook_admission_duration_seconds [STABLE] Admission webhook latency
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu-scheduler.io",operation="CREATE",rejected="false",type="admit",le="0.005"} 980
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu-scheduler.io",operation="CREATE",rejected="false",type="admit",le="0.025"} 1000
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.gpu-scheduler.io",operation="CREATE",rejected="false",type="admit",le="+Inf"} 1000
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other",operation="CREATE",rejected="false",type="admit",le="0.005"} 7
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other",operation="CREATE",rejected="false",type="admit",le="0.025"} 7
apiserver_admission_webhook_admission_duration_seconds_bucket{name="other",operation="CREATE",rejected="false",type="admit",le="+Inf"} 7
"""
OURS = {"name": "pods.gpu-scheduler.io", "operation": "CREATE", "type": "admit"}


def test_histogram_keeps_only_the_series_asked_for() -> None:
    found = bench.histogram(SCRAPE, bench.WEBHOOK_HISTOGRAM, OURS)
    assert found == {0.005: 980.0, 0.025: 1000.0, float("inf"): 1000.0}


def test_histogram_sums_the_series_that_match() -> None:
    found = bench.histogram(SCRAPE, bench.WEBHOOK_HISTOGRAM, {"operation": "CREATE"})
    assert found[0.005] == 987.0


def test_quantile_interpolates_within_the_bucket_as_histogram_quantile_does() -> None:
    after = bench.histogram(SCRAPE, bench.WEBHOOK_HISTOGRAM, OURS)
    # p50: rank 500 of 980 in [0, 5 ms]; p99: rank 990 is 10 of the 20 calls in (5, 25 ms]
    assert bench.quantile(0.5, {}, after) == pytest.approx(0.005 * 500 / 980)
    assert bench.quantile(0.99, {}, after) == pytest.approx(0.015)


def test_quantile_is_over_the_increase_since_before() -> None:
    before = {0.005: 900.0, 0.025: 900.0, float("inf"): 900.0}
    after = bench.histogram(SCRAPE, bench.WEBHOOK_HISTOGRAM, OURS)
    # the burst: 80 calls within 5 ms, 20 in (5, 25 ms]; p50 is rank 50 of those 80
    assert bench.quantile(0.5, before, after) == pytest.approx(0.005 * 50 / 80)


def test_quantile_of_no_calls_is_none() -> None:
    after = bench.histogram(SCRAPE, bench.WEBHOOK_HISTOGRAM, OURS)
    assert bench.quantile(0.99, after, after) is None


def test_a_quantile_in_the_open_bucket_is_the_last_bound() -> None:
    assert bench.quantile(0.99, {}, {0.005: 1.0, 0.025: 2.0, float("inf"): 100.0}) == 0.025


def test_within_is_the_exact_share_of_the_increase_under_a_bound() -> None:
    before = {0.005: 900.0, 0.025: 900.0, float("inf"): 900.0}
    after = bench.histogram(SCRAPE, bench.WEBHOOK_HISTOGRAM, OURS)
    # the burst: 100 calls, 80 of them within 5 ms and all 100 within 25 ms
    assert bench.within(0.005, before, after) == pytest.approx(0.8)
    assert bench.within(0.025, before, after) == pytest.approx(1.0)


def test_within_of_no_calls_is_none() -> None:
    after = bench.histogram(SCRAPE, bench.WEBHOOK_HISTOGRAM, OURS)
    assert bench.within(0.005, after, after) is None
