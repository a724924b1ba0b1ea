"""The webhook's Flask app over what it is handed: the configuration in force and a namespace label lookup.

No watches, no API: the process shell (gpu_scheduler.webhook_worker) builds those; the real server
over TLS is in tests/serving.
"""

from __future__ import annotations

import base64
import json

from tests.unit.test_reviews import review
from webhook import app, reloading

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
