"""GPUs through Dynamic Resource Allocation on the real apiserver, with kube-controller-manager's resourceclaim
controller (it makes each pod's claim from its ResourceClaimTemplate and deallocates claims no pod uses).

Nodes here have no `nvidia.com/gpu` at all: each publishes a ResourceSlice as NVIDIA's DRA driver does (driver
`gpu.nvidia.com`, pool = node, devices gpu-0..7 with productName, architecture, cudaComputeCapability, memory,
PCIe root). Each scenario runs once with `gpu-scheduler run` and once with kube-scheduler v1.36.3, each on a node
pool of its own: both must allocate claims the apiserver accepts with devices that meet the selectors, or leave
the pod waiting; where our device choice is better than upstream's first fit, the test says so."""

from __future__ import annotations

import json
import time
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
        "spec": {"selectors": [{"cel": {
            "expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}]}})


@pytest.fixture(scope="module")
def schedulers(plane: Any, scheduler_kubeconfig: Path, device_class: None,
               tmp_path_factory: pytest.TempPathFactory) -> Any:
    with ours_and_kube(plane, scheduler_kubeconfig, tmp_path_factory.mktemp("dra"), ours=SCHEDULERS["ours"],
                       kube=SCHEDULERS["kube"], label="dra", kube_args=(KUBE_UNSCHEDULABLE_FLUSH,)):
        yield


# kube-scheduler retries an unschedulable pod on a ResourceClaim event only when the pod uses that claim or the claim
# was deallocated (dynamicresources.go, isSchedulableAfterClaimChange); a claim deleted while still allocated, as the
# garbage collector deletes a deleted pod's extended-resource claim, wakes no other pod. If the pod's retry on the
# pod's deletion came before the claim left its cache, it waits for the flush of pods left unschedulable, 5 min by
# default (checked every 30 s). Shortened so the kube side of a test waits at most about 40 s for it.
KUBE_UNSCHEDULABLE_FLUSH = "--pod-max-in-unschedulable-pods-duration=10s"


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


BULK = "bulk.example.com"  # a driver publishing one pool of 10,000 devices over 80 slices


def bulk_slices(pool: str, count: int = 80, per_slice: int = 125) -> list[dict[str, Any]]:
    """One pool of count * per_slice devices, reaching the nodes labelled e2e-pool=`pool` (a selector, so no other
    test's scheduler meets it)."""
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{pool}-bulk-{i}"},
             "spec": {"driver": BULK, "pool": {"name": pool, "generation": 1, "resourceSliceCount": count},
                      "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                          {"key": "e2e-pool", "operator": "In", "values": [pool]}]}]},
                      "devices": [{"name": f"d-{i}-{j}", "attributes": {"group": {"int": (i * per_slice + j) // 7}}}
                                  for j in range(per_slice)]}} for i in range(count)]


@pytest.fixture(scope="module")
def tenant(plane: Any, api: Any) -> Any:
    """tenant-dra may write pods, claims and templates in its own namespace, and nothing else."""
    rbac: Any = client.RbacAuthorizationV1Api(api)
    namespace = f"dra-tenant-{SUFFIX}"
    client.CoreV1Api(api).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    rbac.create_namespaced_role(namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "writer"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]},
                  {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceclaimtemplates"],
                   "verbs": ["create", "get", "list", "delete"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant-dra"}]})
    return namespace, plane.api_client(plane.kubeconfig_for("tenant-dra"))


def test_hostile_claims_of_a_tenant_harm_no_one_else(run, tenant, api):
    """A namespace-scoped tenant asks for all of a 10,000-device pool, for 32 GPUs, for a search that would never
    end, with a selector that fails, and with one too costly for the apiserver; the other tenant's pod is bound all
    the same, and no device is in two claims."""
    namespace, tenant_api = tenant
    pool = run.pool("hostile", nodes=2)
    resource: Any = client.ResourceV1Api(api)
    for body in bulk_slices(pool):
        resource.create_resource_slice(body)
    bulk_class = f"bulk-{run.which}-{SUFFIX}"
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": bulk_class},
                                  "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{BULK}'"}}]}})
    theirs: Any = client.ResourceV1Api(tenant_api)
    core: Any = client.CoreV1Api(tenant_api)
    name = f"{run.which}-"
    hostile = {
        "all": {"requests": [{"name": "all", "exactly": {"deviceClassName": bulk_class, "allocationMode": "All"}}]},
        "many": {"requests": [{"name": "many", "exactly": {"deviceClassName": CLASS, "count": 32}}]},
        "endless": {"requests": [{"name": "any", "exactly": {"deviceClassName": bulk_class, "count": 4}},
                                 {"name": "grouped", "exactly": {"deviceClassName": bulk_class, "count": 8}}],
                    "constraints": [{"matchAttribute": f"{BULK}/group", "requests": ["grouped"]}]},
        "failing": claim_spec(1, selector=f"device.attributes['{DRIVER}'].nothing.startsWith('x')")["devices"],
    }
    for kind, devices in hostile.items():
        theirs.create_namespaced_resource_claim(namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name + kind},
            "spec": {"devices": devices}})
        core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name + kind},
            "spec": {"schedulerName": run.scheduler, "nodeSelector": {"e2e-pool": pool},
                     "resourceClaims": [{"name": "c", "resourceClaimName": name + kind}],
                     "containers": [{"name": "main", "image": "registry.invalid/x"}]}})
    ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    costly = (f"{ten}.all(a, {ten}.all(b, {ten}.all(c, {ten}.all(d, {ten}.all(e, {ten}.all(f, {ten}.all(g, "
              "int('1'.find('[0-9]*')) < 100)))))))")  # upstream's own too-costly example
    with pytest.raises(client.exceptions.ApiException) as refused:
        theirs.create_namespaced_resource_claim(namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name + "costly"},
            "spec": claim_spec(1, selector=costly)})
    assert refused.value.status == 422  # the apiserver's own cost limit keeps it out
    run.template("innocent", count=2)
    run.pod("innocent", pool, template="innocent")
    run.node_of("innocent", timeout=60)
    for kind in hostile:
        assert not client.CoreV1Api(api).read_namespaced_pod(name + kind, namespace).spec.node_name, kind
    taken: list[tuple[str, str, str]] = []
    for found in raw(resource.list_resource_claim_for_all_namespaces)["items"]:
        for result in ((found.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            taken.append((result["driver"], result["pool"], result["device"]))
    assert len(taken) == len(set(taken)), "a device is in two claims"
    for kind in hostile:  # gone, so that later tests do not wait behind schedulers retrying them
        client.CoreV1Api(api).delete_namespaced_pod(name + kind, namespace, grace_period_seconds=0)


def random_workload(seed: int, count: int = 24) -> list[dict[str, Any]]:
    """Claims as users write them: 1-4 GPUs, some of one product or with enough memory, some under one PCIe root."""
    import random

    rng = random.Random(seed)
    found = []
    for _ in range(count):
        selector = rng.choice([None, None, H100_ONLY, UNDER_60GI])
        found.append(claim_spec(rng.choice([1, 1, 2, 2, 3, 4]), selector=selector, match_root=rng.random() < 0.4))
    return found


H100_ONLY = f"device.attributes['{DRIVER}'].productName.startsWith('NVIDIA H100')"
UNDER_60GI = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('60Gi')) < 0"
FITTING_NODES = (("NVIDIA A100-SXM4-40GB", "40Gi"), ("NVIDIA A100-SXM4-40GB", "40Gi"), ("NVIDIA H100 80GB HBM3", "80Gi"))
PIECES = ((4,), (3, 1), (2, 2), (2, 1, 1), (1, 1, 1, 1))


def fitting_workload(seed: int, fill: float = 1.0) -> list[dict[str, Any]]:
    """Claims that cut each PCIe root (two of four GPUs per node, nodes as FITTING_NODES) into pieces, each piece a
    claim the node's product suits (some only that product, some under one root), shuffled; the first `fill` of
    them. All fit at once if each goes where it was cut from: a pod left pending is a placement that spent devices
    another claim needed."""
    import random

    rng = random.Random(seed)
    specs = []
    for product, _ in FITTING_NODES:
        for _root in range(2):
            for count in rng.choice(PIECES):
                narrow = H100_ONLY if "H100" in product else UNDER_60GI
                specs.append(claim_spec(count, selector=narrow if rng.random() < 0.4 else None,
                                        match_root=count > 1 and rng.random() < 0.6))
    rng.shuffle(specs)
    return specs[: round(len(specs) * fill)]


def decided(scenario: Scenario, name: str, timeout: float = 60, settle: float = 4) -> str | None:
    """The pod's node once bound, or None once the scheduler has said why it waits and still says so `settle`
    seconds later (a pod made just after its nodes may be told none fits before the scheduler sees them; ours
    also says when the claim is not created yet)."""
    deadline, since = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        pod = scenario.core.read_namespaced_pod(name, scenario.namespace)
        if pod.spec.node_name:
            return str(pod.spec.node_name)
        told = any(c.type == "PodScheduled" and c.status == "False" and "not created yet" not in (c.message or "")
                   for c in pod.status.conditions or ())
        since = (since or time.monotonic()) if told else None
        if since is not None and time.monotonic() - since >= settle:
            return None
        time.sleep(0.2)
    raise AssertionError(f"{scenario.which}: {name} neither bound nor told why within {timeout:.0f}s")


FITTING_SEED = 26  # benchmarks/dra_placement.py --per-seed: ours 0 pending, kube-scheduler emulated 1.6 of 16


def test_random_dra_workloads_are_allocated_validly_and_ours_leaves_no_more_pending(scenarios):
    """Random claims that all fit if placed well (fitting_workload), the same on the same shape of nodes under each
    scheduler, one pod at a time (each decided before the next is made, so both see the same order): every
    allocation meets its selectors and constraints on devices of the pod's node, no device is given twice, and ours
    leaves no more pods pending than kube-scheduler (for this seed none: benchmarks/dra_placement.py has 40)."""
    from scheduler_core.dra import cel, slices

    pools = {}
    for which, scenario in scenarios.items():
        pool = pools[which] = scenario.pool("random", nodes=2)
        scenario.pool("random-h100", nodes=1, product="NVIDIA H100 80GB HBM3", memory="80Gi")
        scenario.core.patch_node(f"dra-{which}-random-h100-{SUFFIX}-0", {"metadata": {"labels": {"e2e-pool": pool}}})
    placed: dict[str, dict[str, str | None]] = {which: {} for which in scenarios}
    for index, spec in enumerate(fitting_workload(FITTING_SEED)):
        name = f"random-{index}"
        for which, scenario in scenarios.items():  # the claim just before its pod: no scheduler knows what comes next
            scenario.resource.create_namespaced_resource_claim(scenario.namespace, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name}, "spec": spec})
            scenario.pod(name, pools[which], claim=name)
        for which, scenario in scenarios.items():
            placed[which][name] = decided(scenario, name)
    for which, scenario in scenarios.items():
        published = {(s["spec"]["pool"]["name"], d.name): d
                     for s in raw(scenario.resource.list_resource_slice)["items"] if s["spec"]["driver"] == DRIVER
                     for d in [*slices.parse(s).devices]}
        seen: set[tuple[str, str]] = set()
        for name, node in placed[which].items():
            if not node:
                continue
            claim = scenario.claim_of(name)
            devices = [published[(r["pool"], r["device"])] for r in claim["status"]["allocation"]["devices"]["results"]]
            spec = claim["spec"]["devices"]
            for device in devices:
                assert (device.pool, device.name) not in seen, f"{which}: {device.name} of {device.pool} twice"
                seen.add((device.pool, device.name))
                assert device.pool == node, f"{which}: {name} on {node} holds a device of {device.pool}"
                for selector in spec["requests"][0]["exactly"].get("selectors", []):
                    assert cel.compile_selector(selector["cel"]["expression"]).matches(device), (which, name)
            if spec.get("constraints"):
                roots = {d.attributes["resource.kubernetes.io/pcieRoot"]["string"] for d in devices}
                assert len(roots) == 1, f"{which}: {name} spans PCIe roots {roots}"
    pending = {which: sorted(name for name, node in found.items() if not node) for which, found in placed.items()}
    print(f"pods left pending: {pending}")
    assert len(pending["ours"]) <= len(pending["kube"]), pending


