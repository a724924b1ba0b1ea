"""`gpu-scheduler extender` behind the real kube-scheduler, configured from the shipped KubeSchedulerConfiguration.

Five GPU nodes of their own label pool (3 A100, 2 L4), pods that name a GPU model in an annotation
kube-scheduler knows nothing about: where they land, and what stays Pending and why, is the
extender's doing. A second kube-scheduler asks the extender about every pod of its profile
(no managedResources, full Nodes instead of names), which is how GPU-share pods reach it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from scheduler_core import pods
from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import (SchedulerProcess, api_json, kube_scheduler_config, overcommit_problems, request,
                                  start_extender)

COMPONENT = Path(__file__).parents[2] / "manifests" / "components" / "extender"
SUFFIX = uuid.uuid4().hex[:5]
POOL = f"ext-{SUFFIX}"
MANAGED = f"gpu-extender-{SUFFIX}"  # profile of the kube-scheduler that runs the shipped configuration
EVERY_POD = f"gpu-extender-all-{SUFFIX}"  # profile of the one that asks about every pod, with full Nodes
A100_NODES = [f"ext-{SUFFIX}-a100-{i}" for i in range(3)]
L4_NODES = [f"ext-{SUFFIX}-l4-{i}" for i in range(2)]
GPUS = {**{name: 4 for name in A100_NODES}, **{name: 2 for name in L4_NODES}}
DEVICES = "gpu-scheduler.io/gpu-devices"
CONFIG = "schedulerName: gpu-scheduler\nscheduling: {nodePolicy: binpack, gpuPolicy: binpack}\n"


@pytest.fixture(scope="module")
def core(api: Any) -> Any:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def pool(api: Any) -> None:
    for name in A100_NODES:
        cp.create_gpu_node(api, name, gpus=GPUS[name], labels={"e2e-pool": POOL})
    for name in L4_NODES:
        cp.create_gpu_node(api, name, gpus=GPUS[name], model="NVIDIA-L4", memory_mib=24576, labels={"e2e-pool": POOL})


@pytest.fixture(scope="module")
def extender(plane: cp.ControlPlane, pool: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchedulerProcess]:
    from tests.e2e.conftest import LOG_SOURCES

    work = tmp_path_factory.mktemp("extender")
    config_file = work / "config.yaml"
    config_file.write_text(CONFIG)
    server = start_extender(plane.kubeconfig, config_file, work, min_nodes=len(GPUS))
    LOG_SOURCES.append(lambda: ("gpu-scheduler extender", server.logs()[-8000:]))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def managed(plane: cp.ControlPlane, extender: SchedulerProcess) -> Iterator[str]:
    scheduler = plane.start_scheduler(kube_scheduler_config(extender.port, MANAGED))
    yield MANAGED
    scheduler.stop()


@pytest.fixture(scope="module")
def every_pod(plane: cp.ControlPlane, extender: SchedulerProcess) -> Iterator[str]:
    scheduler = plane.start_scheduler(kube_scheduler_config(extender.port, EVERY_POD, every_pod=True))
    yield EVERY_POD
    scheduler.stop()


@pytest.fixture(scope="module")
def namespace(core: Any) -> str:
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": POOL}})
    return POOL


def gpu_pod(name: str, scheduler: str, *, gpus: int = 1, milli: int | None = None,
            model: str | None = None) -> dict[str, Any]:
    annotations = {"gpu.nvidia.com/model": model} if model else {}
    limits = {}
    if milli:
        annotations["gpu-scheduler.io/gpu-milli"] = str(milli)
    else:
        limits["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": {
        "schedulerName": scheduler, "nodeSelector": {"e2e-pool": POOL},
        "containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"}, "limits": limits}}]}}


def create(core: Any, namespace: str, bodies: list[dict[str, Any]]) -> None:
    for body in bodies:
        core.create_namespaced_pod(namespace, body)


def pods_by_name(core: Any, namespace: str, names: set[str]) -> dict[str, Any]:
    return {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items if p.metadata.name in names}


def unschedulable_because(core: Any, namespace: str, name: str, reason: str) -> str | None:
    """The PodScheduled=False message, once it gives `reason` and a FailedScheduling event says so too."""
    pod = core.read_namespaced_pod(name, namespace)
    condition = {c.type: c for c in pod.status.conditions or []}.get("PodScheduled")
    if pod.spec.node_name or condition is None or condition.reason != "Unschedulable" or reason not in condition.message:
        return None
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    if not any(e.reason == "FailedScheduling" and reason in (e.message or "") for e in events):
        return None
    return str(condition.message)


def devices(pod: Any) -> list[dict[str, int]]:
    return json.loads((pod.metadata.annotations or {})[DEVICES])


def test_kube_scheduler_places_gpu_pods_only_where_the_extender_lets_it(core, namespace, managed):
    bodies = ([gpu_pod(f"a100-{i}", managed, model="A100") for i in range(4)]
              + [gpu_pod(f"a100-pair-{i}", managed, gpus=2, model="A100") for i in range(2)]
              + [gpu_pod(f"l4-{i}", managed, model="L4") for i in range(2)]
              + [gpu_pod("h100", managed, model="H100")])
    create(core, namespace, bodies)
    placeable = {b["metadata"]["name"] for b in bodies} - {"h100"}

    wait_for(lambda: all(p.spec.node_name for p in pods_by_name(core, namespace, placeable).values()),
             "kube-scheduler to bind every placeable pod through the extender", timeout=60)
    for name, pod in pods_by_name(core, namespace, placeable).items():
        assert pod.spec.node_name in (L4_NODES if name.startswith("l4") else A100_NODES), (name, pod.spec.node_name)
        gpus = 2 if "pair" in name else 1
        assert [d["milli"] for d in devices(pod)] == [1000] * gpus
        assert all(d["index"] < GPUS[pod.spec.node_name] for d in devices(pod))
    assert overcommit_problems(core) == []

    message = wait_for(lambda: unschedulable_because(core, namespace, "h100", "GPU model mismatch (want H100)"),
                       "the H100 pod to be reported unschedulable with the extender's reason", timeout=60)
    # Nodes already full fail kube-scheduler's own filters first; every node left is ours to refuse.
    assert message.startswith("0/") and "GPU model mismatch (want H100)" in message


def test_gpu_shares_get_devices_and_whole_gpus_never_land_on_a_shared_gpu(core, namespace, managed, every_pod):
    shares = ([gpu_pod(f"share-a100-{i}", every_pod, milli=500, model="A100") for i in range(6)]
              + [gpu_pod(f"share-l4-{i}", every_pod, milli=250, model="L4") for i in range(2)])
    create(core, namespace, shares)
    names = {b["metadata"]["name"] for b in shares}
    wait_for(lambda: all(p.spec.node_name for p in pods_by_name(core, namespace, names).values()),
             "the every-pod kube-scheduler to bind the GPU shares through the extender", timeout=60)
    for name, pod in pods_by_name(core, namespace, names).items():
        assert pod.spec.node_name in (L4_NODES if "l4" in name else A100_NODES), (name, pod.spec.node_name)
        [device] = devices(pod)
        assert device["milli"] == (250 if "l4" in name else 500)
    assert overcommit_problems(core) == []

    # kube-scheduler counts only whole nvidia.com/gpu: it sees the GPUs the shares occupy as free.
    touched = {(p.spec.node_name, d["index"]) for p in core.list_namespaced_pod(namespace).items
               if p.spec.node_name in A100_NODES for d in devices(p)}
    idle = sum(GPUS[name] for name in A100_NODES) - len(touched)
    assert idle >= 0
    whole = [gpu_pod(f"fill-{i}", managed, model="A100") for i in range(idle + 1)]
    create(core, namespace, whole)
    filled = {b["metadata"]["name"] for b in whole}

    def settled() -> str | None:
        found = pods_by_name(core, namespace, filled)
        waiting = [name for name, pod in found.items() if not pod.spec.node_name]
        if len(waiting) != 1:
            return None
        return unschedulable_because(core, namespace, waiting[0], "idle GPU(s) (the rest are shared)")

    message = wait_for(settled, f"{idle} whole-GPU pods bound and one refused for want of an idle GPU", timeout=90)
    assert "node(s) had fewer than 1 idle GPU(s) (the rest are shared)" in message
    assert overcommit_problems(core) == []


def test_the_served_extender_refuses_malformed_calls_and_counts_every_call(extender):
    status, body = request(extender, "POST", "/filter", b'{"NodeNames": ["x"]}')
    assert (status, body) == (400, {"error": "Pod: missing", "status": 400})
    status, body = request(extender, "POST", "/bind", b"[")
    assert status == 400 and body["error"].startswith("body: not valid JSON")
    pod = gpu_pod("probe", MANAGED, model="L4")
    pod["metadata"].update(namespace="default", uid="probe-uid")
    asked = A100_NODES + L4_NODES
    status, body = request(extender, "POST", "/filter", json.dumps({"Pod": pod, "NodeNames": asked}).encode())
    assert status == 200 and body["Error"] == "" and set(body["NodeNames"]) <= set(L4_NODES)
    assert {name: body["FailedNodes"][name] for name in A100_NODES} == dict.fromkeys(
        A100_NODES, "GPU model mismatch (want L4)")
    status, text = request(extender, "GET", "/metrics")
    assert status == 200
    for series in ('gpu_scheduler_extender_requests_total{outcome="invalid",verb="filter"} 1.0',
                   'gpu_scheduler_extender_requests_total{outcome="invalid",verb="bind"} 1.0',
                   'gpu_scheduler_extender_requests_total{outcome="ok",verb="filter"}',
                   'gpu_scheduler_extender_request_duration_seconds_count{verb="filter"}',
                   f'gpu_scheduler_allocated_gpus{{model="NVIDIA-L4",node="{L4_NODES[0]}"}}'):  # the model's view
        assert series in text, series


def test_the_extender_overlay_schedules_as_shipped_with_its_own_accounts(plane, api, core, pool, namespace,
                                                                         installed_webhook,
                                                                         tmp_path):
    """The overlay as installed: the real kube-scheduler runs its KubeSchedulerConfiguration (leader election
    included) with a token of the overlay's account, and the extender reads the ConfigMap with a token of its
    own; a whole-GPU pod and a GPU share are both bound through the extender, with devices. The extender holds its
    Lease and raises a warmed-up pod's deletion cost, as `gpu-scheduler run` does."""
    from tests.e2e.conftest import E2E_CONFIG
    from tests.e2e.installing import NAMESPACE, kubectl

    installed_webhook.set_config(E2E_CONFIG + "scheduling:\n  warmup: {seconds: 2, cost: 0}\n")

    for manifest in ("extender.yaml", "kube-scheduler.yaml"):
        kubectl(plane, "apply", "-f", str(COMPONENT / manifest))
    pool = f"overlay-{SUFFIX}"
    nodes = [f"{pool}-a100", f"{pool}-l4"]
    cp.create_gpu_node(api, nodes[0], gpus=2, labels={"e2e-pool": pool})
    cp.create_gpu_node(api, nodes[1], gpus=1, model="NVIDIA-L4", memory_mib=24576, labels={"e2e-pool": pool})
    server = start_extender(plane.kubeconfig_for_service_account(NAMESPACE, "gpu-scheduler-extender"), None,
                            tmp_path, config_map=f"{NAMESPACE}/gpu-scheduler-config", min_nodes=len(GPUS),
                            lease=f"{NAMESPACE}/gpu-scheduler-extender")
    shipped = yaml.safe_load((COMPONENT / "kube-scheduler-config.yaml").read_text())
    profile = f"gpu-overlay-{SUFFIX}"  # the shipped `gpu-scheduler` would also take other tests' pods
    assert [p["schedulerName"] for p in shipped["profiles"]] == ["gpu-scheduler"]
    shipped["profiles"] = [{"schedulerName": profile}]
    shipped["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{server.port}"
    scheduler = plane.start_scheduler(yaml.safe_dump(shipped), leader_elect=True,
                                      kubeconfig=plane.kubeconfig_for_service_account(NAMESPACE, "gpu-kube-scheduler"))
    try:
        bodies = [gpu_pod(f"{pool}-whole", profile, gpus=2, model="A100"),
                  gpu_pod(f"{pool}-share", profile, milli=300, model="L4")]
        for body in bodies:
            body["spec"]["nodeSelector"] = {"e2e-pool": pool}
        create(core, namespace, bodies)
        names = {b["metadata"]["name"] for b in bodies}
        wait_for(lambda: all(p.spec.node_name for p in pods_by_name(core, namespace, names).values()),
                 "the overlay's kube-scheduler to bind both pods through the extender", timeout=60)
        placed = pods_by_name(core, namespace, names)
        assert placed[f"{pool}-whole"].spec.node_name == nodes[0]
        assert [d["milli"] for d in devices(placed[f"{pool}-whole"])] == [1000, 1000]
        assert placed[f"{pool}-share"].spec.node_name == nodes[1]
        assert [d["milli"] for d in devices(placed[f"{pool}-share"])] == [300]

        def recorded() -> bool:  # with its own account's pods/status permission
            listed = api_json(core.list_namespaced_pod, namespace)["items"]
            return all(pods.recorded_devices(p) is not None and pods.format_devices(pods.recorded_devices(p)) ==
                       p["metadata"]["annotations"][pods.DEVICES_ANNOTATION]
                       for p in listed if p["metadata"]["name"] in names)

        wait_for(recorded, "both pods' devices recorded in their status, as annotated")
        lease: Any = client.CoordinationV1Api(api).read_namespaced_lease("gpu-kube-scheduler", NAMESPACE)
        assert lease.spec.holder_identity

        warm = f"{pool}-warm"  # bound and Ready, with the cost the webhook writes: warmed up after 2 s
        core.create_namespaced_pod(namespace, {"metadata": {"name": warm, "annotations": {
            "controller.kubernetes.io/pod-deletion-cost": "-50", "gpu-scheduler.io/initial-deletion-cost": "-50"}},
            "spec": {"nodeName": nodes[1], "containers": [{"name": "main", "image": "registry.invalid/cuda:12"}]}})
        cp.mark_pod_ready(api, namespace, warm)
        wait_for(lambda: (core.read_namespaced_pod(warm, namespace).metadata.annotations or {}).get(
            "gpu-scheduler.io/deletion-cost-warmed-at"), "the extender to raise the warmed-up pod's cost", timeout=30)
        annotations = core.read_namespaced_pod(warm, namespace).metadata.annotations
        assert annotations["controller.kubernetes.io/pod-deletion-cost"] == "0"
        holder = client.CoordinationV1Api(api).read_namespaced_lease("gpu-scheduler-extender", NAMESPACE)
        assert holder.spec.holder_identity.startswith("gpu-scheduler-extender-")
    finally:
        installed_webhook.set_config(E2E_CONFIG)
        scheduler.stop()
        server.stop()


# --- DRA: kube-scheduler allocates the devices; the extender scores, counts and binds -------------------------------

DRA_POOL = f"{POOL}-dra"
DRA_NODES = [f"ext-{SUFFIX}-dra-{i}" for i in range(2)]
DRA_CLASS = f"gpu-ext-{SUFFIX}"


@pytest.fixture(scope="module")
def dra_nodes(api: Any) -> Iterator[None]:
    """Two DRA-only nodes (no nvidia.com/gpu in allocatable; 4 GPUs each in a ResourceSlice) and a DeviceClass
    serving nvidia.com/gpu, which lives only while the tests below (the last of this module) run."""
    from tests.e2e.standins import DRA_DRIVER, gpu_slice

    resource = client.ResourceV1Api(api)
    for name in DRA_NODES:
        cp.create_gpu_node(api, name, gpus=0, labels={"e2e-pool": DRA_POOL})
        resource.create_resource_slice(gpu_slice(name, count=4))
    resource.create_device_class({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRA_CLASS},
        "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression": (
            f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}'].type == 'gpu'")}}]}})
    yield
    resource.delete_device_class(DRA_CLASS)


def test_kube_scheduler_allocates_dra_gpus_and_the_extender_counts_them_and_binds_without_device_records(
        api, core, namespace, managed, extender, dra_nodes):
    """Pods asking nvidia.com/gpu on DRA-only nodes: the extender does not refuse them (kube-scheduler's
    DynamicResources decides what fits and allocates, writing the claim before it asks us to bind), binds them
    without a GPU-devices annotation or record, and its model counts the devices the claims hold (its metrics)."""
    bodies = [gpu_pod(f"dra-{i}", managed, gpus=2) for i in range(5)]
    for body in bodies:
        body["spec"]["nodeSelector"] = {"e2e-pool": DRA_POOL}
    create(core, namespace, bodies[:4])
    names = {b["metadata"]["name"] for b in bodies[:4]}
    wait_for(lambda: all(p.spec.node_name for p in pods_by_name(core, namespace, names).values()),
             "kube-scheduler to bind the four DRA pods through the extender", timeout=60)
    resource = client.ResourceV1Api(api)
    held: set[tuple[str, str]] = set()
    for name in sorted(names):
        pod = api_json(core.read_namespaced_pod, name, namespace)
        assert DEVICES not in (pod["metadata"].get("annotations") or {}), name
        assert pods.recorded_devices(pod) is None, name
        claim_name = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        claim = api_json(resource.read_namespaced_resource_claim, claim_name, namespace)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]} and len(results) == 2, (name, results)
        held |= {(r["pool"], r["device"]) for r in results}
    assert len(held) == 8  # both nodes full, no device twice
    create(core, namespace, bodies[4:])
    message = wait_for(lambda: unschedulable_because(core, namespace, "dra-4", "cannot allocate all claims"),
                       "the fifth pod to wait: no device left", timeout=60)
    assert message.startswith("0/")

    def counted() -> bool:
        status, text = request(extender, "GET", "/metrics")
        return status == 200 and all(
            f'gpu_scheduler_allocated_gpus{{model="NVIDIA A100-SXM4-40GB",node="{node}"}} 4.0' in text
            for node in DRA_NODES)

    wait_for(counted, "the extender's model to count the 4 DRA GPUs in use on each node")
