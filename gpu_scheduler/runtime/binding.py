"""Binding a pod to a node: the one write that places a pod, isolated here, and the read that
tells what became of a pod when it failed.

The Binding carries the pod's GPU devices as an annotation; the apiserver copies a
Binding's annotations onto the pod in the same write that sets spec.nodeName, so a pod
is never bound without its devices (a restarted scheduler restores them from the pod).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from kubernetes import client

from gpu_scheduler import rawapi


def bind(api: client.ApiClient, *, namespace: str, name: str, uid: str | None, node: str,
         annotations: dict[str, str] | None = None) -> None:
    """POST the Binding; raises ApiException with the apiserver's status on refusal (409: already bound)."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations or {}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    rawapi.request(api, "POST", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding", body)


def read_pod(core: Any, *, namespace: str, name: str) -> dict[str, Any]:
    """The pod as the API has it now, as JSON (a CoreV1Api read, its connection returned to the pool);
    raises ApiException (404: not found) or the transport's error."""
    reply = core.read_namespaced_pod(name, namespace, _preload_content=False)
    try:
        return dict(json.loads(reply.data))
    finally:
        reply.release_conn()
