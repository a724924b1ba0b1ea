"""Which pods are GPU pods, and which rule a GPU pod matches.

A pod is a GPU pod when its effective request (Kubernetes arithmetic, see
scheduler_core.requests) includes any of `admission.gpuResources`, when it asks for
a share of one GPU through `gpu-scheduler.io/gpu-milli`, or when it asks, through Dynamic
Resource Allocation, for devices of one of `admission.deviceClasses`: in a ResourceClaim or
ResourceClaimTemplate its `spec.resourceClaims` names, or as the extended resource
`deviceclass.resource.kubernetes.io/<class>` every DeviceClass serves (its DRA demand).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from scheduler_core import fields, podgroups, quantity, requests
from scheduler_core.dra import claims, extended
from webhook import config, selectors

GPU_MILLI = 1000
_NONE = Fraction(0)

CLAIM = "ResourceClaim"
TEMPLATE = "ResourceClaimTemplate"


@dataclass(frozen=True)
class DeviceRequest:
    """One request of a claim: its name, and each way it may be served, in order, as (DeviceClass, device count):
    one for `exactly`, one per subrequest of `firstAvailable`. A count of None: allocationMode All (every device of
    the class the node has, so how many is not known before allocation)."""

    name: str
    alternatives: tuple[tuple[str, int | None], ...]


DeviceRequests = tuple[DeviceRequest, ...]

# (kind, name) -> the device requests of the ResourceClaim or ResourceClaimTemplate of that name in the pod's
# namespace, or why they are unknown ("not found", "cannot be read: HTTP 403 Forbidden").
ClaimLookup = Callable[[str, str], DeviceRequests | str]


def device_requests(kind: str, obj: Mapping[str, Any]) -> DeviceRequests:
    """The device requests of a ResourceClaim, or of each claim a ResourceClaimTemplate makes (its `spec.spec`).
    Read as the allocator reads them (scheduler_core.dra.claims): a field of the wrong shape is absent."""
    spec = fields.mapping(obj.get("spec"))
    if kind == TEMPLATE:
        spec = fields.mapping(spec.get("spec"))
    return tuple(
        DeviceRequest(alternatives[0].parent or alternatives[0].name,
                      tuple((r.class_name, _count(r)) for r in alternatives))
        for alternatives in claims.parse({"spec": spec}).requests if alternatives)


def _count(request: claims.Request) -> int | None:
    """Devices a request asks for; None for allocationMode All (or a mode the apiserver would refuse)."""
    return max(request.count, 0) if request.mode == claims.EXACT_COUNT else None


@dataclass(frozen=True)
class DraDemand:
    """What a pod asks of DRA, as far as it can be known."""

    classes: frozenset[str] = frozenset()  # every DeviceClass its known requests may be served from
    gpus: int = 0  # devices of the GPU classes (admission.deviceClasses): ExactCount counts, an All request as 1
    gpu: bool = False  # asks, or may ask (unknown claims), for devices of a GPU class
    at_least: bool = False  # `gpus` is only a lower bound: an All request, or unknown claims, of the GPU classes
    notes: tuple[str, ...] = ()  # how the GPU count was read, where it is not exact: a line each
    unknown: tuple[str, ...] = ()  # the claims whose requests could not be read, and why


NO_DEMAND = DraDemand()


def dra_demand(
    pod: Mapping[str, Any],
    *,
    gpu_classes: Collection[str],
    lookup: ClaimLookup | None,
    counted: Collection[str] = (),
) -> DraDemand:
    """The pod's DRA demand: its claims (read through `lookup`; None: they cannot be read here) and the implicit
    extended resources of its containers, leaving out those among `counted` (admission.gpuResources: counted
    already). A firstAvailable request counts the devices of its first subrequest of a GPU class."""
    spec = fields.mapping(pod.get("spec"))
    classes: set[str] = set()
    gpus = 0
    notes: list[str] = []
    unknown: list[str] = []
    shared: set[str] = set()
    for entry in map(fields.mapping, fields.sequence(spec.get("resourceClaims"))):
        kind, name = _reference(entry)
        if name is None or (kind == CLAIM and name in shared):
            continue  # a shared claim named twice is allocated once; each template entry makes a claim of its own
        if kind == CLAIM:
            shared.add(name)
        where = f"{kind} {fields.cut(name)}"
        found = lookup(kind, name) if lookup is not None else "not known here (no access to the cluster)"
        if isinstance(found, str):
            unknown.append(f"{where}: {found}")
            continue
        for request in found:
            classes.update(class_name for class_name, _ in request.alternatives if class_name)
            served = next(((c, n) for c, n in request.alternatives if c in gpu_classes), None)
            if served is None:
                continue
            gpus += 1 if served[1] is None else served[1]
            if served[1] is None:
                notes.append(f"GPU count: {where} request {fields.cut(request.name)} asks for all devices of "
                             f"{served[0]} (allocationMode All): counted as at least 1")
    for class_name, amount in _implicit(spec, counted).items():
        classes.add(class_name)
        if class_name in gpu_classes:
            gpus += amount
    uncounted = bool(notes)  # an All request of a GPU class
    unsure = bool(unknown) and bool(gpu_classes)  # an unknown claim may ask for GPUs
    notes += [f"DRA demand unknown: {why}" for why in unknown]
    return DraDemand(frozenset(classes), gpus, gpu=gpus > 0 or unsure, at_least=uncounted or unsure,
                     notes=tuple(notes), unknown=tuple(unknown))


def asks_dra(pod: Mapping[str, Any]) -> bool:
    """Whether the pod may ask anything of DRA (claims, or a resource a DeviceClass serves implicitly): cheap, for
    the pods that do not."""
    spec = fields.mapping(pod.get("spec"))
    return bool(fields.sequence(spec.get("resourceClaims"))) or any(
        name.startswith(extended.IMPLICIT_PREFIX) for name in _resource_names(spec))


def _reference(entry: Mapping[str, Any]) -> tuple[str, str | None]:
    if isinstance(entry.get("resourceClaimName"), str):
        return CLAIM, entry["resourceClaimName"]
    if isinstance(entry.get("resourceClaimTemplateName"), str):
        return TEMPLATE, entry["resourceClaimTemplateName"]
    return CLAIM, None


def _resource_names(spec: Mapping[str, Any]) -> set[str]:
    """Every resource name a container or init container of the pod requests or limits."""
    found: set[str] = set()
    for container in map(fields.mapping, [*fields.sequence(spec.get("initContainers")),
                                          *fields.sequence(spec.get("containers"))]):
        resources = fields.mapping(container.get("resources"))
        for part in ("limits", "requests"):
            found.update(name for name in fields.mapping(resources.get(part)) if isinstance(name, str))
    return found


def _implicit(spec: Mapping[str, Any], counted: Collection[str]) -> dict[str, int]:
    """DeviceClass -> devices the pod's effective request asks for as `deviceclass.resource.kubernetes.io/<class>`;
    a quantity that does not parse, or is no whole number, asks for nothing (the apiserver refuses such a pod)."""
    names = [name for name in _resource_names(spec)
             if name.startswith(extended.IMPLICIT_PREFIX) and name not in counted]
    if not names:
        return {}
    try:
        effective = requests.pod_requests(spec, names)
    except (quantity.QuantityError, AttributeError, TypeError):
        return {}
    return {name.removeprefix(extended.IMPLICIT_PREFIX): int(amount) for name, amount in effective.items()
            if amount > 0 and amount.denominator == 1}


def gpu_demand(pod: Mapping[str, Any], gpu_resources: tuple[str, ...]) -> Fraction | None:
    """GPUs the pod asks for (a share counts as its fraction), or None for a non-GPU pod.

    A pod whose GPU quantities do not parse is not ours to judge: the apiserver rejects it.
    """
    spec = pod.get("spec") or {}
    try:
        effective = requests.pod_requests(spec, gpu_resources)
    except (quantity.QuantityError, AttributeError, TypeError):
        return None
    amounts = [effective[name] for name in gpu_resources if name in effective]
    whole = amounts[0] if len(amounts) == 1 else sum(amounts, _NONE)
    share = _milli(annotations_of(pod).get(config.MILLI_ANNOTATION))
    if whole <= 0 and share is None:
        return None
    return whole + Fraction(share, GPU_MILLI) if share else whole


def first_match(
    rules: tuple[config.Rule, ...],
    *,
    pod_labels: Mapping[str, str],
    namespace_labels: Mapping[str, str] | None,
    gpus: Fraction,
    dra: DraDemand = NO_DEMAND,
) -> tuple[config.Rule | None, tuple[tuple[str, str], ...]]:
    """The first rule that matches, and (name, why not) for each rule before it.

    With unknown namespace labels (None), a rule with a namespaceSelector cannot match; with unknown DRA demand
    (claims that cannot be read), a rule with deviceClasses matches only through the classes that are known.
    """
    skipped: list[tuple[str, str]] = []
    for rule in rules:
        why = mismatch(rule, pod_labels=pod_labels, namespace_labels=namespace_labels, gpus=gpus, dra=dra)
        if why is None:
            return rule, tuple(skipped)
        skipped.append((rule.name, why))
    return None, tuple(skipped)


def mismatch(
    rule: config.Rule,
    *,
    pod_labels: Mapping[str, str],
    namespace_labels: Mapping[str, str] | None,
    gpus: Fraction,
    dra: DraDemand = NO_DEMAND,
) -> str | None:
    """Why `rule` does not match the pod, in one line; None when it matches.

    Where the GPU count is only a lower bound (`dra.at_least`), maxGPUs cannot be shown to hold: it does not match.
    """
    if rule.device_classes is not None and not dra.classes.intersection(rule.device_classes):
        return f"deviceClasses {', '.join(rule.device_classes)}: {_other_classes(dra)}"
    at_least = "at least " if dra.at_least else ""
    if rule.min_gpus is not None and gpus < rule.min_gpus:
        return f"minGPUs {rule.min_gpus}: the pod asks for {at_least}{_gpus(gpus)}"
    if rule.max_gpus is not None and gpus > rule.max_gpus:
        return f"maxGPUs {rule.max_gpus}: the pod asks for {at_least}{_gpus(gpus)}"
    if rule.max_gpus is not None and dra.at_least:
        return f"maxGPUs {rule.max_gpus}: the pod asks for at least {_gpus(gpus)}, and how many more is unknown"
    if rule.pod_selector is not None and not rule.pod_selector.matches(pod_labels):
        return f"podSelector {rule.pod_selector.describe()}: the pod has {_relevant(rule.pod_selector, pod_labels)}"
    if rule.namespace_selector is not None:
        if namespace_labels is None:
            return f"namespaceSelector {rule.namespace_selector.describe()}: the namespace's labels are not known"
        if not rule.namespace_selector.matches(namespace_labels):
            return (f"namespaceSelector {rule.namespace_selector.describe()}: the namespace has "
                    f"{_relevant(rule.namespace_selector, namespace_labels)}")
    return None


def _other_classes(dra: DraDemand) -> str:
    """What a pod asks of DRA, when that is none of a rule's classes."""
    asked = f"devices of {', '.join(sorted(dra.classes))}" if dra.classes else ""
    if not dra.unknown:
        return f"the pod asks for {asked} only" if asked else "the pod asks for no devices through DRA"
    unknown = "; ".join(dra.unknown)
    if asked:
        return f"the pod asks for {asked}, and the rest of its DRA demand is unknown ({unknown})"
    return f"the pod's DRA demand is unknown ({unknown})"


