"""Allocating a pod's ResourceClaims on one node, deciding exactly as kube-scheduler v1.36.3 does.

Ported from k8s.io/dynamic-resource-allocation's structured allocator, the "incubating" variant that v1.36's
default feature gates select. The claims are allocated one after the other, each request's devices one after
the other; every candidate device is tried in turn and the search backtracks when a later device cannot be
found, so the first full solution in candidate order wins and a claim set that fits is never missed.

What a device must meet: its class's and its request's CEL selectors, not allocated to anyone (unless the
request has admin access, or the device allows multiple allocations and has capacity left), no NoSchedule or
NoExecute taint the request does not tolerate, the claim's constraints (`matchAttribute`,
`distinctAttribute`), room in the counters of a partitionable device's pool, and per-device node selection.

Where we differ from upstream is only the candidate order: upstream tries devices in pool, slice and device
order; `allocate(..., order=...)` lets the caller's GPU policy put the devices it prefers first. Feasibility,
errors and the shape of each AllocationResult stay upstream's.
"""

from __future__ import annotations

import functools
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from scheduler_core import fields, predicates, quantity
from scheduler_core.dra import capacity, cel, claims, pools, slices
from scheduler_core.dra.claims import Claim, DeviceClass, Request
from scheduler_core.dra.slices import Device, NodeLike, Slice

DeviceID = tuple[str, str, str]  # driver, pool, device


def device_text(device_id: DeviceID) -> str:
    return "/".join(device_id)


class AllocationError(Exception):
    """The claims cannot be allocated on any node (a bad selector, a missing class, a count too large):
    upstream stops and reports it instead of trying other nodes."""


class NodeUnsuitable(Exception):
    """Not on this node, for a reason worth telling (upstream's ErrFailedAllocationOnNode)."""


@dataclass(frozen=True)
class Features:
    """The allocator's switches, named after the feature gates; the defaults are v1.36.3's."""

    admin_access: bool = True
    consumable_capacity: bool = True
    device_binding: bool = True  # DRADeviceBindingConditions + DRAResourceClaimDeviceStatus
    device_taints: bool = True
    partitionable: bool = True
    prioritized_list: bool = True


@dataclass
class Allocated:
    """Devices already allocated by any claim (upstream's AllocatedState): dedicated devices, shares of devices
    that allow multiple allocations, and the capacity those shares consume."""

    devices: set[DeviceID] = field(default_factory=set)
    shared: set[tuple[DeviceID, str]] = field(default_factory=set)
    capacity: dict[DeviceID, dict[str, Fraction]] = field(default_factory=dict)

    def holds(self, device_id: DeviceID) -> bool:
        """As IsDeviceAllocated: in use in any way (counters of partitionable devices count this)."""
        return (device_id in self.devices or device_id in self.capacity
                or any(shared_id == device_id for shared_id, _ in self.shared))

    def add(self, allocation: Mapping[str, Any], *, consumable: bool = True) -> None:
        """Count a claim's `status.allocation` (devices with admin access are not in use)."""
        for device_id, share, consumed in results_in(allocation):
            if share is not None and consumable:
                self.shared.add((device_id, share))
                if consumed:
                    capacity.add(self.capacity.setdefault(device_id, {}), consumed)
            else:
                self.devices.add(device_id)

    def remove(self, allocation: Mapping[str, Any], *, consumable: bool = True) -> None:
        for device_id, share, consumed in results_in(allocation):
            if share is not None and consumable:
                self.shared.discard((device_id, share))
                if consumed and device_id in self.capacity:
                    capacity.subtract(self.capacity[device_id], consumed)
                    if not any(self.capacity[device_id].values()):
                        del self.capacity[device_id]
            else:
                self.devices.discard(device_id)


def results_in(allocation: Mapping[str, Any]) -> Iterable[tuple[DeviceID, str | None, dict[str, Fraction]]]:
    """The devices of an allocation that count as used: (id, share id or None, consumed capacity)."""
    for result in fields.sequence(fields.mapping(allocation.get("devices")).get("results")):
        result = fields.mapping(result)
        if result.get("adminAccess") is True:
            continue
        device_id = (str(result.get("driver") or ""), str(result.get("pool") or ""), str(result.get("device") or ""))
        share = result.get("shareID")
        consumed: dict[str, Fraction] = {}
        for name, amount in fields.mapping(result.get("consumedCapacity")).items():
            try:
                consumed[str(name)] = quantity.parse(amount)
            except quantity.QuantityError:
                continue
        yield device_id, share if isinstance(share, str) and share else None, consumed


