"""Nodes as the scheduler sees them: parsed once per change into compact, immutable facts.

GPU facts come from allocatable (`nvidia.com/gpu`) and from the labels of the seed design
(`gpu.nvidia.com/*`) or NVIDIA GPU Feature Discovery (`nvidia.com/gpu.*`), read as aliases.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core import predicates, quantity

MILLI = 1000
GPU_MILLI = 1000
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
_MEMORY_IN_MODEL = re.compile(r"(\d+)\s*GB", re.IGNORECASE)


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


def to_milli(value: object) -> int:
    """A quantity in thousandths, rounded up as Quantity.MilliValue does."""
    return math.ceil(quantity.parse(value) * MILLI)


def parse(node: Mapping[str, Any], *, gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",),
          now: datetime.datetime | None = None, utilization_max_age: float = 300.0) -> NodeFacts:
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels = dict(metadata.get("labels") or {})
    annotations = metadata.get("annotations") or {}
    allocatable = {}
    for name, value in (status.get("allocatable") or status.get("capacity") or {}).items():
        try:
            allocatable[name] = to_milli(value)
        except quantity.QuantityError:
            continue
    model = _first_label(labels, MODEL_LABELS)
    return NodeFacts(
        name=str(metadata.get("name", "")),
        labels=labels,
        allocatable=allocatable,
        taints=predicates.parse_taints(spec.get("taints")),
        unschedulable=bool(spec.get("unschedulable")),
        ready=_ready(status.get("conditions")),
        zone=labels.get(ZONE_LABEL),
        capacity_type=_capacity_type(labels),
        gpu_count=_gpu_count(allocatable, labels, gpu_resources),
        gpu_model=model,
        gpu_memory_mib=_gpu_memory(labels, model),
        gpu_utilization=_utilization(annotations, now, utilization_max_age),
    )


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
    for resource in gpu_resources:
        if resource in allocatable:
            return allocatable[resource] // MILLI
    count = _first_label(labels, COUNT_LABELS)
    return int(count) if count and count.isdigit() else 0


def _gpu_memory(labels: Mapping[str, str], model: str | None) -> int | None:
    memory = _first_label(labels, MEMORY_LABELS)
    if memory and memory.isdigit():
        return int(memory)
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
        if (now - updated).total_seconds() > max_age:
            return None
    return value
