"""GPUs through Dynamic Resource Allocation on the real apiserver, with kube-controller-manager's resourceclaim
controller (it makes each pod's claim from its ResourceClaimTemplate and deallocates claims no pod uses).

Nodes here have no `nvidia.com/gpu` at all: each publishes a ResourceSlice as NVIDIA's DRA driver does (driver
`gpu.nvidia.com`, pool = node, devices gpu-0..7 with productName, architecture, cudaComputeCapability, memory,
PCIe root). Each scenario runs once with `gpu-scheduler run` and once with kube-scheduler v1.36.3, each on a node
pool of its own: both must allocate claims the apiserver accepts with devices that meet the selectors, or leave
the pod waiting; where our device choice is better than upstream's first fit, the test says so."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import controlplane as cp
from tests.e2e.scheduling import bound_node, ours_and_kube, waiting_message
from tests.e2e.standins import DRA_DRIVER as DRIVER
from tests.e2e.standins import gpu_slice

SUFFIX = uuid.uuid4().hex[:5]
SCHEDULERS = {"ours": f"dra-ours-{SUFFIX}", "kube": f"dra-kube-{SUFFIX}"}
CLASS = f"gpu-{SUFFIX}"
FINALIZER = "resource.kubernetes.io/delete-protection"


def claim_spec(count: int = 1, *, selector: str | None = None, match_root: bool = False) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": CLASS, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if match_root:
        devices["constraints"] = [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    return {"devices": devices}


def raw(call: Any, *args: Any) -> dict[str, Any]:
    """An API read as the JSON the apiserver sent."""
    return json.loads(call(*args, _preload_content=False).data)


class Scenario:
    """One scheduler's run: its namespace, and a node pool per scenario (label e2e-pool)."""

    def __init__(self, api: Any, which: str):
        self.api, self.which, self.scheduler = api, which, SCHEDULERS[which]
        self.core: Any = client.CoreV1Api(api)
        self.resource: Any = client.ResourceV1Api(api)
        self.namespace = f"dra-{which}-{SUFFIX}"
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})

    def pool(self, scenario: str, nodes: int = 1, **slice_args: Any) -> str:
        pool = f"dra-{self.which}-{scenario}-{SUFFIX}"
        for index in range(nodes):
            name = f"{pool}-{index}"
            cp.create_gpu_node(self.api, name, gpus=0, labels={"e2e-pool": pool})
            self.resource.create_resource_slice(gpu_slice(name, **slice_args))
        return pool

    def template(self, name: str, **spec: Any) -> None:
        self.resource.create_namespaced_resource_claim_template(self.namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": claim_spec(**spec)}})

    def claim(self, name: str, **spec: Any) -> None:
        self.resource.create_namespaced_resource_claim(self.namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": claim_spec(**spec)})

    def pod(self, name: str, pool: str, *, template: str | None = None, claim: str | None = None) -> None:
        reference = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
        self.core.create_namespaced_pod(self.namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": self.scheduler, "nodeSelector": {"e2e-pool": pool},
                     "resourceClaims": [{"name": "gpus", **reference}],
                     "containers": [{"name": "main", "image": "registry.invalid/cuda:12",
                                     "resources": {"claims": [{"name": "gpus"}]}}]}})

    def node_of(self, name: str, timeout: float = 60) -> str:
        return bound_node(self.core, self.namespace, name, who=self.which, timeout=timeout)

    def waiting(self, name: str, reason: str = "", timeout: float = 30) -> str:
        return waiting_message(self.core, self.namespace, name, reason, who=self.which, timeout=timeout)

    def claim_of(self, pod: str) -> dict[str, Any]:
        """The claim the pod uses (its template's, as the resourceclaim controller named it in the pod's status)."""
        status = raw(self.core.read_namespaced_pod, pod, self.namespace).get("status") or {}
        names = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
        spec = raw(self.core.read_namespaced_pod, pod, self.namespace)["spec"]["resourceClaims"][0]
        name = spec.get("resourceClaimName") or names["gpus"]
        return raw(self.resource.read_namespaced_resource_claim, name, self.namespace)

    def devices(self, pod: str) -> list[str]:
        allocation = self.claim_of(pod)["status"]["allocation"]
        return sorted(r["device"] for r in allocation["devices"]["results"])


@pytest.fixture(scope="module")
def device_class(api: Any) -> None:
    client.ResourceV1Api(api).create_device_class({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression":
                                        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}]}})


@pytest.fixture(scope="module")
def schedulers(plane: Any, scheduler_kubeconfig: Path, device_class: None,
               tmp_path_factory: pytest.TempPathFactory) -> Any:
    with ours_and_kube(plane, scheduler_kubeconfig, tmp_path_factory.mktemp("dra"), ours=SCHEDULERS["ours"],
                       kube=SCHEDULERS["kube"], label="dra"):
        yield


