"""`gpu-scheduler certs ensure` against the real apiserver: create, reuse, renew, caBundle in step."""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid
from typing import Any

from kubernetes import client

from tests.e2e.installing import kubectl


def ensure(plane: Any, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "gpu_scheduler", "certs", "ensure", "--kubeconfig",
                             str(plane.kubeconfig), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_certs_ensure_creates_reuses_and_renews_and_keeps_the_ca_bundle_in_step(plane, api):
    core: Any = client.CoreV1Api(api)
    admission: Any = client.AdmissionregistrationV1Api(api)
    namespace = f"certs-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    config_name = f"{namespace}-hook"
    kubectl(plane, "apply", "-f", "-", stdin=f"""
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: {config_name}}}
webhooks:
  - name: pods.{namespace}.example.com
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Ignore
    clientConfig:
      service: {{name: wh, namespace: {namespace}, path: /mutate}}
    namespaceSelector: {{matchLabels: {{never: matches}}}}
    rules: [{{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}}]
""")
    args = ("--secret", f"{namespace}/wh-tls", "--service", "wh", "--webhook-config", config_name)

    assert ensure(plane, *args).startswith(f"{namespace}/wh-tls: create")
    secret = core.read_namespaced_secret("wh-tls", namespace)
    assert secret.type == "kubernetes.io/tls" and {"ca.crt", "ca.key", "tls.crt", "tls.key"} <= set(secret.data)
    [owner] = secret.metadata.owner_references  # uninstalling the webhook configuration takes the key pair along
    assert (owner.kind, owner.name, owner.uid) == (
        "MutatingWebhookConfiguration", config_name,
        admission.read_mutating_webhook_configuration(config_name).metadata.uid)

    def bundle() -> str:
        value = admission.read_mutating_webhook_configuration(config_name).webhooks[0].client_config.ca_bundle
        return base64.b64encode(value).decode() if isinstance(value, bytes) else value

    assert bundle() == secret.data["ca.crt"]

    assert "reuse" in ensure(plane, *args)
    again = core.read_namespaced_secret("wh-tls", namespace)
    assert again.metadata.resource_version == secret.metadata.resource_version

    assert "renew" in ensure(plane, *args, "--margin-days", "400")  # the certificate is only valid for 365
    renewed = core.read_namespaced_secret("wh-tls", namespace)
    assert renewed.data["tls.crt"] != secret.data["tls.crt"] and renewed.data["ca.crt"] == secret.data["ca.crt"]
    assert bundle() == secret.data["ca.crt"]
