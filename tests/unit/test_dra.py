"""DRA claims through the core: a pod's claims resolved and checked (PreFilter), allocated per node (Filter) with our
device order and the pod's GPU annotations, the decision's allocations, and what the model assumes until the
claims' status shows them. Upstream's allocator table is in test_upstream_dra_allocator.py."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import nodes, preemption, profile
from scheduler_core.dra import cel, state
from tests.unit.builders import facts, node, pod, scheduler

DRIVER = "gpu.nvidia.com"
CLASS_SELECTOR = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"


def gpu_slice(node_name: str, *, count: int = 8, product: str = "NVIDIA A100-SXM4-40GB", memory: str = "40Gi",
              generation: int = 1, slice_count: int = 1, tainted: tuple[int, ...] = ()) -> dict[str, Any]:
    devices = []
    for index in range(count):
        device: dict[str, Any] = {
            "name": f"gpu-{index}", "capacity": {"memory": {"value": memory}},
            "attributes": {"type": {"string": "gpu"}, "productName": {"string": product},
                           "uuid": {"string": f"GPU-{node_name}-{index}"},
                           "cudaComputeCapability": {"version": "8.0.0"},
                           "resource.kubernetes.io/pcieRoot": {"string": f"pci{index // 4}"}}}
        if index in tainted:
            device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
        devices.append(device)
    return {"metadata": {"name": f"{node_name}-gpus", "uid": f"uid-{node_name}"},
            "spec": {"driver": DRIVER, "nodeName": node_name, "devices": devices,
                     "pool": {"name": node_name, "generation": generation, "resourceSliceCount": slice_count}}}


def claim(name: str, count: int = 1, *, selector: str | None = None, owner: str | None = None,
          match_root: bool = False, allocation: dict[str, Any] | None = None,
          reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    meta: dict[str, Any] = {"namespace": "ns", "name": name, "uid": f"claim-{name}"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if match_root:
        devices["constraints"] = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    status: dict[str, Any] = {}
    if allocation:
        status["allocation"] = allocation
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": u, "uid": u} for u in reserved]
    return {"metadata": meta, "spec": {"devices": devices}, "status": status}


def claiming(name: str, claim_name: str, *, template: bool = False, **kwargs: Any) -> dict[str, Any]:
    obj = pod(name, **kwargs)
    obj["metadata"]["uid"] = f"uid-{name}"
    if template:
        obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "t"}]
        obj["status"] = {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": claim_name}]}
    else:
        obj["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim_name}]
    return obj


def cluster(*names: str, gpu_policy: str = "binpack", **slice_args: Any) -> Any:
    framework = scheduler(*(node(n, gpus=0) for n in names),
                          scheduling=profile.Scheduling(gpu_policy=gpu_policy))  # type: ignore[arg-type]
    resources = framework.cluster.dra
    for kind in state.KINDS:
        resources.clear(kind)
    resources.set("DeviceClass", {"metadata": {"name": DRIVER},
                                  "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]}})
    for name in names:
        resources.set("ResourceSlice", gpu_slice(name, **slice_args))
    return framework


def devices_of(decision: Any) -> list[str]:
    return [r["device"] for _, allocation in decision.claim_allocations for r in allocation["devices"]["results"]]


def test_a_pod_waits_until_the_dra_objects_are_listed():
    framework = scheduler(node("a", gpus=0))
    framework.cluster.dra.set("ResourceClaim", claim("c"))
    assert "DRA objects" in (framework.decide(facts(claiming("p", "c"))).reason or "")


def test_a_template_claim_is_allocated_on_a_node_with_devices_and_the_decision_carries_it():
    framework = cluster("a")
    framework.cluster.dra.set("ResourceClaim", claim("c", 2, owner="uid-p"))
    decision = framework.decide(facts(claiming("p", "c", template=True)))
    assert decision.node == "a" and devices_of(decision) == ["gpu-0", "gpu-1"]
    (key, allocation), = decision.claim_allocations
    assert key == ("ns", "c")
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["a"]


def test_the_claim_of_a_template_must_be_the_pods_own():
    framework = cluster("a")
    framework.cluster.dra.set("ResourceClaim", claim("c", owner="someone-else"))
    assert framework.decide(facts(claiming("p", "c", template=True))).reason == (
        "0/1 nodes are available: ResourceClaim ns/c was not created for Pod ns/p (Pod is not owner).")


def test_a_template_claim_not_made_yet_makes_the_pod_wait_with_upstreams_words():
    framework = cluster("a")
    obj = claiming("p", "c", template=True)
    obj["status"] = {}
    assert framework.decide(facts(obj)).reason == (
        '0/1 nodes are available: pod "ns/p": ResourceClaim not created yet.')


def test_a_claim_too_large_for_any_node_is_reported_per_node():
    framework = cluster("a", "b", count=4)
    framework.cluster.dra.set("ResourceClaim", claim("c", 5))
    assert framework.decide(facts(claiming("p", "c"))).reason == (
        "0/2 nodes are available: 2 cannot allocate all claims.")


def test_an_allocated_claim_brings_the_pod_to_its_node():
    framework = cluster("a", "b")
    allocation = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "b", "device": "gpu-0"}]},
                  "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                      {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}
    framework.cluster.dra.set("ResourceClaim", claim("c", allocation=allocation, reserved=("other",)))
    decision = framework.decide(facts(claiming("p", "c")))
    assert decision.node == "b" and decision.claim_allocations == ()


def test_an_allocation_in_flight_for_another_pod_makes_the_pod_wait():
    framework = cluster("a")
    framework.cluster.dra.set("ResourceClaim", claim("c"))
    first = framework.place(facts(claiming("p", "c")))
    assert first.node == "a"
    assert framework.decide(facts(claiming("q", "c"))).reason == (
        "0/1 nodes are available: resource claim ns/c is in the process of being allocated.")


def test_devices_assumed_for_one_claim_are_not_given_to_the_next():
    framework = cluster("a", count=2)
    for name in ("c1", "c2", "c3"):
        framework.cluster.dra.set("ResourceClaim", claim(name))
    assert devices_of(framework.place(facts(claiming("p1", "c1")))) == ["gpu-0"]
    assert devices_of(framework.place(facts(claiming("p2", "c2")))) == ["gpu-1"]
    assert framework.decide(facts(claiming("p3", "c3"))).node is None


def test_a_tainted_gpu_is_not_allocated():
    framework = cluster("a", count=4, tainted=(0,))
    framework.cluster.dra.set("ResourceClaim", claim("c", 3))
    assert devices_of(framework.decide(facts(claiming("p", "c")))) == ["gpu-1", "gpu-2", "gpu-3"]


def test_a_selector_that_fails_makes_the_pod_wait_naming_the_expression_and_the_error():
    framework = cluster("a", "b")
    framework.cluster.dra.set("ResourceClaim", claim("bad", selector=f"device.attributes['{DRIVER}'].nope == 1"))
    framework.cluster.dra.set("ResourceClaim", claim("good"))
    reason = framework.decide(facts(claiming("p", "bad"))).reason or ""
    assert "claim ns/bad: selector #0: CEL runtime error" in reason and "nope" in reason, reason
    assert framework.decide(facts(claiming("q", "good"))).node == "a"


def test_the_pods_gpu_annotations_limit_the_devices_and_say_so():
    framework = cluster("a")
    framework.cluster.dra.set("ResourceSlice", gpu_slice("h", product="NVIDIA H100 80GB HBM3", memory="80Gi"))
    framework.cluster.set_node(nodes.parse(node("h", gpus=0)))
    framework.cluster.dra.set("ResourceClaim", claim("c"))
    decision = framework.decide(facts(claiming("p", "c", model="H100")))
    assert decision.node == "h"
    framework.cluster.dra.set("ResourceClaim", claim("d"))
    reason = framework.decide(facts(claiming("q", "d", memory_mib=100_000))).reason
    assert reason == ("0/2 nodes are available: 2 cannot allocate all claims (GPUs limited by the pod's annotations "
                      "to at least 100000 MiB).")


def test_binpack_takes_a_gpu_of_a_broken_pcie_root_so_a_whole_root_stays_free():
    """gpu-5 is in use: upstream's first fit would take gpu-0 and leave no root of four; ours takes gpu-4."""
    framework = cluster("a")
    resources = framework.cluster.dra
    held = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "a", "device": "gpu-5"}]}}
    resources.set("ResourceClaim", claim("held", allocation=held, reserved=("x",)))
    resources.set("ResourceClaim", claim("small"))
    assert devices_of(framework.place(facts(claiming("p", "small")))) == ["gpu-4"]
    resources.set("ResourceClaim", claim("four", 4, match_root=True))
    assert devices_of(framework.decide(facts(claiming("q", "four")))) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