def devices_in(allocations: Iterable[Mapping[str, Any]]) -> int:
    """How many devices some allocations hold."""
    return sum(len(fields.sequence(fields.mapping(fields.mapping(a).get("devices")).get("results")))
               for a in allocations)


FIRST_AVAILABLE_MAX = 8  # resourceapi.FirstAvailableDeviceRequestMaxSize


def alternative_score(claim: Claim, allocation: Mapping[str, Any]) -> int:
    """Upstream's computeScore for one claim: 8 - i for each `firstAvailable` alternative i it was given."""
    chosen = {str(fields.mapping(r).get("request")) for r in
              fields.sequence(fields.mapping(allocation.get("devices")).get("results"))}
    return sum(FIRST_AVAILABLE_MAX - index
               for alternatives, prioritized in zip(claim.requests, claim.prioritized) if prioritized
               for index, request in enumerate(alternatives) if request.full_name in chosen)


@dataclass(frozen=True)
class Candidate:
    """A device a request may take on the node, where it sits (for per-device node selection and results)."""

    device: Device
    slice: Slice
    pool: pools.Pool


Order = Callable[[list[Candidate]], list[Candidate]]


@dataclass
class _RequestData:
    request: Request
    class_: DeviceClass
    num_devices: int
    all_devices: list[Candidate] | None = None  # allocationMode All: exactly these


MAX_STEPS = 200_000  # devices tried in one node's search before it gives up (under a second here)


class _TooMany(Exception):
    """More devices than one claim may hold: backtrack further (upstream's errAllocationResultMaxSizeExceeded)."""


@dataclass
class _Taken:
    """One device in the solution being built."""

    request: Request
    candidate: Candidate
    share_id: str | None = None
    consumed: dict[str, Fraction] | None = None


class Allocator:
    """Allocates over one snapshot of slices, classes and allocated devices; reusable for every node and pod
    of that snapshot. Selector verdicts are cached per device and expression, as devices do not change within
    a snapshot."""

    def __init__(self, classes: Mapping[str, DeviceClass], all_slices: Sequence[Slice] | pools.SliceIndex,
                 allocated: Allocated, *, features: Features = Features(),
                 verdicts: MutableMapping[Device, dict[str, bool | cel.SelectorError]] | None = None,
                 pools_kept: dict[str, tuple[NodeLike, list[pools.Pool]]] | None = None) -> None:
        self.classes = classes
        self.index = all_slices if isinstance(all_slices, pools.SliceIndex) else pools.SliceIndex(all_slices)
        self.allocated = allocated
        self.features = features
        # a node's pools, while its facts object is the same (pools_kept may outlive this snapshot: the caller
        # drops it when the slices change)
        self._pools: dict[str, tuple[NodeLike, list[pools.Pool]]] = pools_kept if pools_kept is not None else {}
        # selector verdicts per device object: a device never changes (a changed slice is new objects), so this may
        # be shared by the allocators of successive snapshots (state.Resources does)
        self._verdicts = verdicts if verdicts is not None else weakref.WeakKeyDictionary()
        self._available_counters: dict[str, dict[str, dict[str, Fraction]]] = {}
        self._device_counts: dict[str, tuple[int, int]] = {}

    def pools_for(self, node: NodeLike) -> list[pools.Pool]:
        kept = self._pools.get(node.name)
        if kept is not None and kept[0] is node:
            return kept[1]
        found = pools.for_node(node, self.index, partitionable=self.features.partitionable)
        self._pools[node.name] = (node, found)
        return found

    def allocate(self, node: NodeLike, to_allocate: Sequence[Claim], *, order: Order | None = None,
                 admit: Callable[[Device], bool] | None = None) -> list[dict[str, Any]] | None:
        """One AllocationResult (JSON, as `status.allocation`) per claim, or None if they do not fit on `node`.
        `order` arranges the candidate devices (default: upstream's slice order); `admit`, if given, is one more
        condition every device must meet (the pod's GPU annotations). Raises AllocationError (nowhere) or
        NodeUnsuitable (not here, with a reason)."""
        try:
            found = self.pools_for(node)
        except slices.SelectionError as err:
            raise AllocationError(f"gather pool information: {err}") from err
        return _Search(self, node, to_allocate, found, order, admit).run()

    def devices_on(self, node: NodeLike) -> tuple[int, int]:
        """The devices the node's usable pools offer it, and how many of them are in use (for scores)."""
        found = self._device_counts.get(node.name)
        if found is None:
            total = in_use = 0
            for device in self.offered(node):
                total += 1
                in_use += self.allocated.holds(device.id)
            found = self._device_counts[node.name] = (total, in_use)
        return found

    def offered(self, node: NodeLike) -> Iterable[Device]:
        """The devices of the node's usable pools (complete, valid) that reach it."""
        try:
            usable = [p for p in self.pools_for(node) if not p.incomplete and not p.invalid]
        except slices.SelectionError:
            return
        for pool in usable:
            for member in pool.targeting:
                yield from member.devices

    def matches(self, device: Device, expression: str) -> bool:
        """A selector's verdict on a device; raises cel.SelectorError (compile or runtime), cached either way."""
        known = self._verdicts.get(device)
        if known is None:
            known = self._verdicts[device] = {}
        verdict = known.get(expression)
        if verdict is None:
            selector = compiled(expression)
            try:
                if isinstance(selector, cel.SelectorError):
                    raise selector
                verdict = selector.matches(device)
            except cel.SelectorError as err:
                verdict = err
            known[expression] = verdict
        if isinstance(verdict, cel.SelectorError):
            raise verdict
        return verdict

    def available_counters(self, pool: pools.Pool) -> dict[str, dict[str, Fraction]]:
        """A pool's counters less what its allocated devices consume, computed once per snapshot."""
        found = self._available_counters.get(pool.id)
        if found is None:
            found = {name: dict(counters) for name, counters in pool.counter_sets.items()}
            for member in pool.targeting + pool.not_targeting:
                for device in member.devices:
                    if not self.allocated.holds(device.id):
                        continue
                    for use in device.consumes:
                        available = found.get(use.counter_set, {})
                        for name, amount in use.counters.items():
                            if name in available:
                                available[name] -= amount
            self._available_counters[pool.id] = found
        return found


