"""Smoke test of the e2e control plane itself: if this fails, every e2e test would."""

from __future__ import annotations

import base64
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


def new_namespace(core: Any) -> str:
    name = f"kcm-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


def test_controller_manager_runs_a_replica_set_as_the_controllers_own_service_account(
    plane: cp.ControlPlane, api: Any
) -> None:
    """The ReplicaSet controller creates the pods, with a token of its own service account in kube-system
    (--use-service-account-credentials); deleting the ReplicaSet, the garbage collector removes them, and
    the namespace controller empties and removes the namespace. The pods name a scheduler nobody runs, so
    no kube-scheduler started later places them."""
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    ns = new_namespace(core)
    labels = {"app": "kcm-smoke"}
    apps.create_namespaced_replica_set(ns, {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "smoke"},
        "spec": {"replicas": 3, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"schedulerName": "e2e-nobody", "containers": [
                {"name": "main", "image": "registry.invalid/pause:3.10"}]}}}})
    wait_until(plane, "the ReplicaSet controller to create 3 pods",
               lambda: len(core.list_namespaced_pod(ns).items) == 3)
    owners = {ref.name for pod in core.list_namespaced_pod(ns).items for ref in pod.metadata.owner_references}
    assert owners == {"smoke"}
    assert core.read_namespaced_service_account("replicaset-controller", "kube-system")
    wait_until(plane, "the service account controller to create `default`",
               lambda: any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(ns).items))

    apps.delete_namespaced_replica_set("smoke", ns)
    wait_until(plane, "the garbage collector to delete the pods", lambda: not core.list_namespaced_pod(ns).items)
    core.delete_namespace(ns)
    wait_until(plane, "the namespace controller to remove the namespace",
               lambda: ns not in {n.metadata.name for n in core.list_namespace().items})


def test_the_token_controller_fills_a_service_account_token_secret_the_apiserver_accepts(
    plane: cp.ControlPlane, api: Any
) -> None:
    """The controller manager signs with the apiserver's service-account key: a legacy token Secret gets a
    token, and the apiserver authenticates it as the service account."""
    core: Any = client.CoreV1Api(api)
    ns = new_namespace(core)
    wait_until(plane, "the `default` service account",
               lambda: any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(ns).items))
    core.create_namespaced_secret(ns, {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "default-token", "annotations": {"kubernetes.io/service-account.name": "default"}}})
    wait_until(plane, "the token controller to fill the Secret",
               lambda: "token" in (core.read_namespaced_secret("default-token", ns).data or {}))
    secret = core.read_namespaced_secret("default-token", ns)
    assert base64.b64decode(secret.data["ca.crt"]) == plane.ca_cert.read_bytes()
    configuration = client.Configuration()
    configuration.host = plane.server
    configuration.ssl_ca_cert = str(plane.ca_cert)
    configuration.api_key = {"authorization": "Bearer " + base64.b64decode(secret.data["token"]).decode()}
    with client.ApiClient(configuration) as as_account:
        authentication: Any = client.AuthenticationV1Api(as_account)  # Any: a plain-dict body
        review = authentication.create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    assert review.status.user_info.username == f"system:serviceaccount:{ns}:default"


def test_the_volume_controllers_bind_a_claim_to_a_matching_volume_and_release_both(
    plane: cp.ControlPlane, api: Any
) -> None:
    """No storage class, an Immediate claim and a pre-created volume that fits: the PV controller binds them
    both ways; deleted, the claim and then the volume go, as the protection controllers see no pod using them."""
    core: Any = client.CoreV1Api(api)
    ns = new_namespace(core)
    volume = f"pv-{ns}"
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "hostPath": {"path": "/tmp/e2e-pv"}}})
    core.create_namespaced_persistent_volume_claim(ns, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": "1Gi"}}}})
    wait_until(plane, "the PV controller to bind the claim",
               lambda: core.read_namespaced_persistent_volume_claim("data", ns).status.phase == "Bound")
    claim = core.read_namespaced_persistent_volume_claim("data", ns)
    pv = core.read_persistent_volume(volume)
    assert claim.spec.volume_name == volume
    assert (pv.status.phase, pv.spec.claim_ref.namespace, pv.spec.claim_ref.name) == ("Bound", ns, "data")
    assert "kubernetes.io/pvc-protection" in claim.metadata.finalizers

    core.delete_namespaced_persistent_volume_claim("data", ns)
    wait_until(plane, "the claim to go and the volume to be Released",
               lambda: not core.list_namespaced_persistent_volume_claim(ns).items
               and core.read_persistent_volume(volume).status.phase == "Released")
    core.delete_persistent_volume(volume)
    wait_until(plane, "the volume to go",
               lambda: volume not in {v.metadata.name for v in core.list_persistent_volume().items})
