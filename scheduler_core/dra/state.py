"""The DRA objects as the watches show them, with our own allocations in flight, and kube-scheduler's
DynamicResources verdicts over them: PreFilter (per pod) and Filter (per node).

A claim allocated by anyone (kube-scheduler, another replica, us) holds its devices: `status.allocation` is
the record. Between our Reserve and the write of that status (PreBind), the allocation is *assumed* here, so
the next decision does not hand the same device out again, as upstream's in-flight allocations do; the watch
showing the claim allocated, or `forget` after a failed write, ends the assumption.

The messages are upstream's (dynamicresources.go, resourceclaim.go), so users recognise them.
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler_core import fields, predicates
from scheduler_core.dra import allocator, claims, demand, extended, policy, pools, slices
from scheduler_core.dra.slices import NodeLike

KINDS = ("ResourceSlice", "DeviceClass", "ResourceClaim")
FINALIZER = "resource.kubernetes.io/delete-protection"
RESERVED_FOR_MAX = 256  # resourceapi.ResourceClaimReservedForMaxSize
BINDING_TIMEOUT = 600.0  # seconds devices may take to meet their binding conditions (upstream's default)

# Filter reasons (upstream's words)
NOT_AVAILABLE = "resourceclaim not available on the node"
CANNOT_ALLOCATE = "cannot allocate all claims"
STALE_EXTENDED = "cannot schedule extended resource claim"
CANNOT_FIT = "cannot fit resource"


@dataclass(frozen=True)
class ClaimRecord:
    """A watched ResourceClaim."""

    obj: Mapping[str, Any]
    claim: claims.Claim
    allocation: Mapping[str, Any] | None
    reserved_for: tuple[str, ...]  # uids
    controller_uid: str | None
    deleting: bool
    extended_for: str | None = None  # the pod uid, for the claim the scheduler made for a pod's extended resources


def read_claim(obj: Mapping[str, Any]) -> ClaimRecord:
    meta, status = fields.mapping(obj.get("metadata")), fields.mapping(obj.get("status"))
    allocation = status.get("allocation")
    controller = fields.controller_uid(meta)
    return ClaimRecord(
        obj=obj, claim=claims.parse(obj), allocation=allocation if fields.is_object(allocation) else None,
        reserved_for=tuple(str(fields.mapping(r).get("uid")) for r in fields.sequence(status.get("reservedFor"))),
        controller_uid=controller, deleting=meta.get("deletionTimestamp") is not None,
        extended_for=owner[1] if (owner := extended.owned_by(obj)) is not None else None)


@dataclass(frozen=True)
class Extended:
    """The extended resources a pod asks for that DeviceClasses serve, which DRA serves on a node without them in
    its allocatable, through one claim the scheduler makes for the pod."""

    namespace: str
    classes: Mapping[str, str]  # resource -> the DeviceClass serving it
    unserved: tuple[str, ...]  # extended resources the pod asks for that no class serves
    asks: tuple[extended.ContainerAsk, ...]
    # the claim made for the pod in an earlier attempt whose binding failed: the pod waits until it is deleted
    stale: ClaimRecord | None = None
    _made: dict[frozenset[str], NodeClaim] = field(default_factory=dict, compare=False, repr=False)

    def delegated(self, allocatable: Mapping[str, int]) -> frozenset[str]:
        """The resources DRA serves on a node with this allocatable: none of it there (shouldDelegateResourceToDRA)."""
        return frozenset(r for r in self.classes if not allocatable.get(r))

    def unfit(self, allocatable: Mapping[str, int]) -> bool:
        """Whether a resource no class serves is missing from the node's allocatable altogether."""
        return any(r not in allocatable for r in self.unserved)

    def node_claim(self, allocatable: Mapping[str, int]) -> NodeClaim | None:
        """The claim to make for the pod on a node with this allocatable (None: DRA serves nothing there). The
        nodes of one kind share it."""
        delegated = self.delegated(allocatable)
        if not delegated:
            return None
        made = self._made.get(delegated)
        if made is None:
            requests, mappings = extended.requests_and_mappings(self.asks, delegated, self.classes.get)
            obj = {"metadata": {"namespace": self.namespace, "name": extended.IN_MEMORY_NAME},
                   "spec": {"devices": {"requests": requests}}}
            made = self._made[delegated] = NodeClaim(tuple(requests), tuple(mappings), claims.parse(obj),
                                                     json.dumps(requests, sort_keys=True))
        return made


