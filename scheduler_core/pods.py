"""Pods as the scheduler sees them: effective requests, GPU demand and placement constraints.

Parsed once per pod. Annotation values a user can get wrong (a share of 1500, memory as
"40Gi") do not raise: they become `problems`, and the pod is reported unschedulable with
that message instead of being placed on a guess. Nor does anything else the apiserver
accepts (a 250 KiB annotation, a request of 100P): the facts keep only bounded values, and
messages quote only the start of a long one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from scheduler_core import fields, podaffinity, predicates, quantity, requests
from scheduler_core.nodes import GPU_MILLI, MAX_GPUS, MILLI, to_milli

MODEL_ANNOTATION = "gpu.nvidia.com/model"
MEMORY_ANNOTATION = "gpu.nvidia.com/memory"
MILLI_ANNOTATION = "gpu-scheduler.io/gpu-milli"
DEVICES_ANNOTATION = "gpu-scheduler.io/gpu-devices"
# The pod status condition in which the binder records the devices it bound a pod with. Unlike the
# annotation, which anyone who may patch the pod can rewrite, it takes pods/status to write, and
# a create starts with an empty status: a tenant cannot forge it.
DEVICES_CONDITION = "gpu-scheduler.io/GPUDevices"
SPOT_ANNOTATION = "gpu-scheduler.io/spot"
SPOT_POLICIES = ("prefer", "avoid", "require", "forbid")
TERMINAL_PHASES = ("Succeeded", "Failed")  # such a pod holds no resources any more
MAX_MODEL = 256  # characters of gpu.nvidia.com/model: a few dozen model names
MAX_DEVICES_TEXT = 4096  # characters of gpu-scheduler.io/gpu-devices: MAX_GPUS entries fit


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
    devices: tuple[Device, ...] | None  # restored from the record (or else the annotation) of an assigned pod
    devices_from: str | None  # where `devices` were read, for messages: the condition or the annotation
    devices_problem: str | None  # why the annotation could not be read, or how it differs from the record
    problems: tuple[str, ...]  # why the pod cannot be scheduled whatever the nodes
    # Fields that constrain where the pod may run which the core does not evaluate yet (paths, e.g.
    # `spec.topologySpreadConstraints[0]`): the standalone scheduler never binds such a pod, rather than
    # bind it where kube-scheduler would not. In extender mode kube-scheduler evaluates them itself.
    unsupported: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    pod_affinity: podaffinity.PodAffinity | None = None  # inter-pod affinity terms; None: it has none

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or self.gpu_milli > 0

    @property
    def identity(self) -> str:
        """The UID, as kube-scheduler keys pods (a new pod of the same name is another pod); namespace/name
        for pods without one (simulation and trace inputs)."""
        return self.uid or self.key


def key_of(pod: Mapping[str, Any]) -> str:
    metadata = fields.mapping(pod.get("metadata"))
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or metadata.get('generateName') or ''}"


def parse(
    pod: Mapping[str, Any],
    *,
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",),
    locality_labels: tuple[str, ...] = ("app.kubernetes.io/part-of", "app"),
) -> PodFacts:
    metadata = fields.mapping(pod.get("metadata"))
    spec = fields.mapping(pod.get("spec"))
    annotations = fields.mapping(metadata.get("annotations"))
    labels = fields.strings(metadata.get("labels"))
    problems: list[str] = []

    try:
        effective = requests.pod_requests(pod.get("spec") or {})  # a spec that is no object is a problem
    except quantity.QuantityError as err:
        problems.append(f"resources: {err}")
        effective = {}
    milli_requests = {name: to_milli(amount) for name, amount in effective.items() if amount > 0}
    milli_requests["pods"] = MILLI
    gpus = sum(milli_requests.get(name, 0) for name in gpu_resources) // MILLI

    gpu_milli = _share(annotations.get(MILLI_ANNOTATION), problems)
    if gpus and gpu_milli:
        problems.append(f"asks for {gpus} whole GPU(s) and a share ({MILLI_ANNOTATION}); choose one")
    model, models = _models(annotations.get(MODEL_ANNOTATION), problems)
    key = key_of(pod)
    all_affinity = fields.mapping(spec.get("affinity"))
    pod_affinity, affinity_problem = podaffinity.parse(all_affinity, key.partition("/")[0])
    if affinity_problem:
        problems.append(affinity_problem)
    affinity = fields.mapping(all_affinity.get("nodeAffinity"))
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    node_name = spec.get("nodeName")
    devices, devices_from, devices_problem = _assigned_devices(pod)
    return PodFacts(
        key=key,
        uid=str(metadata.get("uid") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=node_name if isinstance(node_name, str) and node_name else None,
        priority=_priority(spec.get("priority"), problems),
        requests=milli_requests,
        gpus=gpus,
        gpu_milli=gpu_milli,
        model=model,
        models=models,
        min_gpu_memory_mib=_memory(annotations.get(MEMORY_ANNOTATION), problems),
        tolerations=predicates.parse_tolerations(spec.get("tolerations")),
        node_selector=_node_selector(spec.get("nodeSelector"), problems),
        # required terms that cannot be read match no node
        required_terms=predicates.parse_terms(fields.mapping(required).get("nodeSelectorTerms")) if required else None,
        preferred_terms=_preferred(affinity.get("preferredDuringSchedulingIgnoredDuringExecution")),
        spot=_spot(annotations.get(SPOT_ANNOTATION), problems),
        app=next((labels[k] for k in locality_labels if labels.get(k)), None),
        devices=devices,
        devices_from=devices_from,
        devices_problem=devices_problem,
        problems=tuple(problems),
        unsupported=unsupported_fields(spec),
        labels=labels,
        pod_affinity=pod_affinity,
    )


def unsupported_fields(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The paths of constraints in `spec` the core cannot evaluate yet (see PodFacts.unsupported).

    Preferences (ScheduleAnyway spread) are not among them: kube-scheduler, too, may bind a pod on any
    node that passes its filters, whatever it scores.
    """
    found = []
    for index, constraint in enumerate(fields.sequence(spec.get("topologySpreadConstraints"))):
        if fields.mapping(constraint).get("whenUnsatisfiable", "DoNotSchedule") != "ScheduleAnyway":
            found.append(f"spec.topologySpreadConstraints[{index}]")
    for group in ("initContainers", "containers"):
        for index, container in enumerate(fields.sequence(spec.get(group))):
            if group == "initContainers" and fields.mapping(container).get("restartPolicy") != "Always":
                continue  # it has ended before the pod runs: kube-scheduler ignores its host ports too
            for port_index, port in enumerate(fields.sequence(fields.mapping(container).get("ports"))):
                if fields.mapping(port).get("hostPort"):
                    found.append(f"spec.{group}[{index}].ports[{port_index}].hostPort")
    for index, volume in enumerate(fields.sequence(spec.get("volumes"))):
        for source in ("persistentVolumeClaim", "ephemeral"):
            if fields.mapping(volume).get(source) is not None:
                found.append(f"spec.volumes[{index}].{source}")
    if spec.get("resourceClaims"):
        found.append("spec.resourceClaims")
    if fields.mapping(spec.get("resources")):
        found.append("spec.resources")
    return tuple(found)


