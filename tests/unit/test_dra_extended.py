"""Extended resources served by DRA through the core: a pod asking for `nvidia.com/gpu` goes to a node whose
allocatable has it (the device plugin) or to one that has none but DRA devices of a DeviceClass naming it; there the
decision carries the claim to make, its requests and mappings, and its allocation. Upstream's request tables are in
test_upstream_dra_extended.py; its plugin cases in test_upstream_dra_plugin.py."""

from __future__ import annotations

import json
from typing import Any

from scheduler_core import pods, preemption
from scheduler_core.dra import extended, state
from tests.unit.builders import facts, node, pod, scheduler
from tests.unit.test_dra import CLASS_SELECTOR, DRIVER, gpu_slice


def gpu_class(name: str = DRIVER, resource: str | None = "nvidia.com/gpu", created: str = "2026-01-01T00:00:00Z"
              ) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]}
    if resource:
        spec["extendedResourceName"] = resource
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


def mixed(*, device_plugin: tuple[str, ...] = ("dp",), dra: tuple[str, ...] = ("dra",), count: int = 8,
          resource: str | None = "nvidia.com/gpu") -> Any:
    """A cluster with device-plugin GPU nodes and DRA-only GPU nodes (no nvidia.com/gpu in their allocatable)."""
    framework = scheduler(*(node(n) for n in device_plugin), *(node(n, gpus=0) for n in dra))
    resources = framework.cluster.dra
    for kind in state.KINDS:
        resources.clear(kind)
    resources.set("DeviceClass", gpu_class(resource=resource))
    for name in dra:
        resources.set("ResourceSlice", gpu_slice(name, count=count))
    return framework


def gpu_pod(name: str, gpus: int, **kwargs: Any) -> pods.PodFacts:
    obj = pod(name, gpus=gpus, **kwargs)
    obj["metadata"]["uid"] = f"uid-{name}"
    return facts(obj)


def test_resolve_prefers_the_newest_class_then_the_lower_name_and_always_maps_the_implicit_name():
    classes = [extended.ClassName("old", "2026-01-01T00:00:00Z", "nvidia.com/gpu"),
               extended.ClassName("new", "2026-02-01T00:00:00Z", "nvidia.com/gpu"),
               extended.ClassName("b", "2026-03-01T00:00:00Z", "example.com/x"),
               extended.ClassName("a", "2026-03-01T00:00:00Z", "example.com/x")]
    assert extended.resolve(classes) == {
        "nvidia.com/gpu": "new", "example.com/x": "a",
        **{extended.IMPLICIT_PREFIX + c.name: c.name for c in classes}}


def test_a_gpu_pod_goes_to_a_dra_only_node_with_a_claim_to_make():
    framework = mixed(device_plugin=())
    decision = framework.decide(gpu_pod("p", 2))
    assert decision.node == "dra" and decision.devices == ()
    assert decision.extended_claim is not None
    node_claim, allocation = decision.extended_claim
    assert node_claim.requests == ({"name": "container-0-request-0",
                                    "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount",
                                                "count": 2}},)
    assert node_claim.mappings == ({"containerName": "main", "resourceName": "nvidia.com/gpu",
                                    "requestName": "container-0-request-0"},)
    assert [r["device"] for r in allocation["devices"]["results"]] == ["gpu-0", "gpu-1"]
    assert {r["request"] for r in allocation["devices"]["results"]} == {"container-0-request-0"}


def test_without_a_class_naming_the_resource_the_dra_node_is_refused_as_before():
    framework = mixed(resource=None)
    decision = framework.decide(gpu_pod("p", 2))
    assert decision.node == "dp" and decision.extended_claim is None
    framework = mixed(device_plugin=(), resource=None)
    assert "node(s) had no GPUs" in (framework.decide(gpu_pod("p", 2)).reason or "")


def test_a_node_with_the_resource_in_its_allocatable_is_served_by_the_device_plugin():
    framework = mixed(dra=())
    decision = framework.decide(gpu_pod("p", 2))
    assert decision.node == "dp" and len(decision.devices) == 2 and decision.extended_claim is None


def test_placing_accounts_the_allocation_so_devices_are_not_given_twice_and_the_node_fills():
    framework = mixed(device_plugin=(), count=4)
    first = framework.place(gpu_pod("a", 3))
    second = framework.decide(gpu_pod("b", 2))
    assert first.node == "dra" and second.node is None
    assert "cannot allocate all claims" in (second.reason or "")
    third = framework.place(gpu_pod("c", 1))
    assert third.extended_claim is not None
    assert [r["device"] for r in third.extended_claim[1]["devices"]["results"]] == ["gpu-3"]


