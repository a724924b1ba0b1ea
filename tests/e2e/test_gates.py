"""Scheduling gates with `gpu-scheduler run` on the real apiserver: a pod created with `spec.schedulingGates` (as
Kueue holds pods) is not tried, assumed or reported while a gate is left, and is bound once the last one is lifted,
as kube-scheduler's SchedulingGates plugin has it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import GPU, start_scheduler

SUFFIX = uuid.uuid4().hex[:5]
SCHEDULER = f"gates-{SUFFIX}"
NAMESPACE = f"gates-{SUFFIX}"
POOL = f"gates-{SUFFIX}"


@pytest.fixture(scope="module")
def scheduler(api: Any, scheduler_kubeconfig: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.e2e.conftest import LOG_SOURCES

    client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    cp.create_gpu_node(api, f"{POOL}-0", gpus=2, labels={"e2e-pool": POOL})
    work = tmp_path_factory.mktemp("gates")
    config = work / "config.yaml"
    config.write_text(f"schedulerName: {SCHEDULER}\n")
    process = start_scheduler(scheduler_kubeconfig, work, "--config", str(config), name="gates-run")
    LOG_SOURCES.append(lambda: ("gpu-scheduler run (gates)", process.logs()[-8000:]))
    yield process
    process.stop()


def gpu_pod(name: str, gates: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER, "nodeSelector": {"e2e-pool": POOL},
        "containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": {"limits": {GPU: "1"}}}]}
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return {"metadata": {"name": name}, "spec": spec}


def test_a_gated_pod_waits_untouched_and_is_bound_once_its_last_gate_is_lifted(api, scheduler):
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod(NAMESPACE, gpu_pod("held", ["example.com/quota", "example.com/review"]))
    core.create_namespaced_pod(NAMESPACE, gpu_pod("after"))  # tried after the gated one: once it is bound, the
    wait_for(lambda: core.read_namespaced_pod("after", NAMESPACE).spec.node_name, timeout=60,  # loop has passed it
             what="the ungated pod created after the gated one to be bound")
    held = core.read_namespaced_pod("held", NAMESPACE)
    assert held.spec.node_name is None
    condition = next(c for c in held.status.conditions if c.type == "PodScheduled")
    assert (condition.status, condition.reason) == ("False", "SchedulingGated")  # the apiserver's, never ours
    events = core.list_namespaced_event(NAMESPACE, field_selector="involvedObject.name=held").items
    assert [e.reason for e in events] == []

    # a JSON patch: a strategic merge of the list would keep both gates (it merges schedulingGates by name)
    core.patch_namespaced_pod("held", NAMESPACE, [{"op": "replace", "path": "/spec/schedulingGates",
                                                   "value": [{"name": "example.com/review"}]}])
    core.create_namespaced_pod(NAMESPACE, gpu_pod("later"))
    wait_for(lambda: core.read_namespaced_pod("later", NAMESPACE).spec.node_name, timeout=60,
             what="another pod bound after one gate was lifted")
    assert core.read_namespaced_pod("held", NAMESPACE).spec.node_name is None  # one gate is left

    core.delete_namespaced_pod("later", NAMESPACE, grace_period_seconds=0)  # room for the held pod
    wait_for(lambda: not [p for p in core.list_namespaced_pod(NAMESPACE).items if p.metadata.name == "later"],
             timeout=30, what="the other pod gone")
    core.patch_namespaced_pod("held", NAMESPACE, [{"op": "remove", "path": "/spec/schedulingGates"}])
    node = wait_for(lambda: core.read_namespaced_pod("held", NAMESPACE).spec.node_name, timeout=30,
                    what="the pod bound once its last gate was lifted")
    assert node == f"{POOL}-0"
