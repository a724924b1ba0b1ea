"""The DRA objects as the watches show them, with our own allocations in flight, and kube-scheduler's
DynamicResources verdicts over them: PreFilter (per pod) and Filter (per node).

A claim allocated by anyone (kube-scheduler, another replica, us) holds its devices: `status.allocation` is
the record. Between our Reserve and the write of that status (PreBind), the allocation is *assumed* here, so
the next decision does not hand the same device out again, as upstream's in-flight allocations do; the watch
showing the claim allocated, or `forget` after a failed write, ends the assumption.

The messages are upstream's (dynamicresources.go, resourceclaim.go), so users recognise them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler_core import fields, predicates
from scheduler_core.dra import allocator, claims, slices
from scheduler_core.dra.slices import NodeLike

KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim")
FINALIZER = "resource.kubernetes.io/delete-protection"
RESERVED_FOR_MAX = 256  # resourceapi.ResourceClaimReservedForMaxSize

# Filter reasons (upstream's words)
NOT_AVAILABLE = "resourceclaim not available on the node"
CANNOT_ALLOCATE = "cannot allocate all claims"


@dataclass(frozen=True)
class ClaimRecord:
    """A watched ResourceClaim."""

    obj: Mapping[str, Any]
    claim: claims.Claim
    allocation: Mapping[str, Any] | None
    reserved_for: tuple[str, ...]  # uids
    controller_uid: str | None
    deleting: bool
    resource_version: str


def read_claim(obj: Mapping[str, Any]) -> ClaimRecord:
    meta, status = fields.mapping(obj.get("metadata")), fields.mapping(obj.get("status"))
    allocation = status.get("allocation")
    controller = next((str(ref.get("uid")) for ref in map(fields.mapping, fields.sequence(meta.get("ownerReferences")))
                       if ref.get("controller") is True), None)
    return ClaimRecord(
        obj=obj, claim=claims.parse(obj), allocation=allocation if fields.is_object(allocation) else None,
        reserved_for=tuple(str(fields.mapping(r).get("uid")) for r in fields.sequence(status.get("reservedFor"))),
        controller_uid=controller, deleting=meta.get("deletionTimestamp") is not None,
        resource_version=str(meta.get("resourceVersion") or ""))


@dataclass(frozen=True)
class Prepared:
    """A pod's claims after PreFilter: each record with the node selector of its allocation (if allocated), and
    which of them this pod must allocate."""

    records: tuple[ClaimRecord, ...]
    selectors: tuple[tuple[predicates.Term, ...] | None, ...]  # allocation.nodeSelector per record
    to_allocate: tuple[int, ...]  # indices into records

    def allocation_needed(self) -> bool:
        return bool(self.to_allocate)


class Resources:
    """ResourceSlices, DeviceClasses and ResourceClaims as watched, with our assumed allocations."""

    def __init__(self) -> None:
        self.slices: dict[str, slices.Slice] = {}  # by uid (name when none)
        self.classes: dict[str, claims.DeviceClass] = {}
        self.claims: dict[tuple[str, str], ClaimRecord] = {}
        self.assumed: dict[tuple[str, str], Mapping[str, Any]] = {}  # claim key -> allocation in flight
        self.listed: set[str] = set()
        self.version = 0
        self._allocator: tuple[int, allocator.Allocator] | None = None
        self._verdicts: weakref.WeakKeyDictionary[slices.Device, dict[str, Any]] = weakref.WeakKeyDictionary()

    # --- taking objects in

    @property
    def ready(self) -> bool:
        """Every kind has been listed once: until then a pod with claims waits, as it could take a used device."""
        return self.listed.issuperset(KINDS)

    def set(self, kind: str, obj: Mapping[str, Any], *, deleted: bool = False) -> None:
        meta = fields.mapping(obj.get("metadata"))
        name = str(meta.get("name") or "")
        if kind == "ResourceSlice":
            key = str(meta.get("uid") or name)
            if deleted:
                self.slices.pop(key, None)
            else:
                self.slices[key] = slices.parse(obj)
        elif kind == "DeviceClass":
            if deleted:
                self.classes.pop(name, None)
            else:
                self.classes[name] = claims.parse_class(obj)
        elif kind == "ResourceClaim":
            claim_key = (str(meta.get("namespace") or "default"), name)
            if deleted:
                self.claims.pop(claim_key, None)
                self.assumed.pop(claim_key, None)
            else:
                record = read_claim(obj)
                self.claims[claim_key] = record
                if record.allocation is not None:
                    self.assumed.pop(claim_key, None)  # the watch shows it allocated: newer than our assumption
        self.version += 1

    def clear(self, kind: str) -> None:
        """Before a relist of `kind`: everything of it is forgotten (our assumptions stay)."""
        if kind == "ResourceSlice":
            self.slices.clear()
        elif kind == "DeviceClass":
            self.classes.clear()
        elif kind == "ResourceClaim":
            self.claims.clear()
        self.listed.add(kind)
        self.version += 1

    def assume(self, claim_key: tuple[str, str], allocation: Mapping[str, Any]) -> None:
        self.assumed[claim_key] = allocation
        self.version += 1

    def forget(self, claim_key: tuple[str, str]) -> None:
        if self.assumed.pop(claim_key, None) is not None:
            self.version += 1

    # --- deciding

    def allocated(self) -> allocator.Allocated:
        used = allocator.Allocated()
        for claim_key, record in self.claims.items():
            allocation = record.allocation or self.assumed.get(claim_key)
            if allocation is not None:
                used.add(allocation)
        for claim_key, allocation in self.assumed.items():
            if claim_key not in self.claims:
                used.add(allocation)
        return used

    def snapshot(self) -> allocator.Allocator:
        """An allocator over the current objects, made again only after a change."""
        if self._allocator is None or self._allocator[0] != self.version:
            made = allocator.Allocator(self.classes, list(self.slices.values()), self.allocated(),
                                       verdicts=self._verdicts)
            self._allocator = (self.version, made)
        return self._allocator[1]

    def pre_filter(self, namespace: str, name: str, uid: str, wanted: Sequence[claims.PodClaim]) -> Prepared | str:
        """The pod's claims, or why the pod waits whatever the node (upstream's PreEnqueue and PreFilter)."""
        records: list[ClaimRecord] = []
        selectors: list[tuple[predicates.Term, ...] | None] = []
        to_allocate: list[int] = []
        for entry in wanted:
            if entry.problem == "not created":
                return f'pod "{namespace}/{name}": ResourceClaim not created yet'
            if entry.problem == "unsupported":
                return f'pod "{namespace}/{name}", spec.resourceClaim "{entry.name}": none of the supported fields are set'
            if entry.claim_name is None:
                continue  # the template made no claim for it: nothing to allocate
            record = self.claims.get((namespace, entry.claim_name))
            if record is None:
                return f'resourceclaim.resource.k8s.io "{entry.claim_name}" not found'
            if record.deleting:
                return f'resourceclaim "{entry.claim_name}" is being deleted'
            if entry.from_template and record.controller_uid != uid:
                return (f"ResourceClaim {namespace}/{entry.claim_name} was not created for Pod {namespace}/{name} "
                        "(Pod is not owner)")
            allocation = record.allocation or self.assumed.get((namespace, entry.claim_name))
            if record.allocation is None and allocation is not None and uid not in record.reserved_for:
                return f"resource claim {namespace}/{entry.claim_name} is in the process of being allocated"
            if allocation is None:
                problem = self._classes_problem(record.claim)
                if problem:
                    return problem
                to_allocate.append(len(records))
            if allocation is not None and uid not in record.reserved_for and len(record.reserved_for) >= RESERVED_FOR_MAX:
                return "resourceclaim in use"
            selector = fields.mapping(allocation).get("nodeSelector") if allocation is not None else None
            records.append(record)
            selectors.append(predicates.parse_terms(fields.mapping(selector).get("nodeSelectorTerms"))
                             if selector is not None else None)
        return Prepared(tuple(records), tuple(selectors), tuple(to_allocate))

    def _classes_problem(self, claim: claims.Claim) -> str | None:
        for alternatives in claim.requests:
            for request in alternatives:
                if not request.class_name:
                    return f"request {request.full_name}: unsupported request type"
                if request.class_name not in self.classes:
                    return f"request {request.full_name}: device class {request.class_name} does not exist"
        return None

    def filter(self, node: NodeLike, prepared: Prepared, *, order: allocator.Order | None = None,
               admit: Callable[[slices.Device], bool] | None = None) -> list[dict[str, Any]] | str:
        """Upstream's Filter on one node: the allocations of the claims to allocate (in `to_allocate` order), or
        the reason the node is rejected. Raises allocator.AllocationError when the claims cannot be allocated
        anywhere (the pod waits with that message)."""
        for selector in prepared.selectors:
            if selector is not None and not any(t.matches(node.labels, node.name) for t in selector):
                return NOT_AVAILABLE
        if not prepared.to_allocate:
            return []
        wanted = [prepared.records[i].claim for i in prepared.to_allocate]
        try:
            found = self.snapshot().allocate(node, wanted, order=order, admit=admit)
        except allocator.NodeUnsuitable as err:
            return str(err)
        if found is None:
            return CANNOT_ALLOCATE
        return found


def consumer(namespace: str, name: str, uid: str) -> dict[str, str]:
    """The reservedFor entry for a pod (upstream's ResourceClaimConsumerReference)."""
    del namespace
    return {"resource": "pods", "name": name, "uid": uid}


def claim_keys(namespace: str, records: Iterable[ClaimRecord]) -> list[tuple[str, str]]:
    return [(namespace, r.claim.name) for r in records]
