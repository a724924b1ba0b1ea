"""`gpu-scheduler run` killed mid-run and restarted, and two instances under leader election."""

from __future__ import annotations

import re
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import controlplane as cp
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import overcommit_problems, start_scheduler

POOL = {"e2e-pool": "lifecycle"}


@pytest.fixture(scope="module")
def pool(api: Any, installed_webhook: Any) -> list[str]:
    names = [f"life-gpu-{i:02d}" for i in range(20)]
    for name in names:
        cp.create_gpu_node(api, name, gpus=8, model="NVIDIA-A100-SXM4-40GB", labels=POOL)
    return names


def new_namespace(core: Any) -> str:
    name = f"life-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": name, "labels": {"gpu-scheduler.io/inject": "enabled"}}})
    return name


def create_pods(core: Any, ns: str, count: int, prefix: str) -> None:
    def create(i: int) -> None:
        core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{prefix}-{i}"},
                                        "spec": {"nodeSelector": POOL, "containers": [{
                                            "name": "main", "image": "registry.invalid/cuda:12",
                                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})

    with ThreadPoolExecutor(max_workers=20) as pool:
        list(pool.map(create, range(count)))


def bound(core: Any, ns: str) -> int:
    return sum(1 for p in core.list_namespaced_pod(ns).items if p.spec.node_name)


def metric(process: Any, name: str) -> float:
    """A value from the instance's /metrics; 0 while it is not serving yet."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{process.port}/metrics", timeout=5).read().decode()
    except OSError:
        return 0.0
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_scheduler_killed_mid_run_is_replaced_without_double_binding(scheduler_kubeconfig, api, pool, tmp_path):
    """SIGKILL while bindings are in flight; the next instance rebuilds GPU assignments from the pods alone."""
    core: Any = client.CoreV1Api(api)
    ns = new_namespace(core)
    first = start_scheduler(scheduler_kubeconfig, tmp_path, "--config-map", "gpu-scheduler-system/gpu-scheduler-config",
                            name="first")
    try:
        create_pods(core, ns, 100, "early")
        wait_for(lambda: bound(core, ns) >= 20, "the first scheduler to bind some pods", timeout=60)
    finally:
        first.stop(kill=True)
    create_pods(core, ns, 50, "late")  # work for the second instance whatever the first managed
    second = start_scheduler(scheduler_kubeconfig, tmp_path, "--config-map", "gpu-scheduler-system/gpu-scheduler-config",
                             name="second")
    try:
        wait_for(lambda: bound(core, ns) == 150, "the restarted scheduler to bind the rest", timeout=90)
    finally:
        second.stop()
    assert overcommit_problems(core) == []
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)  # give the pool back


def test_only_the_leader_binds_and_a_standby_takes_over(scheduler_kubeconfig, api, pool, tmp_path):
    core: Any = client.CoreV1Api(api)
    args = ("--config-map", "gpu-scheduler-system/gpu-scheduler-config", "--leader-elect",
            "--lease", "gpu-scheduler-system/gpu-scheduler")  # the Lease the shipped RBAC allows
    instances = [start_scheduler(scheduler_kubeconfig, tmp_path, *args, name=f"elect-{i}") for i in range(2)]
    try:
        wait_for(lambda: sum(metric(p, "gpu_scheduler_leader") for p in instances) == 1, "one leader")
        ns = new_namespace(core)
        create_pods(core, ns, 20, "a")
        wait_for(lambda: bound(core, ns) == 20, "the leader to bind")
        leader = next(p for p in instances if metric(p, "gpu_scheduler_leader") == 1)
        standby = next(p for p in instances if p is not leader)
        # the counter moves when the loop hears back from the binder thread, just after the API shows the pod bound
        wait_for(lambda: metric(leader, 'gpu_scheduler_schedule_attempts_total{result="scheduled"}') >= 20,
                 "the leader to count its bindings")
        assert metric(standby, 'gpu_scheduler_schedule_attempts_total{result="scheduled"}') == 0

        leader.stop(kill=True)
        create_pods(core, ns, 20, "b")
        wait_for(lambda: metric(standby, "gpu_scheduler_leader") == 1, "the standby to take the lease", timeout=60)
        wait_for(lambda: bound(core, ns) == 40, "the new leader to bind the rest", timeout=60)
        wait_for(lambda: metric(standby, 'gpu_scheduler_schedule_attempts_total{result="scheduled"}') >= 20,
                 "the new leader to count its bindings")
    finally:
        for process in instances:
            process.stop()
    assert overcommit_problems(core) == []
