"""`gpu-scheduler certs ensure`: the certificate plan applied to a Secret and a webhook configuration.

Thin I/O around certs.lifecycle: read the Secret, write it back only when the plan changes
something (with its resourceVersion, so two concurrent runs cannot both win), and keep
every webhook's `caBundle` equal to the certificates the plan trusts. The Secret it writes is owned by
that webhook configuration: uninstalling the configuration (`helm uninstall`, `kubectl delete -k`)
takes the key pair with it, through the garbage collector.
"""

from __future__ import annotations

import base64
import datetime
import logging
import threading
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from certs import lifecycle

log = logging.getLogger(__name__)
ATTEMPTS = 3  # a conflict means another replica's run wrote first: plan again from what it wrote
RETRY_AFTER_FAILURE = datetime.timedelta(minutes=1)


def ensure(api: client.ApiClient, *, secret: tuple[str, str], policy: lifecycle.Policy, common_name: str,
           webhook_config: str | None = None, now: datetime.datetime | None = None) -> tuple[lifecycle.Plan, int]:
    """Apply the plan; returns it and how many webhooks had their caBundle updated.

    Both webhook replicas run this; writes carry the resourceVersion they planned from, and a
    conflict (the other replica wrote first) is answered by planning again from what it wrote.
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _ensure_once(api, secret=secret, policy=policy, common_name=common_name,
                                webhook_config=webhook_config, now=now)
        except ApiException as err:
            if err.status != 409 or attempt == ATTEMPTS:
                raise
            log.info("%s/%s or its webhook configuration changed meanwhile: planning again", *secret)
    raise AssertionError("unreachable")


def keep(api: client.ApiClient, *, every: datetime.timedelta, stop: threading.Event, **kwargs: Any) -> None:
    """`ensure` now and every `every` until `stop`: renewals and CA rotations happen while the webhook
    serves, and the kubelet brings the renewed Secret into its volume. A failed run is retried sooner."""
    while not stop.is_set():
        wait = every
        try:
            plan, updated = ensure(api, **kwargs)
            log.info("%s/%s: %s (%s); caBundle updated in %d webhook(s)", *kwargs["secret"], plan.action,
                     plan.reason, updated)
        except (ApiException, HTTPError, OSError) as err:
            reason = f"HTTP {err.status} {err.reason}" if isinstance(err, ApiException) else str(err)
            log.warning("%s/%s: certificate check failed (%s); retrying in %s", *kwargs["secret"], reason,
                        min(every, RETRY_AFTER_FAILURE))
            wait = min(every, RETRY_AFTER_FAILURE)
        stop.wait(wait.total_seconds())


def _ensure_once(api: client.ApiClient, *, secret: tuple[str, str], policy: lifecycle.Policy, common_name: str,
                 webhook_config: str | None, now: datetime.datetime | None) -> tuple[lifecycle.Plan, int]:
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
    # A new CA is trusted before any certificate it signed can reach a webhook pod: the bundle first, then the
    # Secret (which the kubelet projects into the pods). Otherwise the Secret first, and trust narrows after.
    updated = 0
    if webhook_config and plan.action == "rotate-ca":
        updated = _update_ca_bundle(api, webhook_config, plan.bundle.trusted_pem)
    if plan.action != "reuse":
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gpu-scheduler-certs"}},
            "data": {key: base64.b64encode(value).decode() for key, value in plan.bundle.as_secret_data().items()},
        }
        if webhook_config:
            body["metadata"]["ownerReferences"] = [_owned_by(api, webhook_config)]
        if existing is None:
            core.create_namespaced_secret(namespace, body)
        else:
            body["metadata"]["resourceVersion"] = existing.metadata.resource_version
            core.replace_namespaced_secret(name, namespace, body)
    if webhook_config and plan.action != "rotate-ca":
        updated = _update_ca_bundle(api, webhook_config, plan.bundle.trusted_pem)
    return plan, updated


def _owned_by(api: client.ApiClient, webhook_config: str) -> dict[str, str]:
    """An owner reference to the webhook configuration (no blockOwnerDeletion: that would need its delete
    permission, and nothing waits for the Secret)."""
    admission: Any = client.AdmissionregistrationV1Api(api)
    configuration = admission.read_mutating_webhook_configuration(webhook_config)
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "name": webhook_config, "uid": configuration.metadata.uid}


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
    if patch:  # the resourceVersion makes the patch conditional: 409 Conflict if the list changed meanwhile
        patch.insert(0, {"op": "replace", "path": "/metadata/resourceVersion",
                         "value": configuration.metadata.resource_version})
        admission.patch_mutating_webhook_configuration(name, patch)
    return len(patch) - 1 if patch else 0
