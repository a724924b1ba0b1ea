"""Consumable capacity (DRAConsumableCapacity, beta and on in v1.36): one device shared by several claims, each
taking part of its capacity.

A device with `allowMultipleAllocations` may be allocated again while the sum of what its allocations consume
stays within each capacity's value. A request asks for amounts by capacity name; what it consumes is that amount
rounded up to the device's `requestPolicy` (a valid range with a step, or a list of valid values), the policy's
default when the request names no amount, or the whole capacity when there is no default either. Ported from
upstream's consumable_capacity.go (incubating); the function names say which of its steps each is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from scheduler_core import fields, quantity

Consumed = dict[str, Fraction]  # capacity name (as written in the slice) -> amount


def _q(raw: object) -> Fraction:
    return quantity.parse(raw)


def fits(requests: Mapping[str, Fraction] | None, capacity: Mapping[str, Mapping[str, Any]],
         *, allocated: Mapping[str, Fraction], allocating: Mapping[str, Fraction]) -> bool:
    """Whether the request fits on the device beside what is allocated and what this cycle is allocating.
    False (as upstream's error, which it logs and skips) when the request names a capacity the device lacks."""
    if requests and any(name not in capacity for name in requests):
        return False
    for name, entry in capacity.items():
        consumed = consumed_for(requests.get(name) if requests else None, entry)
        policy = fields.mapping(entry.get("requestPolicy")) if entry.get("requestPolicy") is not None else None
        if violates(consumed, policy):
            return False
        if allocated.get(name, Fraction(0)) + consumed + allocating.get(name, Fraction(0)) > _q(entry.get("value")):
            return False
    return True


def consumed(requests: Mapping[str, Fraction] | None, capacity: Mapping[str, Mapping[str, Any]]) -> Consumed:
    """What an allocation of the device consumes of each of its capacities."""
    return {name: consumed_for(requests.get(name) if requests else None, entry) for name, entry in capacity.items()}


def consumed_for(requested: Fraction | None, entry: Mapping[str, Any]) -> Fraction:
    policy = entry.get("requestPolicy")
    if requested is None:
        default = fields.mapping(policy).get("default")
        return _q(default) if default is not None else _q(entry.get("value"))
    if policy is None:
        return requested
    policy = fields.mapping(policy)
    valid_range = fields.mapping(policy.get("validRange"))
    if valid_range.get("min") is not None:
        return _round_up_range(requested, valid_range)
    if policy.get("validValues") is not None:
        for valid in fields.sequence(policy.get("validValues")):
            if requested <= _q(valid):
                return _q(valid)
    return requested


def _round_up_range(requested: Fraction, valid_range: Mapping[str, Any]) -> Fraction:
    low = _q(valid_range.get("min"))
    if requested < low:
        return low
    if valid_range.get("step") is None:
        return requested
    step = _whole(_q(valid_range.get("step")))
    start = _whole(low)
    steps = -(-(_whole(requested) - start) // step) if step else 0
    return Fraction(start + step * steps)


def _whole(amount: Fraction) -> int:
    """Quantity.Value(): rounded up to a whole number."""
    return math.ceil(amount)


def violates(amount: Fraction, policy: Mapping[str, Any] | None) -> bool:
    if policy is None:
        return False
    if policy.get("default") is not None and amount == _q(policy.get("default")):
        return False
    if policy.get("validRange") is not None:
        valid_range = fields.mapping(policy.get("validRange"))
        if valid_range.get("max") is not None and amount > _q(valid_range.get("max")):
            return True
        if valid_range.get("step") is not None:
            step = _whole(_q(valid_range.get("step")))
            return step != 0 and (_whole(amount) - _whole(_q(valid_range.get("min")))) % step != 0
        return False
    values = fields.sequence(policy.get("validValues"))
    return bool(values) and all(amount != _q(v) for v in values)


def add(total: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, Fraction(0)) + amount


def subtract(total: dict[str, Fraction], amounts: Mapping[str, Fraction]) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, Fraction(0)) - amount
