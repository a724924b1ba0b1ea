"""Binding a pod to a node: the one write that places a pod, isolated here, the writes that bind or provision its
volumes first, the record of its devices, and the read that tells what became of a pod when the binding failed.

The Binding carries the pod's GPU devices as an annotation; the apiserver copies a
Binding's annotations onto the pod in the same write that sets spec.nodeName, so a pod
is never bound without its devices, and the workload can read them. Anyone who may patch
the pod can rewrite that annotation, though, so the binder then records the same devices
in a status condition (scheduler_core.pods.DEVICES_CONDITION), which takes pods/status to
write: a restarted scheduler believes the record first.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import rawapi, watching
from scheduler_core import pods, volumes

log = logging.getLogger(__name__)


def bind(api: client.ApiClient, *, namespace: str, name: str, uid: str | None, node: str,
         devices: tuple[pods.Device, ...] = ()) -> None:
    """POST the Binding; raises ApiException with the apiserver's status on refusal (409: already bound)."""
    annotations = {pods.DEVICES_ANNOTATION: pods.format_devices(devices)} if devices else {}
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    rawapi.request(api, "POST", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding", body)


def write_volumes(api: client.ApiClient, changes: list[volumes.Write]) -> dict[str, str]:
    """Carry out a pod's volume plan before its binding (kube-scheduler's VolumeBinding PreBind): bind each chosen
    PersistentVolume to its claim, ask for each claim to be provisioned on the node. Returns the resource version
    each write gave its object; raises ApiException (409: the object changed since the decision) on the first
    refusal, leaving the writes before it in place, as upstream does."""
    written = {}
    for change in changes:
        reply = json.loads(rawapi.request(api, "PATCH", change.path, change.patch, content_type=rawapi.MERGE_PATCH))
        written[change.key] = str((reply.get("metadata") or {}).get("resourceVersion") or "")
    return written


def record_devices(api: client.ApiClient, *, namespace: str, name: str, uid: str,
                   devices: tuple[pods.Device, ...], dra: tuple[tuple[str, str, str], ...] = ()) -> bool:
    """Set the bound pod's devices condition; whether it was set. The UID in the patch makes the apiserver
    refuse (422) a pod re-created under the name. A failure is logged, not raised: the pod is bound and its
    annotation holds the devices; only a tenant's later edit of it could then mislead a restarted scheduler."""
    body = {"metadata": {"uid": uid}, "status": {"conditions": [pods.devices_condition(devices, dra)]}}
    try:
        rawapi.request(api, "PATCH", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/status", body,
                       content_type=rawapi.STRATEGIC_MERGE_PATCH)
    except (ApiException, HTTPError, OSError) as err:
        log.warning("pod %s/%s is bound, but its devices %s could not be recorded in condition %s: %s",
                    namespace, name, pods.format_devices(devices, dra), pods.DEVICES_CONDITION,
                    watching.describe_error(err))
        return False
    return True


def read_pod(core: Any, *, namespace: str, name: str) -> dict[str, Any]:
    """The pod as the API has it now, as JSON (a CoreV1Api read, its connection returned to the pool);
    raises ApiException (404: not found) or the transport's error."""
    reply = core.read_namespaced_pod(name, namespace, _preload_content=False)
    try:
        return dict(json.loads(reply.data))
    finally:
        reply.release_conn()
