"""Rules on DRA demand in the real webhook (gunicorn over TLS, the webhook's service account and shipped RBAC)
against the real kube-apiserver: a pod is a GPU pod by its claims' DeviceClasses, a rule with deviceClasses matches
only pods asking for devices of its classes, and a claim the webhook cannot read leaves the pod admitted, with a
warning, to the rules that need no DRA demand."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.conftest import E2E_CONFIG
from tests.e2e.installing import wait_for
from tests.e2e.test_webhook import COST, MODEL, RULE, create, mutated, opted_in, pod_body

GPU, MIG, NIC = "gpu.nvidia.com", "mig.nvidia.com", "nic.example.com"
CONFIG = f"""\
schedulerName: gpu-scheduler
admission:
  deviceClasses: [{GPU}, {MIG}]
  deletionCost: {{initial: -50}}
  rules:
    - name: dra-training
      deviceClasses: [{GPU}]
      minGPUs: 2
      set: {{gpuModel: H100, deletionCost: -100}}
    - name: dra-any-gpu
      set: {{gpuModel: "A100|H100"}}
"""


def requests(cls: str, count: int) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "devices", "exactly": {"deviceClassName": cls, "count": count}}]}}


def dra_pod(name: str | None = None, *, template: str | None = None, claim: str | None = None) -> dict[str, Any]:
    body = pod_body(gpus=None, name=name)
    entry = {"resourceClaimTemplateName": template} if template else {"resourceClaimName": claim}
    body["spec"]["resourceClaims"] = [{"name": "devices", **entry}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "devices"}]}
    return body


@pytest.fixture(scope="module")
def dra(installed_webhook: Any) -> Iterator[tuple[Any, str]]:
    """An opted-in namespace with templates for 2 GPUs, a MIG slice and a NIC, a claim of 2 GPUs, and the webhook
    configured with deviceClasses; the e2e configuration is back afterwards."""
    core = installed_webhook.core
    namespace = opted_in(core)
    resource = client.ResourceV1Api(installed_webhook.api)
    for name, cls, count in (("two-gpus", GPU, 2), ("one-mig", MIG, 1), ("one-nic", NIC, 1)):
        resource.create_namespaced_resource_claim_template(namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name}, "spec": {"spec": requests(cls, count)}})
    resource.create_namespaced_resource_claim(namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "shared-gpus"},
        "spec": requests(GPU, 2)})
    installed_webhook.set_config(CONFIG)
    try:
        wait_for(lambda: create(core, namespace, dra_pod(template="two-gpus"), dry_run="All").metadata.annotations[RULE]
                 == "dra-training", "the webhook to load the DRA configuration", timeout=10)
        yield core, namespace
    finally:
        installed_webhook.set_config(E2E_CONFIG)
        wait_for(lambda: create(core, namespace, pod_body(), dry_run="All").metadata.annotations[RULE] == "any-gpu",
                 "the e2e configuration to return", timeout=10)
        core.delete_namespace(namespace)


def test_a_pod_whose_template_asks_two_gpus_of_the_class_is_patched_by_the_rule(dra):
    core, namespace = dra
    pod = create(core, namespace, dra_pod("trainer", template="two-gpus"))
    assert pod.spec.scheduler_name == "gpu-scheduler"
    assert pod.metadata.annotations[RULE] == "dra-training"
    assert pod.metadata.annotations[MODEL] == "H100" and pod.metadata.annotations[COST] == "-100"
    stored = core.read_namespaced_pod("trainer", namespace)
    assert stored.spec.scheduler_name == "gpu-scheduler" and stored.metadata.annotations == pod.metadata.annotations


def test_a_named_claim_of_the_class_matches_the_rule_too(dra):
    core, namespace = dra
    assert create(core, namespace, dra_pod(claim="shared-gpus"), dry_run="All").metadata.annotations[RULE] == \
        "dra-training"


def test_a_pod_asking_another_gpu_class_is_not_matched_by_the_rule(dra):
    core, namespace = dra
    pod = create(core, namespace, dra_pod(template="one-mig"), dry_run="All")
    assert mutated(pod) and pod.metadata.annotations[RULE] == "dra-any-gpu"
    assert pod.metadata.annotations[MODEL] == "A100|H100"


def test_a_pod_asking_only_a_class_that_is_no_gpu_is_left_alone(dra):
    core, namespace = dra
    pod = create(core, namespace, dra_pod(template="one-nic"), dry_run="All")
    assert pod.spec.scheduler_name == "default-scheduler" and pod.metadata.annotations is None


def test_a_claim_that_does_not_exist_yet_is_unknown_the_pod_is_admitted_with_a_warning(dra):
    core, namespace = dra
    response = core.create_namespaced_pod(namespace, dra_pod(claim="not-yet"), dry_run="All", _preload_content=False)
    pod = json.loads(response.data)
    assert pod["spec"]["schedulerName"] == "gpu-scheduler"
    assert pod["metadata"]["annotations"][RULE] == "dra-any-gpu"  # taken as a GPU pod; the DRA rule cannot match
    assert "gpu-scheduler: DRA demand unknown: ResourceClaim not-yet: not found" in response.headers.get("Warning", "")


def test_a_pod_asking_the_class_as_an_extended_resource_matches_the_rule(dra):
    core, namespace = dra
    body = pod_body(gpus=None)
    body["spec"]["containers"][0]["resources"] = {"limits": {f"deviceclass.resource.kubernetes.io/{GPU}": "2"}}
    assert create(core, namespace, body, dry_run="All").metadata.annotations[RULE] == "dra-training"
