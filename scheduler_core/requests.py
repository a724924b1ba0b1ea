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

from scheduler_core import quantity

Requests = dict[str, Fraction]


def container_requests(container: Mapping[str, Any], only: Collection[str] | None = None) -> Requests:
    """Requests of one container, limits filling in for requests it does not state.

    `only` restricts the result (and the parsing) to those resource names.
    """
    resources = container.get("resources") or {}
    merged: dict[str, object] = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {
        name: quantity.parse(value) for name, value in merged.items() if only is None or name in only
    }


def pod_requests(spec: Mapping[str, Any], only: Collection[str] | None = None) -> Requests:
    """The effective request of a pod spec (see the module docstring), optionally of `only` some resources."""
    total: Requests = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container, only))

    sidecars: Requests = {}
    init_peak: Requests = {}
    for init in spec.get("initContainers") or []:
        own = container_requests(init, only)
        if init.get("restartPolicy") == "Always":
            _add(sidecars, own)
            _add(total, own)
            continue
        running = dict(sidecars)
        _add(running, own)
        _max(init_peak, running)

    _max(total, init_peak)
    overhead = spec.get("overhead") or {}
    _add(total, {name: quantity.parse(v) for name, v in overhead.items() if only is None or name in only})
    return total


def _add(into: Requests, other: Requests) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _max(into: Requests, other: Requests) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, Fraction(0)), amount)
