"""The resource pools a node can draw devices from, gathered as upstream's GatherPools does (v1.36.3, incubating).

A pool is the devices one driver publishes under one pool name, possibly over several slices. Only the newest
generation counts. A pool is *incomplete* while fewer slices of that generation exist than
`resourceSliceCount` says (the driver is mid-update): nothing is allocated from it, and a request for all
devices fails on it. A pool is *invalid* when its slices contradict each other (a device name twice, a counter
set twice or missing): allocation skips it, and if no other pool can serve the claims, the node is rejected
with "invalid resource pools were encountered".

Pools are sorted by driver and name, those with binding conditions last, so that the first fitting devices
upstream takes are the ones we would take in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from scheduler_core.dra import slices
from scheduler_core.dra.slices import NodeLike, Slice


@dataclass
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: str | None = None  # why, when invalid
    targeting: list[Slice] = field(default_factory=list)  # device slices that reach the node, by name
    # the pool's other device slices (their devices consume the pool's counters too)
    not_targeting: list[Slice] = field(default_factory=list)
    counter_sets: Mapping[str, Mapping[str, Fraction]] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"


class SliceIndex:
    """The slices by the node they name, and those that name none (or publish counters), as upstream's allocator
    splits them, so gathering one node's pools reads its own slices and the shared ones, not every slice."""

    def __init__(self, all_slices: Iterable[Slice]) -> None:
        self.all = list(all_slices)
        self.by_node: dict[str, list[Slice]] = {}
        self.shared: list[Slice] = []
        for member in self.all:
            if member.reach.node_name and not member.counter_sets:
                self.by_node.setdefault(member.reach.node_name, []).append(member)
            else:
                self.shared.append(member)

    def near(self, node_name: str) -> list[Slice]:
        return self.by_node.get(node_name, []) + self.shared


def for_node(node: NodeLike, index: SliceIndex, *, partitionable: bool = True) -> list[Pool]:
    """The pools whose devices `node` may use. Raises slices.SelectionError for a node selector that does not
    parse (upstream fails the allocation on that node)."""
    all_slices = index.all
    by_pool: dict[tuple[str, str], list[Slice]] = {}
    for candidate in index.near(node.name):
        if not partitionable and (candidate.per_device_node_selection or candidate.counter_sets):
            continue
        if candidate.counter_sets:
            relevant = True
        elif candidate.reach.given:
            try:
                relevant = slices.node_matches(node, candidate.reach)
            except slices.SelectionError as err:
                raise slices.SelectionError(
                    f"failed to perform node selection for slice {candidate.name}: {err}") from err
        elif candidate.per_device_node_selection:
            relevant = False
            for device in candidate.devices:
                try:
                    if slices.node_matches(node, device.reach):
                        relevant = True
                        break
                except slices.SelectionError as err:
                    raise slices.SelectionError(f"failed to perform node selection for device {device.name} in slice "
                                                f"{candidate.name}: {err}") from err
        else:
            continue
        if relevant:
            _add(by_pool, candidate)
    ready: list[Pool] = []
    with_conditions: list[Pool] = []
    for (driver, name), members in by_pool.items():
        generation, count = members[0].generation, members[0].slice_count
        everything: list[Slice] | None = None
        if len(members) != count:
            everything = [s for s in all_slices if s.driver == driver and s.pool == name and s.generation >= generation]
            if any(s.generation > generation for s in everything):
                continue  # obsolete: a newer generation exists that does not reach this node
            if len(everything) != count:
                ready.append(Pool(driver, name, incomplete=True))
                continue
        pool = _build(driver, name, members, everything, partitionable=partitionable)
        (with_conditions if _has_binding_conditions(pool) else ready).append(pool)
    ready.sort(key=lambda p: (p.driver, p.name))
    with_conditions.sort(key=lambda p: (p.driver, p.name))
    return ready + with_conditions


def _add(by_pool: dict[tuple[str, str], list[Slice]], candidate: Slice) -> None:
    key = (candidate.driver, candidate.pool)
    members = by_pool.get(key)
    if members is None or candidate.generation > members[0].generation:
        by_pool[key] = [candidate]
    elif candidate.generation == members[0].generation:
        members.append(candidate)


def _build(driver: str, name: str, members: list[Slice], everything: list[Slice] | None, *,
           partitionable: bool) -> Pool:
    members = sorted(members, key=lambda s: s.name)
    problem = next((s.problem for s in members if s.problem), None)
    if problem:
        return Pool(driver, name, invalid=problem)
    device_slices = [s for s in members if not s.counter_sets] if partitionable else members
    problem = _duplicate_device(device_slices)
    if problem or not partitionable:
        return Pool(driver, name, invalid=problem, targeting=device_slices)
    counter_sets: dict[str, Mapping[str, Fraction]] = {}
    for counter_slice in (s for s in members if s.counter_sets):
        for set_name, counters in counter_slice.counter_sets.items():
            if set_name in counter_sets:
                return Pool(driver, name, invalid=f"duplicate counter set name {set_name}")
            counter_sets[set_name] = counters
    problem = _unknown_counter(counter_sets, members)
    if problem:
        return Pool(driver, name, invalid=problem)
    others: list[Slice] = []
    if everything is not None and len(everything) != len(members):
        names = {s.name for s in members}
        others = [s for s in everything if s.name not in names]
        problem = _unknown_counter(counter_sets, others)
        if problem:
            return Pool(driver, name, invalid=problem)
    return Pool(driver, name, targeting=device_slices, not_targeting=others, counter_sets=counter_sets)


def _duplicate_device(device_slices: Iterable[Slice]) -> str | None:
    seen: set[str] = set()
    for device_slice in device_slices:
        for device in device_slice.devices:
            if device.name in seen:
                return f"duplicate device name {device.name}"
            seen.add(device.name)
    return None


def _unknown_counter(counter_sets: Mapping[str, Mapping[str, Fraction]], members: Iterable[Slice]) -> str | None:
    for member in members:
        for device in member.devices:
            for use in device.consumes:
                counters = counter_sets.get(use.counter_set)
                if counters is None:
                    return f"counter set {use.counter_set} not found"
                for counter in use.counters:
                    if counter not in counters:
                        return f"counter {counter} not found in counter set {use.counter_set}"
    return None


def _has_binding_conditions(pool: Pool) -> bool:
    return any(d.raw_binding_conditions for s in pool.targeting for d in s.devices)
