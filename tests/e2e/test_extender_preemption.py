"""kube-scheduler's own preemption behind `gpu-scheduler extender` with its preemptVerb: the real kube-scheduler
evicts the pods whose going frees GPU room for the preemptor, not those it would pick alone.

Each pool: two nodes of one GPU and 2 CPUs, their pods bound by nodeName (no kubelet here, so every pod that may be
evicted has terminationGracePeriodSeconds 0 and is deleted at once). Node a: a GPU share of 600 (priority 100)
holding both CPUs. Node b: a share of 700 (priority 1000) and a pod of no GPU (priority 10) holding both CPUs. A
share of 500 (priority 10000, 1 CPU) fits nowhere for want of CPU. DefaultPreemption, whose filters know nothing of
GPU shares, finds victims on both nodes (a: the share of 600; b: the CPU pod, the share of 700 reprieved as more
important) and picks b, whose victim has the lower priority; b's GPU would still have only 300 free. The extender
drops b: a's share is evicted, and the preemptor is nominated to a and bound there.

Once with the extender overlay's kube-scheduler configuration (victims sent by UID, nodeCacheCapable: true), once
with full Nodes and Pods (nodeCacheCapable: false): both forms of ExtenderPreemptionArgs.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client, watch

from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import (DEVICES, MILLI, SchedulerProcess, kube_scheduler_config, overcommit_problems,
                                  overlay_kube_scheduler_config, request, start_extender)

SUFFIX = uuid.uuid4().hex[:5]
MODES = ("by-uid", "full-pods")  # how kube-scheduler sends the victims: NodeNameToMetaVictims, NodeNameToVictims
PRIORITIES = {"least": 10, "low": 100, "keeper": 1000, "high": 10000}


def priority_class(level: str) -> str:
    return f"preempt-{level}-{SUFFIX}"


def pool(mode: str) -> str:
    return f"preempt-{mode}-{SUFFIX}"


def node_name(mode: str, which: str) -> str:
    return f"{pool(mode)}-{which}"


def pod_body(name: str, mode: str, level: str, *, cpu: str | None = None, milli: int | None = None,
             node: str | None = None) -> dict[str, Any]:
    requests = {"memory": "64Mi", **({"cpu": cpu} if cpu else {})}
    spec: dict[str, Any] = {
        "schedulerName": pool(mode), "priorityClassName": priority_class(level), "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"e2e-pool": pool(mode)},
        "containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": {"requests": requests}}]}
    if node:
        spec["nodeName"] = node
    annotations = {MILLI: str(milli)} if milli else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": spec}


def placed_pods(mode: str) -> list[dict[str, Any]]:
    a, b = node_name(mode, "a"), node_name(mode, "b")
    return [pod_body("share-600", mode, "low", cpu="2", milli=600, node=a),
            pod_body("keeper-700", mode, "keeper", milli=700, node=b),
            pod_body("cpu-hog", mode, "least", cpu="2", node=b)]


@pytest.fixture(scope="module")
def core(api: Any) -> Any:
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def pools(api: Any, core: Any) -> None:
    """The priority classes, and each mode's namespace, nodes and bound pods, before the extender lists them."""
    scheduling: Any = client.SchedulingV1Api(api)
    for level, value in PRIORITIES.items():
        scheduling.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                          "metadata": {"name": priority_class(level)}, "value": value})
    for mode in MODES:
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": pool(mode)}})
        for which in ("a", "b"):
            cp.create_gpu_node(api, node_name(mode, which), gpus=1, cpu="2", labels={"e2e-pool": pool(mode)})
        for body in placed_pods(mode):
            core.create_namespaced_pod(pool(mode), body)