@pytest.fixture(scope="module")
def scenarios(api: Any, schedulers: None) -> dict[str, Scenario]:
    return {which: Scenario(api, which) for which in SCHEDULERS}


@pytest.fixture(params=list(SCHEDULERS))
def run(request: pytest.FixtureRequest, scenarios: dict[str, Scenario]) -> Scenario:
    return scenarios[request.param]


def test_a_template_claim_gets_gpus_that_meet_its_selector_and_is_reserved_before_the_pod_binds(run):
    """An A100 node and an H100 node; the claim asks for two H100s: the pod lands on the H100 node, its claim holds
    two of that node's GPUs, carries the finalizer, names the node, and is reserved for the pod."""
    pool = run.pool("select", product="NVIDIA A100-SXM4-40GB")
    h100 = run.pool("select-h100", product="NVIDIA H100 80GB HBM3", memory="80Gi")
    run.core.patch_node(f"{h100}-0", {"metadata": {"labels": {"e2e-pool": pool}}})
    run.template("two-h100", count=2,
                 selector=f"device.attributes['{DRIVER}'].productName.startsWith('NVIDIA H100')")
    run.pod("train", pool, template="two-h100")
    assert run.node_of("train") == f"{h100}-0"
    claim = run.claim_of("train")
    pod = run.core.read_namespaced_pod("train", run.namespace)
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod.metadata.uid]
    assert FINALIZER in claim["metadata"]["finalizers"]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {f"{h100}-0"}
    selector = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
    assert selector["values"] == [f"{h100}-0"]


def test_a_shared_claim_brings_its_second_pod_to_the_same_node(run):
    pool = run.pool("shared", nodes=2)
    run.claim("shared", count=1)
    run.pod("first", pool, claim="shared")
    first = run.node_of("first")
    run.pod("second", pool, claim="shared")
    assert run.node_of("second") == first
    claim = raw(run.resource.read_namespaced_resource_claim, "shared", run.namespace)
    assert len(claim["status"]["reservedFor"]) == 2
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 1


def test_a_claim_for_more_gpus_than_a_node_has_waits(run):
    pool = run.pool("toomany", count=4)
    run.template("five", count=5)
    run.pod("big", pool, template="five")
    if run.which == "ours":
        run.waiting("big", "cannot allocate all claims")
    else:
        run.waiting("big")


def test_a_gpu_tainted_after_an_xid_error_is_not_allocated(run):
    pool = run.pool("xid", count=4, tainted=(1,))
    run.template("three", count=3)
    run.pod("three", pool, template="three")
    run.node_of("three")
    assert run.devices("three") == ["gpu-0", "gpu-2", "gpu-3"]
    run.template("xid-one", count=1)
    run.pod("one-more", pool, template="xid-one")
    run.waiting("one-more")


def test_a_selector_that_fails_makes_only_its_pod_wait_saying_why(run):
    pool = run.pool("badcel", count=2)
    run.template("bad", count=1, selector=f"device.attributes['{DRIVER}'].noSuchAttribute == 'x'")
    run.pod("bad", pool, template="bad")
    run.template("good", count=1)
    run.pod("good", pool, template="good")
    run.node_of("good")
    if run.which == "ours":
        message = run.waiting("bad", "CEL runtime error")
        assert "noSuchAttribute" in message, message
    else:
        run.waiting("bad")


def test_devices_of_a_deleted_pod_are_freed_by_the_controller_and_used_again(run):
    pool = run.pool("reuse", count=2)
    run.template("both", count=2)
    run.pod("holder", pool, template="both")
    run.node_of("holder")
    run.pod("next", pool, template="both")
    run.waiting("next")
    run.core.delete_namespaced_pod("holder", run.namespace, grace_period_seconds=0)
    run.node_of("next", timeout=90)


def test_our_device_choice_keeps_a_whole_pcie_root_free_where_first_fit_does_not(run):
    """gpu-5 (second root) is taken; a one-GPU pod follows. Upstream's first fit takes gpu-0 and leaves no root
    with four free GPUs, so a pod asking for four under one root waits; we take a GPU of the already broken second
    root, and the four-GPU pod lands."""
    pool = run.pool("roots")
    node = f"{pool}-0"
    run.template("gpu5", count=1, selector=f"device.attributes['{DRIVER}'].uuid == 'GPU-{node}-5'")
    run.pod("pinned", pool, template="gpu5")
    run.node_of("pinned")
    run.template("roots-one", count=1)
    run.pod("small", pool, template="roots-one")
    run.node_of("small")
    run.template("four", count=4, match_root=True)
    run.pod("four", pool, template="four")
    if run.which == "ours":
        run.node_of("four")
        assert run.devices("four") == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    else:
        assert run.devices("small") == ["gpu-0"]
        run.waiting("four")
