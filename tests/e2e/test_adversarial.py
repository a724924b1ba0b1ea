"""A namespace-scoped tenant against the scheduler, on the real control plane.

`tenant-x` authenticates with a client certificate and may only create, read, patch, update and delete
pods in its own namespace: no pods/binding, no pods/status. That is enough to write everything the
scheduler reads from a pod: annotations (a share, GPU memory, the devices a pod holds), resources,
tolerations, affinity, and `spec.nodeName`, which binds a pod without any scheduler, so the scheduler
only accounts it. Each attempt runs against `gpu-scheduler run` and against `gpu-scheduler extender`
behind the real kube-scheduler (a module-scoped scheduler per mode, restarted during each attempt while
the tenant's pods exist), and, where it reads pods, against the webhook.

Whatever the tenant writes: scheduling goes on (another tenant's ordinary GPU pods are bound within a
deadline, health stays 200), no GPU is given beyond capacity, and no tenant takes GPUs another tenant
holds. The other tenant's pods are judged by the devices they had when the scheduler bound them.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e import chaos, conftest, installing, scheduling
from tests.e2e import controlplane as cp
from scheduler_core import pods
from tests.e2e.installing import wait_for

SUFFIX = uuid.uuid4().hex[:5]
POOL = f"adv-{SUFFIX}"
MODES = ("run", "extender")
TENANT = "tenant-x"
MEMORY = "gpu.nvidia.com/memory"
MODEL = "gpu.nvidia.com/model"
BOUND_WITHIN = 30.0  # seconds for an ordinary pod to be bound while an attack goes on
UNHEALTHY_FOR = 10.0  # seconds of failing health that end a wait at once (a restarted extender lists first)
RSS_SLACK_MIB = 150.0


@pytest.fixture(scope="module")
def pool(api: Any) -> chaos.Pool:
    return chaos.Pool.named(POOL, [8] * 4).create(api)


@dataclass(frozen=True)
class Tenants:
    victim: str  # the other tenant's namespace; its pods are created by the admin
    attacker: str  # tenant-x's namespace (opted in to the webhook)
    core: Any  # admin
    tenant: Any  # CoreV1Api authenticated as tenant-x


@pytest.fixture(scope="module")
def tenants(plane: cp.ControlPlane, api: Any) -> Tenants:
    """tenant-x may write pods in its namespace and nothing else. Its namespace sorts before the victim's,
    so a scheduler rebuilding its model from a pod list meets the tenant's pods first."""
    core: Any = client.CoreV1Api(api)
    attacker, victim = f"adv-a-tenant-{SUFFIX}", f"adv-v-victim-{SUFFIX}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": attacker, "labels": {"gpu-scheduler.io/inject": "enabled"}}})
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": victim}})
    rbac: Any = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(attacker, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pod-writer"},
        "rules": [{"apiGroups": [""], "resources": ["pods"],
                   "verbs": ["create", "get", "list", "watch", "patch", "update", "delete"]}]})
    rbac.create_namespaced_role_binding(attacker, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "pod-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}]})
    tenant: Any = client.CoreV1Api(plane.api_client(plane.kubeconfig_for(TENANT)))
    return Tenants(victim, attacker, core, tenant)


@dataclass
class Target:
    scheduler: chaos.Scheduler
    name: str  # the schedulerName its pods carry


@pytest.fixture(scope="module", params=MODES)
def target(request: pytest.FixtureRequest, plane: cp.ControlPlane, pool: chaos.Pool, scheduler_kubeconfig: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """`run` with the shipped scheduler RBAC, or the extender behind kube-scheduler; one mode at a time."""
    mode = request.param
    name = f"adv-{mode}-{SUFFIX}"
    work = tmp_path_factory.mktemp(f"adversarial-{mode}")
    config_file = work / "config.yaml"
    config_file.write_text(f"schedulerName: {name}\n")
    scheduler: chaos.Scheduler
    if mode == "run":
        scheduler = chaos.RunScheduler(scheduler_kubeconfig, config_file, work, name="run")
    else:
        # the extender with a token of its shipped account, which must be enough for its records and events
        installing.apply_rbac(plane, installing.EXTENDER_ACCOUNT, installing.EXTENDER_OVERLAY)
        account = plane.kubeconfig_for_service_account(installing.NAMESPACE, installing.EXTENDER_ACCOUNT)
        scheduler = chaos.ExtenderScheduler(plane, account, config_file, work, profile=name,
                                            min_nodes=len(pool.gpus), kube_scheduler_kubeconfig=plane.kubeconfig)

    def logs() -> tuple[str, str]:
        return f"{mode} under attack", scheduler.logs()

    conftest.LOG_SOURCES.append(logs)
    scheduler.start()
    yield Target(scheduler, name)
    scheduler.stop()
    conftest.LOG_SOURCES.remove(logs)


@dataclass
class Attack:
    """One attempt: the victim's pods, the tenant's pods, and what the API shows of both."""

    target: Target
    tenants: Tenants
    pool: chaos.Pool
    trusted: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # pod -> devices when bound
    _names: Iterator[int] = field(default_factory=itertools.count)

    @property
    def node(self) -> str:
        """The node the tenant's self-bound pods name."""
        return self.pool.names[0]

    def victims(self, count: int, *, host: str | None = None, gpus: int = 0, milli: int = 0) -> list[str]:
        """Ordinary pods of the other tenant: `gpus` whole GPUs or a `milli` share (default: 1 GPU, every
        third a 500 share), anywhere in the pool or pinned to `host`."""
        names = []
        for _ in range(count):
            i = next(self._names)
            shape = (gpus, milli) if gpus or milli else ((0, 500) if i % 3 == 2 else (1, 0))
            body = chaos.gpu_pod(f"victim-{i}", self.target.name, self.pool.label, host=host,
                                 gpus=shape[0], milli=shape[1])
            self.tenants.core.create_namespaced_pod(self.tenants.victim, body)
            names.append(f"victim-{i}")
        return names

    def wait_bound(self, names: list[str], namespace: str | None = None, *, phase: str) -> None:
        """Until every pod named is bound; fail at once when health has failed for UNHEALTHY_FOR seconds."""
        namespace = namespace or self.tenants.victim
        deadline = time.monotonic() + BOUND_WITHIN
        unhealthy_since: float | None = None
        while True:
            pods = {p["metadata"]["name"]: p for p in
                    scheduling.api_json(self.tenants.core.list_namespaced_pod, namespace)["items"]}
            for name in names:
                pod = pods.get(name)
                if pod is not None and pod["spec"].get("nodeName") and f"{namespace}/{name}" not in self.trusted:
                    self.trusted[f"{namespace}/{name}"] = scheduling.devices_of(pod) or []
            waiting = [name for name in names if not (pods.get(name) or {"spec": {}})["spec"].get("nodeName")]
            if not waiting:
                return
            status, body = self.target.scheduler.health()
            now = time.monotonic()
            unhealthy_since = None if status == 200 else (unhealthy_since or now)
            if unhealthy_since is not None and now - unhealthy_since >= UNHEALTHY_FOR:
                raise AssertionError(f"{phase}: {self.target.scheduler.mode} health {status} {body[:300]!r} for "
                                     f"{UNHEALTHY_FOR:.0f}s; pods still pending: {waiting}")
            if now > deadline:
                reasons = {name: _reason(pods.get(name)) for name in waiting}
                raise AssertionError(f"{phase}: not bound within {BOUND_WITHIN:.0f}s (health {status} "
                                     f"{body[:100]!r}): {reasons}")
            time.sleep(0.3)

    def wait_refused(self, names: list[str], *, phase: str) -> None:
        """Until every pod named is PodScheduled=False with a message (and none is bound)."""

        def refused() -> bool:
            pods = {p["metadata"]["name"]: p for p in
                    scheduling.api_json(self.tenants.core.list_namespaced_pod, self.tenants.victim)["items"]}
            bound = [name for name in names if pods[name]["spec"].get("nodeName")]
            assert not bound, f"{phase}: bound although the node has no room left: " + ", ".join(
                f"{name} -> {pods[name]['spec']['nodeName']} {scheduling.devices_of(pods[name])}" for name in bound)
            return all(_refusal(pods[name]) for name in names)

        wait_for(refused, f"{phase}: {names} to be refused with a reason", timeout=BOUND_WITHIN)

    def wait_recorded(self, name: str) -> list[tuple[int, int]]:
        """Until the binder's record of the tenant's pod `name` is there; its devices, as (index, milli)."""
        recorded: list[tuple[int, int]] = []

        def there() -> bool:
            pod = scheduling.api_json(self.tenants.core.read_namespaced_pod, name, self.tenants.attacker)
            devices = pods.recorded_devices(pod)
            recorded[:] = [(d.index, d.milli) for d in devices or ()]
            return devices is not None

        wait_for(there, f"the devices of {name} to be recorded in condition {pods.DEVICES_CONDITION}",
                 timeout=BOUND_WITHIN)
        return recorded

    def events(self, name: str, reason: str) -> list[Any]:
        """The events with `reason` about the tenant's pod `name`."""
        return [e for e in self.tenants.core.list_namespaced_event(self.tenants.attacker).items
                if e.involved_object.name == name and e.reason == reason]

    def create(self, body: dict[str, Any]) -> Any:
        """Create a pod as tenant-x, in its namespace."""
        return self.tenants.tenant.create_namespaced_pod(self.tenants.attacker, body)

    def restart(self) -> None:
        """Restart the scheduler while the tenant's pods exist; it must come back by itself."""
        self.target.scheduler.restart(ready=False)

    def assert_isolated(self) -> None:
        problems = self.problems()
        assert not problems, f"{self.target.scheduler.mode}: {len(problems)} problem(s):\n  " + "\n  ".join(problems)

    def problems(self) -> list[str]:
        """Isolation, from the API: the victims' pods keep the node and devices they were bound with, the
        devices the scheduler handed out overlap nowhere, and no node is given beyond its declared GPUs."""
        core = self.tenants.core
        state = chaos.snapshot(core, [self.tenants.victim, self.tenants.attacker])
        by_name = {scheduling.pod_name(p): p for p in state.pods}
        problems = []
        for name, devices in self.trusted.items():
            pod = by_name.get(name)
            if pod is not None and name.startswith(f"{self.tenants.victim}/") and scheduling.devices_of(pod) != devices:
                problems.append(f"{name}: devices changed from {devices} to {scheduling.devices_of(pod)}")
        scheduled = [p for p in state.pods if scheduling.pod_name(p) in self.trusted]
        problems += scheduling.capacity_problems(scheduled, state.nodes, scheduler=self.target.name,
                                                 devices=self.trusted)
        problems += chaos.held_problems(state, trusted=self.trusted)
        return problems

    def clean_up(self) -> None:
        """Delete the attempt's pods, then restart the scheduler: what one attempt did to it (a stopped loop,
        a model or learned workload gone wrong) must not be blamed on the next."""
        for namespace in (self.tenants.attacker, self.tenants.victim):
            self.tenants.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_for(lambda: not any(scheduling.api_json(self.tenants.core.list_namespaced_pod, ns)["items"]
                                 for ns in (self.tenants.attacker, self.tenants.victim)),
                 "the attempt's pods to be gone")
        self.target.scheduler.restart()


def _reason(pod: dict[str, Any] | None) -> str:
    """Why a pod waits, as its PodScheduled condition says (shortened)."""
    for condition in (pod or {"status": {}})["status"].get("conditions") or []:
        if condition["type"] == "PodScheduled":
            return f"{condition['status']}: {(condition.get('message') or '')[:160]}"
    return "no PodScheduled condition"


def _refusal(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message")
               for c in pod["status"].get("conditions") or [])


@pytest.fixture()
def attack(target: Target, tenants: Tenants, pool: chaos.Pool) -> Iterator[Attack]:
    attempt = Attack(target, tenants, pool)
    yield attempt
    attempt.clean_up()


def tenant_pod(name: str, *, node: str | None = None, annotations: dict[str, str] | None = None,
               requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
               spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod with whatever the tenant wrote; with `node` it names its node itself, so no scheduler binds it."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {**({"nodeName": node} if node else {}), "terminationGracePeriodSeconds": 0, **(spec or {}),
                     "containers": [{"name": "main", "image": "registry.invalid/cuda:12",
                                     "resources": {"requests": requests or {}, "limits": limits or {}}}]}}


ODD_SCHEDULING_FIELDS = {
    "tolerations": [{"operator": "Exists"},
                    {"key": "k", "operator": "Equal", "value": "v" * 63, "effect": "NoExecute",
                     "tolerationSeconds": 9223372036854775807}],
    "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                   "values": [f"n{i}" for i in range(1000)]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n" * 253]}]},
            {"matchExpressions": [{"key": "k", "operator": "Gt", "values": ["9223372036854775807"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "preference": {"matchExpressions": [{"key": f"k{i}", "operator": "Exists"}]}}
            for i in range(200)]}},
}