COMPILED_KEPT = 1024  # distinct selectors kept compiled: a cluster's classes and claims repeat a few


@functools.lru_cache(maxsize=COMPILED_KEPT)
def compiled(expression: str) -> cel.Selector | cel.SelectorError:
    """A selector compiled once, or why it does not compile. Kept beyond cel's own small cache (upstream's 10),
    which a cluster with more distinct selectors than that would recompile on every device."""
    try:
        return cel.compile_selector(expression)
    except cel.SelectorError as err:
        return err


def _expression_text(expression: str, shown: int = 200) -> str:
    """The expression for a message, its start only when long (a selector may be 10,000 characters)."""
    return expression if len(expression) <= shown else f"{expression[:shown]}... ({len(expression)} characters)"


class _Search:
    """One Allocate call: the backtracking search and the state it builds and undoes."""

    def __init__(self, allocator: Allocator, node: NodeLike, to_allocate: Sequence[Claim],
                 found: list[pools.Pool], order: Order | None, admit: Callable[[Device], bool] | None) -> None:
        self.a = allocator
        self.admit = admit
        self.features = allocator.features
        self.node = node
        self.claims = list(to_allocate)
        self.pools = found
        candidates = [Candidate(device, member, pool) for pool in found if not pool.incomplete and not pool.invalid
                      for member in pool.targeting for device in member.devices]
        self.candidates = order(candidates) if order is not None else candidates
        self.data: dict[tuple[int, int, int], _RequestData] = {}
        self.selected: dict[tuple[int, int], int] = {}  # firstAvailable: the subrequest chosen
        self.taking: dict[DeviceID, set[int]] = {}  # device -> claims (by index) it is being allocated to
        self.taking_capacity: dict[DeviceID, dict[str, Fraction]] = {}
        self.consumed_counters: dict[str, dict[str, dict[str, Fraction]]] = {}
        self.results: list[list[_Taken]] = [[] for _ in self.claims]
        self.constraints: list[list[_Constraint]] = []
        self.selectable: dict[tuple[int, tuple[int, int, int]], bool] = {}
        self.steps = 0

    def run(self) -> list[dict[str, Any]] | None:
        for claim_index, claim in enumerate(self.claims):
            self._prepare(claim_index, claim)
        if not self._one(0, 0, 0, 0, False, 0):
            if any(p.invalid for p in self.pools):
                raise NodeUnsuitable("invalid resource pools were encountered")
            return None
        return [self._result(i, claim) for i, claim in enumerate(self.claims)]

    # -- preparing: upstream's checks before searching, with its messages

    def _prepare(self, claim_index: int, claim: Claim) -> None:
        least = 0
        for request_index, alternatives in enumerate(claim.requests):
            prioritized = claim.prioritized[request_index]
            if prioritized and not self.features.prioritized_list:
                raise AllocationError(f"claim {claim.key}, request {alternatives[0].parent}: has subrequests, "
                                      "but the DRAPrioritizedList feature is disabled")
            if not self.features.consumable_capacity:
                for request in alternatives:
                    if request.capacity is not None:
                        kind = "subrequest" if request.parent else "request"
                        raise AllocationError(f"claim {claim.key}, {kind} {request.name}: has capacity requests, "
                                              "but the DRAConsumableCapacity feature is disabled")
            fewest = None
            for sub_index, request in enumerate(alternatives):
                data = self._validate(claim, request, (claim_index, request_index, sub_index))
                self.data[(claim_index, request_index, sub_index)] = data
                fewest = data.num_devices if fewest is None else min(fewest, data.num_devices)
            least += fewest or 0
        if least > claims.RESULTS_MAX:
            raise AllocationError(f"claim {claim.key}: number of requested devices {least} exceeds the claim limit "
                                  f"of {claims.RESULTS_MAX}")
        constraints: list[_Constraint] = []
        for index, constraint in enumerate(claim.constraints):
            if not constraint.kind:
                raise AllocationError(f"claim {claim.key}, constraint #{index}: empty constraint "
                                      "(unsupported constraint type?)")
            constraints.append(_Constraint(constraint))
        self.constraints.append(constraints)

    def _validate(self, claim: Claim, request: Request, key: tuple[int, int, int]) -> _RequestData:
        prefix = f"claim {claim.key}, request {request.name}"
        for index, selector in enumerate(request.selectors):
            if selector is None:
                raise AllocationError(f"{prefix}, selector #{index}: CEL expression empty (unsupported selector type?)")
        if not self.features.admin_access and request.has_admin_access:
            raise AllocationError(f"{prefix}: admin access is requested, but the feature is disabled")
        if not request.class_name:
            raise AllocationError(f"{prefix}: missing device class name (unsupported request type?)")
        device_class = self.a.classes.get(request.class_name)
        if device_class is None:
            raise AllocationError(f"{prefix}: could not retrieve device class {request.class_name}: "
                                  f'deviceclass.resource.k8s.io "{request.class_name}" not found')
        data = _RequestData(request, device_class, 0)
        if request.mode == claims.EXACT_COUNT:
            data.num_devices = request.count
        elif request.mode == claims.ALL:
            data.all_devices = []
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(f"{prefix}: asks for all devices, but resource pool {pool.id} is currently "
                                          "being updated")
                if pool.invalid:
                    raise AllocationError(f"{prefix}: asks for all devices, but resource pool {pool.id} is currently "
                                          "invalid")
                for member in pool.targeting:
                    for device in member.devices:
                        candidate = Candidate(device, member, pool)
                        if self._selectable(key, data, candidate) and self._capacity_fits(request, device):
                            data.all_devices.append(candidate)
            data.num_devices = len(data.all_devices)
        else:
            raise AllocationError(f"{prefix}: unsupported count mode {request.mode}")
        return data

    # -- the search

    def _one(self, claim_index: int, request_index: int, sub_index: int, device_index: int,
             in_subrequest: bool, start: int) -> bool:
        self._step()
        if claim_index >= len(self.claims):
            return True
        claim = self.claims[claim_index]
        if request_index >= len(claim.requests):
            try:
                return self._one(claim_index + 1, 0, 0, 0, False, 0)
            except _TooMany:
                return False
        key = (claim_index, request_index, sub_index)
        data = self.data[key]
        if not in_subrequest and claim.prioritized[request_index]:
            all_too_many = True
            for choice in range(len(claim.requests[request_index])):
                try:
                    done = self._one(claim_index, request_index, choice, device_index, True, 0)
                except _TooMany:
                    continue
                all_too_many = False
                if done:
                    self.selected[(claim_index, request_index)] = choice
                    return True
            if all_too_many:
                raise _TooMany
            return False
        request = data.request
        if data.all_devices is not None and not data.all_devices:
            return False
        if device_index >= data.num_devices:
            return self._one(claim_index, request_index + 1, 0, 0, False, 0)
        if len(self.results[claim_index]) + data.num_devices - device_index > claims.RESULTS_MAX:
            raise _TooMany
        if data.all_devices is not None:
            undo = self._take(claim_index, data, data.all_devices[device_index], must=True)
            if undo is None:
                return False
            try:
                done = self._one(claim_index, request_index, sub_index, device_index + 1, in_subrequest, 0)
            except BaseException:
                undo()
                raise
            if not done:
                undo()
            return done
        for position in range(start, len(self.candidates)):
            self._step()
            candidate = self.candidates[position]
            device_id = candidate.device.id
            if request.admin_access:
                if claim_index in self.taking.get(device_id, ()):
                    continue
            elif self._in_use(device_id):
                continue
            if not self._selectable(key, data, candidate):
                continue
            if self.features.consumable_capacity and not self._capacity_fits(request, candidate.device):
                continue
            undo = self._take(claim_index, data, candidate, must=False)
            if undo is None:
                continue
            try:
                done = self._one(claim_index, request_index, sub_index, device_index + 1, in_subrequest, position + 1)
            except BaseException:
                undo()
                raise
            if done:
                return True
            undo()
        return False

    def _step(self) -> None:
        """One more device tried. Upstream bounds a node's search by time (DRASchedulerFilterTimeout, 10 s) and
        fails the pod's cycle with this error; a bound in steps gives the same answer on any machine."""
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise AllocationError(f"node {self.node.name}: timed out trying to allocate devices "
                                  f"(more than {MAX_STEPS} devices tried)")

    def _in_use(self, device_id: DeviceID) -> bool:
        return device_id in self.a.allocated.devices or bool(self.taking.get(device_id))

    def _selectable(self, key: tuple[int, int, int], data: _RequestData, candidate: Candidate) -> bool:
        device = candidate.device
        if not self.features.device_binding and device.binding_conditions:
            return False
        memo = (id(device), key)
        verdict = self.selectable.get(memo)
        if verdict is None:
            verdict = (self._selectors_match(key, device, data.class_.selectors, device_class=data.class_)
                       and self._selectors_match(key, device, data.request.selectors, device_class=None)
                       and (self.admit is None or self.admit(device)))
            if verdict and candidate.slice.per_device_node_selection:
                try:
                    verdict = slices.node_matches(self.node, device.reach)
                except slices.SelectionError as err:
                    raise AllocationError(str(err)) from err
            self.selectable[memo] = verdict
        return verdict

    def _selectors_match(self, key: tuple[int, int, int], device: Device, expressions: Sequence[str | None], *,
                         device_class: DeviceClass | None) -> bool:
        for index, expression in enumerate(expressions):
            if expression is None:
                continue
            try:
                if not self.a.matches(device, expression):
                    return False
            except cel.SelectorError as err:
                owner = (f"class {device_class.name}" if device_class is not None
                         else f"claim {self.claims[key[0]].key}")
                kind = "compile" if err.compile_time else "runtime"
                raise AllocationError(f"{owner}: selector #{index}: CEL {kind} error: {err.detail} (in "
                                      f"{_expression_text(expression)})") from err
        return True

    def _capacity_fits(self, request: Request, device: Device) -> bool:
        device_id = device.id
        if (request.capacity is None and not device.capacity_policies and device_id not in self.a.allocated.capacity
                and device_id not in self.taking_capacity):
            return True  # it would consume each capacity whole, which nothing else consumes: it fits
        return capacity.fits(request.capacity, device.capacity_raw,
                             allocated=self.a.allocated.capacity.get(device_id, {}),
                             allocating=self.taking_capacity.get(device_id, {}))

    def _take(self, claim_index: int, data: _RequestData, candidate: Candidate, *,
              must: bool) -> Callable[[], None] | None:
        """Add the device to the solution; a function that takes it out again, or None if it cannot be added."""
        request, device = data.request, candidate.device
        device_id = device.id
        shared = self.features.consumable_capacity and device.allow_multiple_allocations
        if not shared and request.admin_access and claim_index in self.taking.get(device_id, ()):
            return None
        if not request.admin_access and self._in_use(device_id):
            return None
        if not self.features.partitionable and device.consumes:
            return None
        undo: list[Callable[[], None]] = []

        def rollback() -> None:
            while undo:
                undo.pop()()

        skip_counters = shared and (device_id in self.a.allocated.capacity or device_id in self.taking_capacity)
        if not skip_counters and device.consumes:
            if not self._reserve_counters(candidate):
                return None
            undo.append(lambda: self._release_counters(candidate))
        if self.features.device_taints and predicates.first_untolerated(device.taints, request.tolerations) is not None:
            rollback()
            return None
        base, sub = (request.parent, request.name) if request.parent else (request.name, "")
        for constraint in self.constraints[claim_index]:
            if not constraint.add(base, sub, device):
                rollback()
                if must:
                    raise AllocationError(f"claim {self.claims[claim_index].key}, request {request.name}: cannot add "
                                          f"device {device_text(device_id)} because a claim constraint would not "
                                          "be satisfied")
                return None
            undo.append(lambda c=constraint: c.remove(base, sub))  # type: ignore[misc]
        if not shared:
            self.taking.setdefault(device_id, set()).add(claim_index)
            undo.append(lambda: self.taking[device_id].discard(claim_index))
        taken = _Taken(request, candidate)
        if self.features.consumable_capacity:
            if not self._capacity_fits(request, device):
                rollback()
                return None
            if shared:
                taken.consumed = capacity.consumed(request.capacity, device.capacity_raw)
                taken.share_id = str(uuid.uuid4())
                had_entry = device_id in self.taking_capacity
                capacity.add(self.taking_capacity.setdefault(device_id, {}), taken.consumed)
                consumed = taken.consumed

                def give_back() -> None:
                    capacity.subtract(self.taking_capacity[device_id], consumed)
                    if not had_entry:
                        del self.taking_capacity[device_id]
                undo.append(give_back)
        results = self.results[claim_index]
        results.append(taken)

        def drop() -> None:
            results.pop()
        undo.append(drop)
        return rollback

    def _reserve_counters(self, candidate: Candidate) -> bool:
        pool = candidate.pool
        available = self.a.available_counters(pool)
        consumed = self.consumed_counters.setdefault(pool.id, {})
        for use in candidate.device.consumes:
            capacity.add(consumed.setdefault(use.counter_set, {}), use.counters)
        for set_name, counters in available.items():
            used = consumed.get(set_name, {})
            for name, amount in counters.items():
                if amount < used.get(name, Fraction(0)):
                    self._release_counters(candidate)
                    return False
        return True

    def _release_counters(self, candidate: Candidate) -> None:
        consumed = self.consumed_counters[candidate.pool.id]
        for use in candidate.device.consumes:
            capacity.subtract(consumed[use.counter_set], use.counters)

    # -- the result, as upstream writes it into status.allocation

    def _result(self, claim_index: int, claim: Claim) -> dict[str, Any]:
        results = []
        for taken in self.results[claim_index]:
            entry: dict[str, Any] = {"request": taken.request.full_name, "driver": taken.candidate.device.driver,
                                     "pool": taken.candidate.device.pool, "device": taken.candidate.device.name}
            if taken.request.admin_access:
                entry["adminAccess"] = True
            if taken.request.tolerations_raw:
                entry["tolerations"] = [dict(t) for t in taken.request.tolerations_raw]
            if self.features.device_binding:
                if taken.candidate.device.binding_conditions:
                    entry["bindingConditions"] = list(taken.candidate.device.binding_conditions)
                if taken.candidate.device.binding_failure_conditions:
                    entry["bindingFailureConditions"] = list(taken.candidate.device.binding_failure_conditions)
            if taken.share_id is not None:
                entry["shareID"] = taken.share_id
            if taken.consumed:
                entry["consumedCapacity"] = {k: slices.quantity_text(v) for k, v in taken.consumed.items()}
            results.append(entry)
        devices: dict[str, Any] = {"results": results}
        config = self._config(claim_index, claim)
        if config:
            devices["config"] = config
        allocation: dict[str, Any] = {"devices": devices}
        selector = self._node_selector(self.results[claim_index], claim)
        if selector is not None:
            allocation["nodeSelector"] = selector
        return allocation

    def _chosen(self, claim_index: int, request_index: int) -> _RequestData:
        choice = self.selected.get((claim_index, request_index), 0)
        return self.data[(claim_index, request_index, choice)]

    def _config(self, claim_index: int, claim: Claim) -> list[dict[str, Any]]:
        config: list[dict[str, Any]] = []
        by_class: dict[str, tuple[int, int]] = {}
        for request_index in range(len(claim.requests)):
            data = self._chosen(claim_index, request_index)
            name = data.request.full_name
            span = by_class.get(data.class_.name)
            if span is not None:
                for index in range(*span):
                    config[index]["requests"].append(name)
                continue
            first = len(config)
            for entry in data.class_.config:
                config.append({"source": "FromClass", "requests": [name], **_device_configuration(entry)})
            by_class[data.class_.name] = (first, len(config))
        for entry in claim.config:
            wanted = [str(r) for r in entry.get("requests") or []]
            as_allocated = {"source": "FromClaim", **({"requests": wanted} if wanted else {}),
                            **_device_configuration(entry)}
            if not wanted:
                config.append(as_allocated)
                continue
            for request_index, alternatives in enumerate(claim.requests):
                data = self._chosen(claim_index, request_index)
                parent = alternatives[0].parent
                if (parent or data.request.name) in wanted:
                    config.append(dict(as_allocated))
                elif parent and data.request.full_name in wanted:
                    config.append(dict(as_allocated))
        return config

    def _node_selector(self, taken: list[_Taken], claim: Claim) -> dict[str, Any] | None:
        fields_: list[dict[str, Any]] = []
        expressions: list[dict[str, Any]] = []
        for item in taken:
            where = item.candidate
            reach = where.device.reach if where.slice.per_device_node_selection else where.slice.reach
            if reach.node_name or item.candidate.device.binds_to_node:
                return {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [self.node.name]}]}]}
            if reach.selector_raw is None:
                continue
            terms = reach.selector_raw.get("nodeSelectorTerms") or []
            if len(terms) == 1:
                _merge(terms[0].get("matchFields") or [], fields_)
                _merge(terms[0].get("matchExpressions") or [], expressions)
            elif len(terms) > 1:
                raise AllocationError(f"create NodeSelector for claim {claim.name}: unsupported "
                                      f"ResourceSlice.NodeSelector with {len(terms)} terms")
        if not fields_ and not expressions:
            return None
        term: dict[str, Any] = {}
        if expressions:
            term["matchExpressions"] = expressions
        if fields_:
            term["matchFields"] = fields_
        return {"nodeSelectorTerms": [term]}


