"""A pod's effective resource request, computed the way kube-scheduler does.

Sum over containers; sidecar init containers (restartPolicy Always) run alongside them
and add to that sum; each other init container runs alone with the sidecars started
before it; the pod needs the largest of those, plus `spec.overhead`. A container's
request defaults to its limit, as the apiserver defaults it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from fractions import Fraction
from typing import Any

from scheduler_core import fields, quantity

Requests = dict[str, Fraction]


class RequestsError(quantity.QuantityError):
    """A pod spec whose resources cannot be read, for a shape the apiserver would refuse."""


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
    _add(total, _parsed(_object(spec.get("overhead"), "spec.overhead"), only))
    return total


def _parsed(amounts: Mapping[str, object], only: Collection[str] | None) -> Requests:
    return {name: quantity.parse(value) for name, value in amounts.items() if only is None or name in only}


def _object(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestsError(f"{field}: expected an object, got {fields.shown(value)}")
    return value


def _objects(value: object, field: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise RequestsError(f"{field}: expected a list of objects, got {fields.shown(value)}")
    return value


def _add(into: Requests, other: Requests) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _max(into: Requests, other: Requests) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, Fraction(0)), amount)