# What a tenant can write on a pod that the scheduler reads: pytest id -> tenant_pod() keywords.
HOSTILE = {
    "milli-superscript-two": {"annotations": {scheduling.MILLI: "²"}},
    "milli-5000-digits": {"annotations": {scheduling.MILLI: "9" * 5000}},
    "memory-superscript-two": {"annotations": {MEMORY: "²"}},
    "devices-index-true": {"annotations": {scheduling.DEVICES: '[{"index": true}]'},
                           "limits": {scheduling.GPU: "1"}},
    "requests-memory-100P": {"requests": {"memory": "100P"}},
    "requests-ephemeral-storage-100P": {"requests": {"ephemeral-storage": "100P"}},
    "milli-arabic-indic-digits": {"annotations": {scheduling.MILLI: "٥٠٠"}},
    "odd-tolerations-and-affinity": {"spec": ODD_SCHEDULING_FIELDS},
}


def test_the_tenant_may_write_its_own_pods_and_nothing_more(tenants, pool):
    node = pool.names[0]
    tenants.tenant.create_namespaced_pod(tenants.attacker, tenant_pod("probe", node=node), dry_run="All")
    refused = []
    attempts = {
        "create pods/binding": lambda: tenants.tenant.create_namespaced_pod_binding(
            "probe", tenants.attacker, {"metadata": {"name": "probe"}, "target": {"kind": "Node", "name": node}},
            _preload_content=False),
        "patch pods/status": lambda: tenants.tenant.patch_namespaced_pod_status(
            "probe", tenants.attacker, {"status": {"phase": "Running"}}),
        "create pods in another namespace": lambda: tenants.tenant.create_namespaced_pod(
            tenants.victim, tenant_pod("probe", node=node), dry_run="All"),
        "patch nodes": lambda: tenants.tenant.patch_node(node, {"spec": {"unschedulable": True}}),
    }
    for what, call in attempts.items():
        try:
            call()
        except ApiException as err:
            refused.append((what, err.status))
    assert refused == [(what, 403) for what in attempts]


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_self_bound_pod_does_not_stop_scheduling(attack, hostile):
    """The value on a pod the tenant binds itself: victims are bound before, meanwhile, and after a restart
    of the scheduler while the pod still exists."""
    attack.wait_bound(attack.victims(3), phase="before the attack")
    attack.create(tenant_pod("hostile", node=attack.node, **hostile))
    attack.wait_bound(attack.victims(4), phase="with the hostile pod")
    attack.restart()
    attack.wait_bound(attack.victims(3), phase="after a restart with the hostile pod")
    attack.assert_isolated()


