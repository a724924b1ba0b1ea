"""What a ResourceClaim asks for, read once: its requests (or, with `firstAvailable`, its ordered alternatives),
constraints and configuration, as upstream's allocator reads them through its request accessors.

A claim is written by a tenant. The apiserver validates it, yet nothing here trusts it: a field of the wrong
shape is read as absent, and the allocator's own checks (a missing class, a count too large) then refuse it
with upstream's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from scheduler_core import fields, predicates, quantity

EXACT_COUNT = "ExactCount"
ALL = "All"
RESULTS_MAX = 32  # resourceapi.AllocationResultsMaxSize: devices one claim may be allocated


@dataclass(frozen=True)
class Request:
    """A request with `exactly`, or one subrequest of `firstAvailable` (then `parent` names its request)."""

    name: str
    parent: str  # "" unless a subrequest
    class_name: str
    mode: str  # ExactCount | All | whatever was written (refused by the allocator)
    count: int
    admin_access: bool
    has_admin_access: bool  # the field was set (even to false)
    selectors: tuple[str | None, ...]  # CEL expressions; None for a selector of an unknown kind
    tolerations: tuple[predicates.Toleration, ...]
    tolerations_raw: tuple[Mapping[str, Any], ...]
    capacity: Mapping[str, Fraction] | None  # capacity.requests, when given

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name


@dataclass(frozen=True)
class Constraint:
    kind: str  # "matchAttribute" | "distinctAttribute" | "" (unknown)
    attribute: str
    requests: frozenset[str]


@dataclass(frozen=True)
class Claim:
    """A claim to allocate: `requests[i]` is one Request, or the ordered subrequests of a `firstAvailable`."""

    namespace: str
    name: str
    uid: str
    requests: tuple[tuple[Request, ...], ...]
    prioritized: tuple[bool, ...]  # per request: whether it is a firstAvailable list
    constraints: tuple[Constraint, ...]
    config: tuple[Mapping[str, Any], ...]  # spec.devices.config, as written

    @property
    def key(self) -> str:
        """As klog.KObj prints it in upstream's messages."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def parse(obj: Mapping[str, Any]) -> Claim:
    meta = fields.mapping(obj.get("metadata"))
    devices = fields.mapping(fields.mapping(obj.get("spec")).get("devices"))
    requests: list[tuple[Request, ...]] = []
    prioritized: list[bool] = []
    for raw in fields.sequence(devices.get("requests")):
        raw = fields.mapping(raw)
        name = str(raw.get("name") or "")
        alternatives = fields.sequence(raw.get("firstAvailable"))
        if alternatives:
            requests.append(tuple(_request(fields.mapping(sub), parent=name) for sub in alternatives))
            prioritized.append(True)
        else:
            exactly = dict(fields.mapping(raw.get("exactly")))
            exactly["name"] = name
            requests.append((_request(exactly, parent=""),))
            prioritized.append(False)
    constraints = []
    for raw in fields.sequence(devices.get("constraints")):
        raw = fields.mapping(raw)
        kind = next((k for k in ("matchAttribute", "distinctAttribute") if isinstance(raw.get(k), str)), "")
        constraints.append(Constraint(kind, str(raw.get(kind) or ""),
                                      frozenset(str(r) for r in fields.sequence(raw.get("requests")))))
    return Claim(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
        requests=tuple(requests), prioritized=tuple(prioritized), constraints=tuple(constraints),
        config=tuple(fields.mapping(c) for c in fields.sequence(devices.get("config"))))


def _request(raw: Mapping[str, Any], *, parent: str) -> Request:
    tolerations_raw = tuple(fields.mapping(t) for t in fields.sequence(raw.get("tolerations")))
    count = raw.get("count")
    admin = raw.get("adminAccess") if not parent else None
    return Request(
        name=str(raw.get("name") or ""), parent=parent, class_name=str(raw.get("deviceClassName") or ""),
        mode=str(raw.get("allocationMode") or EXACT_COUNT),
        count=count if isinstance(count, int) and not isinstance(count, bool) else 1,
        admin_access=admin is True, has_admin_access=isinstance(admin, bool),
        selectors=selectors(raw.get("selectors")),
        tolerations=predicates.parse_tolerations(list(tolerations_raw)), tolerations_raw=tolerations_raw,
        capacity=_capacity(raw.get("capacity")))


def selectors(raw: object) -> tuple[str | None, ...]:
    """The CEL expressions of a selectors list (a DeviceClass's or a request's)."""
    found: list[str | None] = []
    for selector in fields.sequence(raw):
        expression = fields.mapping(fields.mapping(selector).get("cel")).get("expression")
        found.append(expression if isinstance(expression, str) and expression else None)
    return tuple(found)


def _capacity(raw: object) -> Mapping[str, Fraction] | None:
    requests = fields.mapping(raw).get("requests")
    if requests is None:
        return None
    amounts = {}
    for name, value in fields.mapping(requests).items():
        try:
            amounts[str(name)] = quantity.parse(value)
        except quantity.QuantityError:
            continue
    return amounts


@dataclass(frozen=True)
class DeviceClass:
    """A DeviceClass: the selectors every device allocated through it must meet, and its configuration."""

    name: str
    selectors: tuple[str | None, ...]
    config: tuple[Mapping[str, Any], ...]


def parse_class(obj: Mapping[str, Any]) -> DeviceClass:
    spec = fields.mapping(obj.get("spec"))
    return DeviceClass(
        name=str(fields.mapping(obj.get("metadata")).get("name") or ""), selectors=selectors(spec.get("selectors")),
        config=tuple(fields.mapping(c) for c in fields.sequence(spec.get("config"))))


@dataclass(frozen=True)
class PodClaim:
    """One entry of a pod's `spec.resourceClaims`, and the claim it resolved to (from the pod's status for a
    template)."""

    name: str
    claim_name: str | None  # None: not known (yet), or the template produced none
    from_template: bool
    problem: str | None = None  # neither field set


def pod_claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """A pod's claims, resolved as upstream's resourceclaim.Name resolves them."""
    generated = {str(s.get("name")): s.get("resourceClaimName")
                 for s in map(fields.mapping, fields.sequence(status.get("resourceClaimStatuses")))}
    found = []
    for entry in map(fields.mapping, fields.sequence(spec.get("resourceClaims"))):
        name = str(entry.get("name") or "")
        if isinstance(entry.get("resourceClaimName"), str):
            found.append(PodClaim(name, entry["resourceClaimName"], False))
        elif isinstance(entry.get("resourceClaimTemplateName"), str):
            claim_name = generated.get(name, "")
            found.append(PodClaim(name, claim_name if isinstance(claim_name, str) else None, True,
                                  problem="not created" if name not in generated else None))
        else:
            found.append(PodClaim(name, None, False, problem="unsupported"))
    return tuple(found)