def _device_configuration(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in ("requests", "source")}


def _merge(requirements: Iterable[Mapping[str, Any]], into: list[dict[str, Any]]) -> None:
    for requirement in requirements:
        values = set(requirement.get("values") or [])
        if not any(r.get("key") == requirement.get("key") and r.get("operator") == requirement.get("operator")
                   and set(r.get("values") or []) == values for r in into):
            into.append(dict(requirement))


class _Constraint:
    """matchAttribute (every device of the named requests has the first one's value) or distinctAttribute
    (a device's value differs from those recorded); a device without the attribute satisfies neither.

    As upstream, distinctAttribute records one value per request name (the last device added for it), so it
    compares a device with the latest device of each request, not with every device.
    """

    def __init__(self, spec: claims.Constraint) -> None:
        self.spec = spec
        self.matched: list[tuple[str, Any]] = []  # matchAttribute: one entry per device added
        self.distinct: dict[str, tuple[str, Any]] = {}  # distinctAttribute: request -> value

    def _applies(self, base: str, sub: str) -> bool:
        names = self.spec.requests
        return not names or base in names or bool(sub) and f"{base}/{sub}" in names

    def add(self, base: str, sub: str, device: Device) -> bool:
        if not self._applies(base, sub):
            return True
        value = _typed(device.attributes.get(self.spec.attribute))
        if value is None:
            return False
        if self.spec.kind == "matchAttribute":
            if self.matched and value != self.matched[0]:
                return False
            self.matched.append(value)
        else:
            if any(value == seen for seen in self.distinct.values()):
                return False
            self.distinct[base] = value
        return True

    def remove(self, base: str, sub: str) -> None:
        if not self._applies(base, sub):
            return
        if self.spec.kind == "matchAttribute":
            self.matched.pop()
        else:
            self.distinct.pop(base, None)


def _typed(attribute: Mapping[str, Any] | None) -> tuple[str, Any] | None:
    """An attribute's value with its type, so that the string "1" and the int 1 differ, as upstream compares."""
    if attribute is None:
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in attribute and attribute[kind] is not None:
            return (kind, attribute[kind])
    return None
