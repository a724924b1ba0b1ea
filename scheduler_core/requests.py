"""A pod's effective resource request, computed the way kube-scheduler does (component-helpers'
`resource.PodRequests`, over the pod as the apiserver defaults it).

Sum over containers; sidecar init containers (restartPolicy Always) run alongside them
and add to that sum; each other init container runs alone with the sidecars started
before it; the pod needs the largest of those. Pod-level `spec.resources` requests
(PodLevelResources, on by default since 1.34) replace that for the resources they name
(cpu, memory, hugepages-*). `spec.overhead` is added last. A container's request defaults
to its limit, and a pod-level one as the apiserver defaults it (see `_pod_level`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from fractions import Fraction
from typing import Any

from scheduler_core import fields, quantity

Requests = dict[str, Fraction]

# What kube-scheduler accounts besides cpu, memory and ephemeral-storage (`IsScalarResourceName`): extended
# resources (a domain-qualified name outside *kubernetes.io/), hugepages-*, *kubernetes.io/* and
# attachable-volumes-*. It ignores any other name, which the apiserver refuses in a container anyway.
BASE_COUNTED = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX = "hugepages-"
_SCALAR_PREFIXES = (HUGEPAGES_PREFIX, "attachable-volumes-")
_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*", re.ASCII)
_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)


class RequestsError(quantity.QuantityError):
    """A pod spec whose resources cannot be read, for a shape the apiserver would refuse."""


def counted(resource: str) -> bool:
    """Whether kube-scheduler's NodeResourcesFit accounts a request of `resource` (see BASE_COUNTED)."""
    if resource in BASE_COUNTED or resource.startswith(_SCALAR_PREFIXES) or "kubernetes.io/" in resource:
        return True
    # an extended resource: "requests." + its name must be a qualified name (as a quota would name it)
    prefix, _, name = resource.partition("/")
    return (not resource.startswith("requests.") and 0 < len(prefix) <= 244 and 0 < len(name) <= 63
            and _SUBDOMAIN.fullmatch(prefix) is not None and _NAME.fullmatch(name) is not None)


def pod_level(resource: str) -> bool:
    """Whether pod-level `spec.resources` may name `resource`; it ignores any other."""
    return resource in ("cpu", "memory") or resource.startswith(HUGEPAGES_PREFIX)


def container_requests(container: Mapping[str, Any], only: Collection[str] | None = None) -> Requests:
    """Requests of one container, limits filling in for requests it does not state.

    `only` restricts the result (and the parsing) to those resource names.
    """
    resources = _object(container.get("resources"), "resources")
    merged: dict[str, object] = dict(_object(resources.get("limits"), "resources.limits"))
    merged.update(_object(resources.get("requests"), "resources.requests"))
    return _parsed(merged, only)


def pod_requests(spec: Mapping[str, Any], only: Collection[str] | None = None) -> Requests:
    """The effective request of a pod spec (see the module docstring), optionally of `only` some resources."""
    spec = _object(spec, "spec")
    total: Requests = {}
    for container in _objects(spec.get("containers"), "spec.containers"):
        _add(total, container_requests(container, only))

    sidecars: Requests = {}
    init_peak: Requests = {}
    for init in _objects(spec.get("initContainers"), "spec.initContainers"):
        own = container_requests(init, only)
        if init.get("restartPolicy") == "Always":
            _add(sidecars, own)
            _add(total, own)
            continue
        running = dict(sidecars)
        _add(running, own)
        _max(init_peak, running)

    _max(total, init_peak)
    if spec.get("resources") is not None:  # the common pod has neither this nor an overhead: skip the work
        total.update(_pod_level(spec, total, only))
    if spec.get("overhead") is not None:
        _add(total, _parsed(_object(spec["overhead"], "spec.overhead"), only))
    return total


def _pod_level(spec: Mapping[str, Any], containers: Requests, only: Collection[str] | None) -> Requests:
    """The pod-level requests, as the apiserver defaults them: a pod-level limit stands in for a missing
    request, except that cpu and memory the containers request default to the containers' sum (which
    is then what the pod needs anyway)."""
    resources = _object(spec.get("resources"), "spec.resources")
    requests = _parsed(_object(resources.get("requests"), "spec.resources.requests"), only)
    for name, limit in _parsed(_object(resources.get("limits"), "spec.resources.limits"), only).items():
        if name not in requests and not (name in ("cpu", "memory") and name in containers):
            requests[name] = limit
    return {name: amount for name, amount in requests.items() if pod_level(name)}


def _parsed(amounts: Mapping[str, object], only: Collection[str] | None) -> Requests:
    return {name: quantity.parse(value) for name, value in amounts.items() if only is None or name in only}


def _object(value: object, field: str) -> Mapping[str, Any]:
    if type(value) is dict:  # JSON's own type: no ABC check (every pod of the webhook and the scheduler comes here)
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestsError(f"{field}: expected an object, got {fields.shown(value)}")
    return value


def _objects(value: object, field: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(type(item) is dict or isinstance(item, Mapping) for item in value):
        raise RequestsError(f"{field}: expected a list of objects, got {fields.shown(value)}")
    return value


def _add(into: Requests, other: Requests) -> None:
    for name, amount in other.items():
        into[name] = into[name] + amount if name in into else amount  # Fraction arithmetic only where needed


def _max(into: Requests, other: Requests) -> None:
    for name, amount in other.items():
        current = into.get(name)
        if current is None:
            into[name] = amount if amount > 0 else _ZERO
        elif amount > current:
            into[name] = amount


_ZERO = Fraction(0)
