"""Placement-quality policies on small clusters where the right node is known."""

from collections import Counter

import numpy as np
import pytest

from scheduler_core import cluster, framework, nodes, openb, pods, profile, workloads
from tests.unit.builders import facts, node, pod

GIB = "Gi"


def only(policy: str, **extra: object) -> profile.Scheduling:
    """A policy's plugin alone, as `bench openb --policy` runs it."""
    return profile.Scheduling(weights=tuple((name, int(name == policy)) for name in profile.SCORE_PLUGINS), **extra)


def build(node_objects, bound=(), *, scheduling, workload=None, seed=0) -> framework.Framework:
    model = cluster.Cluster()
    for obj in node_objects:
        model.set_node(nodes.parse(obj))
    for obj in bound:
        model.restore(facts(obj))
    return framework.Framework(model, scheduling, workload=workload, rng=np.random.default_rng(seed))


def workload_of(*pod_objects, times: int = 1) -> workloads.Workload:
    return workloads.Workload.of([facts(obj) for obj in pod_objects] * times)


# Each row: nodes, pods already bound, the pod, the node each policy must choose, and why.
CASES = [
    ("bestfit", [node("a"), node("b")], [pod("x", gpus=4, node_name="b", cpu="4")], pod("p", gpus=1, cpu="1"), "b",
     "the node left with the fewest free GPUs and cpu"),
    ("bestfit", [node("a", cpu="16"), node("b", cpu="128")], [], pod("p", gpus=1, cpu="1"), "a",
     "equal GPUs: the node left with less cpu"),
    ("dotproduct", [node("a", gpus=8, cpu="64"), node("b", gpus=2, cpu="16")], [], pod("p", gpus=1, cpu="8"), "b",
     "the smallest dot product of free resources and request"),
    ("gpupacking", [node("a", gpus=2), node("b", gpus=2)], [pod("x", milli=500, node_name="b")],
     pod("p", milli=300), "b", "a share goes onto a GPU already shared"),
    ("gpupacking", [node("a", gpus=4), node("b", gpus=4)], [pod("x", gpus=1, node_name="b")],
     pod("p", gpus=2), "b", "whole GPUs go to a node with GPUs in use before an idle node"),
    ("gpupacking", [node("a", gpus=2), node("b", gpus=2)],
     [pod("x", milli=400, node_name="a"), pod("y", milli=700, node_name="b")], pod("p", milli=250), "b",
     "of two shared GPUs, the one the share fills more tightly"),
    ("gpupacking", [node("a", gpus=2), node("b", gpus=2)], [pod("x", milli=800, node_name="b")],
     pod("p", milli=500), "b", "no shared GPU with room: a node with GPUs in use before an idle node"),
]


@pytest.mark.parametrize(("policy", "node_objects", "bound", "pending", "expected", "why"), CASES,
                         ids=[f"{c[0]}: {c[5]}" for c in CASES])
def test_baselines_choose_the_published_node(policy, node_objects, bound, pending, expected, why):
    for seed in range(5):  # ties are broken at random: the answer must not depend on the draw
        decision = build(node_objects, bound, scheduling=only(policy), seed=seed).decide(facts(pending))
        assert decision.node == expected, why


def test_cached_costs_match_a_fresh_computation():
    """Costs are kept per pod shape and recomputed only for rows that changed: the same as from scratch."""
    shapes = [pod("w1", gpus=1, cpu="8"), pod("w2", milli=300, cpu="2"), pod("w4", gpus=4, cpu="16")]
    node_objects = [node(f"n{i}", gpus=g, cpu=c) for i, (g, c) in enumerate([(8, "96"), (2, "104"), (4, "32")] * 3)]
    kept = build(node_objects, scheduling=profile.Scheduling(), workload=workload_of(*shapes))
    for i, shape in enumerate([1, 300, 4, 300, 1, 1, 300, 4, 1, 300] * 2):
        kept.place(facts(pod(f"p{i}", gpus=shape if shape < 10 else 0, milli=shape if shape >= 10 else None,
                             cpu="4")))
    probe = facts(pod("probe", milli=300, cpu="4"))  # a shape placed before: its costs are cached
    fresh = framework.Framework(kept.cluster, profile.Scheduling(), workload=workload_of(*shapes))
    assert kept.decide(probe, explain=True).scores == fresh.decide(probe, explain=True).scores