H100_ONLY = f"device.attributes['{DRIVER}'].productName.startsWith('NVIDIA H100')"


def two_products() -> Any:
    """Node a: eight A100s; node h: eight H100s."""
    framework = cluster("a", "h")
    framework.cluster.dra.set("ResourceSlice", gpu_slice("h", product="NVIDIA H100 80GB HBM3", memory="80Gi"))
    return framework


def test_a_claim_that_can_use_any_gpu_leaves_the_product_other_claims_need():
    """Waiting claims ask for H100s only: a claim that takes any GPU goes to the A100s, even though binpack alone
    would prefer the fuller H100 node."""
    framework = two_products()
    resources = framework.cluster.dra
    held = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "h", "device": "gpu-0"}]}}
    resources.set("ResourceClaim", claim("held", selector=H100_ONLY, allocation=held, reserved=("x",)))
    for index in range(3):
        resources.set("ResourceClaim", claim(f"h100-{index}", 2, selector=H100_ONLY))
    resources.set("ResourceClaim", claim("any"))
    assert framework.place(facts(claiming("p", "any"))).node == "a"


def test_without_narrow_claims_binpack_decides():
    framework = two_products()
    resources = framework.cluster.dra
    held = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "h", "device": "gpu-0"}]}}
    resources.set("ResourceClaim", claim("held", allocation=held, reserved=("x",)))
    resources.set("ResourceClaim", claim("any"))
    assert framework.place(facts(claiming("p", "any"))).node == "h"


