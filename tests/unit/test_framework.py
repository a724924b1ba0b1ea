"""Filter, score and device choice: each plugin through the framework, with kube-scheduler semantics."""

import numpy as np
import pytest

from scheduler_core import names, pods, profile
from tests.unit.builders import facts, node, pod, scheduler

INFRA = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]


def reason(*node_objects, pod_obj):
    decision = scheduler(*node_objects).decide(facts(pod_obj))
    assert decision.node is None, decision
    return decision.reason


@pytest.mark.parametrize(
    ("node_objects", "pod_obj", "message"),
    [
        ([node("a", gpus=1), node("b", gpus=2)], pod("p", gpus=4),
         "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        ([node("a", taints=INFRA)], pod("p", gpus=1),
         "0/1 nodes are available: 1 node(s) had untolerated taint(s)."),
        ([node("a", unschedulable=True)], pod("p", gpus=1), "0/1 nodes are available: 1 node(s) were unschedulable."),
        ([node("a", ready=False)], pod("p", gpus=1), "0/1 nodes are available: 1 node(s) were not ready."),
        ([node("a")], pod("p", gpus=1, node_selector={"pool": "gpu"}),
         "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."),
        ([node("a")], pod("p", gpus=1, model="H100"), "0/1 nodes are available: 1 GPU model mismatch (want H100)."),
        ([node("a")], pod("p", gpus=1, memory_mib=81920),
         "0/1 nodes are available: 1 GPU memory too small (want >= 81920 MiB per GPU)."),
        ([node("a", model="gpu", memory_mib=None)], pod("p", gpus=1, memory_mib=1024),
         "0/1 nodes are available: 1 GPU memory unknown (want >= 1024 MiB per GPU)."),
        ([node("a", gpus=0)], pod("p", gpus=1), "0/1 nodes are available: 1 node(s) had no GPUs."),
        ([node("a", gpus=0)], pod("p", milli=300), "0/1 nodes are available: 1 node(s) had no GPUs."),
        ([node("a")], pod("p", gpus=1, spot="require"),
         "0/1 nodes are available: 1 node(s) were not spot capacity (pod requires spot)."),
        ([node("a", labels={"karpenter.sh/capacity-type": "spot"})], pod("p", gpus=1, spot="forbid"),
         "0/1 nodes are available: 1 node(s) were spot capacity (pod forbids spot)."),
        ([node("a", cpu="2", memory="1Gi")], pod("p", gpus=1, cpu="4", mem="2Gi"),
         "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."),
        ([node("a", max_pods=0)], pod("p", gpus=1), "0/1 nodes are available: 1 Too many pods."),
        ([node("a")], pod("p", gpus=1, extra={"example.com/fpga": "1"}),
         "0/1 nodes are available: 1 Insufficient example.com/fpga."),
        ([], pod("p", gpus=1), "0/0 nodes are available: no nodes in the cluster."),
        (
            [node("a", gpus=1), node("b", gpus=1), node("c", gpus=1), node("d", model="NVIDIA-L4"),
             node("e", model="NVIDIA-T4"), node("f", taints=INFRA), node("g", taints=INFRA)],
            pod("p", gpus=2, model="A100|H100"),
            "0/7 nodes are available: 3 Insufficient nvidia.com/gpu, 2 GPU model mismatch (want A100|H100), "
            "2 node(s) had untolerated taint(s).",
        ),
    ],
    ids=["gpus", "taint", "cordoned", "not-ready", "selector", "model", "memory", "memory-unknown", "no-gpus",
         "share-no-gpus", "spot-require", "spot-forbid", "cpu-memory", "pods", "unknown-resource", "no-nodes",
         "mixed"],
)
def test_rejections_read_like_kube_scheduler(node_objects, pod_obj, message):
    assert reason(*node_objects, pod_obj=pod_obj) == message


def test_a_problem_with_the_pod_is_the_reason():
    assert reason(node("a"), pod_obj=pod("p", milli=2000)).startswith("annotation gpu-scheduler.io/gpu-milli")


def test_tolerated_taints_and_cordons_let_pods_in():
    tolerate_all = [{"operator": "Exists"}]
    decision = scheduler(node("a", taints=INFRA, unschedulable=True)).decide(
        facts(pod("p", gpus=1, tolerations=tolerate_all)))
    assert decision.node == "a"