def unsupported_reason(paths: tuple[str, ...]) -> str:
    """Why the standalone scheduler leaves a pod with such fields pending, and what the user can do."""
    listed = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return (f"not scheduled: gpu-scheduler cannot evaluate {listed} yet, and kube-scheduler would honour "
            f"{'it' if len(paths) == 1 else 'them'}; remove {'it' if len(paths) == 1 else 'them'}, or schedule "
            "the pod with kube-scheduler and the gpu-scheduler extender (manifests/overlays/extender)")


def parse_devices(text: object) -> tuple[Device, ...] | None:
    """`[{"index": 0, "milli": 1000}, ...]`; None when absent or not of that shape.

    At most MAX_GPUS entries with indices below it, in at most MAX_DEVICES_TEXT characters:
    nothing larger names GPUs of one node, and reading it stays cheap.
    """
    if not isinstance(text, str) or len(text) > MAX_DEVICES_TEXT:
        return None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, list) or len(raw) > MAX_GPUS:
        return None
    devices = []
    for item in raw:
        if not isinstance(item, Mapping):
            return None
        index, milli = item.get("index"), item.get("milli", GPU_MILLI)
        if not _integer(index) or not _integer(milli) or not 0 <= index < MAX_GPUS or not 0 < milli <= GPU_MILLI:
            return None
        devices.append(Device(index, milli))
    return tuple(devices)


def recorded_devices(pod: Mapping[str, Any]) -> tuple[Device, ...] | None:
    """The devices the binder recorded in the pod's DEVICES_CONDITION; None when there is no such record."""
    for condition in fields.sequence(fields.mapping(pod.get("status")).get("conditions")):
        condition = fields.mapping(condition)
        if condition.get("type") == DEVICES_CONDITION and condition.get("status") == "True":
            return parse_devices(condition.get("message"))
    return None