def test_random_chooses_every_feasible_node_and_never_an_infeasible_one():
    node_objects = [node("a", gpus=1), node("b", gpus=2), node("c", gpus=2), node("full", gpus=1)]
    bound = [pod("x", gpus=1, node_name="full")]
    chosen = Counter(build(node_objects, bound, scheduling=only("random"), seed=seed).decide(
        facts(pod("p", gpus=1))).node for seed in range(60))
    assert set(chosen) == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("free", "cpu_free", "shapes", "expected"),
    [
        # one whole-GPU shape: a half-used GPU's 500 cannot serve it; idle GPUs can
        ([500, 1000], 64_000, [(1000, 1, 0)], 500),
        # a 300 share uses both GPUs' free parts: nothing is a fragment
        ([500, 1000], 64_000, [(1000, 0, 300)], 0),
        # no cpu left for the shape: every idle thousandth is a fragment
        ([500, 1000], 500, [(1000, 1, 0)], 1500),
        # shapes weighted by popularity: (500 + 0) / 2
        ([500, 1000], 64_000, [(1000, 1, 0), (1000, 0, 300)], 250),
        # a shape asking for more whole GPUs than are idle cannot use any of them
        ([1000, 1000, 0, 0], 64_000, [(1000, 4, 0)], 2000),
    ],
)
def test_fgd_fragmentation_of_a_node(free, cpu_free, shapes, expected):
    pods_ = [pod(f"s{i}", gpus=gpus, milli=milli or None, cpu=f"{cpu}m") for i, (cpu, gpus, milli) in enumerate(shapes)]
    workload = workload_of(*pods_)
    state = workloads.NodeState(np.array([free]), np.array([cpu_free]), np.array([10**15]))
    found = workloads.fragmentation(state, workload.shapes(), np.ones((1, len(shapes)), dtype=bool))
    assert found[0] == pytest.approx(expected)


def test_fgd_puts_a_share_where_it_removes_fragmentation():
    """Whole-GPU pods are the workload: a share fills the half-used GPU instead of breaking an idle one."""
    fgd = build([node("a", gpus=2), node("b", gpus=2)], [pod("x", milli=500, node_name="b")],
                scheduling=only("fgd"), workload=workload_of(pod("w", gpus=1)))
    decision = fgd.decide(facts(pod("p", milli=500)))
    assert (decision.node, decision.devices[0].milli) == ("b", 500)


def test_fgd_chooses_the_gpu_of_a_share_by_fragmentation_too():
    """Shares of 500 are the workload: a 300 share on the 1000 GPU leaves 600 and 700, both usable;
    on the tighter 600 GPU (the default choice) it would leave 300 that no 500 share can use."""
    node_objects = [node("a", gpus=2)]
    bound = [pod("x", milli=400, node_name="a")]
    fgd = build(node_objects, bound, scheduling=only("fgd"), workload=workload_of(pod("w", milli=500)))
    assert fgd.decide(facts(pod("p", milli=300))).devices == (pods.Device(1, 300),)
    tightest = build(node_objects, bound, scheduling=only("bestfit"))
    assert tightest.decide(facts(pod("p", milli=300))).devices == (pods.Device(0, 300),)


def test_fgd_keeps_room_for_the_shapes_of_the_workload():
    """Workload of 4-GPU pods: a 2-GPU pod leaves a's 4 idle GPUs whole and takes 2 of b's 8, where
    6 idle still fit one; bestfit fills a and leaves 2 GPUs no typical pod can use."""
    node_objects = [node("a"), node("b")]
    bound = [pod("x", gpus=4, node_name="a")]
    for seed in range(5):
        fgd = build(node_objects, bound, scheduling=only("fgd"), workload=workload_of(pod("w", gpus=4)), seed=seed)
        assert fgd.decide(facts(pod("p", gpus=2))).node == "b"
    assert build(node_objects, bound, scheduling=only("bestfit")).decide(facts(pod("p", gpus=2))).node == "a"


def test_the_typical_shapes_cover_95_percent_and_sum_to_one():
    common = [pod(f"c{i}", gpus=1) for i in range(96)]
    rare = [pod(f"r{i}", gpus=8) for i in range(4)]
    shapes = workloads.Workload.of([facts(p) for p in common + rare]).shapes()
    assert shapes.gpus.tolist() == [1]
    assert shapes.popularity.sum() == pytest.approx(1.0)


def test_a_learned_workload_counts_each_pod_once():
    workload = workloads.Workload()
    again = facts(pod("same", gpus=1))
    for _ in range(10):
        workload.observe(again)
    workload.observe(facts(pod("other", gpus=2)))
    assert sorted(workload.counts.values()) == [1, 1]


