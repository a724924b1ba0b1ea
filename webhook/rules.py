"""Which pods are GPU pods, and which rule a GPU pod matches.

A pod is a GPU pod when its effective request (Kubernetes arithmetic, see
scheduler_core.requests) includes any of `admission.gpuResources`, or when it asks for
a share of one GPU through `gpu-scheduler.io/gpu-milli`.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from scheduler_core import fields, quantity, requests
from webhook import config

GPU_MILLI = 1000


def gpu_demand(pod: Mapping[str, Any], gpu_resources: tuple[str, ...]) -> Fraction | None:
    """GPUs the pod asks for (a share counts as its fraction), or None for a non-GPU pod.

    A pod whose GPU quantities do not parse is not ours to judge: the apiserver rejects it.
    """
    spec = pod.get("spec") or {}
    try:
        effective = requests.pod_requests(spec, gpu_resources)
    except (quantity.QuantityError, AttributeError, TypeError):
        return None
    whole = sum((effective.get(name, Fraction(0)) for name in gpu_resources), Fraction(0))
    share = _milli(annotations_of(pod).get(config.MILLI_ANNOTATION))
    if whole <= 0 and share is None:
        return None
    return whole + Fraction(share or 0, GPU_MILLI)


def first_match(
    rules: tuple[config.Rule, ...],
    *,
    pod_labels: Mapping[str, str],
    namespace_labels: Mapping[str, str] | None,
    gpus: Fraction,
) -> config.Rule | None:
    """The first rule that matches; with unknown namespace labels, namespace-selecting rules cannot."""
    for rule in rules:
        if rule.min_gpus is not None and gpus < rule.min_gpus:
            continue
        if rule.max_gpus is not None and gpus > rule.max_gpus:
            continue
        if rule.pod_selector is not None and not rule.pod_selector.matches(pod_labels):
            continue
        if rule.namespace_selector is not None and (
            namespace_labels is None or not rule.namespace_selector.matches(namespace_labels)
        ):
            continue
        return rule
    return None


def annotations_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return _string_map((pod.get("metadata") or {}).get("annotations"))


def labels_of(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return _string_map((pod.get("metadata") or {}).get("labels"))


def _string_map(value: object) -> Mapping[str, str]:
    return value if isinstance(value, Mapping) else {}


def _milli(value: object) -> int | None:
    """A share in thousandths, 1..999; anything else is no share (the scheduler explains)."""
    milli = fields.natural(value)
    return milli if milli is not None and 0 < milli < GPU_MILLI else None