def test_the_watched_claim_replaces_the_assumption_made_before_its_name_was_known():
    framework = mixed(device_plugin=(), count=2)
    resources = framework.cluster.dra
    decision = framework.place(gpu_pod("a", 2))
    assert decision.extended_claim is not None
    node_claim, allocation = decision.extended_claim
    made = extended.claim_for("ns", "a", "uid-a", list(node_claim.requests))
    made["metadata"].update(name="a-extended-resources-x1", uid="c1")
    resources.set("ResourceClaim", made)  # created, not yet allocated: still assumed under the pending key
    assert resources.extended_claims[("ns", "uid-a")] == ("ns", "a-extended-resources-x1")
    assert extended.pending_key("ns", "uid-a") in resources.assumed
    made["status"] = {"allocation": allocation}
    resources.set("ResourceClaim", made)
    assert not resources.assumed
    assert framework.decide(gpu_pod("b", 1)).node is None  # the watched allocation holds the devices
    resources.set("ResourceClaim", made, deleted=True)
    assert framework.decide(gpu_pod("b", 1)).node == "dra"


def test_a_claim_left_from_an_earlier_attempt_makes_the_pod_wait_until_it_is_deleted():
    framework = mixed()
    made = extended.claim_for("ns", "p", "uid-p", [{"name": "container-0-request-0", "exactly": {
        "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}])
    made["metadata"].update(name="p-extended-resources-x1", uid="c1")
    framework.cluster.dra.set("ResourceClaim", made)
    decision = framework.decide(gpu_pod("p", 1))
    assert decision.node is None
    assert "2 cannot schedule extended resource claim" in (decision.reason or "")


def test_a_mixed_cluster_binpacks_over_both_kinds():
    framework = mixed(device_plugin=("dp",), dra=("dra",))
    assert framework.place(gpu_pod("a", 6)).node == "dp"  # the first node by name wins the tie
    assert framework.place(gpu_pod("b", 2)).node == "dp"  # binpack: the fuller node
    assert framework.place(gpu_pod("c", 2)).node == "dra"
    assert framework.place(gpu_pod("d", 2)).node == "dra"


def test_the_pods_model_annotation_limits_the_dra_devices():
    framework = mixed(device_plugin=())
    decision = framework.decide(gpu_pod("p", 1, model="H100"))
    assert decision.node is None
    assert "GPUs limited by the pod's annotations to model H100" in (decision.reason or "")


def test_a_share_is_refused_on_a_dra_only_node_with_a_clear_reason():
    framework = mixed(device_plugin=())
    decision = framework.decide(facts(pod("p", milli=500)))
    assert decision.node is None
    assert "offer GPUs only through DRA" in (decision.reason or "")


def test_evicting_a_pod_whose_gpus_dra_serves_frees_no_device_in_the_dry_run():
    framework = mixed(device_plugin=(), count=2)
    framework.place(gpu_pod("low", 2))
    assert not preemption._node_local(gpu_pod("high", 2), framework.cluster)


def test_the_models_gpu_count_covers_dra_devices_by_product():
    from scheduler_core import nodes as node_facts
    from scheduler_core import watched

    model = watched.WatchedCluster()
    for obj in (node("dp"), node("dra", gpus=0)):
        model.cluster.set_node(node_facts.parse(obj))
    resources = model.cluster.dra
    for kind in state.KINDS:
        resources.clear(kind)
    resources.set("DeviceClass", gpu_class())
    resources.set("ResourceSlice", gpu_slice("dra", count=4))
    framework = mixed(device_plugin=(), count=4)
    decision = framework.decide(gpu_pod("p", 3))
    assert decision.extended_claim is not None
    resources.assume(("ns", "c"), decision.extended_claim[1])
    assert sorted(model.gpu_use()) == [("dp", "NVIDIA-A100-SXM4-40GB", 0.0, 8), ("dra", "NVIDIA A100-SXM4-40GB", 3.0, 4)]


def test_the_devices_record_lists_dra_devices_and_restoring_passes_over_them():
    framework = mixed(device_plugin=())
    decision = framework.decide(gpu_pod("p", 2))
    condition = pods.devices_condition(decision.devices, decision.dra_devices(gpu_pod("p", 2)))
    assert json.loads(condition["message"]) == [
        {"driver": DRIVER, "pool": "dra", "device": "gpu-0"}, {"driver": DRIVER, "pool": "dra", "device": "gpu-1"}]
    mixed_record = pods.format_devices((pods.Device(1, 1000),), (("gpu.nvidia.com", "n", "nic-0"),))
    assert pods.parse_devices(mixed_record) == (pods.Device(1, 1000),)


def test_gpu_capacity_counts_dra_gpus_where_the_device_plugin_has_none():
    framework = mixed(device_plugin=("dp",), dra=("dra",), count=4)
    capacity = framework.cluster.gpu_capacity()
    rows = framework.cluster.index
    assert capacity[rows["dp"]] == 8 and capacity[rows["dra"]] == 4
