"""The preemption core (scheduler_core.preemption): which pods a high-priority GPU pod evicts, and where; and the
reservation of the room made, for the pod it was made for."""

from __future__ import annotations

from typing import Any

from scheduler_core import preemption
from tests.unit.builders import facts, node, pod, scheduler


def prioritized(name: str, priority: int, *, started: str | None = None, **kwargs: Any) -> dict[str, Any]:
    obj = pod(name, **kwargs)
    obj["spec"]["priority"] = priority
    obj["metadata"]["uid"] = f"uid-{name}"
    if started:
        obj["status"] = {"startTime": started}
    return obj


def placed(framework: Any, *objects: dict[str, Any]) -> None:
    """Account pods on their nodes (each with spec.nodeName), as the watch would."""
    for obj in objects:
        assert framework.cluster.restore(facts(obj)) is None


def test_a_high_priority_pod_evicts_the_fewest_lowest_priority_pods_on_one_node():
    framework = scheduler(node("a", gpus=4), node("b", gpus=4))
    placed(framework,
           prioritized("a-low-1", 10, gpus=2, node_name="a"), prioritized("a-low-2", 10, gpus=2, node_name="a"),
           prioritized("b-low", 10, gpus=1, node_name="b"), prioritized("b-mid", 50, gpus=3, node_name="b"))
    urgent = facts(prioritized("urgent", 100, gpus=2))
    assert framework.decide(urgent).node is None
    chosen = preemption.Evaluator(framework).preempt(urgent)
    # on a: one of the two 2-GPU pods is enough; on b, 1 GPU free after evicting b-low is not, so b-mid goes too
    assert isinstance(chosen, preemption.Victims)
    assert (chosen.node, [p.key for p in chosen.pods]) == ("a", ["ns/a-low-2"])
    assert sorted(framework.cluster.assignments) == ["uid-a-low-1", "uid-a-low-2", "uid-b-low", "uid-b-mid"]


def test_no_pod_of_equal_or_higher_priority_is_ever_a_victim():
    framework = scheduler(node("a", gpus=2))
    placed(framework, prioritized("same", 100, gpus=1, node_name="a"), prioritized("higher", 200, gpus=1,
                                                                                    node_name="a"))
    outcome = preemption.Evaluator(framework).preempt(facts(prioritized("urgent", 100, gpus=1)))
    assert outcome == "0/1 nodes are available: 1 No preemption victims found for incoming pod."


def test_a_pod_whose_budget_allows_no_disruption_survives_when_another_node_serves():
    framework = scheduler(node("a", gpus=1), node("b", gpus=1))
    placed(framework, prioritized("guarded", 10, gpus=1, node_name="a", labels={"app": "db"}),
           prioritized("free", 10, gpus=1, node_name="b", labels={"app": "batch"}))
    budget = preemption.Budget.of({"metadata": {"namespace": "ns"}, "spec": {"selector": {"matchLabels": {
        "app": "db"}}}, "status": {"disruptionsAllowed": 0}})
    chosen = preemption.Evaluator(framework).preempt(facts(prioritized("urgent", 100, gpus=1)), [budget])
    assert (chosen.node, [p.key for p in chosen.pods], chosen.pdb_violations) == ("b", ["ns/free"], 0)


def test_preemption_policy_never_waits():
    framework = scheduler(node("a", gpus=1))
    placed(framework, prioritized("low", 10, gpus=1, node_name="a"))
    polite = prioritized("polite", 100, gpus=1)
    polite["spec"]["preemptionPolicy"] = "Never"
    assert preemption.Evaluator(framework).preempt(facts(polite)) == preemption.NEVER


