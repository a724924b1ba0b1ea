"""The gang decision (scheduler_core.gangs) and the pod groups it reads (scheduler_core.podgroups)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import numpy as np
import pytest

from scheduler_core import gangs, pods, podgroups
from scheduler_core.podgroups import COSCHEDULING, VOLCANO, WORKLOAD, GroupRef
from tests.unit.builders import node, planted, pod, scheduler

JOB = GroupRef(COSCHEDULING, "ns", "job-a")
NOW = datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc)


def group(min_member: int = 4, **changes: Any) -> podgroups.PodGroup:
    return dataclasses.replace(podgroups.PodGroup(JOB, min_member, True, 60, {}), **changes)


def members(count: int, *, gpus: int = 8, prefix: str = "job-a", **kwargs: Any) -> list[pods.PodFacts]:
    return [pods.parse(pod(f"{prefix}-{i}", gpus=gpus, labels={podgroups.COSCHEDULING_LABEL: "job-a"}, **kwargs))
            for i in range(count)]


def placed_on(decision: gangs.GroupDecision) -> dict[str, str | None]:
    return {member.key: placement.node for member, placement in decision.placements}


# --- pod groups as their APIs declare them ----------------------------------------------------------------

def test_a_pod_names_its_group_by_label_annotation_or_field_and_the_field_wins():
    labelled = pod("w", labels={podgroups.COSCHEDULING_LABEL: "job-a"})
    annotated = pod("w", annotations={podgroups.VOLCANO_ANNOTATION: "job-v"})
    both = {**labelled, "spec": {**labelled["spec"], "schedulingGroup": {"podGroupName": "job-u"}}}
    assert pods.parse(labelled).group == JOB
    assert pods.parse(annotated).group == GroupRef(VOLCANO, "ns", "job-v")
    assert pods.parse(both).group == GroupRef(WORKLOAD, "ns", "job-u")
    assert pods.parse(pod("w")).group is None


def test_a_group_name_no_podgroup_can_have_is_a_problem_of_the_pod():
    facts = pods.parse(pod("w", annotations={podgroups.VOLCANO_ANNOTATION: "Job_A"}))
    assert facts.group is None
    assert facts.problems == ('annotation scheduling.k8s.io/group-name: "Job_A" is not a PodGroup name: must be a '
                              "lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.')",)


@pytest.mark.parametrize("api, spec, expected", [
    (COSCHEDULING, {"minMember": 4, "scheduleTimeoutSeconds": 30, "minResources": {"nvidia.com/gpu": "32"}},
     (4, True, 30, {"nvidia.com/gpu": 32000}, ())),
    (COSCHEDULING, {"minMember": 2}, (2, True, 60, {}, ())),
    (COSCHEDULING, {"minMember": 2, "scheduleTimeoutSeconds": -5}, (2, True, 60, {}, ())),
    (COSCHEDULING, {}, (1, True, 60, {}, ())),
    (VOLCANO, {"minMember": 3, "minResources": {"cpu": "1500m"}}, (3, True, 60, {"cpu": 1500}, ())),
    (WORKLOAD, {"schedulingPolicy": {"gang": {"minCount": 8}}}, (8, True, 300, {}, ())),
    (WORKLOAD, {"schedulingPolicy": {"basic": {}}}, (1, False, 300, {}, ())),
    (WORKLOAD, {"schedulingPolicy": {"gang": {"minCount": 2}},
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]}},
     (2, True, 300, {}, ("topology.kubernetes.io/zone",))),
])
def test_podgroups_are_read_as_their_schedulers_read_them(api, spec, expected):
    read = podgroups.PodGroup.of(api, {"metadata": {"name": "job-a", "namespace": "ns", "uid": "u1"}, "spec": spec})
    assert read.ref == GroupRef(api, "ns", "job-a")
    assert (read.min_member, read.gang, read.timeout_seconds, dict(read.min_resources), read.topology_keys) == expected


@pytest.mark.parametrize("api, spec, message", [
    (COSCHEDULING, {"minMember": 0}, "spec.minMember: 0 is not a count from 1 to 100000"),
    (COSCHEDULING, {"minMember": "4"}, 'spec.minMember: "4" is not a count from 1 to 100000'),
    (COSCHEDULING, {"minMember": 2, "scheduleTimeoutSeconds": "30s"},
     'spec.scheduleTimeoutSeconds: "30s" is not a whole number of seconds'),
    (VOLCANO, {"minMember": 2, "minResources": {"cpu": "lots"}}, "spec.minResources.cpu: "),
    (WORKLOAD, {"schedulingPolicy": {"gang": {}}},
     "spec.schedulingPolicy.gang.minCount: is required (a count from 1 to 100000)"),
])
def test_a_podgroup_that_cannot_be_read_says_which_field_and_why(api, spec, message):
    with pytest.raises(ValueError) as caught:
        podgroups.PodGroup.of(api, {"metadata": {"name": "job-a", "namespace": "ns"}, "spec": spec})
    assert str(caught.value).startswith(message)


# --- the decision -----------------------------------------------------------------------------------------

def test_a_gang_that_fits_is_placed_whole_one_member_per_8_gpu_node():
    framework = scheduler(*(node(f"n{i}") for i in range(5)))
    decision = gangs.place(framework, group(4), members(4))
    assert decision.reason is None and decision.unplaced == ()
    assert sorted(placed_on(decision).values()) == ["n0", "n1", "n2", "n3"]
    assert decision.scope == "cluster"
    assert all(len(p.devices) == 8 for _, p in decision.placements)


def test_a_gang_that_does_not_fit_places_nothing_and_says_what_is_short():
    framework = scheduler(*(node(f"n{i}") for i in range(3)))
    decision = gangs.place(framework, group(4), members(4, model="A100"))
    assert decision.placements == ()
    assert decision.reason == ("gang ns/job-a: 3/4 members fit; 1 x 8 GPUs A100 short "
                               "(0/3 nodes are available: 3 Insufficient nvidia.com/gpu)")
    assert [m.key for m, why in decision.unplaced] == [f"ns/job-a-{i}" for i in range(4)]


def test_the_model_is_as_it_was_after_a_decision():
    framework = scheduler(*(node(f"n{i}") for i in range(3)))
    free = framework.cluster.gpu_free.copy()
    gangs.place(framework, group(4), members(4))
    gangs.place(framework, group(2), members(2))
    assert framework.cluster.assignments == {} and np.array_equal(framework.cluster.gpu_free, free)


def test_members_placed_already_count_toward_min_member():
    framework = scheduler(*(node(f"n{i}") for i in range(3)))
    decision = gangs.place(framework, group(4), members(2), placed=2)
    assert sorted(placed_on(decision).values()) == ["n0", "n1"]
    short = gangs.place(scheduler(node("n0")), group(4), members(2), placed=2)
    assert short.reason.startswith("gang ns/job-a: 3/4 members fit; 1 x 8 GPUs short")


def test_a_gang_waits_for_min_member_members_to_exist():
    framework = scheduler(*(node(f"n{i}") for i in range(8)))
    decision = gangs.place(framework, group(4), members(3))
    assert decision.placements == ()
    assert decision.reason == "gang ns/job-a: 3/4 members exist; waiting for 1 more"
    assert gangs.place(framework, group(4), members(2), placed=1).reason.startswith("gang ns/job-a: 3/4 members exist")


def test_members_beyond_min_member_that_do_not_fit_stay_pending_alone():
    framework = scheduler(*(node(f"n{i}") for i in range(3)))
    decision = gangs.place(framework, group(2), members(4))
    assert len(decision.placements) == 3 and decision.reason is None
    assert [m.key for m, _ in decision.unplaced] == ["ns/job-a-3"]


def test_a_small_gang_lands_on_one_node_the_tightest_that_takes_it():
    framework = scheduler(node("a-roomy", gpus=16), node("b-snug", gpus=8), node("c-small", gpus=4))
    decision = gangs.place(framework, group(2), members(2, gpus=4))
    assert set(placed_on(decision).values()) == {"b-snug"} and decision.scope == "node b-snug"


def test_a_gang_prefers_one_zone_the_tightest_that_takes_it_all():
    nodes = ([node(f"a{i}", zone="zone-a") for i in range(3)] + [node(f"b{i}", zone="zone-b") for i in range(5)]
             + [node(f"c{i}", zone="zone-c") for i in range(4)])
    decision = gangs.place(scheduler(*nodes), group(4), members(4))
    assert decision.scope == "zone zone-c"
    assert sorted(placed_on(decision).values()) == ["c0", "c1", "c2", "c3"]


def test_a_gang_spans_zones_only_when_no_zone_takes_it():
    nodes = [node(f"a{i}", zone="zone-a") for i in range(2)] + [node(f"b{i}", zone="zone-b") for i in range(2)]
    decision = gangs.place(scheduler(*nodes), group(4), members(4))
    assert decision.scope == "cluster" and sorted(placed_on(decision).values()) == ["a0", "a1", "b0", "b1"]


def test_a_topology_constraint_keeps_the_gang_in_one_domain_or_nowhere():
    constrained = group(4, ref=GroupRef(WORKLOAD, "ns", "job-a"), timeout_seconds=300,
                        topology_keys=("example.com/rack",))
    nodes = [node(f"r1-{i}", labels={"example.com/rack": "r1"}) for i in range(3)] + [
        node(f"r2-{i}", labels={"example.com/rack": "r2"}) for i in range(2)] + [node("loose")]
    decision = gangs.place(scheduler(*nodes), dataclasses.replace(constrained, min_member=3), members(3))
    assert decision.scope == "example.com/rack=r1" and len(decision.placements) == 3
    refused = gangs.place(scheduler(*nodes), dataclasses.replace(constrained, min_member=4), members(4))
    assert refused.placements == ()
    assert refused.reason == "gang ns/job-a: no single domain of example.com/rack takes all 4 pending members"


def test_a_basic_group_places_members_one_by_one():
    basic = group(1, gang=False, ref=GroupRef(WORKLOAD, "ns", "job-a"))
    decision = gangs.place(scheduler(node("n0"), node("n1")), basic, members(3))
    assert len(decision.placements) == 2 and len(decision.unplaced) == 1 and decision.reason is None


def test_min_resources_the_cluster_lacks_refuse_the_gang_before_any_member_is_tried():
    short = group(2, min_resources={"nvidia.com/gpu": 24000})
    decision = gangs.place(scheduler(node("n0"), node("n1")), short, members(2))
    assert decision.reason == ("gang ns/job-a: the cluster's free resources are short of its minResources: "
                               "nvidia.com/gpu 8")


def test_room_nominated_to_a_more_important_pod_is_kept_from_the_gang():
    framework = scheduler(node("n0"), node("n1"))
    urgent = dataclasses.replace(pods.parse(pod("urgent", gpus=8)), priority=100)
    decision = gangs.place(framework, group(2), members(2), nominees=[(urgent, "n1")])
    assert decision.placements == () and decision.reason.startswith("gang ns/job-a: 1/2 members fit")
    humble = dataclasses.replace(urgent, priority=-1)
    assert len(gangs.place(framework, group(2), members(2), nominees=[(humble, "n1")]).placements) == 2


def test_larger_members_are_placed_first_so_mixed_gangs_pack():
    framework = scheduler(node("n0", gpus=8), node("n1", gpus=4))
    mixed = members(2, gpus=2, prefix="small") + members(1, gpus=8, prefix="big")
    decision = gangs.place(framework, group(3), mixed)
    assert [m.key for m, _ in decision.placements][0] == "ns/big-0"
    assert placed_on(decision) == {"ns/big-0": "n0", "ns/small-0": "n1", "ns/small-1": "n1"}


def test_a_group_a_rule_formed_is_read_from_its_members_annotations():
    formed = pod("w", annotations={podgroups.GROUP_ANNOTATION: "job-r", podgroups.MIN_MEMBER_ANNOTATION: "4"})
    facts = pods.parse(formed)
    assert facts.group == GroupRef(podgroups.RULE, "ns", "job-r") and facts.group_min_member == 4
    unreadable = pods.parse(planted(formed, ("metadata", "annotations", podgroups.MIN_MEMBER_ANNOTATION), "four"))
    assert unreadable.group is None and unreadable.problems == (
        'annotation gpu-scheduler.io/pod-group-min-member: "four" is not a count from 1 to 100000 (the minMember of '
        "the group job-r a rule formed)",)
    assert podgroups.formed(facts.group, [2, 4, 3]).min_member == 4


def test_the_watched_model_forms_a_rule_group_from_pending_and_placed_members():
    from scheduler_core import watched

    model = watched.WatchedCluster(scheduler_name="gpu-scheduler")
    model.node_event("ADDED", node("n0"), now=NOW)
    annotations = {podgroups.GROUP_ANNOTATION: "job-r", podgroups.MIN_MEMBER_ANNOTATION: "3"}
    for i in range(2):
        obj = pod(f"w{i}", gpus=1, annotations=annotations)
        obj["metadata"]["uid"] = f"u{i}"
        model.pod_event("ADDED", obj, now=NOW)
    placed = pod("w2", gpus=1, annotations=annotations, node_name="n0")
    placed["metadata"]["uid"] = "u2"
    model.pod_event("ADDED", placed, now=NOW)
    group, members, placed_count = model.gang(GroupRef(podgroups.RULE, "ns", "job-r"))
    assert group is not None and group.min_member == 3 and group.gang
    assert sorted(m.name for m in members) == ["w0", "w1"] and placed_count == 1


# --- preemption for a gang as a unit ----------------------------------------------------------------------

def occupied(*placed: tuple[str, str, int]) -> Any:
    """A framework over 8-GPU nodes, each (pod, node, priority) holding all 8 GPUs of its node."""
    from scheduler_core import preemption

    framework = scheduler(*(node(name) for name in sorted({n for _, n, _ in placed} | {"n0", "n1"})))
    for name, where, priority in placed:
        facts = dataclasses.replace(pods.parse(pod(name, gpus=8, node_name=where)), priority=priority)
        framework.cluster.restore(facts)
    return preemption.Evaluator(framework)


def urgent(count: int, priority: int = 100) -> list[pods.PodFacts]:
    return [dataclasses.replace(m, priority=priority) for m in members(count)]


def test_a_gang_preempts_only_when_the_whole_gang_then_fits():
    evaluator = occupied(("low-0", "n0", 1), ("low-1", "n1", 1))
    plan = gangs.preempt(evaluator, group(2), urgent(2))
    assert isinstance(plan, gangs.GangPreemption)
    assert sorted(v.key for v in plan.victims) == ["ns/low-0", "ns/low-1"]
    assert sorted(node for _, node in plan.nominations) == ["n0", "n1"]
    assert len(evaluator.cluster.assignments) == 2  # the model is as it was


def test_no_pod_is_evicted_when_the_gang_would_still_not_fit():
    evaluator = occupied(("low-0", "n0", 1), ("top-1", "n1", 1000))
    plan = gangs.preempt(evaluator, group(2), urgent(2))
    assert isinstance(plan, str) and plan.startswith("preemption: room for 1/2 members; ns/job-a-")
    assert sorted(evaluator.cluster.assignments) == ["ns/low-0", "ns/top-1"]
    assert all(len(a.devices) == 8 for a in evaluator.cluster.assignments.values())


def test_members_that_fit_already_are_nominated_where_they_fit_and_evict_nothing():
    evaluator = occupied(("low-1", "n1", 1))
    plan = gangs.preempt(evaluator, group(2), urgent(2))
    assert isinstance(plan, gangs.GangPreemption) and [v.key for v in plan.victims] == ["ns/low-1"]
    assert sorted(node for _, node in plan.nominations) == ["n0", "n1"]


def test_the_rest_of_a_gang_goes_to_the_zone_of_its_members_placed_before():
    nodes = [node(f"a{i}", zone="zone-a") for i in range(6)] + [node(f"b{i}", zone="zone-b") for i in range(3)]
    framework = scheduler(*nodes)
    for i in range(2):
        framework.cluster.restore(pods.parse(pod(f"job-a-{i}", gpus=8, node_name=f"a{i}",
                                                 labels={podgroups.COSCHEDULING_LABEL: "job-a"})))
    decision = gangs.place(framework, group(4), members(2, prefix="later"), placed=2)
    assert decision.scope == "zone zone-a" and sorted(placed_on(decision).values()) == ["a2", "a3"]
    fresh = gangs.place(scheduler(*nodes), group(2), members(2, prefix="other"))
    assert fresh.scope == "zone zone-b"  # without members placed before: the tightest zone
