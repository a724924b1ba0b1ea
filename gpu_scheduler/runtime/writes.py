"""Pod writes the runner and its plugins share: status patches, and the eviction of a preemption victim.

The eviction is what kube-scheduler's preemption writes for each victim (pkg/scheduler/framework/preemption,
v1.36): the DisruptionTarget condition (reason PreemptionByScheduler), a delete with the victim's own grace period,
and a Preempted event. Both the preemption of one pod and that of a gang use it, so it lives here, in neither.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from gpu_scheduler import rawapi, watching
from gpu_scheduler.runtime import events
from scheduler_core import pods

log = logging.getLogger(__name__)


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"


def timestamp() -> str:
    return now().strftime("%Y-%m-%dT%H:%M:%SZ")


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def patch_status(api: Any, namespace: str, name: str, patch: dict[str, Any]) -> None:
    rawapi.request(api, "PATCH", f"{pod_path(namespace, name)}/status", patch,
                   content_type=rawapi.STRATEGIC_MERGE_PATCH)


def evict(api: Any, victim: pods.PodFacts, *, preemptor_key: str, preemptor_uid: str, node: str,
          scheduler_name: str, identity: str) -> None:
    """Mark the victim DisruptionTarget, delete it, and tell it why. A victim that is gone, or another pod under its
    name now, is left alone; any other API error is raised (the preemption stops there)."""
    namespace, _, name = victim.key.partition("/")
    condition = {"type": "DisruptionTarget", "status": "True", "reason": pods.PREEMPTED,
                 "message": f"{scheduler_name}: preempting to accommodate a higher priority pod",
                 "lastTransitionTime": timestamp()}
    try:
        # the uid in the patch makes it fail on another pod of the victim's name (422: uid is immutable)
        patch_status(api, namespace, name, {"metadata": {"uid": victim.identity}, "status": {"conditions": [condition]}})
        rawapi.request(api, "DELETE", pod_path(namespace, name),
                       {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": victim.identity}})
    except ApiException as err:
        if err.status in (404, 409, 422):  # gone already, or another pod of its name now: nothing to evict
            log.info("victim %s of %s not evicted: %s", victim.key, preemptor_key, watching.describe_error(err))
            return
        raise
    events.record(api, namespace=namespace, name=name, uid=victim.identity, kind="Normal", reason="Preempted",
                  message=f"Preempted by pod {preemptor_uid} on node {node}", component=scheduler_name,
                  instance=identity)


class UnderWay:
    """Preemptions under way, by preemptor (a pod's UID, or a gang's key): from the decision until the watch shows
    each victim gone or being deleted. While one is, its preemptor waits rather than evict more (upstream's
    DefaultPreemption PreEnqueue keeps a pod whose preemption is running out of the queue)."""

    def __init__(self) -> None:
        self.victims: dict[Any, set[str] | None] = {}  # None: the API calls are in flight

    def start(self, key: Any) -> None:
        self.victims[key] = None

    def carried_out(self, key: Any, evicted: set[str]) -> None:
        self.victims[key] = evicted

    def drop(self, key: Any) -> None:
        self.victims.pop(key, None)

    def __contains__(self, key: Any) -> bool:
        return key in self.victims

    def still(self, key: Any, assignments: Any) -> bool:
        """Whether `key`'s last preemption is still under way: its API calls in flight, or a victim the model
        (`assignments`, by UID) does not show gone or terminating yet."""
        if key not in self.victims:
            return False
        victims = self.victims[key]
        if victims is not None:
            victims -= {v for v in victims if v not in assignments or assignments[v].pod.terminating}
            if not victims:
                del self.victims[key]
                return False
        return True