def test_a_learned_workload_follows_the_recent_mix():
    workload = workloads.Workload(memory=8)
    for i in range(8):
        workload.observe(facts(pod(f"old{i}", gpus=8)))
    for i in range(8):
        workload.observe(facts(pod(f"new{i}", gpus=1)))
    eight, one = (workloads.Shape(0, 0, gpus, 0) for gpus in (8, 1))
    assert workload.counts[one] > workload.counts[eight]


# --- ours -------------------------------------------------------------------------------------------


def test_ours_is_the_product_default():
    assert profile.Scheduling().weight_of("gpu-fragmentation") > 0
    assert openb.scheduling_for(openb.OURS) == profile.Scheduling()
    assert all(profile.Scheduling().weight_of(name) == 0 for name in openb.BASELINES)


def test_ours_puts_cpu_only_pods_where_cpu_is_spare_not_where_gpus_need_it():
    """GPU pods ask 12 cores per GPU: 64 cores taken from the 8-GPU, 96-core node would strand GPUs."""
    gpu_dense = node("a-gpu-dense", gpus=8, cpu="96")
    cpu_rich = node("b-cpu-rich", gpus=2, cpu="104")
    seen = workload_of(pod("w", gpus=1, cpu="12"), times=1)
    ours = build([gpu_dense, cpu_rich], scheduling=profile.Scheduling(), workload=seen)
    assert ours.decide(facts(pod("cpu-only", cpu="64"))).node == "b-cpu-rich"


def test_ours_keeps_a_scarce_model_for_the_pods_that_need_it():
    """A100 pods are a third of the demand but A100s a fifth of the GPUs: an any-GPU pod goes to the L4."""
    a100 = node("a100", gpus=2, model="NVIDIA-A100-SXM4-40GB")
    l4 = node("l4", gpus=8, model="NVIDIA-L4", memory_mib=23034)
    seen = workloads.Workload.of([facts(pod("any", gpus=1))] * 2 + [facts(pod("a", gpus=1, model="A100"))])
    ours = build([a100, l4], scheduling=profile.Scheduling(), workload=seen)
    assert ours.decide(facts(pod("p", gpus=1))).node == "l4"
    assert ours.decide(facts(pod("q", gpus=1, model="A100"))).node == "a100"
    assert build([a100, l4], scheduling=only("bestfit")).decide(facts(pod("p", gpus=1))).node == "a100"


def test_ours_fills_a_shared_gpu_before_breaking_an_idle_one():
    ours = build([node("a", gpus=2), node("b", gpus=2)], [pod("x", milli=500, node_name="b")],
                 scheduling=profile.Scheduling(), workload=workload_of(pod("w", gpus=1), pod("s", milli=500)))
    decision = ours.decide(facts(pod("p", milli=500)))
    assert (decision.node, decision.devices) == ("b", (decision.devices[0],))
    assert ours.cluster.gpu_free[ours.cluster.index["b"], decision.devices[0].index] == 500


def test_ours_stands_aside_when_the_admin_asks_for_spread():
    spread = build([node("a"), node("b")], [pod("x", gpus=4, node_name="a")],
                   scheduling=profile.Scheduling(node_policy="spread"), workload=workload_of(pod("w", gpus=2)))
    assert spread.decide(facts(pod("p", gpus=2))).node == "b"


def test_ours_learns_the_shapes_from_the_pods_it_decides_on():
    ours = build([node("a")], scheduling=profile.Scheduling())
    ours.place(facts(pod("p", gpus=1, cpu="4")))
    ours.decide(facts(pod("q", milli=250, cpu="1")))
    assert sorted(s.gpus * 1000 + s.gpu_milli for s in ours.workload.counts) == [250, 1000]


# --- group-room: room kept for the groups that placed pods constrain ------------------------------------------

PORT = {"containerPort": 8080, "hostPort": 8080}
HATES_ITS_OWN = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": "kubernetes.io/hostname"}]}}
NEAR_DB = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}


def with_port(obj):
    obj["spec"]["containers"][0]["ports"] = [dict(PORT)]
    return obj


NODE_EXCLUSIVE = [
    ("a host port", with_port(pod("web-0", gpus=1, node_name="a")), with_port(pod("web-1", gpus=1))),
    ("required anti-affinity", pod("solo-0", gpus=1, node_name="a", labels={"app": "solo"}, affinity=HATES_ITS_OWN),
     pod("solo-1", gpus=1, labels={"app": "solo"}, affinity=HATES_ITS_OWN)),
]


