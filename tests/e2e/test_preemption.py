"""Priority and preemption with `gpu-scheduler run`, on the real apiserver and the real kube-controller-manager (its
disruption controller keeps the PodDisruptionBudgets' status), with PriorityClasses created through the API.

There is no kubelet: a bound pod deleted with a grace period stays Terminating until its kubelet confirms. The test
plays that part (`Kubelet`): it removes, with grace period 0, each Terminating pod of the test's namespace, as a
kubelet does once the containers have stopped; paused, it lets a victim stay Terminating, as a slow shutdown would.

Each scenario has a node pool of its own, chosen by the pods' node selector (nodes outside it reject for node
affinity, which no eviction cures, so preemption never looks at them), and pods placed on it up front with
`spec.nodeName` (as the API shows pods some scheduler bound)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import DEVICES, GPU, MILLI, start_scheduler
from tests.e2e.standins import Poller

SUFFIX = uuid.uuid4().hex[:5]
SCHEDULER = f"preempt-{SUFFIX}"
NAMESPACE = f"preempt-{SUFFIX}"
CLASSES = {"lowest": 5, "low": 10, "mid": 50, "high": 1000, "top": 2000}
POLITE = f"polite-{SUFFIX}"  # high, with preemptionPolicy: Never


def class_name(level: str) -> str:
    return f"{level}-{SUFFIX}"


class Kubelet(Poller):
    """Finishes the deletion of the namespace's Terminating pods (grace period 0), unless paused."""

    name = "e2e-kubelet"

    def __init__(self, api: Any):
        super().__init__()
        self.core: Any = client.CoreV1Api(api)
        self.running = threading.Event()
        self.running.set()

    def poll(self) -> None:
        if self.running.is_set():
            for pod in self.core.list_namespaced_pod(NAMESPACE).items:
                if pod.metadata.deletion_timestamp is not None:
                    self.core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)


@pytest.fixture(scope="module")
def cluster(plane: Any, api: Any, scheduler_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The namespace, the PriorityClasses, the kubelet stand-in and one `gpu-scheduler run` for the module."""
    from tests.e2e.conftest import LOG_SOURCES

    core: Any = client.CoreV1Api(api)
    scheduling: Any = client.SchedulingV1Api(api)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    for level, value in CLASSES.items():
        scheduling.create_priority_class({"metadata": {"name": class_name(level)}, "value": value})
    scheduling.create_priority_class({"metadata": {"name": POLITE}, "value": CLASSES["high"],
                                      "preemptionPolicy": "Never"})
    work = tmp_path_factory.mktemp("preemption")
    config = work / "config.yaml"
    config.write_text(f"schedulerName: {SCHEDULER}\n")
    kubelet = Kubelet(api).start()
    state = {"work": work, "config": config, "kubeconfig": scheduler_kubeconfig, "kubelet": kubelet}
    state["scheduler"] = start_scheduler(scheduler_kubeconfig, work, "--config", str(config), name="preemption-run")
    LOG_SOURCES.append(lambda: ("gpu-scheduler run (preemption)", state["scheduler"].logs()[-8000:]))
    yield state
    kubelet.stop()
    state["scheduler"].stop()
    for level in CLASSES:
        scheduling.delete_priority_class(class_name(level))
    scheduling.delete_priority_class(POLITE)


def pool(api: Any, name: str, gpus: int, count: int = 2) -> list[str]:
    nodes = [f"{name}-{SUFFIX}-{i}" for i in range(count)]
    for node in nodes:
        cp.create_gpu_node(api, node, gpus=gpus, labels={"e2e-pool": f"{name}-{SUFFIX}"})
    return nodes


def pod(api: Any, name: str, pool_name: str, level: str, *, gpus: int = 0, milli: int | None = None,
        node: str | None = None, devices: list[dict[str, int]] | None = None, labels: dict[str, str] | None = None,
        grace: int = 0, priority_class: str | None = None) -> Any:
    """A pod of the pool, placed on `node` (as bound by someone) or left to our scheduler."""
    annotations = {}
    if milli is not None:
        annotations[MILLI] = str(milli)
    if devices is not None:
        annotations[DEVICES] = json.dumps(devices)
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER, "priorityClassName": priority_class or class_name(level),
        "terminationGracePeriodSeconds": grace, "nodeSelector": {"e2e-pool": f"{pool_name}-{SUFFIX}"},
        "containers": [{"name": "main", "image": "registry.invalid/cuda:12",
                        "resources": {"limits": {GPU: str(gpus)} if gpus else {}}}]}
    if node:
        spec["nodeName"] = node
    body = {"metadata": {"name": name, "labels": labels or {}, "annotations": annotations}, "spec": spec}
    return client.CoreV1Api(api).create_namespaced_pod(NAMESPACE, body)


def names_on(api: Any, node: str) -> set[str]:
    found = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE, field_selector=f"spec.nodeName={node}").items
    return {p.metadata.name for p in found}


def bound_to(api: Any, name: str, timeout: float = 60) -> str:
    core: Any = client.CoreV1Api(api)
    wait_for(lambda: core.read_namespaced_pod(name, NAMESPACE).spec.node_name, timeout=timeout,
             what=f"pod {name} bound")
    return str(core.read_namespaced_pod(name, NAMESPACE).spec.node_name)


def gone(api: Any, name: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespaced_pod(name, NAMESPACE)
    except ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def preempted_events(api: Any) -> dict[str, str]:
    """victim -> the message of its Preempted event."""
    events = client.CoreV1Api(api).list_namespaced_event(NAMESPACE, field_selector="reason=Preempted").items
    return {e.involved_object.name: e.message for e in events}


def attempts(scheduler: Any) -> float:
    """gpu_scheduler_preemption_attempts_total of a running `gpu-scheduler run`."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return 0.0
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("gpu_scheduler_preemption_attempts_total "))