def test_a_share_preempts_only_where_one_device_gets_enough_room():
    """On a, evicting both 300-shares frees 600 of GPU 0 for a 500 share; on b the low pods' shares sit on two
    GPUs and the rest is held by a higher-priority pod, so no device gets 500."""
    framework = scheduler(node("a", gpus=1), node("b", gpus=2))
    placed(framework,
           prioritized("a-1", 10, milli=300, node_name="a"), prioritized("a-2", 10, milli=300, node_name="a"),
           prioritized("a-keep", 200, milli=400, node_name="a"),
           prioritized("b-1", 10, milli=300, node_name="b"), prioritized("b-keep-1", 200, milli=700, node_name="b"),
           prioritized("b-2", 10, milli=300, node_name="b"), prioritized("b-keep-2", 200, milli=700, node_name="b"))
    devices = {a.pod.key: a.devices for a in framework.cluster.assignments.values()}
    assert {d.index for d in devices["ns/b-1"] + devices["ns/b-2"]} == {0, 1}  # one low share on each GPU of b
    chosen = preemption.Evaluator(framework).preempt(facts(prioritized("urgent", 100, milli=500)))
    assert chosen.node == "a" and sorted(p.key for p in chosen.pods) == ["ns/a-1", "ns/a-2"]


def test_among_equal_victims_the_node_left_least_fragmented_wins():
    """One victim of priority 10 either way: on a it frees a whole GPU, of which the urgent 500 share strands the
    other half; on b it frees the half of a GPU whose other half a higher-priority share holds, and the urgent
    share fills it: b leaves nothing stranded."""
    framework = scheduler(node("a", gpus=1), node("b", gpus=1))
    placed(framework, prioritized("a-low", 10, gpus=1, node_name="a"),
           prioritized("b-low", 10, milli=500, node_name="b"), prioritized("b-high", 200, milli=500, node_name="b"))
    evaluator = preemption.Evaluator(framework)
    urgent = facts(prioritized("urgent", 100, milli=500))
    assert {v.node: evaluator.stranded(urgent, v) for v in evaluator.candidates(urgent)} == {"a": 500, "b": 0}
    assert evaluator.preempt(urgent).node == "b"


def test_many_nodes_at_once_choose_the_same_victims_as_one_node_at_a_time():
    """The dry run over many nodes in one pass per step (node-local pods) agrees with the node-by-node one."""
    import random
    rng = random.Random(7)
    for _ in range(20):
        framework = scheduler(*(node(f"n{i}", gpus=4) for i in range(6)))
        for i in range(6):
            free = 4
            for j in range(rng.randint(1, 4)):
                gpus = rng.randint(1, free) if free else 0
                if not gpus:
                    break
                free -= gpus
                placed(framework, prioritized(f"p{i}-{j}", rng.choice([1, 5, 10, 100]), gpus=gpus, node_name=f"n{i}",
                                              started=f"2026-01-0{rng.randint(1, 9)}T00:00:00Z"))
        urgent = facts(prioritized("urgent", 50, gpus=rng.randint(1, 4)))
        evaluator = preemption.Evaluator(framework)
        rows = list(range(6))
        at_once = {v.node: v for v in evaluator._victims_at_once(urgent, rows, ()).values()}
        one_by_one = {v.node: v for row in rows if (v := evaluator.select_victims(urgent, row))}
        assert at_once == one_by_one


def test_nominated_room_is_kept_from_pods_of_lower_or_equal_priority_only():
    framework = scheduler(node("a", gpus=2))
    urgent = facts(prioritized("urgent", 100, gpus=2))
    for other, fits in ((prioritized("low", 10, gpus=1), False), (prioritized("peer", 100, gpus=1), False),
                        (prioritized("higher", 200, gpus=1), True)):
        with preemption.reserving(framework.cluster, [(urgent, "a")], facts(other)):
            assert (framework.decide(facts(other)).node == "a") is fits
    with preemption.reserving(framework.cluster, [(urgent, "a")], urgent):  # not against itself
        assert framework.decide(urgent).node == "a"
    assert not framework.cluster.assignments