def test_hostile_pending_pods_are_refused_with_a_reason_and_scheduling_goes_on(attack):
    """The same values on pods left to the scheduler: each is bound sensibly or refused with a reason."""
    hostile = []
    for i, values in enumerate(HOSTILE.values()):
        body = tenant_pod(f"pending-{i}", **values)
        body["spec"].update(schedulerName=attack.target.name, nodeSelector={chaos.POOL_LABEL: attack.pool.label})
        attack.create(body)
        hostile.append(f"pending-{i}")
    attack.wait_bound(attack.victims(4), phase="with hostile pending pods")

    def settled() -> list[str] | None:
        pods = {p["metadata"]["name"]: p for p in
                scheduling.api_json(attack.tenants.core.list_namespaced_pod, attack.tenants.attacker)["items"]}
        waiting = [name for name in hostile if not pods[name]["spec"].get("nodeName") and not _refusal(pods[name])]
        return None if waiting else hostile

    wait_for(settled, "every hostile pending pod to be bound or refused with a reason", timeout=BOUND_WITHIN)
    attack.restart()
    attack.wait_bound(attack.victims(2), phase="after a restart with hostile pending pods")
    attack.assert_isolated()


def test_shares_that_claim_whole_gpus_take_no_more_than_they_declare(attack):
    """8 self-bound pods each declare 1/1000 of a GPU and claim a whole GPU in their devices annotation:
    they fit on one GPU, so another tenant still gets the other 7 of the node."""
    for index in range(8):
        attack.create(tenant_pod(f"claims-{index}", node=attack.node, annotations={
            scheduling.MILLI: "1", scheduling.DEVICES: json.dumps([{"index": index, "milli": 1000}])}))
    attack.wait_bound(attack.victims(4, host=attack.node, gpus=1), phase="whole GPUs beside the forged claims")
    attack.restart()
    attack.wait_bound(attack.victims(3, host=attack.node, gpus=1), phase="the same after a restart")
    attack.assert_isolated()


