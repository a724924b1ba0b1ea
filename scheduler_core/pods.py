"""Pods as the scheduler sees them: effective requests, GPU demand and placement constraints.

Parsed once per pod. Annotation values a user can get wrong (a share of 1500, memory as
"40Gi") do not raise: they become `problems`, and the pod is reported unschedulable with
that message instead of being placed on a guess.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core import predicates, quantity, requests
from scheduler_core.nodes import GPU_MILLI, MILLI

MODEL_ANNOTATION = "gpu.nvidia.com/model"
MEMORY_ANNOTATION = "gpu.nvidia.com/memory"
MILLI_ANNOTATION = "gpu-scheduler.io/gpu-milli"
DEVICES_ANNOTATION = "gpu-scheduler.io/gpu-devices"
SPOT_ANNOTATION = "gpu-scheduler.io/spot"
SPOT_POLICIES = ("prefer", "avoid", "require", "forbid")
TERMINAL_PHASES = ("Succeeded", "Failed")  # such a pod holds no resources any more


@dataclass(frozen=True)
class Device:
    """A GPU of a node given (a share of) to a pod."""

    index: int
    milli: int  # 1000: the whole GPU


@dataclass(frozen=True)
class PodFacts:
    key: str  # namespace/name
    uid: str
    scheduler_name: str
    node_name: str | None
    priority: int
    requests: Mapping[str, int]  # milli-units, with "pods": 1000
    gpus: int  # whole GPUs
    gpu_milli: int  # a share of one GPU in thousandths, 0 for none
    model: str | None  # as asked, for messages
    models: tuple[frozenset[str], ...]  # alternatives, each a set of tokens
    min_gpu_memory_mib: int | None
    tolerations: tuple[predicates.Toleration, ...]
    node_selector: Mapping[str, str]
    required_terms: tuple[predicates.Term, ...] | None  # None: no required node affinity
    preferred_terms: tuple[tuple[int, predicates.Term], ...]
    spot: str | None
    app: str | None  # the application, for locality
    devices: tuple[Device, ...] | None  # restored from the annotation of an assigned pod
    problems: tuple[str, ...]  # why the pod cannot be scheduled whatever the nodes

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or self.gpu_milli > 0

    @property
    def identity(self) -> str:
        """The UID, as kube-scheduler keys pods (a new pod of the same name is another pod); namespace/name
        for pods without one (simulation and trace inputs)."""
        return self.uid or self.key


def key_of(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or metadata.get('generateName') or ''}"


def parse(
    pod: Mapping[str, Any],
    *,
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",),
    locality_labels: tuple[str, ...] = ("app.kubernetes.io/part-of", "app"),
) -> PodFacts:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    problems: list[str] = []

    try:
        effective = requests.pod_requests(spec)
    except (quantity.QuantityError, AttributeError, TypeError) as err:
        problems.append(f"resources: {err}")
        effective = {}
    milli_requests = {name: math.ceil(amount * MILLI) for name, amount in effective.items() if amount > 0}
    milli_requests["pods"] = MILLI
    gpus = sum(milli_requests.get(name, 0) for name in gpu_resources) // MILLI

    gpu_milli = _share(annotations.get(MILLI_ANNOTATION), problems)
    if gpus and gpu_milli:
        problems.append(f"asks for {gpus} whole GPU(s) and a share ({MILLI_ANNOTATION}); choose one")
    model = annotations.get(MODEL_ANNOTATION) or None
    models = _models(model, problems)
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return PodFacts(
        key=key_of(pod),
        uid=str(metadata.get("uid") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=spec.get("nodeName") or None,
        priority=int(spec.get("priority") or 0),
        requests=milli_requests,
        gpus=gpus,
        gpu_milli=gpu_milli,
        model=model,
        models=models,
        min_gpu_memory_mib=_memory(annotations.get(MEMORY_ANNOTATION), problems),
        tolerations=predicates.parse_tolerations(spec.get("tolerations")),
        node_selector=dict(spec.get("nodeSelector") or {}),
        required_terms=predicates.parse_terms(required.get("nodeSelectorTerms")) if required else None,
        preferred_terms=tuple(
            (int(p.get("weight") or 0), predicates.parse_terms([p.get("preference") or {}])[0])
            for p in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
            if isinstance(p, Mapping)
        ),
        spot=_spot(annotations.get(SPOT_ANNOTATION), problems),
        app=next((labels[k] for k in locality_labels if labels.get(k)), None),
        devices=parse_devices(annotations.get(DEVICES_ANNOTATION)),
        problems=tuple(problems),
    )


def parse_devices(text: object) -> tuple[Device, ...] | None:
    """`[{"index": 0, "milli": 1000}, ...]`; None when absent or not of that shape."""
    if not isinstance(text, str):
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, list):
        return None
    devices = []
    for item in raw:
        if not isinstance(item, Mapping):
            return None
        index, milli = item.get("index"), item.get("milli", GPU_MILLI)
        if not isinstance(index, int) or not isinstance(milli, int) or index < 0 or not 0 < milli <= GPU_MILLI:
            return None
        devices.append(Device(index, milli))
    return tuple(devices)


def format_devices(devices: tuple[Device, ...]) -> str:
    return json.dumps([{"index": d.index, "milli": d.milli} for d in devices], separators=(",", ":"))


def _share(value: object, problems: list[str]) -> int:
    if value is None:
        return 0
    if isinstance(value, str) and value.isdigit() and 0 < int(value) < GPU_MILLI:
        return int(value)
    problems.append(f"annotation {MILLI_ANNOTATION}: must be an integer from 1 to 999 "
                    f"(thousandths of one GPU), got {json.dumps(value)}")
    return 0


def _memory(value: object, problems: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    problems.append(f"annotation {MEMORY_ANNOTATION}: must be a positive integer (MiB per GPU), "
                    f"got {json.dumps(value)}")
    return None


def _models(value: str | None, problems: list[str]) -> tuple[frozenset[str], ...]:
    if value is None:
        return ()
    alternatives = tuple(predicates.model_tokens(part) for part in value.split("|"))
    if not all(alternatives):
        problems.append(f"annotation {MODEL_ANNOTATION}: must be model names separated by '|', "
                        f"like A100|H100, got {json.dumps(value)}")
        return ()
    return alternatives


def _spot(value: object, problems: list[str]) -> str | None:
    if value is None:
        return None
    if value in SPOT_POLICIES:
        return str(value)
    problems.append(f"annotation {SPOT_ANNOTATION}: must be one of {', '.join(SPOT_POLICIES)}, "
                    f"got {json.dumps(value)}")
    return None
