"""ResourceSlices as the allocator reads them: devices with fully qualified attributes, their pool and node reach.

A driver publishes its devices in ResourceSlices (resource.k8s.io/v1). The slices of one pool share a
generation and say how many of them make the pool whole (`pool.resourceSliceCount`); each slice reaches nodes
by `nodeName`, `nodeSelector` or `allNodes`, or lets each device say so (`perDeviceNodeSelection`); a slice
with `sharedCounters` publishes counter sets that partitionable devices of the same pool consume.

Attribute and capacity names without a domain belong to the driver's domain, as upstream's CEL environment
and its `matchAttribute` lookup read them; here they are qualified once, when the slice is read.
Parsing never raises: a device or slice that does not read is kept with its problem, which makes its pool
invalid, as upstream treats a pool it cannot use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

from scheduler_core import fields, predicates, quantity


class NodeLike(Protocol):
    """What node selection reads of a node."""

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


@dataclass(frozen=True)
class Reach:
    """Which nodes a slice, or one device of it, serves: exactly one of the three is set by validation."""

    node_name: str = ""
    all_nodes: bool = False
    node_selector: tuple[predicates.Term, ...] | None = None
    selector_raw: Mapping[str, Any] | None = None  # as written, for the allocation's node selector

    @property
    def given(self) -> bool:
        return bool(self.node_name) or self.all_nodes or self.node_selector is not None


class SelectionError(ValueError):
    """A node selector that does not parse: upstream fails the allocation with it."""


def node_matches(node: NodeLike | None, reach: Reach) -> bool:
    """As upstream's NodeMatches: the name, all nodes, or the selector (whose every term must parse)."""
    if reach.node_name:
        return node is not None and node.name == reach.node_name
    if reach.all_nodes:
        return True
    if reach.node_selector is not None:
        problems = [t.problem for t in reach.node_selector if t.problem]
        if problems:
            raise SelectionError(f"failed to parse node selector: {problems[0]}")
        return node is not None and any(t.matches(node.labels, node.name) for t in reach.node_selector)
    return False


@dataclass(frozen=True)
class CounterUse:
    """A device's consumption from one counter set of its pool (partitionable devices)."""

    counter_set: str
    counters: Mapping[str, Fraction]


@dataclass(frozen=True, eq=False)
class Device:
    """One device of a slice. Identity (not value) equality: the allocator caches per device object."""

    name: str
    driver: str
    pool: str
    attributes: Mapping[str, Mapping[str, Any]]  # fully qualified name -> DeviceAttribute JSON
    capacity: Mapping[str, Mapping[str, Any]]  # fully qualified name -> DeviceCapacity JSON (for CEL)
    capacity_raw: Mapping[str, Mapping[str, Any]]  # name as written -> DeviceCapacity JSON (for requests)
    allow_multiple_allocations: bool
    taints: tuple[predicates.Taint, ...]
    consumes: tuple[CounterUse, ...]
    reach: Reach  # per-device node selection; empty unless the slice says so
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    binds_to_node: bool
    raw_binding_conditions: bool  # the field was present (even empty): upstream tests `!= nil`
    capacity_policies: bool = False  # a capacity has a requestPolicy (consumable capacity)
    memory: Fraction = Fraction(0)  # capacity `memory` in the driver's domain (bytes), 0 when absent or unreadable

    @property
    def id(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, eq=False)
class Slice:
    """A ResourceSlice, read. `problem` (if any) makes the pool it belongs to invalid."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    reach: Reach
    per_device_node_selection: bool
    devices: tuple[Device, ...]
    counter_sets: Mapping[str, Mapping[str, Fraction]]  # sharedCounters: set -> counter -> value
    problem: str | None = None


def qualified(name: str, driver: str) -> str:
    """`name` with the driver's domain when it has none."""
    return name if "/" in name else f"{driver}/{name}"


