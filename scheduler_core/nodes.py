"""Nodes as the scheduler sees them: parsed once per change into compact, immutable facts.

GPU facts come from allocatable (`nvidia.com/gpu`) and from the labels of the seed design
(`gpu.nvidia.com/*`) or NVIDIA GPU Feature Discovery (`nvidia.com/gpu.*`), read as aliases.

A node whose allocatable cannot be read gets `problems` and counts as not ready: the
scheduler cannot tell what fits there, so it places nothing there. Absurd amounts are
clamped (see MAX_MILLI, MAX_GPUS) rather than refused: such a node simply looks big.
"""

from __future__ import annotations

import datetime
import itertools
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from scheduler_core import fields, predicates, quantity

MILLI = 1000
GPU_MILLI = 1000
# The most of one resource in thousandths (2 PiB of memory, in milli-bytes) on a node or in a
# pod's request: an absurd request makes every node look full, and the model's int64 sums
# (one node's amount plus one request) never wrap around.
MAX_MILLI = 2**61
MAX_GPUS = 128  # per node (16 GPUs time-sliced 8 ways); one that says more is modelled with this many
# status.images, for ImageLocality: the kubelet reports its 50 largest images by default (nodeStatusMaxImages),
# each under a few names. A node that lists more has the first MAX_IMAGE_NAMES names kept; a name past
# MAX_IMAGE_NAME characters (no registry reference is that long) is left out, as are such names in pods.
MAX_IMAGE_NAMES = 512
MAX_IMAGE_NAME = 1024
INT64 = 2**63 - 1
ZONE_LABEL = "topology.kubernetes.io/zone"
UTILIZATION_ANNOTATION = "gpu-scheduler.io/gpu-utilization"
UTILIZATION_TIME_ANNOTATION = "gpu-scheduler.io/gpu-utilization-updated"
MODEL_LABELS = ("gpu.nvidia.com/model", "nvidia.com/gpu.product")
MEMORY_LABELS = ("gpu.nvidia.com/memory", "nvidia.com/gpu.memory")
COUNT_LABELS = ("gpu.nvidia.com/count", "nvidia.com/gpu.count")
UNSCHEDULABLE_TAINT = predicates.Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")

# label -> {value: capacity type}; the clouds and autoscalers that publish one.
_CAPACITY_LABELS: dict[str, dict[str, str]] = {
    "karpenter.sh/capacity-type": {"spot": "spot", "on-demand": "on-demand"},
    "eks.amazonaws.com/capacityType": {"SPOT": "spot", "ON_DEMAND": "on-demand"},
    "cloud.google.com/gke-spot": {"true": "spot"},
    "cloud.google.com/gke-preemptible": {"true": "spot"},
    "kubernetes.azure.com/scalesetpriority": {"spot": "spot", "regular": "on-demand"},
    "node.kubernetes.io/lifecycle": {"spot": "spot", "normal": "on-demand", "on-demand": "on-demand"},
}
_MEMORY_IN_MODEL = re.compile(r"(\d{1,6})\s*GB", re.IGNORECASE | re.ASCII)


@dataclass(frozen=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]  # milli-units, resource name -> amount * 1000
    taints: tuple[predicates.Taint, ...]
    unschedulable: bool
    ready: bool
    zone: str | None
    capacity_type: str | None  # "spot" | "on-demand" | None
    gpu_count: int
    gpu_model: str | None
    gpu_memory_mib: int | None  # per GPU
    gpu_utilization: float | None  # 0..1, None when absent, invalid or stale
    problems: tuple[str, ...]  # why the node cannot take pods (it counts as not ready)
    images: Mapping[str, int]  # image name -> size in bytes (status.images), for ImageLocality


def to_milli(amount: Fraction) -> int:
    """An amount in thousandths, rounded up as Quantity.MilliValue does, within 0..MAX_MILLI."""
    return max(0, min(math.ceil(amount * MILLI), MAX_MILLI))


def scheduled_milli(resource: str, amount: Fraction) -> int:
    """An amount as kube-scheduler counts it, in thousandths: cpu in millicores (Quantity.MilliValue), any
    other resource in whole units (Quantity.Value, rounded up), so sums and comparisons round as upstream's."""
    return to_milli(amount if resource == "cpu" else Fraction(math.ceil(amount)))


