"""Events on pods (and pod groups), as kube-scheduler writes them (core/v1 Events): what `kubectl describe pod` shows.

Best effort: an event that cannot be written is logged at debug level and dropped, never retried,
so a slow or refusing API never holds up scheduling.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import rawapi, watching

log = logging.getLogger(__name__)

MAX_MESSAGE = 1024  # characters; the apiserver refuses event messages past 4 KiB


def record(api: client.ApiClient, *, namespace: str, name: str, uid: str, kind: str, reason: str, message: str,
           component: str, instance: str, involved: tuple[str, str] = ("v1", "Pod")) -> None:
    """POST one event about the object `namespace/name` with `uid`, by default a pod (`involved`: its apiVersion
    and kind); `kind` is Normal or Warning."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": {"apiVersion": involved[0], "kind": involved[1], "name": name, "namespace": namespace,
                           "uid": uid},
        "type": kind, "reason": reason, "message": message[:MAX_MESSAGE],
        "source": {"component": component},
        "reportingComponent": component, "reportingInstance": instance,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }
    try:
        rawapi.request(api, "POST", f"/api/v1/namespaces/{quote(namespace)}/events", event)
    except (ApiException, HTTPError, OSError) as err:
        log.debug("cannot record event %s on %s/%s: %s", reason, namespace, name, watching.describe_error(err))