def test_a_pod_holding_whole_gpus_keeps_them_whatever_shares_it_claims(attack):
    """A self-bound pod declares all 8 GPUs of the node and claims 1/1000 of each: no other pod may be
    placed there, neither a share nor a whole GPU, before or after a restart."""
    attack.create(tenant_pod("holds-all", node=attack.node, limits={scheduling.GPU: "8"}, annotations={
        scheduling.DEVICES: json.dumps([{"index": index, "milli": 1} for index in range(8)])}))
    pinned = attack.victims(2, host=attack.node, milli=500) + attack.victims(1, host=attack.node, gpus=1)
    attack.wait_bound(attack.victims(2), phase="elsewhere in the pool")
    attack.wait_refused(pinned, phase="on the node the tenant holds")
    attack.restart()
    attack.wait_bound(attack.victims(2), phase="elsewhere in the pool after a restart")
    attack.wait_refused(pinned, phase="on the node the tenant holds, after a restart")
    attack.assert_isolated()


def test_a_devices_annotation_patched_onto_another_tenants_gpu_moves_nothing(attack):
    """A tenant's pod, bound by the scheduler, rewrites its devices annotation to the GPU of another tenant's
    pod on the same node, with an idle GPU below its own; then the scheduler restarts and rebuilds its model
    from the pods. Whichever of the two it restores first, neither the victim's GPU nor the tenant's real
    one may be given again: the node's 6 other GPUs go to new pods, and a 7th new pod is refused."""
    first = attack.victims(1, host=attack.node, gpus=1)
    attack.wait_bound(first, phase="a victim below the hole")
    second = attack.victims(1, host=attack.node, gpus=1)
    attack.wait_bound(second, phase="the victim whose GPU is claimed")
    attack.create(chaos.gpu_pod("forger", attack.target.name, attack.pool.label, host=attack.node, gpus=1))
    attack.wait_bound(["forger"], attack.tenants.attacker, phase="the tenant's pod")
    forger = attack.wait_recorded("forger")
    attack.tenants.core.delete_namespaced_pod(first[0], attack.tenants.victim, grace_period_seconds=0)  # the hole
    [(claimed, _)] = attack.trusted[f"{attack.tenants.victim}/{second[0]}"]
    forged = json.dumps([{"index": claimed, "milli": 1000}])
    attack.tenants.tenant.patch_namespaced_pod("forger", attack.tenants.attacker, {"metadata": {"annotations": {
        scheduling.DEVICES: forged}}})
    with pytest.raises(ApiException) as refused:  # nor may the tenant rewrite the record
        attack.tenants.tenant.patch_namespaced_pod_status("forger", attack.tenants.attacker, {"status": {
            "conditions": [{"type": pods.DEVICES_CONDITION, "status": "True", "message": forged}]}})
    assert refused.value.status == 403
    attack.restart()
    attack.wait_bound(attack.victims(6, host=attack.node, gpus=1), phase="the node's free GPUs after a restart")
    attack.wait_refused(attack.victims(1, host=attack.node, gpus=1), phase="one more than the node has")
    attack.assert_isolated()
    wait_for(lambda: any("differs from the devices recorded at binding" in e.message and
                         f"keeping GPU {forger[0][0]}" in e.message
                         for e in attack.events("forger", "GPUDevicesConflict")),
             "a GPUDevicesConflict event on the forger's pod saying which GPU it keeps", timeout=BOUND_WITHIN)