def test_required_and_preferred_node_affinity():
    affinity = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}}],
    }}
    s = scheduler(node("a"), node("b", zone="zone-b"), node("c", zone="zone-b", labels={"tier": "gold"}))
    assert s.decide(facts(pod("p", gpus=1, affinity=affinity))).node == "c"


BROKEN_PREFERENCE = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
    {"weight": 10, "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}},
    {"weight": 5, "preference": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["no good"]}]}}]}}


def test_a_preferred_term_that_does_not_parse_fails_the_pod_when_nodes_must_be_scored():
    """The API takes an invalid label value in a preferred term; kube-scheduler's PreScore then fails the cycle,
    which it runs only when more than one node fits (and the node-affinity score is on)."""
    broken = facts(pod("p", gpus=1, affinity=BROKEN_PREFERENCE))
    assert broken.preferred_problem == (
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[1].preference.matchExpressions[0]"
        f".values[0]: {names.VALUE_RULE}, got \"no good\"")
    decision = scheduler(node("a"), node("b")).decide(broken)
    assert (decision.node, decision.reason) == (None, f"{broken.preferred_problem} (needed to score the 2 nodes that fit)")
    assert scheduler(node("a"), node("b", gpus=0)).decide(broken).node == "a"
    unscored = profile.Scheduling(weights=(("node-affinity", 0),))
    assert scheduler(node("a"), node("b"), scheduling=unscored).decide(broken).node is not None


GPU_PLACEMENT_ONLY = profile.Scheduling(weights=(("gpu-fragmentation", 0),))  # the default before issue 7


def test_whole_gpus_binpack_onto_the_fullest_node_and_spread_onto_the_emptiest():
    s = scheduler(node("a"), node("b"), scheduling=GPU_PLACEMENT_ONLY)
    s.place(facts(pod("first", gpus=4)))
    assert s.decide(facts(pod("p", gpus=2))).node == "a"
    spread = profile.Scheduling(node_policy="spread", weights=(("gpu-fragmentation", 0),))
    s.configure(spread)
    assert s.decide(facts(pod("p", gpus=2))).node == "b"


def test_small_pods_do_not_fragment_big_idle_nodes():
    """Binpack puts a 1-GPU pod on the 2-GPU node, keeping the 8-GPU node whole for an 8-GPU pod."""
    s = scheduler(node("big", gpus=8), node("small", gpus=2))
    assert s.place(facts(pod("one", gpus=1))).node == "small"
    assert s.place(facts(pod("eight", gpus=8))).node == "big"


def test_shares_pack_onto_a_partly_used_gpu():
    s = scheduler(node("a", gpus=2), node("b", gpus=2), scheduling=GPU_PLACEMENT_ONLY)
    first = s.place(facts(pod("n1", milli=300)))
    second = s.place(facts(pod("n2", milli=500)))
    assert (second.node, second.devices) == (first.node, (pods.Device(first.devices[0].index, 500),))
    third = s.place(facts(pod("n3", milli=500)))  # 200 left on that GPU: another one is used
    assert (third.node, third.devices[0].index) != (first.node, first.devices[0].index)
    assert third.node == first.node  # ... on the same node, keeping the other node idle


def test_gpu_spread_puts_shares_on_the_emptiest_gpu():
    s = scheduler(node("a", gpus=2), scheduling=profile.Scheduling(gpu_policy="spread"))
    a = s.place(facts(pod("n1", milli=300)))
    b = s.place(facts(pod("n2", milli=300)))
    assert a.devices[0].index != b.devices[0].index


def test_spot_preferences():
    spot = node("spot", labels={"karpenter.sh/capacity-type": "spot"})
    on_demand = node("on-demand", labels={"karpenter.sh/capacity-type": "on-demand"})
    s = scheduler(spot, on_demand)
    assert s.decide(facts(pod("p", gpus=1, spot="prefer"))).node == "spot"
    assert s.decide(facts(pod("p", gpus=1, spot="avoid"))).node == "on-demand"
    assert s.decide(facts(pod("p", gpus=1, spot="require"))).node == "spot"
    assert s.decide(facts(pod("p", gpus=1, spot="forbid"))).node == "on-demand"


def test_utilization_prefers_idle_gpus():
    busy = node("a", annotations={"gpu-scheduler.io/gpu-utilization": "0.9"})
    idle = node("b", annotations={"gpu-scheduler.io/gpu-utilization": "0.1"})
    assert scheduler(busy, idle).decide(facts(pod("p", gpus=1))).node == "b"