def test_a_decision_leaves_out_a_node_whose_room_is_nominated_and_says_so_when_nothing_else_fits():
    framework = scheduler(node("a", gpus=2), node("b", gpus=1))
    urgent = facts(prioritized("urgent", 100, gpus=2))
    decision, excluded = preemption.decide(framework, facts(prioritized("low", 10, gpus=1)), [(urgent, "a")])
    assert decision.node == "b"
    placed(framework, prioritized("b-full", 10, gpus=1, node_name="b"))
    decision, excluded = preemption.decide(framework, facts(prioritized("low", 10, gpus=1)), [(urgent, "a")])
    assert decision.node is None and list(excluded) == [framework.cluster.index["a"]]
    assert decision.reason == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    decision, _ = preemption.decide(framework, facts(prioritized("higher", 200, gpus=1)), [(urgent, "a")])
    assert decision.node == "a"


def test_nominated_room_is_kept_as_well_from_a_pod_whose_fit_reads_other_pods():
    """A pod with inter-pod terms is decided with the nominated pods accounted in full (labels too), not only
    their requests and devices."""
    framework = scheduler(node("a", gpus=2))
    urgent = facts(prioritized("urgent", 100, gpus=2, labels={"app": "u"}))
    spread_out = prioritized("low", 10, gpus=1, affinity={"podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {"app": "u"}}, "topologyKey": "kubernetes.io/hostname"}}]}})
    decision, excluded = preemption.decide(framework, facts(spread_out), [(urgent, "a")])
    assert decision.node is None and list(excluded) == [framework.cluster.index["a"]]
    assert not framework.cluster.assignments


def test_answers_kept_for_pods_of_one_shape_are_those_a_fresh_dry_run_gives():
    """A burst of like pods preempting one after another: the evaluator that keeps each node's answer until the
    node changes chooses what a fresh evaluator chooses every time, start times and budgets included."""
    import random
    rng = random.Random(3)
    framework = scheduler(*(node(f"n{i}", gpus=4) for i in range(12)))
    for i in range(12):
        for j, gpus in enumerate(rng.choice([[2, 2], [2, 1, 1], [1, 1, 1, 1]])):
            placed(framework, prioritized(f"p{i}-{j}", rng.choice([1, 2]), gpus=gpus, node_name=f"n{i}",
                                          labels={"app": rng.choice(["a", "b"])}))
    budget = preemption.Budget.of({"metadata": {"namespace": "ns"}, "spec": {"selector": {"matchLabels": {"app": "a"}}},
                                   "status": {"disruptionsAllowed": 1}})
    keeping = preemption.Evaluator(framework, min_percentage=50, min_absolute=3)
    for k in range(8):
        urgent = facts(prioritized(f"urgent-{k}", 10, gpus=2))
        fresh = preemption.Evaluator(framework, min_percentage=50, min_absolute=3)
        expected = fresh.preempt(urgent, [budget], offset=k * 5)
        assert keeping.preempt(urgent, [budget], offset=k * 5) == expected
        if k == 3:  # a pod starts: the order of reprieves on its node changes
            victim = next(iter(framework.cluster.assignments.values())).pod
            framework.cluster.relabel(victim.identity, labels=victim.labels, app=victim.app, terminating=False,
                                      started="2026-01-01T00:00:00Z", preempted=False)
        if isinstance(expected, preemption.Victims):
            for victim in expected.pods:
                framework.cluster.unassign(victim.identity)
            decision = framework.decide(urgent)
            framework.cluster.assign(urgent, decision.node, decision.devices)
    assert keeping._kept  # it did keep answers


def test_a_nomination_to_a_node_that_is_gone_keeps_nothing_and_breaks_nothing():
    framework = scheduler(node("a", gpus=2))
    gone = facts(prioritized("urgent-gone", 100, gpus=2))
    waiting = facts(prioritized("urgent-a", 100, gpus=2))
    low = facts(prioritized("low", 10, gpus=1))
    assert preemption.decide(framework, low, [(gone, "c")])[0].node == "a"
    decision, excluded = preemption.decide(framework, low, [(gone, "c"), (waiting, "a")])
    assert decision.node is None and list(excluded) == [framework.cluster.index["a"]]