def test_long_annotations_on_pending_pods_cost_memory_only_while_they_exist(attack):
    """100 pending pods, each with its own 250 KiB gpu.nvidia.com/model (some 23 000 model names, none
    present): the scheduler's resident memory may grow while they exist, returns within RSS_SLACK_MIB once
    they are deleted, and scheduling goes on meanwhile."""
    scheduler = attack.target.scheduler
    attack.wait_bound(attack.victims(2), phase="before the long annotations")
    before = chaos.rss_mib(scheduler.pids())
    bodies = [chaos.gpu_pod(f"long-{i}", attack.target.name, attack.pool.label, gpus=1,
                            annotations={MODEL: _models(f"p{i:03d}", 250 * 1024)}) for i in range(100)]
    chaos.create_pods(attack.tenants.tenant, attack.tenants.attacker, bodies, threads=4)
    peak = before

    def all_refused() -> bool:
        nonlocal peak
        peak = max(peak, chaos.rss_mib(scheduler.pids()))
        pods = scheduling.api_json(attack.tenants.core.list_namespaced_pod, attack.tenants.attacker)["items"]
        return all(_refusal(p) for p in pods)

    wait_for(all_refused, "the 100 pods to be refused with a reason", timeout=120, interval=1.0)
    attack.wait_bound(attack.victims(2), phase="while the long annotations exist")
    during = max(peak, chaos.rss_mib(scheduler.pids()))
    with ThreadPoolExecutor(4) as deleting:  # the tenant's Role has no deletecollection
        list(deleting.map(lambda body: attack.tenants.tenant.delete_namespaced_pod(
            body["metadata"]["name"], attack.tenants.attacker, grace_period_seconds=0), bodies))
    attack.wait_bound(attack.victims(2), phase="after the long annotations are deleted")
    after = chaos.rss_mib(scheduler.pids())
    deadline = time.monotonic() + 30
    while after > before + RSS_SLACK_MIB and time.monotonic() < deadline:
        time.sleep(1.0)
        after = chaos.rss_mib(scheduler.pids())
    figures = f"{scheduler.mode} RSS: {before:.0f} MiB before, {during:.0f} MiB with the pods, {after:.0f} MiB after"
    print(figures)
    assert after <= before + RSS_SLACK_MIB, figures
    attack.assert_isolated()


