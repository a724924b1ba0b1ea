"""The shipped RBAC, checked against the real apiserver: enough for each job, nothing dangerous.

Sufficiency is shown by the other e2e tests, which run the webhook and the scheduler with tokens
of their service accounts (TokenRequest); here `certs ensure` does its whole job with the webhook's,
and `kubectl auth can-i` confirms what neither account may do.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from tests.e2e.installing import EXTENDER_ACCOUNT, EXTENDER_OVERLAY, SERVICE_ACCOUNT, apply_rbac, kubectl

WEBHOOK = "system:serviceaccount:gpu-scheduler-system:gpu-scheduler-webhook"
SCHEDULER = "system:serviceaccount:gpu-scheduler-system:gpu-scheduler"
EXTENDER = f"system:serviceaccount:gpu-scheduler-system:{EXTENDER_ACCOUNT}"


@pytest.fixture(scope="module")
def rbac(plane: Any, installed_webhook: Any, scheduler_kubeconfig: Any) -> Any:
    # `kubectl auth can-i` knows podgroups.scheduling.x-k8s.io only while the API serves it: the CRD, as in test_gangs
    kubectl(plane, "apply", "--server-side", "-f", str(plane.bin_dir.parent / "crds" / "coscheduling"))
    kubectl(plane, "wait", "--for=condition=Established", "--timeout=30s", "crd/podgroups.scheduling.x-k8s.io")
    apply_rbac(plane, SERVICE_ACCOUNT)
    apply_rbac(plane, EXTENDER_ACCOUNT, EXTENDER_OVERLAY)
    return plane


def can(plane: Any, user: str, verb: str, resource: str, namespace: str | None) -> bool:
    """`kubectl auth can-i` as the account; `pods/binding`, `podgroups.scheduling.k8s.io/status` name a subresource
    (of pods, or of a resource ending in `/status`), `leases/x` an object."""
    args = [verb, resource]
    if resource.startswith("pods/") or resource.endswith("/status"):
        kind, _, subresource = resource.partition("/")
        args = [verb, kind, f"--subresource={subresource}"]
    if namespace:
        args += ["-n", namespace]
    result = subprocess.run([str(plane.bin_dir / "kubectl"), "--kubeconfig", str(plane.kubeconfig), "auth", "can-i",
                             *args, "--as", user, "--as-group", "system:serviceaccounts"],
                            capture_output=True, text=True, timeout=30)
    return result.stdout.strip() == "yes"


@pytest.mark.parametrize(
    ("user", "verb", "resource", "namespace"),
    [
        (WEBHOOK, "create", "pods", "default"),
        (WEBHOOK, "get", "secrets", "kube-system"),
        (WEBHOOK, "list", "secrets", "gpu-scheduler-system"),
        (WEBHOOK, "patch", "mutatingwebhookconfigurations/other", None),
        (WEBHOOK, "create", "pods/binding", "default"),
        (SCHEDULER, "get", "secrets", "gpu-scheduler-system"),
        (SCHEDULER, "deletecollection", "pods", "default"),  # preemption deletes its victims one by one
        (SCHEDULER, "create", "pods", "default"),
        (SCHEDULER, "patch", "nodes", None),
        (SCHEDULER, "update", "leases/someone-else", "gpu-scheduler-system"),
        (SCHEDULER, "get", "services", "default"),  # list and watch are all system default spreading needs
        (SCHEDULER, "update", "replicasets.apps", "default"),
        (SCHEDULER, "*", "*", None),
        (EXTENDER, "delete", "pods", "default"),  # kube-scheduler evicts; the extender only answers /preempt
        (EXTENDER, "update", "leases/someone-else", "gpu-scheduler-system"),
        (EXTENDER, "update", "pods/status", "default"),
        (EXTENDER, "get", "secrets", "gpu-scheduler-system"),
        (EXTENDER, "delete", "events", "default"),
    ],
)
def test_dangerous_permissions_are_absent(rbac, user, verb, resource, namespace):
    assert not can(rbac, user, verb, resource, namespace)


@pytest.mark.parametrize(
    ("user", "verb", "resource", "namespace"),
    [
        (WEBHOOK, "watch", "namespaces", None),
        (WEBHOOK, "patch", "mutatingwebhookconfigurations/gpu-scheduler", None),
        (WEBHOOK, "update", "secrets/gpu-scheduler-webhook-tls", "gpu-scheduler-system"),
        (SCHEDULER, "create", "pods/binding", "default"),
        (SCHEDULER, "patch", "pods/status", "default"),
        (SCHEDULER, "update", "leases/gpu-scheduler", "gpu-scheduler-system"),
        (SCHEDULER, "watch", "namespaces", None),
        (SCHEDULER, "watch", "services", None),
        (SCHEDULER, "list", "replicationcontrollers", None),
        (SCHEDULER, "watch", "replicasets.apps", None),
        (SCHEDULER, "list", "statefulsets.apps", None),
        (SCHEDULER, "delete", "pods", "default"),  # preemption victims
        (SCHEDULER, "watch", "poddisruptionbudgets.policy", None),  # preemption spares budgets when it can
        (SCHEDULER, "watch", "podgroups.scheduling.x-k8s.io", None),  # gangs
        (SCHEDULER, "patch", "podgroups.scheduling.k8s.io/status", "default"),  # PodGroupScheduled
        (EXTENDER, "create", "pods/binding", "default"),
        (EXTENDER, "watch", "namespaces", None),
        (EXTENDER, "watch", "poddisruptionbudgets.policy", None),  # /preempt recounts budget violations
        (EXTENDER, "patch", "pods/status", "default"),
        (EXTENDER, "create", "events", "default"),
        (EXTENDER, "patch", "pods", "default"),  # the deletion-cost warm-up
        (EXTENDER, "update", "leases/gpu-scheduler-extender", "gpu-scheduler-system"),  # held by the warming replica
    ],
)
def test_the_permissions_each_job_needs_are_there(rbac, user, verb, resource, namespace):
    assert can(rbac, user, verb, resource, namespace)


def test_certs_ensure_does_its_whole_job_with_a_token_of_the_webhook_account(rbac, installed_webhook):
    """Create the Secret, keep the installed webhook configuration's caBundle, reuse: all as the account."""
    import base64

    from kubernetes import client

    admission: Any = client.AdmissionregistrationV1Api(rbac.api_client())
    original = admission.read_mutating_webhook_configuration("gpu-scheduler").webhooks[0].client_config.ca_bundle
    kubeconfig = rbac.kubeconfig_for_service_account("gpu-scheduler-system", "gpu-scheduler-webhook")
    command = [sys.executable, "-m", "gpu_scheduler", "certs", "ensure", "--kubeconfig", str(kubeconfig),
               "--secret", "gpu-scheduler-system/gpu-scheduler-webhook-tls", "--service", "gpu-scheduler-webhook",
               "--webhook-config", "gpu-scheduler"]
    try:
        first = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        assert "caBundle updated in 1 webhook(s)" in first.stdout
        secret = client.CoreV1Api(rbac.api_client()).read_namespaced_secret(
            "gpu-scheduler-webhook-tls", "gpu-scheduler-system")
        bundle = admission.read_mutating_webhook_configuration("gpu-scheduler").webhooks[0].client_config.ca_bundle
        assert (base64.b64encode(bundle).decode() if isinstance(bundle, bytes) else bundle) == secret.data["ca.crt"]
        second = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert second.returncode == 0 and "reuse" in second.stdout, second.stderr
    finally:  # the installed webhook serves the certificate of `certs generate`: trust it again
        value = base64.b64encode(original).decode() if isinstance(original, bytes) else original
        admission.patch_mutating_webhook_configuration(
            "gpu-scheduler", [{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": value}])