def devices_condition(devices: tuple[Device, ...]) -> dict[str, str]:
    """The status condition that records a binding's devices (see DEVICES_CONDITION)."""
    return {"type": DEVICES_CONDITION, "status": "True", "reason": "Bound", "message": format_devices(devices)}


def _assigned_devices(pod: Mapping[str, Any]) -> tuple[tuple[Device, ...] | None, str | None, str | None]:
    """(devices, where they were read, a problem with the annotation): the binder's record wins; the
    annotation counts only for a pod without one (bound before records, or not by a scheduler of ours)."""
    value = fields.mapping(fields.mapping(pod.get("metadata")).get("annotations")).get(DEVICES_ANNOTATION)
    annotated = parse_devices(value)
    unreadable = None if annotated is not None or value is None else (
        f"annotation {DEVICES_ANNOTATION}: must be a JSON list of at most {MAX_GPUS} GPUs "
        f"like [{{\"index\": 0, \"milli\": 1000}}], got {fields.shown(value)}")
    recorded = recorded_devices(pod)
    if recorded is None:
        return annotated, (f"annotation {DEVICES_ANNOTATION}" if annotated is not None else None), unreadable
    edited = None if value is None or annotated == recorded else (
        f"annotation {DEVICES_ANNOTATION} {fields.shown(value)} differs from the devices recorded at binding "
        f"(condition {DEVICES_CONDITION})")
    return recorded, f"condition {DEVICES_CONDITION}", edited


def format_devices(devices: tuple[Device, ...]) -> str:
    return json.dumps([{"index": d.index, "milli": d.milli} for d in devices], separators=(",", ":"))


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is no number


def _share(value: object, problems: list[str]) -> int:
    if value is None:
        return 0
    milli = fields.natural(value)
    if milli is not None and 0 < milli < GPU_MILLI:
        return milli
    problems.append(f"annotation {MILLI_ANNOTATION}: must be an integer from 1 to 999 "
                    f"(thousandths of one GPU), got {fields.shown(value)}")
    return 0


def _memory(value: object, problems: list[str]) -> int | None:
    if value is None:
        return None
    mib = fields.natural(value)
    if mib:
        return mib
    problems.append(f"annotation {MEMORY_ANNOTATION}: must be a positive integer (MiB per GPU), "
                    f"got {fields.shown(value)}")
    return None


def _models(value: object, problems: list[str]) -> tuple[str | None, tuple[frozenset[str], ...]]:
    """The model as asked (for messages) and its alternatives; None and () when absent or unreadable."""
    if value in (None, ""):
        return None, ()
    if isinstance(value, str) and len(value) > MAX_MODEL:
        problems.append(f"annotation {MODEL_ANNOTATION}: must be at most {MAX_MODEL} characters, "
                        f"got {fields.shown(value)}")
        return None, ()
    alternatives = tuple(predicates.model_tokens(part) for part in value.split("|")) if isinstance(value, str) else ()
    if not alternatives or not all(alternatives):
        problems.append(f"annotation {MODEL_ANNOTATION}: must be model names separated by '|', "
                        f"like A100|H100, got {fields.shown(value)}")
        return None, ()
    return str(value), alternatives


def _priority(value: object, problems: list[str]) -> int:
    if value is None:
        return 0
    if _integer(value) and -(2**31) <= value < 2**31:
        return value
    problems.append(f"spec.priority: must be a 32-bit integer, got {fields.shown(value)}")
    return 0


def _node_selector(value: object, problems: list[str]) -> dict[str, str]:
    selector = fields.strings(value)
    if value is not None and selector != value:
        problems.append(f"spec.nodeSelector: must map label names to values, got {fields.shown(value)}")
    return selector


def _preferred(value: object) -> tuple[tuple[int, predicates.Term], ...]:
    """Preferred terms; one that cannot be read is left out, as it would only add to scores."""
    return tuple(
        (p["weight"], predicates.parse_terms([p["preference"]])[0])
        for p in (value if isinstance(value, list) else [])
        if isinstance(p, Mapping) and _integer(p.get("weight")) and 0 < p["weight"] <= 100
        and isinstance(p.get("preference"), Mapping)
    )


def _spot(value: object, problems: list[str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value in SPOT_POLICIES:
        return value
    problems.append(f"annotation {SPOT_ANNOTATION}: must be one of {', '.join(SPOT_POLICIES)}, "
                    f"got {fields.shown(value)}")
    return None