def parse(obj: Mapping[str, Any]) -> Slice:
    """A ResourceSlice object (as the apiserver serves it) read into a Slice."""
    meta, spec = fields.mapping(obj.get("metadata")), fields.mapping(obj.get("spec"))
    driver = str(spec.get("driver") or "")
    pool = fields.mapping(spec.get("pool"))
    pool_name = str(pool.get("name") or "")
    problems: list[str] = []
    generation = _integer(pool.get("generation"), "spec.pool.generation", problems)
    slice_count = _integer(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", problems)
    reach = _reach(spec, "spec", problems)
    per_device = spec.get("perDeviceNodeSelection") is True
    counter_sets: dict[str, dict[str, Fraction]] = {}
    for index, counter_set in enumerate(fields.sequence(spec.get("sharedCounters"))):
        counter_set = fields.mapping(counter_set)
        counter_sets[str(counter_set.get("name"))] = _counters(
            counter_set.get("counters"), f"spec.sharedCounters[{index}].counters", problems)
    devices = tuple(_device(fields.mapping(raw), driver, pool_name, f"spec.devices[{index}]", problems)
                    for index, raw in enumerate(fields.sequence(spec.get("devices"))))
    return Slice(
        name=str(meta.get("name") or ""), driver=driver, pool=pool_name,
        generation=generation, slice_count=slice_count, reach=reach, per_device_node_selection=per_device,
        devices=devices, counter_sets=counter_sets, problem=problems[0] if problems else None)


def _device(raw: Mapping[str, Any], driver: str, pool: str, path: str, problems: list[str]) -> Device:
    attributes = {qualified(str(k), driver): fields.mapping(v)
                  for k, v in fields.mapping(raw.get("attributes")).items()}
    capacity_raw = {str(k): fields.mapping(v) for k, v in fields.mapping(raw.get("capacity")).items()}
    for name, entry in capacity_raw.items():
        _quantity(entry.get("value"), f"{path}.capacity[{name}].value", problems)
    consumes = []
    for index, use in enumerate(fields.sequence(raw.get("consumesCounters"))):
        use = fields.mapping(use)
        consumes.append(CounterUse(str(use.get("counterSet") or ""), _counters(
            use.get("counters"), f"{path}.consumesCounters[{index}].counters", problems)))
    return Device(
        name=str(raw.get("name") or ""), driver=driver, pool=pool, attributes=attributes,
        capacity={qualified(k, driver): v for k, v in capacity_raw.items()}, capacity_raw=capacity_raw,
        allow_multiple_allocations=raw.get("allowMultipleAllocations") is True,
        taints=predicates.parse_taints(raw.get("taints")), consumes=tuple(consumes),
        reach=_reach(raw, path, problems),
        binding_conditions=tuple(str(c) for c in fields.sequence(raw.get("bindingConditions"))),
        binding_failure_conditions=tuple(str(c) for c in fields.sequence(raw.get("bindingFailureConditions"))),
        binds_to_node=raw.get("bindsToNode") is True,
        raw_binding_conditions=raw.get("bindingConditions") is not None,
        capacity_policies=any(entry.get("requestPolicy") is not None for entry in capacity_raw.values()),
        memory=_memory(capacity_raw, driver))


def _memory(capacity_raw: Mapping[str, Mapping[str, Any]], driver: str) -> Fraction:
    entry = capacity_raw.get("memory") or capacity_raw.get(f"{driver}/memory")
    try:
        return quantity.parse(entry.get("value")) if entry is not None else Fraction(0)
    except quantity.QuantityError:
        return Fraction(0)


def _reach(raw: Mapping[str, Any], path: str, problems: list[str]) -> Reach:
    selector = raw.get("nodeSelector")
    if selector is not None and not fields.is_object(selector):
        problems.append(f"{path}.nodeSelector: must be an object")
        selector = None
    return Reach(
        node_name=str(raw.get("nodeName") or ""), all_nodes=raw.get("allNodes") is True,
        node_selector=None if selector is None else predicates.parse_terms(selector.get("nodeSelectorTerms")),
        selector_raw=selector)


def _counters(raw: object, path: str, problems: list[str]) -> dict[str, Fraction]:
    return {str(name): _quantity(fields.mapping(counter).get("value"), f"{path}[{name}].value", problems)
            for name, counter in fields.mapping(raw).items()}


def _quantity(raw: object, path: str, problems: list[str]) -> Fraction:
    try:
        return quantity.parse(raw)
    except quantity.QuantityError as err:
        problems.append(f"{path}: {err}")
        return Fraction(0)


def _integer(raw: object, path: str, problems: list[str]) -> int:
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    problems.append(f"{path}: must be an integer, got {fields.shown(raw)}")
    return 0


def quantity_text(amount: Fraction) -> str:
    """A quantity string for `amount` (whole numbers plain; else in milli or nano units, which is exact for
    what upstream's quantities can hold)."""
    for scale, suffix in ((1, ""), (1000, "m"), (10**9, "n")):
        scaled = amount * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return f"{(amount * 10**9).__ceil__()}n"
