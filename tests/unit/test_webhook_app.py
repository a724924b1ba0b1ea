"""The webhook's Flask app over what it is handed: the configuration in force, a namespace label lookup and a
claim reader.

No watches, no API: the process shell (gpu_scheduler.webhook_worker) builds those; the real server
over TLS is in tests/serving.
"""

from __future__ import annotations

import base64
import json

from tests.unit.test_reviews import review
from webhook import app, reloading, rules

CONFIG = """
admission:
  rules:
    - name: research-a100
      namespaceSelector: {matchLabels: {team: research}}
      set: {gpuModel: A100}
"""
GPU_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "x-", "namespace": "lab"},
           "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def client(labels: dict[str, dict[str, str]], *, config: str | None = CONFIG):
    holder = reloading.ConfigHolder()
    if config is not None:
        assert holder.offer(config, origin="test")
    asked: list[str] = []

    def lookup(namespace: str) -> dict[str, str] | None:
        asked.append(namespace)
        return labels.get(namespace)

    return app.create_app(holder, namespace_labels=lookup).test_client(), asked


def mutate(test_client) -> dict:
    response = test_client.post("/mutate", json=review(namespace="lab", object=GPU_POD))
    assert response.status_code == 200
    return response.get_json()["response"]


def test_the_namespace_labels_come_from_the_lookup_it_is_handed():
    test_client, asked = client({"lab": {"team": "research"}})
    answer = mutate(test_client)
    patch = json.loads(base64.b64decode(answer["patch"]))
    [annotations] = [op["value"] for op in patch if op["path"] == "/metadata/annotations"]
    assert annotations["gpu.nvidia.com/model"] == "A100"
    assert answer["auditAnnotations"] == {"rule": "research-a100"} and asked == ["lab"]


def test_labels_it_cannot_know_skip_namespace_rules_with_a_warning():
    test_client, _ = client({})
    answer = mutate(test_client)
    assert "patch" not in answer and answer["allowed"] is True
    assert answer["warnings"] == ["gpu-scheduler: namespace labels unavailable; namespaceSelector rules skipped"]


def test_without_a_valid_configuration_it_admits_unmutated_and_is_not_ready():
    test_client, asked = client({}, config=None)
    answer = mutate(test_client)
    assert "patch" not in answer and answer["warnings"] == ["gpu-scheduler: no valid config loaded; pod not mutated"]
    assert test_client.get("/readyz").status_code == 503 and asked == []


DRA_CONFIG = """
admission:
  deviceClasses: [gpu.nvidia.com]
  rules:
    - name: dra
      deviceClasses: [gpu.nvidia.com]
      set: {gpuModel: H100}
    - name: any-gpu
"""
DRA_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "x-"},
           "spec": {"containers": [{"name": "c", "image": "i"}],
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"},
                                       {"name": "nic", "resourceClaimName": "nic"}]}}


def dra_client(answers: dict[tuple[str, str, str], rules.DeviceRequests | str]):
    holder = reloading.ConfigHolder()
    assert holder.offer(DRA_CONFIG, origin="test")
    asked: list[tuple[str, str, str]] = []

    def claims(kind: str, namespace: str, name: str) -> rules.DeviceRequests | str:
        asked.append((kind, namespace, name))
        return answers.get((kind, namespace, name), "not found")

    return app.create_app(holder, namespace_labels=lambda _: None, claims=claims).test_client(), asked


def dra_answer(test_client) -> dict:
    response = test_client.post("/mutate", json=review(namespace="lab", object=DRA_POD))
    assert response.status_code == 200
    return response.get_json()["response"]


def test_the_pods_claims_are_read_in_its_namespace_through_the_reader_it_is_handed():
    gpus = (rules.DeviceRequest("gpus", (("gpu.nvidia.com", 2),)),)
    nic = (rules.DeviceRequest("nic", (("nic.example.com", 1),)),)
    test_client, asked = dra_client({("ResourceClaimTemplate", "lab", "two-gpus"): gpus,
                                     ("ResourceClaim", "lab", "nic"): nic})
    answer = dra_answer(test_client)
    assert answer["auditAnnotations"] == {"rule": "dra"} and "warnings" not in answer
    assert asked == [("ResourceClaimTemplate", "lab", "two-gpus"), ("ResourceClaim", "lab", "nic")]


def test_claims_it_cannot_read_admit_the_pod_with_a_warning_and_no_dra_rule():
    test_client, _ = dra_client({("ResourceClaimTemplate", "lab", "two-gpus"): "cannot be read: HTTP 403 Forbidden"})
    answer = dra_answer(test_client)
    assert answer["allowed"] is True and answer["auditAnnotations"] == {"rule": "any-gpu"}
    assert answer["warnings"] == ["gpu-scheduler: DRA demand unknown: ResourceClaimTemplate two-gpus: cannot be read: "
                                  "HTTP 403 Forbidden (and 1 more); deviceClasses rules match only classes known"]


def test_without_a_claim_reader_claims_are_unknown():
    holder = reloading.ConfigHolder()
    assert holder.offer(DRA_CONFIG, origin="test")
    test_client = app.create_app(holder, namespace_labels=lambda _: None).test_client()
    answer = dra_answer(test_client)
    assert answer["auditAnnotations"] == {"rule": "any-gpu"}
    assert answer["warnings"][0].startswith("gpu-scheduler: DRA demand unknown: ResourceClaimTemplate two-gpus: "
                                            "not known here (no access to the cluster) (and 1 more)")
