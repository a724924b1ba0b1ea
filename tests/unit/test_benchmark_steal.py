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


def test_a_run_line_shows_the_steal_of_each_servers_paced_phases() -> None:
    from benchmarks import webhook

    paced = {"baseline": {"paced": {"p99_ms": 1.5}}, "gpu-scheduler": {"paced": {"p99_ms": 1.8}}}
    run = {"results": paced, "p99_ratio": 1.2, "throughput_ratio": 0.97, "targets_met": True, "cpu_steal": 0.021,
           "paced_cpu_steal": {"baseline": 0.004, "gpu-scheduler": None}}
    assert webhook._run_line(2, run, 500) == (
        "run 2: p99 at 500 req/s baseline 1.50 ms, ours 1.80 ms (ratio 1.20); throughput ratio 0.97; targets met "
        "(CPU steal 2.1%; in the paced phases, baseline 0.4%, ours -)")