def test_a_high_priority_gpu_pod_evicts_the_lowest_priority_pods_on_one_node_and_is_bound_there(api, cluster):
    a, b = pool(api, "basic", gpus=4)
    for name, level, node in (("basic-low-0", "low", a), ("basic-low-1", "low", a),
                              ("basic-mid-0", "mid", b), ("basic-mid-1", "mid", b)):
        pod(api, name, "basic", level, gpus=2, node=node)
    urgent = pod(api, "basic-urgent", "basic", "high", gpus=2)
    assert bound_to(api, "basic-urgent") == a
    left = names_on(api, a) - {"basic-urgent"}
    assert len(left) == 1 and left <= {"basic-low-0", "basic-low-1"}  # the fewest: one 2-GPU pod
    assert names_on(api, b) == {"basic-mid-0", "basic-mid-1"}  # higher priority than the other node's: untouched
    victim = ({"basic-low-0", "basic-low-1"} - left).pop()
    events = preempted_events(api)
    assert events.get(victim) == f"Preempted by pod {urgent.metadata.uid} on node {a}"


def test_a_pod_its_budget_protects_survives_when_another_node_can_serve(api, cluster):
    a, b = pool(api, "budget", gpus=2)
    pod(api, "budget-guarded", "budget", "low", gpus=2, node=a, labels={"app": f"guarded-{SUFFIX}"})
    pod(api, "budget-free", "budget", "low", gpus=2, node=b)
    policy: Any = client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, {
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": f"guarded-{SUFFIX}"}}}})
    # the disruption controller has counted it: no healthy pod without a kubelet, so no disruption is allowed
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget("guarded", NAMESPACE).status.observed_generation,
             timeout=30, what="the disruption controller to count the budget")
    assert policy.read_namespaced_pod_disruption_budget("guarded", NAMESPACE).status.disruptions_allowed == 0
    pod(api, "budget-urgent", "budget", "high", gpus=2)
    assert bound_to(api, "budget-urgent") == b
    assert not gone(api, "budget-guarded") and gone(api, "budget-free")


def test_a_pod_that_never_preempts_waits_and_equal_or_higher_priority_pods_are_never_victims(api, cluster):
    a, b = pool(api, "never", gpus=2)
    pod(api, "never-low", "never", "low", gpus=2, node=a)
    pod(api, "never-top", "never", "top", gpus=2, node=b)
    pod(api, "never-polite", "never", "high", gpus=2, priority_class=POLITE)
    core: Any = client.CoreV1Api(api)

    def waiting_because(name: str, text: str) -> bool:
        conditions = core.read_namespaced_pod(name, NAMESPACE).status.conditions or []
        return any(c.type == "PodScheduled" and c.status == "False" and text in (c.message or "")
                   for c in conditions)

    wait_for(lambda: waiting_because("never-polite", "preemption: not eligible due to preemptionPolicy=Never."),
             timeout=30, what="the polite pod to wait, saying why")
    pod(api, "never-peer", "never", "low", gpus=2)  # the same priority as the only pod it could evict
    wait_for(lambda: waiting_because("never-peer", "preemption: 0/"), timeout=30, what="the peer to wait")
    message = next(c.message for c in core.read_namespaced_pod("never-peer", NAMESPACE).status.conditions
                   if c.type == "PodScheduled")
    assert "No preemption victims found for incoming pod" in message
    assert names_on(api, a) == {"never-low"} and names_on(api, b) == {"never-top"}
    for name in ("never-polite", "never-peer"):  # the restart test counts the attempts of the only pod left
        core.delete_namespaced_pod(name, NAMESPACE)


