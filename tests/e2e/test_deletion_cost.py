"""Deletion cost end to end: a Deployment's GPU pods get the webhook's negative cost through the real
apiserver, `gpu-scheduler run` binds them and raises the cost of those that have warmed up, and the real
ReplicaSet controller, scaling down, deletes the cold ones and keeps the warm ones.

Upstream ranks the pods to delete (pkg/controller/controller_utils.go, ActivePodsWithRanks) by: unassigned,
phase, not Ready, then deletion cost, co-located replicas, Ready-since (in log2 buckets of age), restarts
and creation time. Here every pod is bound, Running and Ready, all on one node (same co-location rank), and
the warm pods' Ready transition is moved after the cold pods', so without the deletion cost the
Ready-since rank would delete the warm pods first: only the cost can pick the cold ones.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import controlplane as cp
from tests.e2e.conftest import E2E_CONFIG, LOG_SOURCES
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import SchedulerProcess, start_scheduler

COST = "controller.kubernetes.io/pod-deletion-cost"
WARMED = "gpu-scheduler.io/deletion-cost-warmed-at"
WARMUP_SECONDS = 5  # the cold pods must stay cold from being marked Ready until the scale-down is done
NODE = "cost-gpu"
POOL = {"e2e-pool": "deletion-cost"}
# Only this test's pods tolerate the node: pending GPU pods other tests leave behind stay off it.
TAINT = {"key": "e2e-deletion-cost", "value": "only", "effect": "NoSchedule"}


@pytest.fixture
def scheduler(scheduler_kubeconfig: Any, installed_webhook: Any, tmp_path: Any) -> Iterator[SchedulerProcess]:
    """`gpu-scheduler run` with a short warm-up: Ready for WARMUP_SECONDS raises the cost to 0."""
    installed_webhook.set_config(E2E_CONFIG + f"scheduling:\n  warmup: {{seconds: {WARMUP_SECONDS}, cost: 0}}\n")
    process = start_scheduler(scheduler_kubeconfig, tmp_path, "--config-map",
                              "gpu-scheduler-system/gpu-scheduler-config", name="deletion-cost")

    def logs() -> tuple[str, str]:
        return "gpu-scheduler run (deletion cost)", process.logs()[-8000:]

    LOG_SOURCES.append(logs)
    try:
        yield process
    finally:
        LOG_SOURCES.remove(logs)
        process.stop()
        installed_webhook.set_config(E2E_CONFIG)


def bound_pods(core: Any, ns: str, count: int) -> dict[str, Any]:
    """Name -> pod once the namespace holds exactly `count` live pods, all bound."""
    def check() -> dict[str, Any]:
        pods = [p for p in core.list_namespaced_pod(ns).items if not p.metadata.deletion_timestamp]
        return {p.metadata.name: p for p in pods} if len(pods) == count and all(
            p.spec.node_name for p in pods) else {}

    return wait_for(check, f"{count} pods of the Deployment to be bound")


def test_a_scale_down_deletes_the_cold_pods_and_keeps_the_warmed_up_ones(api: Any, scheduler: SchedulerProcess) -> None:
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    cp.create_gpu_node(api, NODE, gpus=8, labels=POOL, taints=[TAINT])
    ns = f"cost-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": ns, "labels": {"gpu-scheduler.io/inject": "enabled"}}})
    labels = {"tier": "trainer"}
    apps.create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "trainer"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": POOL, "tolerations": [{**TAINT, "operator": "Equal"}], "containers": [{
                "name": "main", "image": "registry.invalid/cuda:12",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})

    def scale(replicas: int) -> None:
        apps.patch_namespaced_deployment_scale("trainer", ns, {"spec": {"replicas": replicas}})

    def costs() -> dict[str, str | None]:
        return {p.metadata.name: (p.metadata.annotations or {}).get(COST) for p in core.list_namespaced_pod(ns).items}

    try:
        warm = set(bound_pods(core, ns, 2))
        assert set(costs().values()) == {"-50"}, "the webhook's initial cost"
        for name in warm:
            cp.mark_pod_ready(api, ns, name)
        wait_for(lambda: all(core.read_namespaced_pod(name, ns).metadata.annotations.get(WARMED) for name in warm),
                 "the scheduler to raise the warmed-up pods' cost", timeout=WARMUP_SECONDS + 15)

        scale(4)
        cold = set(bound_pods(core, ns, 4)) - warm
        for name in warm:  # Ready again, later than the cold pods: the Ready-since rank now favours the cold ones
            cp.mark_pod_ready(api, ns, name, since=time.time() + 3600)
        for name in cold:
            cp.mark_pod_ready(api, ns, name)
        # the ReplicaSet controller must see every pod Ready (it saw the warm pods' update before, in order)
        wait_for(lambda: apps.list_namespaced_replica_set(ns).items[0].status.ready_replicas == 4,
                 "the ReplicaSet to count 4 Ready pods")
        assert costs() == {**{name: "0" for name in warm}, **{name: "-50" for name in cold}}

        scale(2)

        def deleted() -> set[str]:
            pods = core.list_namespaced_pod(ns).items  # no kubelet: deleted pods stay, Terminating
            found = (warm | cold) - {p.metadata.name for p in pods} | {
                p.metadata.name for p in pods if p.metadata.deletion_timestamp}
            return found if len(found) >= 2 else set()

        assert wait_for(deleted, "the scale-down to delete 2 pods") == cold
    finally:
        core.delete_namespace(ns)  # first: no controller can create pods in it any more
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)  # no kubelet ends them gracefully
        core.delete_node(NODE)