@pytest.mark.parametrize(("held", "member"), [case[1:] for case in NODE_EXCLUSIVE], ids=[c[0] for c in NODE_EXCLUSIVE])
def test_a_pod_outside_a_node_exclusive_group_leaves_its_places_open(held, member):
    """b's last GPU is one of the two places the group's next pod can take: a pod of no group packs onto b without
    group-room, and with it goes to a (no place of the group) or c (a place left either way); the group's next pod
    then still has two places."""
    node_objects = [node("a", gpus=4), node("b", gpus=2), node("c", gpus=4)]
    bound = [held, pod("x", gpus=1, node_name="b"), pod("y", gpus=1, node_name="c")]
    plain = facts(pod("plain", gpus=1))
    without = build(node_objects, bound, scheduling=profile.Scheduling(weights=(("group-room", 0),)))
    assert without.decide(plain).node == "b"
    scheduler = build(node_objects, bound, scheduling=profile.Scheduling())
    assert scheduler.place(plain).node in {"a", "c"}
    assert scheduler.decide(facts(member)).node in {"b", "c"}


def test_a_pod_outside_an_affinity_group_leaves_room_in_its_zone():
    """near-db's pods must go to the zone holding db (z1, one GPU left on a node); a pod of no group goes to z2, where
    packing alone (z1's node is the fuller) would have taken that GPU."""
    node_objects = [node("a", gpus=4, zone="z1"), node("b", gpus=4, zone="z2")]
    bound = [pod("db", gpus=2, node_name="a", labels={"app": "db"}),
             pod("near", gpus=1, node_name="a", labels={"app": "near"}, affinity=NEAR_DB)]
    plain = facts(pod("plain", gpus=1))
    balanced_only = profile.Scheduling(weights=(("group-room", 0), ("zone-balance", 0)))
    assert build(node_objects, bound, scheduling=balanced_only).decide(plain).node == "a"
    only_room = profile.Scheduling(weights=(("zone-balance", 0),))
    assert build(node_objects, bound, scheduling=only_room).decide(plain).node == "b"
    member = facts(pod("near-1", gpus=1, labels={"app": "near"}, affinity=NEAR_DB))
    assert build(node_objects, bound, scheduling=profile.Scheduling()).decide(member).node == "a"


def test_group_room_stands_aside_where_room_is_plenty_and_for_the_groups_own_pods():
    """More than ROOM_PLENTY places: every candidate scores the same, as does every candidate of a member of the
    group; and with no constrained pod placed, nothing is looked at."""
    from scheduler_core import placement, plugins

    many = [node(f"n{i:03d}", gpus=2) for i in range(placement.ROOM_PLENTY + 5)]
    bound = [with_port(pod("web-0", gpus=1, node_name="n000"))]
    for node_objects, incoming in ((many, pod("plain", gpus=2)), (many[:3], with_port(pod("web-1", gpus=2)))):
        scheduler = build(node_objects, bound, scheduling=profile.Scheduling())
        incoming_facts = facts(incoming)
        cycle = plugins.Cycle(scheduler.cluster, incoming_facts, {})
        rows = np.arange(scheduler.cluster.size)
        assert (placement.group_room(cycle, rows) == 100.0).all()
    plain = build(many[:3], [], scheduling=profile.Scheduling())
    cycle = plugins.Cycle(plain.cluster, facts(pod("plain", gpus=1)), {})
    assert (placement.group_room(cycle, np.arange(3)) == 0.0).all()


def test_a_group_is_counted_within_its_reach():
    """The port group's pods are held to pool b by their nodeSelector: pool a's nodes are no places of theirs. A pod of
    pool a packs there as if the group were not; one of pool b leaves the group's last place but one open."""
    def pooled(name, pool, gpus):
        return node(name, gpus=gpus, labels={"pool": pool})

    node_objects = [pooled("a1", "a", 2), pooled("a2", "a", 4), pooled("b1", "b", 4), pooled("b2", "b", 2),
                    pooled("b3", "b", 4)]
    bound = [with_port(pod("web-0", gpus=1, node_name="b1", node_selector={"pool": "b"})),
             pod("x", gpus=1, node_name="a1"), pod("y", gpus=1, node_name="b2"), pod("z", gpus=1, node_name="b3")]
    default, packing = profile.Scheduling(), profile.Scheduling(weights=(("group-room", 0),))
    in_a = facts(pod("plain-a", gpus=1, node_selector={"pool": "a"}))
    assert build(node_objects, bound, scheduling=packing).decide(in_a).node == "a1"
    assert build(node_objects, bound, scheduling=default).decide(in_a).node == "a1"
    in_b = facts(pod("plain-b", gpus=1, node_selector={"pool": "b"}))
    assert build(node_objects, bound, scheduling=packing).decide(in_b).node == "b2"
    assert build(node_objects, bound, scheduling=default).decide(in_b).node in {"b1", "b3"}