def test_demand_follows_claims_allocations_and_slices():
    """What each request asks and how many of the devices it can use are busy stay right through adds, deletes,
    allocations, a relist and a slice change."""
    framework = two_products()
    resources = framework.cluster.dra
    group = (DRIVER, (H100_ONLY,))
    for index in range(2):
        resources.set("ResourceClaim", claim(f"c{index}", 2, selector=H100_ONLY))
    assert resources.demand.asked[group] == 4
    h100 = [(DRIVER, "h", f"gpu-{i}") for i in range(8)]
    assert resources.pressure()(h100[0]) == 4 / 8 and resources.pressure()((DRIVER, "a", "gpu-0")) == 0
    framework.place(facts(claiming("p0", "c0")))  # assumed: two H100s busy
    assert resources.pressure()(h100[7]) == 4 / 6
    resources.set("ResourceClaim", claim("c1", 2, selector=H100_ONLY), deleted=True)
    assert resources.demand.asked[group] == 2 and resources.pressure()(h100[7]) == 2 / 6
    resources.set("ResourceSlice", gpu_slice("h", product="NVIDIA H100 80GB HBM3", memory="80Gi", count=4))
    assert resources.pressure()(h100[3]) == 2 / 2 and resources.pressure()(h100[7]) == 0
    resources.clear("ResourceClaim")
    assert not resources.demand.asked and resources.pressure()(h100[3]) == 0


def test_spread_takes_the_emptiest_root():
    framework = cluster("a", gpu_policy="spread")
    resources = framework.cluster.dra
    held = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "a", "device": "gpu-0"}]}}
    resources.set("ResourceClaim", claim("held", allocation=held, reserved=("x",)))
    resources.set("ResourceClaim", claim("small"))
    assert devices_of(framework.decide(facts(claiming("p", "small")))) == ["gpu-4"]


