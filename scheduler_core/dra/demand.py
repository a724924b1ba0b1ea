"""What the claims that exist ask of the devices, so that a pod can take the devices the others need least.

Upstream takes the first devices that fit. When some claims can use only some devices (one product, enough
memory) and others can use any, that spends the devices the narrow claims need on claims that had a choice.
Here every request of every claim in the cluster (allocated or not: together they are the best estimate of what
will be asked next) spreads its count evenly over the free devices it could use; a device's *pressure* is the sum
of what falls on it. A node whose allocation takes the least-pressed devices is preferred (the `dra-demand`
score).

Requests are grouped by what decides which devices they can use (device class and selectors), so a thousand
claims of one template cost as much as one. Which devices a group can use is found once per group, then only for
the devices of a slice that changes (every device again when the classes change); how many of them are in use is
kept up to date as devices are taken and freed.
A request that the pod's node choice cannot change (`allocationMode: All`, admin access, selectors of an unknown
kind) asks nothing here, and only the GROUPS_WEIGHED groups that ask the most weigh. This is a preference among
allowed nodes only: it never decides whether a node fits.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from scheduler_core.dra import cel, claims
from scheduler_core.dra.allocator import Allocated, Allocator, DeviceID, results_in
from scheduler_core.dra.slices import Device, Slice

Group = tuple[str, tuple[str, ...]]  # device class, request selectors
NO_SCHEDULE = frozenset({"NoSchedule", "NoExecute"})


def groups_of(claim: claims.Claim) -> Iterable[tuple[Group, int]]:
    """What a claim asks: per request (its first alternative, the one upstream tries first), the group and count."""
    for alternatives in claim.requests:
        request = alternatives[0]
        if (request.mode != claims.EXACT_COUNT or request.admin_access or request.count <= 0
                or any(selector is None for selector in request.selectors)):
            continue
        yield (request.class_name, tuple(s for s in request.selectors if s is not None)), request.count


Kind = frozenset[Group]  # the groups that can use a device: devices of one kind are pressed alike
NONE: Kind = frozenset()
KEPT = 100_000  # allocations whose kinds are kept; all are dropped past this
# Only the groups asking the most devices weigh: matching a group against every device costs a CEL evaluation per
# device once, and a tenant writing thousands of distinct specs must not make every decision pay that.
GROUPS_WEIGHED = 32


class Demand:
    """The devices asked per group, and per group the devices it can use and how many of those are in use."""

    def __init__(self, used: Allocated) -> None:
        self.asked: Counter[Group] = Counter()
        self._used = used
        self._usable: dict[Group, set[DeviceID]] = {}
        self._busy: Counter[Group] = Counter()
        self._kind: dict[DeviceID, Kind] = {}
        self._unseen: list[Slice] = []  # published since the groups were last matched against devices
        self._kinds_in: dict[int, tuple[object, tuple[Kind, ...]]] = {}  # id(allocations) -> (them, their kinds)

    def claim_changed(self, before: claims.Claim | None, after: claims.Claim | None) -> None:
        for claim, sign in ((before, -1), (after, 1)):
            if claim is not None:
                for group, count in groups_of(claim):
                    self.asked[group] += sign * count
                    if self.asked[group] <= 0:
                        del self.asked[group]

    def allocation_changed(self, allocation: Mapping[str, Any], sign: int) -> None:
        """A claim's devices were taken (+1) or freed (-1)."""
        for device_id, share, _ in results_in(allocation):
            if share is None:
                for group in self._kind.get(device_id, NONE):
                    self._busy[group] += sign

    def slice_changed(self, before: Slice | None, after: Slice | None) -> None:
        """A slice was published, changed or withdrawn: its devices leave their groups; the new ones are matched
        when next asked."""
        if before is not None:
            self._unseen = [s for s in self._unseen if s is not before]
            for device in before.devices:
                kind = self._kind.pop(device.id, NONE)
                busy = device.id in self._used.devices
                for group in kind:
                    self._usable[group].discard(device.id)
                    self._busy[group] -= busy
            self._kinds_in.clear()
        if after is not None:
            self._unseen.append(after)

    def reset(self) -> None:
        """The classes changed, or every slice was listed again: which devices each group can use is found again
        when next asked."""
        self._usable.clear()
        self._busy.clear()
        self._kind.clear()
        self._unseen.clear()
        self._kinds_in.clear()

    def pressure(self, made: Allocator, devices: Callable[[], Iterable[Device]]) -> Pressure:
        """The devices' pressure now, over `made`'s snapshot (`devices`: every published device, read only when a
        group is new)."""
        if self._unseen:
            unseen, self._unseen = self._unseen, []
            self._match(made, [device for one in unseen for device in one.devices], list(self._usable))
        weighed = [group for group, _ in heapq.nlargest(GROUPS_WEIGHED, self.asked.items(),
                                                        key=lambda item: (item[1], item[0]))]
        new = [group for group in weighed if group not in self._usable]
        if new:
            if len(self._usable) + len(new) > 2 * GROUPS_WEIGHED:  # many specs come and go: start over
                self.reset()
                new = weighed
            for group in new:
                self._usable[group] = set()
            self._match(made, list(devices()), new)
        share = {group: self.asked[group] / max(len(self._usable[group]) - self._busy[group], 1)
                 for group in weighed}
        return Pressure(self, share)

    def kinds(self, allocations: list[dict[str, Any]]) -> tuple[Kind, ...]:
        """The kinds of the devices a node's allocations take (kept per allocations object: the Filter keeps a
        node's outcome until its pools change)."""
        kept = self._kinds_in.get(id(allocations))
        if kept is not None and kept[0] is allocations:
            return kept[1]
        found = tuple(self._kind.get(device_id, NONE) for allocation in allocations
                      for device_id, share, _ in results_in(allocation) if share is None)
        if len(self._kinds_in) >= KEPT:
            self._kinds_in.clear()
        self._kinds_in[id(allocations)] = (allocations, found)
        return found

    def _match(self, made: Allocator, devices: list[Device], groups: list[Group]) -> None:
        """Add each of `devices` to the `groups` that can use it."""
        if not groups or not devices:
            return
        for group in groups:
            class_name, selectors = group
            device_class = made.classes.get(class_name)
            if device_class is None or None in device_class.selectors:
                continue
            wanted = [s for s in device_class.selectors if s is not None] + list(selectors)
            usable = self._usable[group]
            for device in devices:
                if any(taint.effect in NO_SCHEDULE for taint in device.taints):
                    continue
                try:
                    if not all(made.matches(device, expression) for expression in wanted):
                        continue
                except cel.SelectorError:
                    continue
                if device.id not in usable:
                    usable.add(device.id)
                    self._kind[device.id] = self._kind.get(device.id, NONE) | {group}
                    self._busy[group] += device.id in self._used.devices  # as allocation_changed counts
        self._kinds_in.clear()


class Pressure:
    """The pressure on devices at one moment: per group, what it asks over the free devices it can use."""

    def __init__(self, demand: Demand, share: Mapping[Group, float]) -> None:
        self._demand, self._share = demand, share
        self._of_kinds: dict[tuple[Kind, ...], float] = {}

    def __call__(self, device_id: DeviceID) -> float:
        return sum(self._share.get(group, 0.0) for group in self._demand._kind.get(device_id, NONE))

    def of(self, allocations: list[dict[str, Any]]) -> float:
        """The pressure on all the devices `allocations` take."""
        kinds = self._demand.kinds(allocations)
        found = self._of_kinds.get(kinds)
        if found is None:
            share = self._share
            found = self._of_kinds[kinds] = sum(share.get(group, 0.0) for kind in kinds for group in kind)
        return found

    def of_each(self, outcomes: Iterable[object]) -> list[float]:
        """`of` for each of many nodes' outcomes, NaN where one is not a list of allocations (the node does not
        fit)."""
        nan = float("nan")
        return [self.of(outcome) if outcome.__class__ is list else nan for outcome in outcomes]