def test_the_cluster_counts_constrained_groups_as_pods_come_and_go():
    scheduler = build([node("a"), node("b")], [], scheduling=profile.Scheduling())
    model = scheduler.cluster
    first, second = with_port(pod("web-0", gpus=1)), with_port(pod("web-1", gpus=1))
    solo = pod("solo-0", gpus=1, labels={"app": "solo"}, affinity=HATES_ITS_OWN)
    no_gpu = with_port(pod("proxy-0", cpu="1"))  # needs no GPU room: no group of group-room's
    for obj in (first, second, solo, no_gpu):
        scheduler.place(facts(obj))
    rules = {group[0][0]: count for group, count in model.constrained.items()}
    assert rules == {"port": 2, "anti": 1}
    for obj in (first, second, solo, no_gpu):
        model.unassign(facts(obj).identity)
    assert not model.constrained


def reference_room(scheduler, incoming, rows):
    """group-room's score, group by group, straight from its definition (node-wide rules, one reach)."""
    from scheduler_core import cluster as cluster_module

    model = scheduler.cluster
    size = model.size
    free = model.gpu_count[:size] * 1000 - model.gpu_used[:size]
    open_rows = model.present[:size] & (free >= 1000)
    demand = incoming.gpus * 1000
    own = {rule for rule, _ in cluster_module.constrained_groups(incoming)}
    taken = np.zeros(rows.size)
    for rule, _ in model.constrained:
        if rule in own:
            continue
        holders = (model.port_holders.get(rule[1:], {}) if rule[0] == "port"
                   else model.pod_index.anti_terms.rows.get((rule[1], 1), {}))
        left = sum(1 for row in range(size) if open_rows[row] and row not in holders)
        for position, row in enumerate(rows):
            if open_rows[row] and free[row] - demand < 1000 and row not in holders:
                taken[position] += 1 / max(left, 1)
    return 100.0 * np.clip(1.0 - taken, 0.0, 1.0)


@pytest.mark.parametrize("seed", range(6))
def test_group_room_counts_every_group_as_its_definition_does(seed):
    """Random small clusters with host-port and anti-affinity groups, counted all at once: the same as one by one."""
    from scheduler_core import placement, plugins

    rng = np.random.default_rng(seed)
    node_objects = [node(f"n{i}", gpus=int(rng.choice([2, 4, 8]))) for i in range(8)]
    bound, used = [], Counter()
    for index in range(12):
        where = f"n{rng.integers(8)}"
        capacity = int(node_objects[int(where[1:])]["status"]["allocatable"]["nvidia.com/gpu"])
        if used[where] >= capacity:
            continue
        used[where] += 1
        kind = rng.choice(["port", "anti", "plain"])
        app = f"g{rng.integers(3)}"
        if kind == "port":
            obj = pod(f"p{index}", gpus=1, node_name=where)
            obj["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8000 + int(app[1:])}]
        elif kind == "anti":
            hates = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}]}}
            obj = pod(f"p{index}", gpus=1, node_name=where, labels={"app": app}, affinity=hates)
        else:
            obj = pod(f"p{index}", gpus=1, node_name=where)
        bound.append(obj)
    scheduler = build(node_objects, bound, scheduling=profile.Scheduling())
    incoming = facts(pod("plain", gpus=int(rng.choice([1, 2]))))
    rows = np.flatnonzero(scheduler.fitting(incoming))
    cycle = plugins.Cycle(scheduler.cluster, incoming, {})
    assert np.allclose(placement.group_room(cycle, rows), reference_room(scheduler, incoming, rows))


def test_anti_affinity_per_zone_holds_the_whole_zone():
    """A group hating its own per zone holds zone z1 (its pod is there): b's last GPU in z2 is one of its places,
    a's last GPU in z1 is none, so a pod of no group costs the group something on b and nothing on a."""
    from scheduler_core import placement, plugins

    per_zone = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}
    node_objects = [node("a", gpus=2, zone="z1"), node("b", gpus=2, zone="z2"), node("c", gpus=8, zone="z3")]
    bound = [pod("solo-0", gpus=1, node_name="a", labels={"app": "solo"}, affinity=per_zone),
             pod("x", gpus=1, node_name="b")]
    scheduler = build(node_objects, bound, scheduling=profile.Scheduling())
    cycle = plugins.Cycle(scheduler.cluster, facts(pod("plain", gpus=1)), {})
    rows = np.array([scheduler.cluster.index[name] for name in ("a", "b", "c")])
    on_a, on_b, on_c = placement.group_room(cycle, rows)
    assert on_a == on_c == 100.0 and on_b == 50.0  # b is one of the group's two places (b, c)
