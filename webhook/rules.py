"""Which pods are GPU pods, and which rule a GPU pod matches.

A pod is a GPU pod when its effective request (Kubernetes arithmetic, see
scheduler_core.requests) includes any of `admission.gpuResources`, or when it asks for
a share of one GPU through `gpu-scheduler.io/gpu-milli`.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from scheduler_core import fields, podgroups, quantity, requests
from webhook import config, selectors

GPU_MILLI = 1000
_NONE = Fraction(0)


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
) -> tuple[config.Rule | None, tuple[tuple[str, str], ...]]:
    """The first rule that matches, and (name, why not) for each rule before it.

    With unknown namespace labels (None), a rule with a namespaceSelector cannot match.
    """
    skipped: list[tuple[str, str]] = []
    for rule in rules:
        why = mismatch(rule, pod_labels=pod_labels, namespace_labels=namespace_labels, gpus=gpus)
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
) -> str | None:
    """Why `rule` does not match the pod, in one line; None when it matches."""
    if rule.min_gpus is not None and gpus < rule.min_gpus:
        return f"minGPUs {rule.min_gpus}: the pod asks for {_gpus(gpus)}"
    if rule.max_gpus is not None and gpus > rule.max_gpus:
        return f"maxGPUs {rule.max_gpus}: the pod asks for {_gpus(gpus)}"
    if rule.pod_selector is not None and not rule.pod_selector.matches(pod_labels):
        return f"podSelector {rule.pod_selector.describe()}: the pod has {_relevant(rule.pod_selector, pod_labels)}"
    if rule.namespace_selector is not None:
        if namespace_labels is None:
            return f"namespaceSelector {rule.namespace_selector.describe()}: the namespace's labels are not known"
        if not rule.namespace_selector.matches(namespace_labels):
            return (f"namespaceSelector {rule.namespace_selector.describe()}: the namespace has "
                    f"{_relevant(rule.namespace_selector, namespace_labels)}")
    return None


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
