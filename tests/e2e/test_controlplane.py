"""Smoke test of the e2e control plane itself: if this fails, every e2e test would."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.e2e import controlplane as cp

def wait_until(
    plane: cp.ControlPlane, what: str, check: Callable[[], bool], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}\n{plane.logs_tail(40)}")


def test_version_is_the_built_release(api: Any) -> None:
    assert client.VersionApi(api).get_code().git_version == cp.KUBERNETES_VERSION


def test_namespace_can_be_created(api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    name = f"smoke-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    assert core.read_namespace(name).metadata.name == name


def test_gpu_node_is_ready_with_gpus_and_without_not_ready_taint(api: Any) -> None:
    cp.create_gpu_node(api, "smoke-gpu-node", labels={"pool": "smoke"})
    core: Any = client.CoreV1Api(api)  # Any: plain-dict bodies, Optional-typed replies
    node = core.read_node("smoke-gpu-node")
    assert node.status.allocatable[cp.GPU_RESOURCE] == "8"
    assert node.status.capacity[cp.GPU_RESOURCE] == "8"
    assert [t.key for t in node.spec.taints or []] == []
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert node.metadata.labels["gpu.nvidia.com/model"] == "NVIDIA-A100-SXM4-40GB"
    assert node.metadata.labels["pool"] == "smoke"


def test_kube_scheduler_binds_a_plain_pod(plane: cp.ControlPlane, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    cp.create_gpu_node(api, "smoke-bind-node")
    scheduler = plane.start_scheduler()
    try:
        core.create_namespaced_pod(
            "default",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "smoke-plain"},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "smoke-bind-node"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                        }
                    ],
                },
            },
        )
        wait_until(
            plane,
            "kube-scheduler to bind smoke-plain",
            lambda: core.read_namespaced_pod("smoke-plain", "default").spec.node_name is not None,
        )
        assert (
            core.read_namespaced_pod("smoke-plain", "default").spec.node_name == "smoke-bind-node"
        )
        pod = cp.mark_pod_ready(api, "default", "smoke-plain")
        assert pod.status.phase == "Running"
        assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
    finally:
        scheduler.stop()
