"""kube-scheduler's InterPodAffinity tables (filtering_test.go, scoring_test.go), ported as data."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit import upstream

FILTER = upstream.load("interpodaffinity_filter")
SCORE = upstream.load("interpodaffinity_score")


def check(case: dict[str, Any]) -> None:
    if case.get("skip"):
        pytest.skip(case["skip"])
    if "problem" in case:
        assert case["problem"] in " ".join(upstream.problems(case))


@pytest.mark.parametrize("case", FILTER["cases"], ids=lambda case: case["id"])
def test_filter(case: dict[str, Any]) -> None:
    check(case)
    if "filter" in case:
        assert upstream.filter_verdicts(case, FILTER["plugin"]) == case["filter"]


@pytest.mark.parametrize("case", SCORE["cases"], ids=lambda case: case["id"])
def test_score(case: dict[str, Any]) -> None:
    check(case)
    if "score" in case:
        assert upstream.scores(case, SCORE["plugin"]) == case["score"]
