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
from dataclasses import dataclass
from typing import Any

import jsonpointer

from scheduler_core import profile

WARMED_ANNOTATION = "gpu-scheduler.io/deletion-cost-warmed-at"  # when the one promotion happened
LONGEST_COST = len(str(-(2**31)))  # a deletion cost is an int32 in decimal; anything longer is not one


@dataclass(frozen=True)
class Candidate:
    """What the warm-up reads of a bound pod, and names it by: a few short fields, never the pod itself
    (a watched model keeps one per bound pod, and a tenant's annotations may be hundreds of KiB)."""

    namespace: str
    name: str
    uid: str
    initial_cost: str | None  # what the webhook wrote; None: it wrote nothing, so there is nothing to warm
    cost: str | None  # the deletion cost now
    warmed: bool  # the one promotion has happened (WARMED_ANNOTATION)
    deleting: bool  # deletionTimestamp set
    ready_since: datetime.datetime | None  # Ready=True since, None when not Ready

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> Candidate:
        metadata = pod.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        return cls(
            namespace=str(metadata.get("namespace") or "default"),
            name=str(metadata.get("name") or ""),
            uid=str(metadata.get("uid") or ""),
            initial_cost=_cost(annotations.get(profile.INITIAL_COST_ANNOTATION)),
            cost=_cost(annotations.get(profile.DELETION_COST_ANNOTATION)),
            warmed=WARMED_ANNOTATION in annotations,
            deleting=bool(metadata.get("deletionTimestamp")),
            ready_since=_ready_since(pod),
        )


def due(pod: Candidate, *, now: datetime.datetime, warmup: profile.Warmup) -> list[dict[str, Any]] | None:
    """The JSON patch promoting `pod`, or None when it is not (or no longer) due."""
    initial, current = pod.initial_cost, pod.cost
    warmed = str(warmup.cost)
    if initial is None or current != initial or current == warmed or pod.warmed or pod.deleting:
        return None
    if pod.ready_since is None or (now - pod.ready_since).total_seconds() < warmup.seconds:
        return None
    path = f"/metadata/annotations/{jsonpointer.escape(profile.DELETION_COST_ANNOTATION)}"
    return [
        {"op": "test", "path": path, "value": current},
        {"op": "replace", "path": path, "value": warmed},
        {"op": "add", "path": f"/metadata/annotations/{jsonpointer.escape(WARMED_ANNOTATION)}",
         "value": now.strftime("%Y-%m-%dT%H:%M:%SZ")},
    ]


def _cost(value: object) -> str | None:
    return value if isinstance(value, str) and len(value) <= LONGEST_COST else None


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