# --- extended resources served by DRA ------------------------------------------------------------------------------

EXTENDED_CLASS = f"gpu-extended-{SUFFIX}"
EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


@pytest.fixture(scope="module")
def extended_class(api: Any) -> Any:
    """A DeviceClass serving `nvidia.com/gpu` through DRA, as NVIDIA's driver offers for pods written for the device
    plugin. It changes how every scheduler treats `nvidia.com/gpu` on nodes without it, so it lives only while the
    tests below run (the last of this module)."""
    resource = client.ResourceV1Api(api)
    resource.create_device_class({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": EXTENDED_CLASS},
        "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {
            "expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"}}]}})
    time.sleep(1)  # both schedulers' watches see the class before the first pod
    yield
    resource.delete_device_class(EXTENDED_CLASS)


def gpu_pod(scenario: Scenario, name: str, pool: str, gpus: int, *, init_gpus: int = 0) -> None:
    spec: dict[str, Any] = {
        "schedulerName": scenario.scheduler, "nodeSelector": {"e2e-pool": pool},
        "containers": [{"name": "main", "image": "registry.invalid/cuda:12",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if init_gpus:
        spec["initContainers"] = [{"name": "warm", "image": "registry.invalid/cuda:12",
                                   "resources": {"limits": {"nvidia.com/gpu": str(init_gpus)}}}]
    scenario.core.create_namespaced_pod(scenario.namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})


def extended_claim(scenario: Scenario, pod: str) -> dict[str, Any]:
    """The claim the scheduler made for the pod, found as the kubelet finds it: by the pod's status."""
    status = raw(scenario.core.read_namespaced_pod, pod, scenario.namespace)["status"]
    mapped = status.get("extendedResourceClaimStatus")
    assert mapped, f"{scenario.which}: {pod} has no extendedResourceClaimStatus: {status}"
    return raw(scenario.resource.read_namespaced_resource_claim, mapped["resourceClaimName"], scenario.namespace)


def test_a_pod_asking_for_nvidia_gpus_lands_on_a_dra_only_node_with_the_claim_the_kubelet_reads(run, extended_class):
    """A node without `nvidia.com/gpu` whose GPUs a DeviceClass serves: a plain pod asking for 2 (and an init
    container for 1) binds there; the scheduler made its claim as kube-scheduler does (owned by the pod, annotated,
    named after it, the finalizer, two devices of that node, reserved for the pod) and told the kubelet which request
    serves each container."""
    pool = run.pool("extended")
    gpu_pod(run, "plain", pool, 2, init_gpus=1)
    node = run.node_of("plain")
    assert node == f"{pool}-0"
    pod = raw(run.core.read_namespaced_pod, "plain", run.namespace)
    claim = extended_claim(run, "plain")
    meta = claim["metadata"]
    assert meta["name"].startswith("plain-extended-resources-")
    assert meta["annotations"][EXTENDED_ANNOTATION] == "true"
    assert [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in meta["ownerReferences"]] == [
        ("Pod", "plain", pod["metadata"]["uid"], True)]
    assert FINALIZER in meta["finalizers"]
    assert claim["spec"]["devices"]["requests"] == [{"name": "container-1-request-0", "exactly": {
        "deviceClassName": EXTENDED_CLASS, "allocationMode": "ExactCount", "count": 2}}]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {node}
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    mappings = pod["status"]["extendedResourceClaimStatus"]["requestMappings"]
    assert sorted((m["containerName"], m["requestName"]) for m in mappings) == [
        ("main", "container-1-request-0"), ("warm", "container-1-request-0")]
    assert "gpu-scheduler.io/gpu-devices" not in (pod["metadata"].get("annotations") or {})
    if run.which == "ours":  # our record of the binding lists the DRA devices too, by driver, pool and device
        wanted = sorted((r["driver"], r["pool"], r["device"]) for r in results)
        deadline = time.monotonic() + 30
        while True:
            conditions = raw(run.core.read_namespaced_pod, "plain", run.namespace)["status"].get("conditions") or []
            record = [json.loads(c["message"]) for c in conditions if c["type"] == "gpu-scheduler.io/GPUDevices"]
            if record or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert record and sorted((d["driver"], d["pool"], d["device"]) for d in record[0]) == wanted, record


def test_extended_gpus_fill_a_mixed_pool_and_free_again_when_their_pod_goes(run, extended_class):
    """A device-plugin node with 2 GPUs and a DRA-only node with 4: five pods of 2 GPUs, one at a time. Three bind
    (each DRA pod with a claim of its own, the device-plugin pod with none), no GPU is given twice, the rest wait
    saying why; once a DRA pod is deleted, its claim goes with it (owned by the pod) and a waiting pod binds."""
    pool = run.pool("mixed", count=4)
    cp.create_gpu_node(run.api, f"{pool}-dp", gpus=2, labels={"e2e-pool": pool})
    placed = {}
    for index in range(5):
        gpu_pod(run, f"mixed-{index}", pool, 2)
        placed[f"mixed-{index}"] = decided(run, f"mixed-{index}")
    bound = {name: node for name, node in placed.items() if node}
    assert sorted(bound.values()) == sorted([f"{pool}-dp", f"{pool}-0", f"{pool}-0"]), placed
    seen: set[str] = set()
    for name, node in bound.items():
        status = raw(run.core.read_namespaced_pod, name, run.namespace)["status"]
        if node.endswith("-dp"):
            assert not status.get("extendedResourceClaimStatus"), f"{run.which}: {name} on the device-plugin node"
            continue
        devices = [r["device"] for r in extended_claim(run, name)["status"]["allocation"]["devices"]["results"]]
        assert len(devices) == 2 and not seen & set(devices), (run.which, name, devices, seen)
        seen |= set(devices)
    waiting = [name for name, node in placed.items() if not node]
    dra_pod = next(name for name, node in bound.items() if not node.endswith("-dp"))
    claim_name = extended_claim(run, dra_pod)["metadata"]["name"]
    run.core.delete_namespaced_pod(dra_pod, run.namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not [c for c in raw(run.resource.list_namespaced_resource_claim, run.namespace)["items"]
                if c["metadata"]["name"] == claim_name]:
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"{run.which}: claim {claim_name} outlived its pod")
    assert run.node_of(waiting[0], timeout=60) == f"{pool}-0"


EXTENDED_PIECES = ((8,), (4, 4), (4, 2, 2), (4, 2, 1, 1), (3, 3, 2), (2, 2, 2, 2), (2, 2, 2, 1, 1))
# Seed 2: 1,2,1,1,2,2,1,2,2, then 8 and 2 on three nodes of 8 GPUs. Ours binpacks and places all; a scheduler that
# spreads the small pods over the three nodes has no node left for the 8.
EXTENDED_SEED = 2


def extended_workload(seed: int, nodes: int = 3) -> list[int]:
    """GPU counts of plain pods (`nvidia.com/gpu: N`) that cut each node's 8 GPUs into pieces, shuffled: all fit
    at once if each goes where it was cut from, so a pod left pending is a placement that spread GPUs another pod
    needed together."""
    import random

    rng = random.Random(seed)
    counts = [count for _ in range(nodes) for count in rng.choice(EXTENDED_PIECES)]
    rng.shuffle(counts)
    return counts


def test_pods_asking_nvidia_gpus_on_dra_nodes_ours_leaves_no_more_pending_than_kube_scheduler(scenarios,
                                                                                             extended_class):
    """The same plain GPU pods (extended_workload), one at a time, on the same DRA-only nodes under each scheduler:
    every claim made for them holds devices of the pod's node, none twice, and ours leaves no more pods pending
    than kube-scheduler."""
    pools = {which: scenario.pool("extended-fit", nodes=3) for which, scenario in scenarios.items()}
    placed: dict[str, dict[str, str | None]] = {which: {} for which in scenarios}
    for index, count in enumerate(extended_workload(EXTENDED_SEED)):
        name = f"fit-{index}"
        for which, scenario in scenarios.items():
            gpu_pod(scenario, name, pools[which], count)
        for which, scenario in scenarios.items():
            placed[which][name] = decided(scenario, name)
    for which, scenario in scenarios.items():
        seen: set[tuple[str, str]] = set()
        for name, node in placed[which].items():
            if not node:
                continue
            for result in extended_claim(scenario, name)["status"]["allocation"]["devices"]["results"]:
                assert result["pool"] == node, f"{which}: {name} on {node} holds {result}"
                assert (result["pool"], result["device"]) not in seen, f"{which}: {result} twice"
                seen.add((result["pool"], result["device"]))
    pending = {which: sorted(name for name, node in found.items() if not node) for which, found in placed.items()}
    print(f"GPU pods left pending: {pending}; nodes: {placed}")
    assert len(pending["ours"]) <= len(pending["kube"]), pending