@dataclass(frozen=True)
class NodeClaim:
    """The claim the scheduler makes for a pod's extended resources on one node: its requests, which request
    serves which container (the pod's `status.extendedResourceClaimStatus.requestMappings`), and the claim as the
    allocator reads it."""

    requests: tuple[Mapping[str, Any], ...]
    mappings: tuple[Mapping[str, str], ...]
    claim: claims.Claim
    signature: str  # the requests, as a key of the allocator's outcomes


@dataclass(frozen=True)
class Prepared:
    """A pod's claims after PreFilter: each record with the node selector of its allocation (if allocated), and
    which of them this pod must allocate."""

    records: tuple[ClaimRecord, ...]
    selectors: tuple[tuple[predicates.Term, ...] | None, ...]  # allocation.nodeSelector per record
    to_allocate: tuple[int, ...]  # indices into records
    signature: str = ""  # the specs of the claims to allocate: pods of one template share their outcomes
    # an allocated claim whose driver reports a binding failure condition, or whose binding conditions timed out:
    # no node will do until it is deallocated
    binding_failed: bool = False
    extended: Extended | None = None

    def allocation_needed(self) -> bool:
        return bool(self.to_allocate)


class Resources:
    """ResourceSlices, DeviceClasses and ResourceClaims as watched, with our assumed allocations.

    What the allocator needs is kept up to date as objects change, not rebuilt per decision: the devices in use
    (`used`, from every claim's allocation or our assumption of it), a version per pool that moves when a device of
    it is taken or freed, and the slices indexed by node. A node's Filter outcome for a set of claims is kept
    until a pool it reaches (or the slices, or the classes) changes: the pods of one template ask the same of
    every node, and only the node the last pod went to has changed since.
    """

    def __init__(self) -> None:
        self.slices: dict[str, slices.Slice] = {}  # by uid (name when none)
        self.classes: dict[str, claims.DeviceClass] = {}
        self.claims: dict[tuple[str, str], ClaimRecord] = {}
        self.assumed: dict[tuple[str, str], Mapping[str, Any]] = {}  # claim key -> allocation in flight
        self.listed: set[str] = set()
        self.version = 0  # any change
        self.used = allocator.Allocated()
        self.pool_versions: dict[tuple[str, str], int] = {}
        self._slices_version = 0  # slices or classes changed: every kept pool and outcome is void
        self._index: tuple[int, pools.SliceIndex] | None = None
        self._allocator: tuple[int, allocator.Allocator] | None = None
        self._verdicts: weakref.WeakKeyDictionary[slices.Device, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._pools: dict[str, tuple[NodeLike, list[pools.Pool]]] = {}
        self._outcomes: dict[tuple[str, Any], tuple[Any, list[dict[str, Any]] | str]] = {}
        self._counts: dict[str, tuple[Any, tuple[int, int]]] = {}
        self._stamps: tuple[int, dict[str, tuple[NodeLike, tuple[Any, ...]]]] = (-1, {})
        self.demand = demand.Demand(self.used)
        self._class_names: dict[str, extended.ClassName] = {}
        self.extended: dict[str, str] = {}  # extended resource name -> the DeviceClass serving it
        self.extended_claims: dict[tuple[str, str], tuple[str, str]] = {}  # (namespace, pod uid) -> its claim's key
        self.busy: Mapping[str, float] = {}  # GPU UUID -> live utilization 0..1 (scheduler_core.utilization)
        self._busy_version = 0

    @property
    def devices_version(self) -> int:
        """Moves whenever the slices or classes change (the devices there are), not with allocations."""
        return self._slices_version

    def set_busy(self, busy: Mapping[str, float]) -> None:
        """The live utilization of GPUs by UUID: among devices our order ranks equal, the less busy comes first."""
        if busy or self.busy:
            self.busy = busy
            self._busy_version += 1

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
            withdrawn = self.slices.pop(key, None)
            if not deleted:
                self.slices[key] = slices.parse(obj)
            self.demand.slice_changed(withdrawn, self.slices.get(key))
            self._slices_changed()
        elif kind == "DeviceClass":
            if deleted:
                self.classes.pop(name, None)
                self._class_names.pop(name, None)
            else:
                self.classes[name] = claims.parse_class(obj)
                self._class_names[name] = extended.read_class(obj)
            self.extended = extended.resolve(self._class_names.values())
            self.demand.reset()
            self._slices_changed()
        elif kind == "ResourceClaim":
            claim_key = (str(meta.get("namespace") or "default"), name)
            before = self._counted(claim_key)
            earlier = self.claims.get(claim_key)
            if deleted:
                self.claims.pop(claim_key, None)
                self.assumed.pop(claim_key, None)
            else:
                record = read_claim(obj)
                self.claims[claim_key] = record
                if record.allocation is not None:
                    self.assumed.pop(claim_key, None)  # the watch shows it allocated: newer than our assumption
            self._index_extended(claim_key, earlier, self.claims.get(claim_key))
            was, now = (r.claim if r is not None else None for r in (earlier, self.claims.get(claim_key)))
            if was != now:
                self.demand.claim_changed(was, now)
            self._recount(before, self._counted(claim_key))
        self.version += 1

    def clear(self, kind: str) -> None:
        """Before a relist of `kind`: everything of it is forgotten (our assumptions stay)."""
        if kind in ("ResourceSlice", "DeviceClass"):
            if kind == "ResourceSlice":
                self.slices.clear()
            else:
                self.classes.clear()
                self._class_names.clear()
                self.extended = {}
            self.demand.reset()
            self._slices_changed()
        elif kind == "ResourceClaim":
            for claim_key in list(self.claims):
                before = self._counted(claim_key)
                self.demand.claim_changed(self.claims.pop(claim_key).claim, None)
                self._recount(before, self._counted(claim_key))
            self.extended_claims.clear()
        self.listed.add(kind)
        self.version += 1

    def _index_extended(self, claim_key: tuple[str, str], earlier: ClaimRecord | None,
                        record: ClaimRecord | None) -> None:
        """Keep the claims the scheduler made for pods' extended resources findable by pod. The watch showing one
        allocated ends our assumption of its allocation, made before its name was known."""
        if earlier is not None and earlier.extended_for is not None:
            owner = (claim_key[0], earlier.extended_for)
            if self.extended_claims.get(owner) == claim_key:
                del self.extended_claims[owner]
        if record is not None and record.extended_for is not None:
            self.extended_claims[(claim_key[0], record.extended_for)] = claim_key
            if record.allocation is not None:
                self.forget(extended.pending_key(claim_key[0], record.extended_for))

    def assume(self, claim_key: tuple[str, str], allocation: Mapping[str, Any]) -> None:
        before = self._counted(claim_key)
        self.assumed[claim_key] = allocation
        self._recount(before, self._counted(claim_key))
        self.version += 1

    def forget(self, claim_key: tuple[str, str]) -> None:
        if claim_key in self.assumed:
            before = self._counted(claim_key)
            del self.assumed[claim_key]
            self._recount(before, self._counted(claim_key))
            self.version += 1

    def _counted(self, claim_key: tuple[str, str]) -> Mapping[str, Any] | None:
        """The allocation of a claim that holds devices: the watched one, else ours in flight."""
        record = self.claims.get(claim_key)
        return (record.allocation if record is not None else None) or self.assumed.get(claim_key)

    def _recount(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        if before is after:
            return
        for allocation, change, sign in ((before, self.used.remove, -1), (after, self.used.add, 1)):
            if allocation is not None:
                change(allocation)
                self.demand.allocation_changed(allocation, sign)
                for device_id, _, _ in allocator.results_in(allocation):
                    pool = (device_id[0], device_id[1])
                    self.pool_versions[pool] = self.pool_versions.get(pool, 0) + 1

    def _slices_changed(self) -> None:
        self._slices_version += 1
        self._index = None
        self._pools.clear()
        self._outcomes.clear()
        self._counts.clear()

    # --- deciding

    def snapshot(self) -> allocator.Allocator:
        """An allocator over the current objects, made again only after a change (cheaply: the slice index, the
        nodes' pools and the selector verdicts carry over)."""
        if self._allocator is None or self._allocator[0] != self.version:
            if self._index is None:
                self._index = (self._slices_version, pools.SliceIndex(self.slices.values()))
            made = allocator.Allocator(self.classes, self._index[1], self.used, verdicts=self._verdicts,
                                       pools_kept=self._pools)
            self._allocator = (self.version, made)
        return self._allocator[1]

    def pre_enqueue(self, namespace: str, name: str, uid: str, wanted: Sequence[claims.PodClaim]) -> str | None:
        """Upstream's PreEnqueue: why the pod cannot be tried until its claims change (one not made yet, missing,
        being deleted, or a template's made for another pod), or None. A pod update or a claim event brings it
        back (upstream's queueing hints)."""
        for entry in wanted:
            problem = self._claim_problem(namespace, name, uid, entry)
            if problem:
                return problem
        return None

    def _claim_problem(self, namespace: str, name: str, uid: str, entry: claims.PodClaim) -> str | None:
        if entry.problem == "not created":
            return f'pod "{namespace}/{name}": ResourceClaim not created yet'
        if entry.problem == "unsupported":
            return f'pod "{namespace}/{name}", spec.resourceClaim "{entry.name}": none of the supported fields are set'
        if entry.claim_name is None:
            return None  # the template made no claim for it: nothing to allocate
        record = self.claims.get((namespace, entry.claim_name))
        if record is None:
            return f'resourceclaim.resource.k8s.io "{entry.claim_name}" not found'
        if record.deleting:
            return f'resourceclaim "{entry.claim_name}" is being deleted'
        if entry.from_template and record.controller_uid != uid:
            return (f"ResourceClaim {namespace}/{entry.claim_name} was not created for Pod {namespace}/{name} "
                    "(Pod is not owner)")
        return None

    def serving(self, resource: str) -> str | None:
        """The DeviceClass serving an extended resource, once the DRA objects are listed (before, none is: the
        device plugin's nodes alone are considered), or None."""
        return self.extended.get(resource) if self.ready else None

    def extended_part(self, namespace: str, uid: str, asks: Sequence[extended.ContainerAsk]) -> Extended | None:
        """The pod's extended resources that DeviceClasses serve (None when none is), and the claim made for the pod
        before, if any (preFilterExtendedResources)."""
        if not asks or not self.extended or not self.ready:
            return None
        asked = {resource for ask in asks for resource in ask.asks}
        served = {resource: self.extended[resource] for resource in asked if resource in self.extended}
        if not served:
            return None
        made = self.extended_claims.get((namespace, uid))
        return Extended(namespace, served, tuple(sorted(asked - served.keys())), tuple(asks),
                        self.claims.get(made) if made is not None else None)

    def pre_filter(self, namespace: str, name: str, uid: str, wanted: Sequence[claims.PodClaim], *,
                   asks: Sequence[extended.ContainerAsk] = (), now: float | None = None) -> Prepared | str:
        """The pod's claims (and its extended resources DRA may serve, from its containers' `asks`), or why the pod
        waits whatever the node (upstream's PreEnqueue and PreFilter). `now` (default: the clock) decides whether
        binding conditions have timed out."""
        records: list[ClaimRecord] = []
        selectors: list[tuple[predicates.Term, ...] | None] = []
        to_allocate: list[int] = []
        for entry in wanted:
            problem = self._claim_problem(namespace, name, uid, entry)
            if problem:
                return problem
            if entry.claim_name is None:
                continue
            record = self.claims[(namespace, entry.claim_name)]
            allocation = record.allocation or self.assumed.get((namespace, entry.claim_name))
            if record.allocation is None and allocation is not None and uid not in record.reserved_for:
                return f"resource claim {namespace}/{entry.claim_name} is in the process of being allocated"
            if allocation is None:
                problem = self._classes_problem(record.claim)
                if problem:
                    return problem
                to_allocate.append(len(records))
            full = len(record.reserved_for) >= RESERVED_FOR_MAX
            if allocation is not None and uid not in record.reserved_for and full:
                return "resourceclaim in use"
            selector = fields.mapping(allocation).get("nodeSelector") if allocation is not None else None
            records.append(record)
            selectors.append(predicates.parse_terms(fields.mapping(selector).get("nodeSelectorTerms"))
                             if selector is not None else None)
        signature = json.dumps([records[i].obj.get("spec") for i in to_allocate], sort_keys=True, default=str)
        now = time.time() if now is None else now
        failed = any(record.allocation is not None and not_for_binding(record.obj, now) for record in records)
        return Prepared(tuple(records), tuple(selectors), tuple(to_allocate), signature, failed,
                        self.extended_part(namespace, uid, asks))

    def _classes_problem(self, claim: claims.Claim) -> str | None:
        for alternatives in claim.requests:
            for request in alternatives:
                if not request.class_name:
                    return f"request {request.full_name}: unsupported request type"
                if request.class_name not in self.classes:
                    return f"request {request.full_name}: device class {request.class_name} does not exist"
        return None

    def filter(self, node: NodeLike, prepared: Prepared, *, allocatable: Mapping[str, int] | None = None,
               gpu_policy: str | None = None, models: tuple[frozenset[str], ...] = (),
               min_memory_mib: int | None = None) -> list[dict[str, Any]] | str:
        """Upstream's Filter on one node: the allocations of the claims to allocate (in `to_allocate` order, then
        the claim for the pod's extended resources when DRA serves them on a node with this `allocatable`), or
        the reason the node is rejected. With `gpu_policy`, devices are tried in our order (policy.order); the
        pod's GPU annotations (`models`, `min_memory_mib`) limit the GPUs. Raises allocator.AllocationError when
        the claims cannot be allocated anywhere (the pod waits with that message)."""
        node_claim = None
        allocatable = {} if allocatable is None else allocatable
        if prepared.extended is not None:  # filterExtendedResources first
            if prepared.extended.stale is not None:
                return STALE_EXTENDED
            if prepared.extended.unfit(allocatable):
                return CANNOT_FIT
            node_claim = prepared.extended.node_claim(allocatable)
        for selector in prepared.selectors:
            if selector is not None and not any(t.matches(node.labels, node.name) for t in selector):
                return NOT_AVAILABLE
        if prepared.binding_failed:
            return NOT_AVAILABLE
        if not prepared.to_allocate and node_claim is None:
            return []
        made = self.snapshot()
        key = (node.name, (prepared.signature, node_claim.signature if node_claim else None, gpu_policy, models,
                           min_memory_mib, self._busy_version if gpu_policy else 0))
        stamp = self._stamp(made, node)
        kept = self._outcomes.get(key)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        wanted = [prepared.records[i].claim for i in prepared.to_allocate]
        if node_claim is not None:
            wanted.append(node_claim.claim)
        order = policy.order(gpu_policy, self.used, self.busy) if gpu_policy else None
        outcome: list[dict[str, Any]] | str
        try:
            found = made.allocate(node, wanted, order=order, admit=policy.admits(models, min_memory_mib))
            outcome = CANNOT_ALLOCATE if found is None else found
        except allocator.NodeUnsuitable as err:
            outcome = str(err)
        if stamp is not None and not (isinstance(outcome, list) and _shares(outcome)):
            if len(self._outcomes) >= OUTCOMES_KEPT:
                self._outcomes.clear()
            self._outcomes[key] = (stamp, outcome)  # shared, never changed: whoever writes it copies first
        return outcome

    def devices_on(self, node: NodeLike) -> tuple[int, int]:
        """The devices the node's pools offer it and how many are in use (for the dra-devices score)."""
        made = self.snapshot()
        stamp = self._stamp(made, node)
        kept = self._counts.get(node.name)
        if kept is None or kept[0] != stamp:
            kept = self._counts[node.name] = (stamp, made.devices_on(node))
        return kept[1]

    def gpus_on(self, node: NodeLike) -> dict[str, tuple[int, int]]:
        """The node's GPUs of NVIDIA's driver (whole GPUs: MIG slices are not counted) by product name, each with
        how many there are and how many are in use, for the one view of GPUs that metrics and explain give."""
        found: dict[str, tuple[int, int]] = {}
        used = self.used
        for device in self.snapshot().offered(node):
            if device.driver != policy.NVIDIA_DRIVER or policy.kind(device) == "mig":
                continue
            product = policy.product(device) or "unknown"
            total, in_use = found.get(product, (0, 0))
            found[product] = (total + 1, in_use + used.holds(device.id))
        return found

    def pressure(self) -> demand.Pressure:
        """Each device's pressure: how much the claims that exist need it (demand.Demand)."""
        return self.demand.pressure(self.snapshot(), lambda: (d for s in self.slices.values() for d in s.devices))

    def _stamp(self, made: allocator.Allocator, node: NodeLike) -> tuple[Any, ...] | None:
        """What a node's outcome depends on besides the claims: the node itself, the slices and classes, and the
        devices in use in its pools (the sum of the pools' versions, which only grow, so any change moves it).
        None when its pools cannot be gathered (no outcome is kept). Once per node and model version."""
        memo = self._stamps
        if memo[0] != self.version:
            memo = self._stamps = (self.version, {})
        found = memo[1].get(node.name)
        if found is None or found[0] is not node:
            try:
                node_pools = made.pools_for(node)
            except slices.SelectionError:
                return None
            versions = self.pool_versions
            found = (node, (node, self._slices_version, sum(versions.get((p.driver, p.name), 0) for p in node_pools)))
            memo[1][node.name] = found
        return found[1]


OUTCOMES_KEPT = 200_000  # (node, claims) outcomes kept; all are dropped past this, and whenever slices change


def _shares(allocations: list[dict[str, Any]]) -> bool:
    """Whether an outcome holds shares of devices, whose share IDs must be new for every claim."""
    return any("shareID" in result for allocation in allocations
               for result in fields.sequence(fields.mapping(allocation.get("devices")).get("results")))


def consumer(name: str, uid: str) -> dict[str, str]:
    """The reservedFor entry for a pod (upstream's ResourceClaimConsumerReference; the pod's own namespace)."""
    return {"resource": "pods", "name": name, "uid": uid}


def not_for_binding(claim: Mapping[str, Any], now: float, timeout: float = BINDING_TIMEOUT) -> bool:
    """Whether an allocated claim is available on no node until it is deallocated (upstream's Filter): a binding
    failure condition is true, or its conditions are not met `timeout` seconds after allocationTimestamp
    (isClaimTimeout)."""
    met = binding_conditions(claim)
    if isinstance(met, str):
        return True
    if met:
        return False
    allocation = fields.mapping(fields.mapping(claim.get("status")).get("allocation"))
    stamp = allocation.get("allocationTimestamp")
    if not isinstance(stamp, str):
        return False
    results = fields.sequence(fields.mapping(allocation.get("devices")).get("results"))
    waits = any(fields.mapping(result).get("bindingConditions") is not None for result in results)
    return waits and fields.instant(stamp)[0] + timeout < now


def binding_conditions(claim: Mapping[str, Any]) -> bool | str:
    """Whether the binding conditions of a claim's allocated devices are met (upstream's isClaimReadyForBinding):
    True, False (not yet), or a message when a failure condition is true."""
    status = fields.mapping(claim.get("status"))
    devices = {(d.get("driver"), d.get("pool"), d.get("device")): d
               for d in map(fields.mapping, fields.sequence(status.get("devices")))}
    for result in map(fields.mapping, fields.sequence(
            fields.mapping(fields.mapping(status.get("allocation")).get("devices")).get("results"))):
        wanted = fields.sequence(result.get("bindingConditions"))
        if not wanted:
            continue
        device = devices.get((result.get("driver"), result.get("pool"), result.get("device")), {})
        true = {str(c.get("type")) for c in map(fields.mapping, fields.sequence(device.get("conditions")))
                if c.get("status") == "True"}
        failed = [c for c in fields.sequence(result.get("bindingFailureConditions")) if c in true]
        if failed:
            return (f"claim {fields.mapping(claim.get('metadata')).get('name')}: device {result.get('device')} "
                    f"reports binding failure condition {failed[0]}")
        if not all(c in true for c in wanted):
            return False
    return True
