"""`gpu-scheduler certs ensure`: the certificate plan applied to a Secret and a webhook configuration.

Thin I/O around certs.lifecycle: read the Secret, write it back only when the plan changes
something (with its resourceVersion, so two concurrent runs cannot both win), and keep
every webhook's `caBundle` equal to the certificates the plan trusts.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from certs import lifecycle


def ensure(api: client.ApiClient, *, secret: tuple[str, str], policy: lifecycle.Policy, common_name: str,
           webhook_config: str | None = None, now: datetime.datetime | None = None) -> tuple[lifecycle.Plan, int]:
    """Apply the plan; returns it and how many webhooks had their caBundle updated."""
    core: Any = client.CoreV1Api(api)
    namespace, name = secret
    try:
        existing = core.read_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status != 404:
            raise
        existing = None
    data = {key: base64.b64decode(value) for key, value in ((existing.data or {}) if existing else {}).items()}
    plan = lifecycle.plan(lifecycle.read_bundle(data), policy,
                          now=now or datetime.datetime.now(datetime.timezone.utc), common_name=common_name)
    if plan.action != "reuse":
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gpu-scheduler-certs"}},
            "data": {key: base64.b64encode(value).decode() for key, value in plan.bundle.as_secret_data().items()},
        }
        if existing is None:
            core.create_namespaced_secret(namespace, body)
        else:
            body["metadata"]["resourceVersion"] = existing.metadata.resource_version
            core.replace_namespaced_secret(name, namespace, body)
    updated = _update_ca_bundle(api, webhook_config, plan.bundle.trusted_pem) if webhook_config else 0
    return plan, updated


def _update_ca_bundle(api: client.ApiClient, name: str, trusted_pem: bytes) -> int:
    admission: Any = client.AdmissionregistrationV1Api(api)
    configuration = admission.read_mutating_webhook_configuration(name)
    wanted = base64.b64encode(trusted_pem).decode()
    patch = []
    for index, hook in enumerate(configuration.webhooks or []):
        current = hook.client_config.ca_bundle
        current_text = base64.b64encode(current).decode() if isinstance(current, bytes) else current
        if current_text != wanted:
            patch.append({"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": wanted})
    if patch:
        patch.insert(0, {"op": "test", "path": "/metadata/resourceVersion",
                         "value": configuration.metadata.resource_version})
        admission.patch_mutating_webhook_configuration(name, patch)
    return len(patch) - 1 if patch else 0