def _gpus(gpus: Fraction) -> str:
    amount = str(gpus.numerator) if gpus.denominator == 1 else f"{float(gpus):g}"
    return f"{amount} GPU" + ("" if gpus == 1 else "s")


def _relevant(selector: selectors.LabelSelector, labels: Mapping[str, str]) -> str:
    """The labels a selector looks at, as the object has them: `job-type=inference, no team`."""
    keys = dict.fromkeys(r.key for r in selector.requirements)
    return ", ".join(f"{key}={labels[key]}" if key in labels else f"no {key}" for key in keys) or "no labels"


def pod_group_annotations(
    action: config.PodGroupAction, pod: Mapping[str, Any]
) -> tuple[list[tuple[str, str]], str | None]:
    """The group annotations `set.podGroup` writes on this pod, both or neither, and why neither.

    Neither when the pod already names its group (the user's or an earlier admission's word stands), lacks
    the name, or lacks `minMemberFrom`: a name without a count would make a pod that waits on a problem
    rather than one scheduled alone. Values are copied raw: the scheduler reports a bad one on the pod.
    """
    existing = annotations_of(pod).get(podgroups.GROUP_ANNOTATION)
    if existing is not None:
        return [], f"the pod already has {podgroups.GROUP_ANNOTATION} {fields.shown(existing)}"
    name = value_of(pod, action.name_from)
    if name is None:
        return [], f"the pod has no {action.name_from} (nameFrom)"
    if not name:
        return [], f"the pod's {action.name_from} (nameFrom) is empty"
    if action.min_member_from is None:
        return [(podgroups.GROUP_ANNOTATION, name), (podgroups.MIN_MEMBER_ANNOTATION, str(action.min_member))], None
    count = value_of(pod, action.min_member_from)
    if count is None:
        return [], f"the pod has no {action.min_member_from} (minMemberFrom)"
    return [(podgroups.GROUP_ANNOTATION, name), (podgroups.MIN_MEMBER_ANNOTATION, count)], None


def value_of(pod: Mapping[str, Any], source: config.ValueSource) -> str | None:
    """The pod's label or annotation that `source` names; None when absent (or not a string)."""
    value = (labels_of(pod) if source.kind == "label" else annotations_of(pod)).get(source.key)
    return value if isinstance(value, str) else None


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return fields.mapping((pod.get("metadata") or {}).get("annotations"))


def labels_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return fields.mapping((pod.get("metadata") or {}).get("labels"))


def _milli(value: object) -> int | None:
    """A share in thousandths, 1..999; anything else is no share (the scheduler explains)."""
    milli = fields.natural(value)
    return milli if milli is not None and 0 < milli < GPU_MILLI else None
