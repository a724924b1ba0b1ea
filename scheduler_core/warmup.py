"""Deletion-cost warm-up: which pods to promote, and the patch that does it safely.

New pods get a negative `controller.kubernetes.io/pod-deletion-cost` from the webhook, so a
ReplicaSet scaling down removes them first. Once a pod has been Ready for the warm-up
period its cost is raised to the warmed value, once. Only a cost still equal to what the
webhook wrote (`gpu-scheduler.io/initial-deletion-cost`) is raised, and the JSON patch
tests that value, so a user's concurrent change always wins; it also stamps
`gpu-scheduler.io/deletion-cost-warmed-at`, so a cost set back later is never raised twice.
State lives on the pod, so a restarted scheduler neither forgets nor repeats a promotion. Pure: `now` is passed in.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

import jsonpointer

from scheduler_core import profile

WARMED_ANNOTATION = "gpu-scheduler.io/deletion-cost-warmed-at"  # when the one promotion happened


def due(pod: Mapping[str, Any], *, now: datetime.datetime, warmup: profile.Warmup) -> list[dict[str, Any]] | None:
    """The JSON patch promoting `pod`, or None when it is not (or no longer) due."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    initial = annotations.get(profile.INITIAL_COST_ANNOTATION)
    current = annotations.get(profile.DELETION_COST_ANNOTATION)
    warmed = str(warmup.cost)
    if (initial is None or current != initial or current == warmed or WARMED_ANNOTATION in annotations
            or metadata.get("deletionTimestamp")):
        return None
    ready_since = _ready_since(pod)
    if ready_since is None or (now - ready_since).total_seconds() < warmup.seconds:
        return None
    path = f"/metadata/annotations/{jsonpointer.escape(profile.DELETION_COST_ANNOTATION)}"
    return [
        {"op": "test", "path": path, "value": current},
        {"op": "replace", "path": path, "value": warmed},
        {"op": "add", "path": f"/metadata/annotations/{jsonpointer.escape(WARMED_ANNOTATION)}",
         "value": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
    ]


def _ready_since(pod: Mapping[str, Any]) -> datetime.datetime | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime")
            if not stamp:
                return None
            try:
                return datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
            except ValueError:
                return None
    return None
