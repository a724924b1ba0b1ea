"""`zone-balance`: GPU use spread across zones, packing kept within a zone, nothing changed without zones."""

from __future__ import annotations

from scheduler_core import profile
from tests.unit.builders import facts, node, pod, scheduler

UNBALANCED = profile.Scheduling(weights=(("zone-balance", 0),))


def placed(framework, count: int) -> list[str | None]:
    """Where `count` one-GPU pods land, one after another (one shape: fragmentation is the same everywhere)."""
    return [framework.place(facts(pod(f"p{i}", gpus=1))).node for i in range(count)]


def test_gpu_use_is_spread_over_the_zones_where_packing_alone_fills_one_node():
    cluster = [node("a1", zone="zone-a"), node("b1", zone="zone-b")]
    assert placed(scheduler(*cluster, scheduling=UNBALANCED), 4) == ["a1"] * 4
    assert sorted(placed(scheduler(*cluster), 4)) == ["a1", "a1", "b1", "b1"]


def test_within_the_chosen_zone_packing_still_picks_the_node():
    """zone-b has twice zone-a's free GPUs: the first pods go there, onto one node of it, not one each."""
    first, second = placed(scheduler(node("a1", zone="zone-a"), node("b1", zone="zone-b"),
                                     node("b2", zone="zone-b")), 2)
    assert first in ("b1", "b2") and second == first


def test_without_zones_every_decision_is_what_it_was():
    cluster = [node(f"n{i}", zone=None, gpus=g) for i, g in enumerate((8, 4, 8, 2))]
    balanced, unbalanced = scheduler(*cluster), scheduler(*cluster, scheduling=UNBALANCED)
    for i, gpus in enumerate((1, 2, 4, 1, 3, 2, 1, 8, 1)):
        shown = [framework.place(facts(pod(f"p{i}", gpus=gpus))).node for framework in (balanced, unbalanced)]
        assert shown[0] == shown[1]


def test_pods_without_gpus_are_not_scored_by_it():
    framework = scheduler(node("a1", zone="zone-a"), node("b1", zone="zone-b"),
                          scheduling=profile.Scheduling(weights=(("zone-balance", 1),)))
    framework.place(facts(pod("in-a", gpus=4)))
    decision = framework.decide(facts(pod("cpu-only", cpu="1")), explain=True)
    assert decision.scores is not None
    assert {scores.get("zone-balance", 0.0) for scores in decision.scores.values()} == {0.0}