@pytest.fixture(scope="module")
def extender(plane: cp.ControlPlane, pools: None, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[SchedulerProcess]:
    from tests.e2e.conftest import LOG_SOURCES

    work = tmp_path_factory.mktemp("extender-preemption")
    config_file = work / "config.yaml"
    config_file.write_text("schedulerName: gpu-scheduler\n")
    server = start_extender(plane.kubeconfig, config_file, work, min_nodes=2 * len(MODES))
    LOG_SOURCES.append(lambda: ("gpu-scheduler extender", server.logs()[-8000:]))
    yield server
    server.stop()


@dataclass
class Seen:
    """What a watch of the namespace showed of each pod until the preemptor was bound."""

    nominated: list[str] = field(default_factory=list)  # the preemptor's status.nominatedNodeName, each change
    bound_to: str | None = None
    disrupted: set[str] = field(default_factory=set)  # pods given DisruptionTarget by the scheduler's preemption
    deleted: set[str] = field(default_factory=set)
    devices: dict[str, str] = field(default_factory=dict)


def watch_until_bound(core: Any, namespace: str, name: str, since: str, timeout: int = 90) -> Seen:
    seen = Seen()
    stream = watch.Watch().stream(core.list_namespaced_pod, namespace, resource_version=since,
                                  timeout_seconds=timeout)
    for event in stream:
        pod = event["object"]
        key = pod.metadata.name
        if event["type"] == "DELETED":
            seen.deleted.add(key)
        if any(c.type == "DisruptionTarget" and c.status == "True" and c.reason == "PreemptionByScheduler"
               for c in pod.status.conditions or []):
            seen.disrupted.add(key)
        if key != name:
            continue
        nominated = pod.status.nominated_node_name
        if nominated and (not seen.nominated or seen.nominated[-1] != nominated):
            seen.nominated.append(nominated)
        if pod.spec.node_name:
            seen.bound_to = pod.spec.node_name
            seen.devices = pod.metadata.annotations or {}
            break
    return seen


def preemption_events(core: Any, namespace: str, name: str) -> list[str]:
    return [e.message or "" for e in core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}").items if e.reason == "Preempted"]


def preemption_counts(extender: SchedulerProcess) -> dict[str, float]:
    """The extender's gpu_scheduler_extender_preemption_nodes_total by result."""
    status, text = request(extender, "GET", "/metrics")
    assert status == 200
    counts: defaultdict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if line.startswith("gpu_scheduler_extender_preemption_nodes_total{"):
            counts[line.split('result="', 1)[1].split('"', 1)[0]] += float(line.rsplit(" ", 1)[1])
    return dict(counts)


def scheduler_config(mode: str, port: int) -> str:
    if mode == "by-uid":
        return overlay_kube_scheduler_config(port, pool(mode))
    return kube_scheduler_config(port, pool(mode), every_pod=True)


@pytest.mark.parametrize("mode", MODES)
def test_kube_scheduler_evicts_where_the_victims_free_gpu_room_for_the_preemptor(plane, core, extender, mode):
    namespace, node_a, node_b = pool(mode), node_name(mode, "a"), node_name(mode, "b")
    counted = preemption_counts(extender)
    scheduler = plane.start_scheduler(scheduler_config(mode, extender.port))
    try:
        since = core.list_namespaced_pod(namespace).metadata.resource_version
        core.create_namespaced_pod(namespace, pod_body("preemptor", mode, "high", cpu="1", milli=500))
        seen = watch_until_bound(core, namespace, "preemptor", since)
    finally:
        scheduler.stop()

    assert seen.nominated == [node_a], seen  # never node b, which kube-scheduler alone would have freed
    assert seen.bound_to == node_a, seen
    assert seen.devices.get(DEVICES) == '[{"index":0,"milli":500}]'
    assert seen.disrupted == {"share-600"} and seen.deleted == {"share-600"}, seen
    survivors = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
    assert set(survivors) == {"keeper-700", "cpu-hog", "preemptor"}
    assert all(p.metadata.deletion_timestamp is None for p in survivors.values())
    assert all(survivors[name].spec.node_name == node_b for name in ("keeper-700", "cpu-hog"))
    events = wait_for(lambda: preemption_events(core, namespace, "share-600"), "the victim's Preempted event")
    assert any(message.endswith(f"on node {node_a}") for message in events), events
    assert overcommit_problems(core) == []
    answered = preemption_counts(extender)
    for result in ("kept", "dropped"):  # node a kept with its victim, node b dropped, by our /preempt
        assert answered.get(result, 0) > counted.get(result, 0), (counted, answered)