def _models(prefix: str, size: int) -> str:
    """Distinct model names joined by '|', `size` characters at most."""
    names: list[str] = []
    length = -1
    for i in itertools.count():
        name = f"{prefix}m{i:05d}"
        if length + 1 + len(name) > size:
            return "|".join(names)
        names.append(name)
        length += 1 + len(name)
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def webhook(installed_webhook: Any, tenants: Tenants) -> Any:
    """The installed webhook's server, once the apiserver calls it for the tenant's namespace."""
    probe = tenant_pod("probe", limits={scheduling.GPU: "1"})
    wait_for(lambda: tenants.tenant.create_namespaced_pod(tenants.attacker, probe, dry_run="All").spec.scheduler_name
             == "gpu-scheduler", "the apiserver to call the webhook for the tenant's namespace")
    return installed_webhook.server


def _webhook_errors(server: Any) -> tuple[float, int]:
    """Reviews answered with an error (the metric), and failures logged with a traceback."""
    status, body = server.request("GET", "/metrics")
    assert status == 200
    errors = chaos.metric_sum(body.decode(), "gpu_scheduler_webhook_requests_total", outcome="error")
    return errors, server.logs().count("failed to decide")


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
def test_the_webhook_mutates_a_hostile_gpu_pod_like_any_other(webhook, tenants, hostile):
    """The tenant's pending GPU pod (dry run: nothing is stored) carries the value: the webhook decides as
    for any GPU pod, without an error, and goes on mutating the next pod."""
    errors = _webhook_errors(webhook)
    body = tenant_pod("hostile", **{**hostile, "limits": {**hostile.get("limits", {}), scheduling.GPU: "1"}})
    pod = tenants.tenant.create_namespaced_pod(tenants.attacker, body, dry_run="All")
    assert (pod.spec.scheduler_name, (pod.metadata.annotations or {}).get("gpu-scheduler.io/rule")) == (
        "gpu-scheduler", "any-gpu")
    plain = tenant_pod("plain", limits={scheduling.GPU: "1"})
    assert tenants.tenant.create_namespaced_pod(tenants.attacker, plain, dry_run="All").spec.scheduler_name == \
        "gpu-scheduler"
    assert _webhook_errors(webhook) == errors