def test_locality_prefers_the_node_then_the_zone_of_the_same_app():
    s = scheduler(node("a1", gpus=2, zone="a"), node("b1", gpus=4, zone="b"), node("b2", gpus=8, zone="b"),
                  scheduling=profile.Scheduling(node_policy="spread", weights=(("gpu-placement", 0),)))
    s.cluster.restore(facts(pod("web-0", gpus=1, node_name="b2", labels={"app": "web"})))
    assert s.decide(facts(pod("web-1", gpus=1, labels={"app": "web"}))).node == "b2"
    s.cluster.restore(facts(pod("db-0", gpus=1, node_name="b1", labels={"app": "db"})))
    decision = s.decide(facts(pod("db-1", gpus=4, labels={"app": "db"})))
    assert decision.node == "b2"  # b1 is full: the same zone wins over a1


def test_prefer_no_schedule_taints_lower_the_score():
    soft = node("a", taints=[{"key": "spare", "value": "", "effect": "PreferNoSchedule"}])
    assert scheduler(soft, node("b")).decide(facts(pod("p", gpus=1))).node == "b"


def test_ties_go_to_the_first_node_by_name_whatever_the_input_order():
    assert scheduler(node("c"), node("a"), node("b")).decide(facts(pod("p", gpus=1))).node == "a"


def test_explain_gives_weighted_scores_per_plugin():
    decision = scheduler(node("a"), node("b")).decide(facts(pod("p", gpus=1)), explain=True)
    assert set(decision.scores) == {"a", "b"}
    enabled = {name for name, weight in profile.SCORE_PLUGINS.items() if weight > 0}
    assert set(decision.scores["a"]) == enabled | {"total"}
    assert decision.scores["a"]["image-locality"] == 0.0  # nothing to say (Cycle.no_score): shown as 0, not left out


def test_the_no_score_array_is_one_per_decision_and_cannot_be_written():
    """The framework skips a plugin's part when it is this very array; one plugin writing into it would change
    what every other plugin returning it says."""
    from scheduler_core import plugins

    core = scheduler(node("a"), node("b"))
    cycle = plugins.Cycle(core.cluster, facts(pod("p", gpus=1)), {})
    rows = np.arange(2)
    nothing = cycle.no_score(rows)
    assert cycle.no_score(rows) is nothing and not nothing.any()
    with pytest.raises(ValueError):
        nothing += 1.0


def test_weights_of_zero_switch_a_plugin_off():
    busy = node("a", annotations={"gpu-scheduler.io/gpu-utilization": "0.9"})
    idle = node("b", annotations={"gpu-scheduler.io/gpu-utilization": "0.1"})
    s = scheduler(busy, idle, scheduling=profile.Scheduling(weights=(("gpu-utilization", 0),)))
    assert s.decide(facts(pod("p", gpus=1))).node == "a"


def test_a_pod_goes_where_its_images_are_already():
    """ImageLocality, at its default weight: b holds the pod's 500 MiB image, a does not."""
    holder = node("b")
    holder["status"]["images"] = [{"names": ["x:latest"], "sizeBytes": 500 * 2**20}]
    decision = scheduler(node("a"), holder).decide(facts(pod("p", gpus=1)), explain=True)
    assert decision.node == "b" and decision.scores["b"]["image-locality"] > decision.scores["a"]["image-locality"]


def test_scores_kept_per_row_between_decisions_equal_scores_computed_afresh():
    """balanced-allocation and node-resources keep each node's score until its usage changes (Cycle.by_row);
    after every placement, a node removed and one added, they must read as a fresh framework computes them."""
    from scheduler_core import framework, nodes

    kept = scheduler(*(node(name, cpu=cpu, memory=memory) for name, cpu, memory in
                       [("a", "16", "64Gi"), ("b", "32", "64Gi"), ("c", "64", "128Gi"), ("d", "16", "256Gi")]))

    def plugin_scores(core):
        decision = core.decide(facts(pod("probe", gpus=1, cpu="3", mem="10Gi")), explain=True)
        return {name: (parts["balanced-allocation"], parts["node-resources"])
                for name, parts in decision.scores.items()}

    for step in range(8):
        assert kept.place(facts(pod(f"p{step}", gpus=1, cpu="3", mem="10Gi"))).node is not None
        if step == 3:
            kept.cluster.remove_node("b")
            kept.cluster.set_node(nodes.parse(node("e", cpu="8", memory="32Gi")))
        assert plugin_scores(kept) == plugin_scores(framework.Framework(kept.cluster)), step
