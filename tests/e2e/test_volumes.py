"""Pods with persistent volumes, on the real apiserver and the real kube-controller-manager (its PV controller binds
claims to volumes): each scenario runs once with `gpu-scheduler run` and once with kube-scheduler, on a node pool of
its own, and both must put the pod in the same zone, or leave it waiting for the same reason.

The test plays a CSI external provisioner: for a claim annotated with `volume.kubernetes.io/selected-node` it
creates a PersistentVolume of the claim's size, with that node's zone as node affinity and a claimRef to the claim,
and the PV controller binds them; a claim labelled `e2e/fail-once` has its first provisioning fail the way the
external provisioner reports it, by taking the annotation away, so the scheduler must choose again."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import bound_node, ours_and_kube, waiting_message
from tests.e2e.standins import Poller

SUFFIX = uuid.uuid4().hex[:5]
SCHEDULERS = {"ours": f"vol-ours-{SUFFIX}", "kube": f"vol-kube-{SUFFIX}"}
DRIVER = "e2e.csi.gpu-scheduler.io"
WAIT_CLASS = f"vol-wffc-{SUFFIX}"
IMMEDIATE_CLASS = f"vol-immediate-{SUFFIX}"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
ZONE = "topology.kubernetes.io/zone"


class Provisioner(Poller):
    """The external provisioner of DRIVER, polling the claims of the classes it serves."""

    name = "e2e-provisioner"

    def __init__(self, api: Any):
        super().__init__()
        self.core: Any = client.CoreV1Api(api)
        self.failed_once: set[str] = set()
        self.provisioned: dict[str, str] = {}  # claim uid -> zone

    def poll(self) -> None:
        for claim in self.core.list_persistent_volume_claim_for_all_namespaces().items:
            self._serve(claim)

    def _serve(self, claim: Any) -> None:
        node = (claim.metadata.annotations or {}).get(SELECTED_NODE)
        if claim.spec.storage_class_name != WAIT_CLASS or not node or claim.spec.volume_name \
                or claim.metadata.uid in self.provisioned:
            return
        if (claim.metadata.labels or {}).get("e2e/fail-once") and claim.metadata.uid not in self.failed_once:
            self.failed_once.add(claim.metadata.uid)
            self.core.patch_namespaced_persistent_volume_claim(
                claim.metadata.name, claim.metadata.namespace,
                [{"op": "remove", "path": "/metadata/annotations/" + SELECTED_NODE.replace("/", "~1")}])
            return
        zone = self.core.read_node(node).metadata.labels[ZONE]
        self.core.create_persistent_volume(volume(f"pvc-{claim.metadata.uid}", zone=zone,
                                                  size=claim.spec.resources.requests["storage"],
                                                  storage_class=WAIT_CLASS, claim=claim))
        self.provisioned[claim.metadata.uid] = zone


def volume(name: str, *, zone: str | None, size: str = "10Gi", storage_class: str = "", claim: Any = None,
           modes: tuple[str, ...] = ("ReadWriteOnce",), handle: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": list(modes),
                            "storageClassName": storage_class, "persistentVolumeReclaimPolicy": "Retain",
                            "csi": {"driver": DRIVER, "volumeHandle": handle or name}}
    if zone:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}]}}
    if claim is not None:
        spec["claimRef"] = {"namespace": claim.metadata.namespace, "name": claim.metadata.name,
                            "uid": claim.metadata.uid}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def claim(name: str, *, storage_class: str = "", size: str = "10Gi", modes: tuple[str, ...] = ("ReadWriteOnce",),
          volume_name: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": list(modes), "storageClassName": storage_class,
                            "resources": {"requests": {"storage": size}}}
    if volume_name:
        spec["volumeName"] = volume_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


class Scenario:
    """One scheduler's run of the scenarios: its namespace, and a node pool per scenario (label e2e-pool)."""

    def __init__(self, api: Any, which: str):
        self.api, self.which, self.scheduler = api, which, SCHEDULERS[which]
        self.core: Any = client.CoreV1Api(api)
        self.namespace = f"vol-{which}-{SUFFIX}"
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})

    def pool(self, scenario: str, zones: dict[str, int], *, gpus: int = 8) -> str:
        """Nodes `<pool>-<zone>-<i>`, each with `gpus` A100s; returns the pool's name."""
        pool = f"vol-{self.which}-{scenario}-{SUFFIX}"
        for zone, count in zones.items():
            for i in range(count):
                cp.create_gpu_node(self.api, f"{pool}-{zone}-{i}", gpus=gpus, zone=zone, labels={"e2e-pool": pool})
        return pool

    def pod(self, name: str, pool: str, *, gpus: int, claims: tuple[str, ...] = (), node: str | None = None) -> Any:
        spec: dict[str, Any] = {
            "schedulerName": self.scheduler, "nodeSelector": {"e2e-pool": pool},
            "containers": [{"name": "main", "image": "registry.invalid/cuda:12",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            "volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]}
        if node:
            spec["nodeName"] = node
        return self.core.create_namespaced_pod(self.namespace, {"apiVersion": "v1", "kind": "Pod",
                                                                "metadata": {"name": name}, "spec": spec})

    def claim(self, body: dict[str, Any]) -> Any:
        return self.core.create_namespaced_persistent_volume_claim(self.namespace, body)

    def node_of(self, name: str, timeout: float = 60) -> str:
        return bound_node(self.core, self.namespace, name, who=self.which, timeout=timeout)

    def zone_of(self, node: str) -> str:
        return self.core.read_node(node).metadata.labels[ZONE]

    def waiting(self, name: str, reason: str, timeout: float = 30) -> str:
        """The pod's PodScheduled=False message once it names `reason`; the pod must still be unbound."""
        return waiting_message(self.core, self.namespace, name, reason, who=self.which, timeout=timeout)

    def claim_bound(self, name: str) -> Any:
        def bound() -> bool:
            return self.core.read_namespaced_persistent_volume_claim(name, self.namespace).status.phase == "Bound"
        wait_for(bound, f"{self.which}: claim {name} to be Bound", timeout=60)
        return self.core.read_namespaced_persistent_volume_claim(name, self.namespace)


@pytest.fixture(scope="module")
def storage_classes(api: Any) -> None:
    storage: Any = client.StorageV1Api(api)
    for name, mode, provisioner in ((WAIT_CLASS, "WaitForFirstConsumer", DRIVER),
                                    (IMMEDIATE_CLASS, "Immediate", "e2e.invalid/nobody")):
        storage.create_storage_class({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                      "metadata": {"name": name}, "provisioner": provisioner,
                                      "volumeBindingMode": mode})


@pytest.fixture(scope="module")
def schedulers(plane: Any, api: Any, scheduler_kubeconfig: Path, storage_classes: None,
               tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Both schedulers, each with its own name, and the provisioner, for the whole module."""
    with ours_and_kube(plane, scheduler_kubeconfig, tmp_path_factory.mktemp("volumes"), ours=SCHEDULERS["ours"],
                       kube=SCHEDULERS["kube"], label="volumes"):
        provisioner = Provisioner(api).start()
        yield provisioner
        provisioner.stop()


@pytest.fixture(scope="module")
def scenarios(api: Any, schedulers: Any) -> dict[str, Scenario]:
    return {which: Scenario(api, which) for which in SCHEDULERS}


@pytest.fixture(params=list(SCHEDULERS))
def run(request: pytest.FixtureRequest, scenarios: dict[str, Scenario]) -> Scenario:
    return scenarios[request.param]


def test_a_wait_for_first_consumer_claim_is_provisioned_in_the_zone_where_the_gpus_are(run):
    """zone-a's only node is full, zone-b has a free A100 node: the pod lands in zone-b, and its volume is
    provisioned there (the provisioner reads the zone of the node the scheduler selected)."""
    pool = run.pool("wffc", {"zone-a": 1, "zone-b": 1})
    run.pod("filler", pool, gpus=8, node=f"{pool}-zone-a-0")
    run.claim(claim("data", storage_class=WAIT_CLASS))
    run.pod("train", pool, gpus=4, claims=("data",))
    node = run.node_of("train")
    assert run.zone_of(node) == "zone-b"
    bound = run.claim_bound("data")
    assert bound.metadata.annotations[SELECTED_NODE] == node
    pv = run.core.read_persistent_volume(bound.spec.volume_name)
    assert pv.spec.node_affinity.required.node_selector_terms[0].match_expressions[0].values == ["zone-b"]


def test_a_failed_provisioning_sends_the_pod_back_to_be_scheduled_again(run):
    """The first provisioning fails (the provisioner takes the selected node away): the pod is scheduled again,
    with the reason reported, and lands once its volume is made."""
    pool = run.pool("retry", {"zone-a": 1})
    run.claim(claim("flaky", storage_class=WAIT_CLASS, labels={"e2e/fail-once": "yes"}))
    run.pod("retry", pool, gpus=1, claims=("flaky",))
    run.node_of("retry", timeout=90)
    assert run.claim_bound("flaky").spec.volume_name
    if run.which == "ours":
        events = run.core.list_namespaced_event(run.namespace, field_selector="involvedObject.name=retry").items
        assert any("provisioning failed for PVC" in (e.message or "") for e in events), [e.message for e in events]


def test_a_pod_with_a_bound_zonal_volume_lands_only_in_that_zone_or_waits_saying_why(run):
    """The claim is bound to a volume in zone-a. zone-b has the most room, yet the pod goes to zone-a; a second
    pod of the same claim, once zone-a is full, waits naming the volume's node affinity."""
    pool = run.pool("zonal", {"zone-a": 1, "zone-b": 2}, gpus=4)
    name = f"zonal-{run.which}-{SUFFIX}"
    run.core.create_persistent_volume(volume(name, zone="zone-a", modes=("ReadWriteMany",)))
    run.claim(claim("shared", volume_name=name, modes=("ReadWriteMany",)))
    run.claim_bound("shared")
    run.pod("first", pool, gpus=4, claims=("shared",))
    assert run.zone_of(run.node_of("first")) == "zone-a"
    run.pod("second", pool, gpus=4, claims=("shared",))
    message = run.waiting("second", "node(s) didn't match PersistentVolume's node affinity")
    assert "1 Insufficient nvidia.com/gpu" in message, message


def test_an_unbound_immediate_claim_makes_the_pod_wait(run):
    pool = run.pool("immediate", {"zone-a": 1})
    run.claim(claim("later", storage_class=IMMEDIATE_CLASS))
    run.pod("early", pool, gpus=1, claims=("later",))
    run.waiting("early", "pod has unbound immediate PersistentVolumeClaims")


def test_a_read_write_once_pod_claim_is_never_used_by_two_pods(run):
    pool = run.pool("rwop", {"zone-a": 2})
    name = f"rwop-{run.which}-{SUFFIX}"
    run.core.create_persistent_volume(volume(name, zone=None, modes=("ReadWriteOncePod",)))
    run.claim(claim("solo", volume_name=name, modes=("ReadWriteOncePod",)))
    run.claim_bound("solo")
    run.pod("owner", pool, gpus=1, claims=("solo",))
    run.node_of("owner")
    run.pod("intruder", pool, gpus=1, claims=("solo",))
    run.waiting("intruder", "PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod")


def test_a_nodes_csi_attach_limit_holds(run):
    """The node's CSINode allows one volume of DRIVER: a second pod with another volume of it goes elsewhere,
    and a third, with only that node left to it, waits."""
    pool = run.pool("limits", {"zone-a": 2})
    storage: Any = client.StorageV1Api(run.api)
    for i in range(2):
        node = f"{pool}-zone-a-{i}"
        storage.create_csi_node({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node},
                                 "spec": {"drivers": [{"name": DRIVER, "nodeID": node, "allocatable": {"count": 1}}]}})
    for i in range(3):
        pv = f"limit-{run.which}-{i}-{SUFFIX}"
        run.core.create_persistent_volume(volume(pv, zone=None))
        run.claim(claim(f"disk-{i}", volume_name=pv))
        run.claim_bound(f"disk-{i}")
    run.pod("disk-0", pool, gpus=1, claims=("disk-0",))
    run.pod("disk-1", pool, gpus=1, claims=("disk-1",))
    assert run.node_of("disk-0") != run.node_of("disk-1")
    run.pod("disk-2", pool, gpus=1, claims=("disk-2",))
    message = run.waiting("disk-2", "node(s) exceed max volume count")
    assert message.startswith("0/"), message