def parse(node: Mapping[str, Any], *, gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",),
          now: datetime.datetime | None = None, utilization_max_age: float = 300.0) -> NodeFacts:
    metadata, spec, status = (fields.mapping(node.get(part)) for part in ("metadata", "spec", "status"))
    labels = fields.strings(metadata.get("labels"))
    problems: list[str] = []
    allocatable = _allocatable(status, problems)
    model = _first_label(labels, MODEL_LABELS)
    return NodeFacts(
        name=str(metadata.get("name", "")),
        labels=labels,
        allocatable=allocatable,
        taints=predicates.parse_taints(spec.get("taints")),
        unschedulable=bool(spec.get("unschedulable")),
        ready=_ready(status.get("conditions")) and not problems,
        zone=labels.get(ZONE_LABEL),
        capacity_type=_capacity_type(labels),
        gpu_count=_gpu_count(allocatable, labels, gpu_resources),
        gpu_model=model,
        gpu_memory_mib=_gpu_memory(labels, model),
        gpu_utilization=_utilization(fields.strings(metadata.get("annotations")), now, utilization_max_age),
        problems=tuple(problems),
        images=_images(status.get("images")),
    )


def _allocatable(status: Mapping[str, Any], problems: list[str]) -> dict[str, int]:
    raw = status.get("allocatable") or status.get("capacity") or {}
    if not isinstance(raw, Mapping):
        problems.append(f"status.allocatable: expected an object, got {fields.shown(raw)}")
        return {}
    allocatable = {}
    for name, value in raw.items():
        try:
            allocatable[str(name)] = scheduled_milli(str(name), quantity.parse(value))
        except quantity.QuantityError as err:
            problems.append(f"status.allocatable {name}: {err}")
    return allocatable


def _images(value: object) -> dict[str, int]:
    """Image name -> size (`sizeBytes`) from status.images, each name of an image; of one name listed twice
    the later wins, as in kube-scheduler's snapshot. Names are interned: thousands of nodes hold the same
    few images."""
    named = ((name, _size(image)) for image in map(fields.mapping, fields.sequence(value)[:MAX_IMAGE_NAMES])
             for name in fields.sequence(image.get("names")))
    return {sys.intern(name): size for name, size in itertools.islice(named, MAX_IMAGE_NAMES)
            if isinstance(name, str) and len(name) <= MAX_IMAGE_NAME}


def _size(image: Mapping[str, Any]) -> int:
    size = image.get("sizeBytes", 0)
    return max(-INT64 - 1, min(size, INT64)) if isinstance(size, int) and not isinstance(size, bool) else 0


def _first_label(labels: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        if labels.get(key):
            return labels[key]
    return None


def _ready(conditions: object) -> bool:
    """Ready unless a Ready condition says otherwise (a bare snapshot without status counts as ready)."""
    if not isinstance(conditions, list):
        return True
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return True


def _capacity_type(labels: Mapping[str, str]) -> str | None:
    for label, values in _CAPACITY_LABELS.items():
        if label in labels and labels[label] in values:
            return values[labels[label]]
    return None


def _gpu_count(allocatable: Mapping[str, int], labels: Mapping[str, str], gpu_resources: tuple[str, ...]) -> int:
    """At most MAX_GPUS: a node that says more gets that many used."""
    for resource in gpu_resources:
        if resource in allocatable:
            return min(allocatable[resource] // MILLI, MAX_GPUS)
    return min(fields.natural(_first_label(labels, COUNT_LABELS)) or 0, MAX_GPUS)


def _gpu_memory(labels: Mapping[str, str], model: str | None) -> int | None:
    memory = fields.natural(_first_label(labels, MEMORY_LABELS))
    if memory is not None:
        return memory
    found = _MEMORY_IN_MODEL.search(model or "")
    return int(found.group(1)) * 1024 if found else None


def _utilization(annotations: Mapping[str, str], now: datetime.datetime | None, max_age: float) -> float | None:
    try:
        value = float(annotations.get(UTILIZATION_ANNOTATION, ""))
    except ValueError:
        return None
    if not 0.0 <= value <= 1.0:
        return None
    stamp = annotations.get(UTILIZATION_TIME_ANNOTATION)
    if stamp and now is not None:
        try:
            updated = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return None
        if updated.tzinfo is None or (now - updated).total_seconds() > max_age:
            return None
    return value