def test_a_share_preempts_only_where_one_device_gets_enough_room(api, cluster):
    """Node a's victims would free 400 thousandths, 200 on each of two GPUs, which would leave 300 free on each;
    node b's one victim frees 600 on its only GPU. Counted as a sum of free room, node a would do (600), and its
    victims have the lower priority (upstream's second criterion): device-aware, only b is a candidate."""
    a, b = f"share-{SUFFIX}-a", f"share-{SUFFIX}-b"
    cp.create_gpu_node(api, a, gpus=2, labels={"e2e-pool": f"share-{SUFFIX}"})
    cp.create_gpu_node(api, b, gpus=1, labels={"e2e-pool": f"share-{SUFFIX}"})
    for i in range(2):
        pod(api, f"share-a-top-{i}", "share", "top", milli=700, node=a, devices=[{"index": i, "milli": 700}])
        pod(api, f"share-a-low-{i}", "share", "lowest", milli=200, node=a, devices=[{"index": i, "milli": 200}])
    pod(api, "share-b-low", "share", "low", milli=600, node=b, devices=[{"index": 0, "milli": 600}])
    pod(api, "share-b-mid", "share", "mid", milli=300, node=b, devices=[{"index": 0, "milli": 300}])
    pod(api, "share-urgent", "share", "high", milli=500)
    assert bound_to(api, "share-urgent") == b
    assert gone(api, "share-b-low")
    assert names_on(api, a) == {"share-a-top-0", "share-a-top-1", "share-a-low-0", "share-a-low-1"}
    assert names_on(api, b) == {"share-b-mid", "share-urgent"}


def test_a_scheduler_killed_mid_preemption_and_restarted_neither_evicts_more_nor_loses_the_nomination(api, cluster):
    """The victim takes its time to stop (the kubelet is paused); the scheduler is killed meanwhile and started
    again. It must wait for that victim (it is being deleted by a preemption, on the pod's nominated node), not evict
    the other node's pod, and then bind the pod where the room was made."""
    a, b = pool(api, "restart", gpus=2)
    kubelet = cluster["kubelet"]
    kubelet.running.clear()
    try:
        pod(api, "restart-low-a", "restart", "low", gpus=2, node=a, grace=300)
        pod(api, "restart-low-b", "restart", "low", gpus=2, node=b, grace=300)
        pod(api, "restart-urgent", "restart", "high", gpus=2)
        core: Any = client.CoreV1Api(api)

        def nominated() -> str | None:
            return core.read_namespaced_pod("restart-urgent", NAMESPACE).status.nominated_node_name

        wait_for(nominated, timeout=60, what="a nominated node")
        node = nominated()
        victim, spared = ("restart-low-a", "restart-low-b") if node == a else ("restart-low-b", "restart-low-a")
        wait_for(lambda: core.read_namespaced_pod(victim, NAMESPACE).metadata.deletion_timestamp, timeout=30,
                 what="the victim to be deleted")
        conditions = core.read_namespaced_pod(victim, NAMESPACE).status.conditions or []
        assert any(c.type == "DisruptionTarget" and c.reason == "PreemptionByScheduler" for c in conditions)

        cluster["scheduler"].stop(kill=True)
        cluster["scheduler"] = start_scheduler(cluster["kubeconfig"], cluster["work"], "--config",
                                               str(cluster["config"]), name="preemption-run-again")
        # the restarted scheduler has tried the pod again (its only pending pod), and done nothing more
        wait_for(lambda: attempts(cluster["scheduler"]) >= 1, timeout=60, what="the restarted scheduler to try")
        time.sleep(3)
        assert nominated() == node
        assert core.read_namespaced_pod(spared, NAMESPACE).metadata.deletion_timestamp is None
    finally:
        kubelet.running.set()
    assert bound_to(api, "restart-urgent") == node
    assert not gone(api, spared)


def test_a_victims_marking_cannot_land_on_another_pod_of_its_name(api, cluster):
    """The eviction's status patch names the victim's uid: against a pod re-created under that name the apiserver
    refuses it (the uid is immutable), so the new pod never carries the old one's DisruptionTarget."""
    from gpu_scheduler import rawapi

    (a,) = pool(api, "renamed", gpus=1, count=1)
    pod(api, "renamed-victim", "renamed", "low", gpus=1, node=a)
    with pytest.raises(ApiException) as refused:
        rawapi.request(api, "PATCH", f"/api/v1/namespaces/{NAMESPACE}/pods/renamed-victim/status",
                       {"metadata": {"uid": "00000000-0000-0000-0000-000000000000"},
                        "status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}},
                       content_type=rawapi.STRATEGIC_MERGE_PATCH)
    assert refused.value.status in (409, 422)
    conditions = client.CoreV1Api(api).read_namespaced_pod("renamed-victim", NAMESPACE).status.conditions or []
    assert not any(c.type == "DisruptionTarget" for c in conditions)