def test_an_incomplete_pool_gives_nothing():
    framework = cluster("a", slice_count=2)
    framework.cluster.dra.set("ResourceClaim", claim("c"))
    assert framework.decide(facts(claiming("p", "c"))).reason == (
        "0/1 nodes are available: 1 cannot allocate all claims.")


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_random_claims_never_share_a_device_and_every_device_meets_its_selector(seed):
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(1, 3))]
    framework = cluster(*names, count=rng.choice([2, 4, 8]), tainted=tuple(rng.sample(range(2), rng.randint(0, 1))))
    resources = framework.cluster.dra
    taken: set[tuple[str, str]] = set()
    for index in range(rng.randint(1, 12)):
        selector = rng.choice([None, f"device.attributes['{DRIVER}'].uuid.endsWith('-1')",
                               f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0"])
        resources.set("ResourceClaim", claim(f"c{index}", rng.randint(1, 4), selector=selector,
                                             match_root=rng.random() < 0.3))
        decision = framework.place(facts(claiming(f"p{index}", f"c{index}")))
        for _, allocation in decision.claim_allocations:
            for result in allocation["devices"]["results"]:
                device = (result["pool"], result["device"])
                assert device not in taken
                taken.add(device)
                found = next(d for s in resources.slices.values() for d in s.devices
                             if (d.pool, d.name) == device)
                assert not found.taints
                assert cel.compile_selector(CLASS_SELECTOR).matches(found)
                if selector:
                    assert cel.compile_selector(selector).matches(found)


def test_a_gang_is_whole_only_if_every_members_claims_fit_at_once():
    """Two 4-GPU nodes: two members asking four GPUs each are placed together, on both nodes (not twice on the
    first); a third member makes the gang wait, as its claim fits nowhere once the others hold their devices."""
    from scheduler_core import gangs, podgroups

    ref = podgroups.GroupRef(podgroups.COSCHEDULING, "ns", "job")
    framework = cluster("a", "b", count=4)
    members = []
    for index in range(3):
        framework.cluster.dra.set("ResourceClaim", claim(f"c{index}", 4))
        members.append(facts(claiming(f"m{index}", f"c{index}", labels={podgroups.COSCHEDULING_LABEL: "job"})))
    decision = gangs.place(framework, podgroups.PodGroup(ref, 2, True, 60, {}), members[:2])
    assert sorted(placement.node for _, placement in decision.placements) == ["a", "b"]
    assert framework.cluster.dra.assumed == {}  # the trial took its assumptions back
    whole = gangs.place(framework, podgroups.PodGroup(ref, 3, True, 60, {}), members)
    assert whole.reason is not None and "2/3 members fit" in whole.reason, whole.reason


def test_a_claim_whose_search_would_never_end_makes_only_its_pod_wait():
    """Four GPUs of any kind plus eight sharing a group value, where no group has eight: the search tries the
    eight for every choice of the four (hours over 64 devices); it stops after allocator.MAX_STEPS, as upstream's
    filter timeout stops it, and the pod waits saying so while another pod is placed."""
    framework = cluster("a")
    resources = framework.cluster.dra
    wide = gpu_slice("a", count=64)
    for index, device in enumerate(wide["spec"]["devices"]):
        device["attributes"]["group"] = {"int": index // 7}
    resources.set("ResourceSlice", wide)
    endless = claim("endless", 4)
    endless["spec"]["devices"]["requests"].append(
        {"name": "grouped", "exactly": {"deviceClassName": DRIVER, "count": 8}})
    endless["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{DRIVER}/group", "requests": ["grouped"]}]
    resources.set("ResourceClaim", endless)
    reason = framework.decide(facts(claiming("p", "endless"))).reason or ""
    assert "node a: timed out trying to allocate devices" in reason, reason
    resources.set("ResourceClaim", claim("plain", 2))
    assert framework.decide(facts(claiming("q", "plain"))).node == "a"


def test_simulate_allocates_claims_from_the_dra_objects_it_is_given():
    from scheduler_core import simulation
    from webhook import config

    objects = [{"kind": "DeviceClass", "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]}},
               {"kind": "ResourceSlice", **gpu_slice("a", count=2)},
               {"kind": "ResourceClaim", **claim("c", 2)}, {"kind": "ResourceClaim", **claim("d", 1)}]
    settings = config.Config()
    result = simulation.simulate([node("a", gpus=0)], [claiming("p", "c"), claiming("q", "d"), claiming("r", "gone")],
                                 scheduler_name="gpu-scheduler", gpu_resources=("nvidia.com/gpu",),
                                 scheduling=settings.scheduling, admit=lambda pod, _: (pod, None, None),
                                 storage_objects=objects)
    outcome = {p.pod: (p.node, p.reason) for p in result.placements}
    assert outcome["ns/p"] == ("a", None)
    assert outcome["ns/q"] == (None, "0/1 nodes are available: 1 cannot allocate all claims.")
    assert outcome["ns/r"] == (None, '0/1 nodes are available: resourceclaim.resource.k8s.io "gone" not found.')


def test_a_claim_whose_driver_reports_a_binding_failure_is_available_on_no_node():
    """Upstream's Filter: an allocated claim with a binding failure condition true (isClaimReadyForBinding's error)
    makes every node unavailable, until it is deallocated; a claim whose conditions are met brings the pod on."""
    framework = cluster("a")
    result = {"request": "gpus", "driver": DRIVER, "pool": "a", "device": "gpu-0",
              "bindingConditions": ["Attached"], "bindingFailureConditions": ["AttachFailed"]}
    allocation = {"devices": {"results": [result]}}

    def device_status(condition: str) -> dict[str, Any]:
        return {"driver": DRIVER, "pool": "a", "device": "gpu-0",
                "conditions": [{"type": condition, "status": "True", "reason": "Driver",
                                "lastTransitionTime": "2026-12-04T00:00:00Z"}]}
    failed = claim("c", allocation=allocation)
    failed["status"]["devices"] = [device_status("AttachFailed")]
    framework.cluster.dra.set("ResourceClaim", failed)
    assert framework.decide(facts(claiming("p", "c"))).reason == (
        "0/1 nodes are available: 1 resourceclaim not available on the node.")
    attached = claim("c", allocation=allocation)
    attached["status"]["devices"] = [device_status("Attached")]
    framework.cluster.dra.set("ResourceClaim", attached)
    assert framework.decide(facts(claiming("p", "c"))).node == "a"
    assert state.binding_conditions(attached) is True
    assert state.binding_conditions(claim("c", allocation=allocation)) is False


def test_a_claim_whose_binding_conditions_time_out_is_available_on_no_node():
    """Upstream's isClaimTimeout: conditions still unmet 600 s after allocationTimestamp make every node
    unavailable; before that, and for devices without binding conditions, the claim's node is available."""
    framework = cluster("a")
    waiting = {"request": "gpus", "driver": DRIVER, "pool": "a", "device": "gpu-0", "bindingConditions": ["Attached"]}
    allocation = {"devices": {"results": [waiting]}, "allocationTimestamp": "2026-01-01T00:00:00Z"}
    framework.cluster.dra.set("ResourceClaim", claim("c", allocation=allocation))
    allocated_at = 1767225600.0  # 2026-01-01T00:00:00Z
    resources, wanted = framework.cluster.dra, facts(claiming("p", "c")).resource_claims
    for elapsed, available in ((599.0, True), (601.0, False)):
        prepared = resources.pre_filter("ns", "p", "uid-p", wanted, now=allocated_at + elapsed)
        assert not isinstance(prepared, str) and prepared.binding_failed is not available
    assert framework.decide(facts(claiming("p", "c"))).reason == (  # the clock: long after
        "0/1 nodes are available: 1 resourceclaim not available on the node.")
    plain = {"devices": {"results": [{k: v for k, v in waiting.items() if k != "bindingConditions"}]},
             "allocationTimestamp": "2026-01-01T00:00:00Z"}
    assert not state.not_for_binding(claim("c", allocation=plain), allocated_at + 10_000)


def prioritized_claiming(name: str, claim_name: str, priority: int, **kwargs: Any) -> Any:
    obj = claiming(name, claim_name, **kwargs)
    obj["spec"]["priority"] = priority
    return facts(obj)


def test_preemption_never_counts_devices_freed_and_dry_runs_each_claim_on_its_own():
    """Upstream's DynamicResources has no PreFilterExtensions: evicting a pod frees none of its claims' devices in
    the dry run. A pod whose claim fits evicts the low-priority pod that holds the CPU; a pod that asks the same CPU
    but a claim no node can hold finds no victims (not the first pod's, kept for pods of the same requests)."""
    framework = cluster("a", count=8)
    low = pod("low", cpu="60", node_name="a")
    low["spec"]["priority"] = 1
    low["metadata"]["uid"] = "uid-low"
    assert framework.cluster.restore(facts(low)) is None
    resources = framework.cluster.dra
    held = {"devices": {"results": [{"request": "gpus", "driver": DRIVER, "pool": "a", "device": f"gpu-{i}"}
                                    for i in range(4)]}}
    resources.set("ResourceClaim", claim("held", 4, allocation=held, reserved=("uid-low",)))
    resources.set("ResourceClaim", claim("fits", 4))
    resources.set("ResourceClaim", claim("too-many", 5))
    evaluator = preemption.Evaluator(framework)
    fits = prioritized_claiming("urgent", "fits", 100, cpu="10")
    chosen = evaluator.preempt(fits)
    assert isinstance(chosen, preemption.Victims) and [p.key for p in chosen.pods] == ["ns/low"]
    assert not isinstance(evaluator.preempt(prioritized_claiming("greedy", "too-many", 100, cpu="10")),
                          preemption.Victims)


def test_thousands_of_distinct_claim_specs_weigh_only_the_largest_groups():
    """A tenant writing many distinct selectors does not make every decision match each against every device:
    only the groups asking the most weigh, and the groups matched stay bounded."""
    from scheduler_core.dra import demand

    framework = two_products()
    resources = framework.cluster.dra
    for index in range(300):
        resources.set("ResourceClaim", claim(f"odd-{index}", selector=f"device.attributes['{DRIVER}'].uuid != "
                                                                       f"'x{index}'"))
    for index in range(3):
        resources.set("ResourceClaim", claim(f"h100-{index}", 4, selector=H100_ONLY))
    pressure = resources.pressure()
    assert len(resources.demand._usable) <= 2 * demand.GROUPS_WEIGHED
    assert pressure((DRIVER, "h", "gpu-0")) > pressure((DRIVER, "a", "gpu-0"))  # the H100 group weighs
    resources.set("ResourceClaim", claim("any"))
    assert framework.place(facts(claiming("p", "any"))).node == "a"
