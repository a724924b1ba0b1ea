"""The CPU steal share the webhook benchmarks print beside their figures (benchmarks/sides.py)."""

from __future__ import annotations

import pytest

from benchmarks import sides


def test_steal_is_the_share_of_all_cpu_time_between_the_two_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = iter([[100, 0, 50, 800, 0, 0, 0, 50], [400, 0, 100, 1100, 0, 0, 0, 150]])
    monkeypatch.setattr(sides, "_cpu_times", lambda: next(readings))
    meter = sides.CpuSteal()
    assert meter.share() == pytest.approx(100 / 750)


def test_steal_is_unknown_without_proc_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sides, "_cpu_times", lambda: None)
    assert sides.CpuSteal().share() is None


def test_steal_is_unknown_when_no_time_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sides, "_cpu_times", lambda: [1, 0, 1, 1, 0, 0, 0, 0])
    assert sides.CpuSteal().share() is None


def test_this_machine_reports_its_cpu_times() -> None:
    times = sides._cpu_times()
    assert times is None or (len(times) == 8 and all(value >= 0 for value in times))
