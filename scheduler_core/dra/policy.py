"""Our GPU policy over DRA devices: which feasible devices to take, and which GPUs a pod's annotations allow.

Upstream takes the first devices that fit, in slice order. The allocator tries candidates in the order given here
instead, so among the allocations that fit it finds ours first; what fits is unchanged.

- binpack: devices on the PCIe roots that already have the most devices in use come first, so whole roots stay
  free for the claims that need devices under one root (`matchAttribute: resource.kubernetes.io/pcieRoot`); among
  equals, the smallest memory first, so large GPUs stay free for large asks.
- spread: the emptiest roots first, the largest memory first.
- then, with live utilization (scheduler_core.utilization) by GPU UUID, the less busy GPU first (a GPU without a
  reading counts as half busy); the root and memory order come first because they decide which claims fit later.

The webhook's rules steer DRA pods as they steer device-plugin pods: a pod annotated `gpu.nvidia.com/model` or
`gpu.nvidia.com/memory` gets only GPUs of NVIDIA's driver whose `productName` matches the model and whose
`memory` capacity is at least the annotation's MiB; devices of other drivers are not affected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction

from scheduler_core import predicates, utilization
from scheduler_core.dra.allocator import Allocated, Candidate, Order
from scheduler_core.dra.slices import Device

PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NVIDIA_DRIVER = "gpu.nvidia.com"
PRODUCT = f"{NVIDIA_DRIVER}/productName"
MEMORY = f"{NVIDIA_DRIVER}/memory"
UUID = f"{NVIDIA_DRIVER}/uuid"
MIB = 2**20


def _root(device: Device) -> str | None:
    value = device.attributes.get(PCIE_ROOT)
    return str(value.get("string")) if value is not None and value.get("string") is not None else None


def product(device: Device) -> str | None:
    """An NVIDIA GPU's product name (`productName`), or None."""
    value = device.attributes.get(PRODUCT)
    name = value.get("string") if value is not None else None
    return name if isinstance(name, str) else None


def kind(device: Device) -> str | None:
    """What NVIDIA's driver says a device is (`type`: gpu, mig, ...), or None."""
    value = device.attributes.get(f"{NVIDIA_DRIVER}/type")
    name = value.get("string") if value is not None else None
    return name if isinstance(name, str) else None


def _memory(device: Device) -> Fraction:
    return device.memory if device.driver == NVIDIA_DRIVER else Fraction(0)


def uuid(device: Device) -> str | None:
    """An NVIDIA GPU's UUID (`uuid`: GPU-...), or None."""
    value = device.attributes.get(UUID)
    found = value.get("string") if value is not None else None
    return found if isinstance(found, str) else None


def order(gpu_policy: str, allocated: Allocated, busy: Mapping[str, float] | None = None) -> Order:
    """The candidate order for `gpu_policy` ("binpack" or "spread") given the devices in use and the GPUs' live
    utilization by UUID."""
    def arrange(candidates: list[Candidate]) -> list[Candidate]:
        in_use_on: Counter[tuple[str, str, str | None]] = Counter()
        for candidate in candidates:
            device = candidate.device
            if device.id in allocated.devices or device.id in allocated.capacity:
                in_use_on[(device.driver, device.pool, _root(device))] += 1
        sign = -1 if gpu_policy == "binpack" else 1

        def busy_of(device: Device) -> float:
            gpu = uuid(device) if busy else None
            return utilization.UNKNOWN if gpu is None or busy is None else busy.get(gpu, utilization.UNKNOWN)

        def key(item: tuple[int, Candidate]) -> tuple[int, Fraction, float, int]:
            index, candidate = item
            device = candidate.device
            root = _root(device)
            in_use = in_use_on[(device.driver, device.pool, root)] if root is not None else 0
            return (sign * in_use, -sign * _memory(device), busy_of(device), index)
        return [candidate for _, candidate in sorted(enumerate(candidates), key=key)]
    return arrange


def admits(models: Sequence[frozenset[str]], min_memory_mib: int | None) -> Callable[[Device], bool] | None:
    """The pod's GPU model and memory annotations as a device predicate (None when it has neither)."""
    if not models and not min_memory_mib:
        return None
    least = Fraction(min_memory_mib or 0) * MIB

    def admit(device: Device) -> bool:
        if device.driver != NVIDIA_DRIVER:
            return True
        if models:
            name = product(device)
            if name is None or not predicates.model_matches(models, name):
                return False
        return not least or _memory(device) >= least
    return admit
