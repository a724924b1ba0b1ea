"""`gpu-scheduler run` against the real apiserver: 50 GPU nodes, 300 pods through the webhook; replicas spread by
kube-scheduler's system default constraints."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from scheduler_core import pods as pods_core
from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import api_json, overcommit_problems, start_scheduler

MODELS = ["NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"]
INFRA = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def cluster_nodes(api: Any, installed_webhook: Any) -> list[str]:
    """50 fake GPU nodes: mixed models, two zones, spot and on-demand, one tainted, one cordoned."""
    names = []
    for i in range(50):
        name = f"sched-gpu-{i:02d}"
        cp.create_gpu_node(
            api, name, gpus=8 if i % 5 else 4, model=MODELS[i % 3], zone=f"zone-{i % 2}",
            labels={"karpenter.sh/capacity-type": "spot" if i % 4 == 0 else "on-demand", "e2e-pool": "sched"},
            taints=INFRA if i == 7 else None, unschedulable=(i == 8),
        )
        names.append(name)
    return names


@pytest.fixture(scope="module")
def scheduler(scheduler_kubeconfig: Any, cluster_nodes: list[str], tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.e2e.conftest import LOG_SOURCES

    process = start_scheduler(scheduler_kubeconfig, tmp_path_factory.mktemp("scheduler"),
                              "--config-map", "gpu-scheduler-system/gpu-scheduler-config")
    LOG_SOURCES.append(lambda: ("gpu-scheduler run", process.logs()[-8000:]))
    yield process
    process.stop()


def namespace(core: Any) -> str:
    name = f"sched-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": name, "labels": {"gpu-scheduler.io/inject": "enabled"}}})
    return name


def gpu_pod(name: str, *, gpus: int = 1, milli: int | None = None, annotations: dict[str, str] | None = None,
            scheduler: str | None = None, selector: dict[str, str] | None = None) -> dict[str, Any]:
    annotations = dict(annotations or {})
    limits = {}
    if milli:
        annotations["gpu-scheduler.io/gpu-milli"] = str(milli)
    else:
        limits["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": {
        "requests": {"cpu": "100m", "memory": "128Mi"}, "limits": limits}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    spec["nodeSelector"] = {"e2e-pool": "sched", **(selector or {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": spec}


def test_300_pods_are_bound_without_overcommit_and_rejections_are_explained(api, scheduler):
    core: Any = client.CoreV1Api(api)
    ns = namespace(core)
    bodies = []
    for i in range(300):
        if i % 10 == 0:
            bodies.append(gpu_pod(f"share-{i}", milli=250 + (i % 3) * 250))
        elif i % 50 == 1:
            bodies.append(gpu_pod(f"huge-{i}", gpus=16))  # fits nowhere
        elif i % 50 == 2:
            bodies.append(gpu_pod(f"b200-{i}", annotations={"gpu.nvidia.com/model": "B200"}))
        elif i % 50 == 3:
            bodies.append(gpu_pod(f"volcano-{i}", scheduler="volcano"))
        elif i % 3 == 0:
            bodies.append(gpu_pod(f"gpu-{i}", gpus=1 + (i % 8 == 0), annotations={"gpu.nvidia.com/model": "L4"}))
        else:
            bodies.append(gpu_pod(f"gpu-{i}", gpus=1 + (i % 8 == 0)))
    with ThreadPoolExecutor(max_workers=20) as pool:
        list(pool.map(lambda body: core.create_namespaced_pod(ns, body), bodies))

    expected_unschedulable = {b["metadata"]["name"] for b in bodies if b["metadata"]["name"].split("-")[0] in
                              ("huge", "b200")}
    others = {b["metadata"]["name"] for b in bodies if b["metadata"]["name"].startswith("volcano")}

    def all_settled() -> bool:
        pods = core.list_namespaced_pod(ns).items
        for pod in pods:
            name = pod.metadata.name
            if name in others:
                continue
            if name in expected_unschedulable:
                conditions = {c.type: c for c in pod.status.conditions or []}
                if "PodScheduled" not in conditions:
                    return False
            elif not pod.spec.node_name:
                return False
        return True

    wait_for(all_settled, "every schedulable pod to be bound", timeout=120)
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}
    for name, pod in pods.items():
        if name in others:
            assert pod.spec.node_name is None and pod.spec.scheduler_name == "volcano"
        elif name in expected_unschedulable:
            condition = {c.type: c for c in pod.status.conditions}["PodScheduled"]
            assert (condition.status, condition.reason) == ("False", "Unschedulable")
            assert condition.message.startswith("0/")
            want = "GPU model mismatch (want B200)" if name.startswith("b200") else "Insufficient nvidia.com/gpu"
            assert want in condition.message, condition.message
        else:
            assert pod.spec.node_name not in ("sched-gpu-07", "sched-gpu-08"), "tainted or cordoned node used"
            if name.startswith("share"):
                assert pod.metadata.annotations["gpu-scheduler.io/gpu-devices"]
    assert overcommit_problems(core) == []

    def recorded(reason: str) -> set[str]:
        return {e.involved_object.name for e in core.list_namespaced_event(ns).items if e.reason == reason}

    placed = {name for name in pods if name not in expected_unschedulable | others}
    wait_for(lambda: recorded("Scheduled") == placed, "a Scheduled event for every bound pod")  # sent asynchronously
    wait_for(lambda: expected_unschedulable <= recorded("FailedScheduling"), "FailedScheduling events")

    def records() -> dict[str, Any]:
        """pod -> the devices its record names, and whether that equals its annotation, for the bound pods."""
        found = {}
        for pod in api_json(core.list_namespaced_pod, ns)["items"]:
            if pod["metadata"]["name"] in placed:
                record = pods_core.recorded_devices(pod)
                found[pod["metadata"]["name"]] = (record is not None and pods_core.format_devices(record) ==
                                                  pod["metadata"]["annotations"][pods_core.DEVICES_ANNOTATION])
        return found

    # the binder's record of the devices, which a tenant cannot rewrite, follows each binding
    wait_for(lambda: all(records().values()), "every bound pod's devices recorded in its status, as annotated")


def test_deletion_cost_is_raised_once_after_warm_up_and_a_users_own_cost_wins(api, scheduler, installed_webhook):
    from tests.e2e.conftest import E2E_CONFIG

    core: Any = client.CoreV1Api(api)
    installed_webhook.set_config(E2E_CONFIG + "scheduling:\n  warmup: {seconds: 2, cost: 0}\n")
    try:
        ns = namespace(core)
        for name in ("warm", "users-own", "never-ready"):
            core.create_namespaced_pod(ns, gpu_pod(name))
        wait_for(lambda: all(p.spec.node_name for p in core.list_namespaced_pod(ns).items), "the pods to be bound")
        cost = "controller.kubernetes.io/pod-deletion-cost"
        assert core.read_namespaced_pod("warm", ns).metadata.annotations[cost] == "-50"
        core.patch_namespaced_pod("users-own", ns, {"metadata": {"annotations": {cost: "7"}}})
        cp.mark_pod_ready(api, ns, "warm")
        cp.mark_pod_ready(api, ns, "users-own")

        def promoted() -> bool:
            annotations = core.read_namespaced_pod("warm", ns).metadata.annotations
            return annotations[cost] == "0" and "gpu-scheduler.io/deletion-cost-warmed-at" in annotations

        wait_for(promoted, "the warmed pod's deletion cost to be raised", timeout=30)
        assert core.read_namespaced_pod("users-own", ns).metadata.annotations[cost] == "7"
        assert core.read_namespaced_pod("never-ready", ns).metadata.annotations[cost] == "-50"
    finally:
        installed_webhook.set_config(E2E_CONFIG)


def test_a_pod_whose_resource_claim_does_not_exist_waits_and_says_which(api, scheduler):
    """A DRA resource claim that was never created, on the real apiserver: not bound, PodScheduled=False naming
    the claim as kube-scheduler's lister does, and a FailedScheduling event; a plain pod created after it is bound
    meanwhile."""
    core: Any = client.CoreV1Api(api)
    ns = namespace(core)
    held = gpu_pod("with-claims")
    held["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
    core.create_namespaced_pod(ns, held)
    core.create_namespaced_pod(ns, gpu_pod("plain"))
    wait_for(lambda: core.read_namespaced_pod("plain", ns).spec.node_name, "the plain pod to be bound")

    def refused() -> Any:
        pod = core.read_namespaced_pod("with-claims", ns)
        assert not pod.spec.node_name, "bound although its claim does not exist"
        condition = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        return condition if condition and 'resourceclaim.resource.k8s.io "gpu" not found' in condition.message else None

    condition = wait_for(refused, "PodScheduled=False naming the missing claim")
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    wait_for(lambda: any(e.reason == "FailedScheduling" and e.involved_object.name == "with-claims"
                         for e in core.list_namespaced_event(ns).items), "a FailedScheduling event")


def test_replicas_of_a_replica_set_spread_by_the_system_defaults_over_nodes_nothing_else_tells_apart(api, scheduler):
    """No topologySpreadConstraints: kube-scheduler's system defaults, over the ReplicaSet's selector, spread six
    replicas over three identical nodes two by two, where binpack alone would put them all on the first. The real
    ReplicaSet controller creates the six pods at once, so each decision must count the replicas placed before it
    whose bindings are still in flight."""
    from collections import Counter

    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    ns = namespace(core)
    pool = [f"spread-{i}" for i in range(3)]
    for name in pool:
        cp.create_gpu_node(api, name, gpus=0, labels={"e2e-pool": "spread"})
    labels = {"tier": "spread-e2e"}  # not `app`, which the `locality` score gathers on one node
    container = {"name": "main", "image": "registry.invalid/web:1",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
    apps.create_namespaced_replica_set(ns, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
        "spec": {"replicas": 6, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"schedulerName": "gpu-scheduler", "nodeSelector": {"e2e-pool": "spread"},
                     "containers": [container]}}}})
    try:
        def placed() -> Counter[str]:
            pods = core.list_namespaced_pod(ns).items
            return Counter(p.spec.node_name for p in pods) if len(pods) == 6 and all(
                p.spec.node_name for p in pods) else Counter()

        assert wait_for(placed, "the ReplicaSet's six pods to be bound") == {name: 2 for name in pool}
    finally:
        apps.delete_namespaced_replica_set("web", ns)  # first, or its controller replaces the pods deleted below
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)  # no kubelet ends them gracefully
        for name in pool:
            core.delete_node(name)
