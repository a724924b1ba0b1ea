"""DRA CEL selectors: evaluations per second of scheduler_core.dra.cel on typical NVIDIA selectors over N devices,
beside the two CEL runtimes on PyPI when they are installed.

N devices of the NVIDIA DRA driver (gpu.nvidia.com): whole GPUs (A100 40/80 GB, H100, L4) and MIG slices, with
`type`, `productName`, `architecture`, `cudaComputeCapability` (a version), `driverVersion` and `memory` capacity in
bytes, all different. Each selector is compiled once and evaluated on every device:

  class     device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'
  memory    device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0
  semver    device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('8.0.0')) >= 0
  all       the three joined with &&

Ways, one column each:

  ours          scheduler_core.dra.cel, each device already converted (the allocator's steady state)
  ours cold     the same, converting each device on first use (a new device object per evaluation)
  cel-expr      cel-expr-python (C++), quantity and semver as protobuf messages with Python functions; needs
                `pip install cel-expr-python protobuf`
  celpy         cel-python, interpreted, on the first --others devices (it is slow); needs `pip install cel-python`

Every way must agree with ours on how many devices match; a way that cannot run says why.

    python benchmarks/dra_cel.py [--devices 40000] [--others 2000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package, not benchmarks/scheduler_core.py

from scheduler_core.dra import cel  # noqa: E402

SELECTORS = {
    "class": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "memory": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
    "semver": "device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('8.0.0')) >= 0",
}
SELECTORS["all"] = " && ".join(f"({e})" for e in SELECTORS.values())
GPU = "gpu.nvidia.com"
MODELS = [  # product, architecture, compute capability, memory in bytes
    ("NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", 42949672960),
    ("NVIDIA A100-SXM4-80GB", "Ampere", "8.0.0", 85899345920),
    ("NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", 85520809984),
    ("NVIDIA L4", "Ada Lovelace", "8.9.0", 24152899584),
    ("Tesla T4", "Turing", "7.5.0", 16106127360),
]


@dataclass(frozen=True, eq=False)
class Device:
    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Any]]
    allow_multiple_allocations: bool = False


def devices(count: int) -> list[Device]:
    out = []
    for i in range(count):
        product, architecture, compute, memory = MODELS[i % len(MODELS)]
        mig = i % 7 == 6
        attributes: dict[str, dict[str, Any]] = {
            "type": {"string": "mig" if mig else "gpu"}, "productName": {"string": product},
            "architecture": {"string": architecture}, "cudaComputeCapability": {"version": compute},
            "driverVersion": {"version": f"{550 + (i // 8) % 10}.54.{i // 80 % 20}"}, "index": {"int": i % 8},
            "uuid": {"string": f"GPU-{i:08x}-0000-0000-0000-000000000000"}}
        size = memory // 7 if mig else memory - (i % 5) * 2**20
        out.append(Device(GPU, {f"{GPU}/{k}": v for k, v in attributes.items()},
                          {f"{GPU}/memory": {"value": str(size)}}))
    return out


def rate(evaluate: Callable[[Any], bool], items: Sequence[Any]) -> tuple[float, int]:
    """Evaluations per second over `items` (at least half a second of work), and how many matched."""
    matched, done, start = 0, 0, time.perf_counter()
    while True:
        matched = sum(1 for item in items if evaluate(item))
        done += len(items)
        elapsed = time.perf_counter() - start
        if elapsed >= 0.5:
            return done / elapsed, matched


def ours(devs: list[Device]) -> dict[str, tuple[float, int]]:
    result = {}
    for name, expression in SELECTORS.items():
        selector = cel.compile_selector(expression)
        for dev in devs:
            cel.activation(dev)
        result[name] = rate(selector.matches, devs)
    return result


def ours_cold(devs: list[Device]) -> dict[str, tuple[float, int]]:
    result = {}
    for name, expression in SELECTORS.items():
        selector = cel.compile_selector(expression)
        fresh = [Device(d.driver, d.attributes, d.capacity) for d in devs]  # new objects: nothing cached
        start = time.perf_counter()
        matched = sum(1 for d in fresh if selector.matches(d))
        result[name] = (len(devs) / (time.perf_counter() - start), matched)
    return result


def cel_expr(devs: list[Device]) -> dict[str, tuple[float, int]] | str:
    try:
        from cel_expr_python import cel as cx
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError as err:
        return f"not installed ({err.name})"
    from fractions import Fraction

    from scheduler_core import quantity

    proto = descriptor_pb2.FileDescriptorProto(name="k8s_cel_bench.proto", package="kubernetes", syntax="proto3")
    q = proto.message_type.add(name="Quantity")
    q.field.add(name="numerator", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    q.field.add(name="denominator", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    quantity_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("kubernetes.Quantity"))

    def to_quantity(text: str) -> Any:
        value = quantity.parse(text)
        return quantity_class(numerator=str(value.numerator), denominator=str(value.denominator))

    def to_semver(text: str) -> int:
        major, minor, patch = (int(p) for p in text.split("."))
        return major << 42 | minor << 21 | patch

    def fraction(message: Any) -> Fraction:
        return Fraction(int(message.numerator), int(message.denominator))

    def compare(a: Any, b: Any) -> int:
        x, y = fraction(a), fraction(b)
        return (x > y) - (x < y)

    qt = cx.Type("kubernetes.Quantity")
    env = cx.NewEnv(pool, variables={"device": cx.Type.Map(cx.Type.STRING, cx.Type.DYN)}, functions=[
        cx.FunctionDecl("quantity", [cx.Overload("string_to_quantity", qt, [cx.Type.STRING], impl=to_quantity)]),
        cx.FunctionDecl("semver", [cx.Overload("string_to_semver", cx.Type.INT, [cx.Type.STRING], impl=to_semver)]),
        # The C++ runtime dispatches on kinds: two message overloads would collide, and dyn matches no message,
        # so a semver is an int here (major, minor, patch in 21 bits each), its own overload.
        cx.FunctionDecl("compareTo", [
            cx.Overload("quantity_compare_to", cx.Type.INT, [qt, qt], is_member=True, impl=compare),
            cx.Overload("semver_compare_to", cx.Type.INT, [cx.Type.INT, cx.Type.INT], is_member=True,
                        impl=lambda a, b: (a > b) - (a < b))]),
    ])
    activations = []
    for dev in devs:
        attributes: dict[str, dict[str, Any]] = {}
        for name, raw in dev.attributes.items():
            domain, _, ident = name.partition("/")
            kind, value = next(iter(raw.items()))
            attributes.setdefault(domain, {})[ident] = to_semver(value) if kind == "version" else value
        capacity: dict[str, dict[str, Any]] = {}
        for name, raw in dev.capacity.items():
            domain, _, ident = name.partition("/")
            capacity.setdefault(domain, {})[ident] = to_quantity(raw["value"])
        activations.append(env.Activation({"device": {
            "driver": dev.driver, "attributes": attributes, "capacity": capacity, "allowMultipleAllocations": False}}))
    result = {}
    for name, expression in SELECTORS.items():
        program = env.compile(expression)

        def evaluate(activation: Any, program: Any = program) -> bool:
            return program.eval(activation).value() is True
        result[name] = rate(evaluate, activations)
    return result


def celpy(devs: list[Device]) -> dict[str, tuple[float, int]] | str:
    try:
        import celpy as cp
        from celpy import celtypes
    except ImportError as err:
        return f"not installed ({err.name})"
    from scheduler_core import quantity

    class Quantity:
        def __init__(self, value: Any) -> None:
            self.value = value

    def to_quantity(text: Any) -> Quantity:
        return Quantity(quantity.parse(str(text)))

    def to_semver(text: Any) -> tuple[int, ...]:
        return tuple(int(p) for p in str(text).split("."))

    def compare(a: Any, b: Any) -> Any:
        x, y = (a.value, b.value) if isinstance(a, Quantity) else (a, b)
        return celtypes.IntType((x > y) - (x < y))

    def value(raw: Mapping[str, Any]) -> Any:
        kind, item = next(iter(raw.items()))
        return to_semver(item) if kind == "version" else cp.json_to_cel(item)

    contexts = []
    for dev in devs:
        attributes: dict[Any, Any] = {}
        for name, raw in dev.attributes.items():
            domain, _, ident = name.partition("/")
            attributes.setdefault(celtypes.StringType(domain), {})[celtypes.StringType(ident)] = value(raw)
        capacity: dict[Any, Any] = {}
        for name, raw in dev.capacity.items():
            domain, _, ident = name.partition("/")
            capacity.setdefault(celtypes.StringType(domain), {})[celtypes.StringType(ident)] = to_quantity(raw["value"])
        contexts.append({"device": celtypes.MapType({
            celtypes.StringType("driver"): celtypes.StringType(dev.driver),
            celtypes.StringType("attributes"): celtypes.MapType(
                {k: celtypes.MapType(v) for k, v in attributes.items()}),
            celtypes.StringType("capacity"): celtypes.MapType({k: celtypes.MapType(v) for k, v in capacity.items()}),
        })})
    env = cp.Environment()
    functions: dict[str, Any] = {"quantity": to_quantity, "semver": to_semver, "compareTo": compare}
    result = {}
    for name, expression in SELECTORS.items():
        program = env.program(env.compile(expression), functions=functions)

        def evaluate(context: Any, program: Any = program) -> bool:
            return bool(program.evaluate(context))
        result[name] = rate(evaluate, contexts)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=40000, help="devices in the pool (default 40000)")
    parser.add_argument("--others", type=int, default=2000, help="devices for celpy, the slow one (default 2000)")
    args = parser.parse_args(argv)
    devs = devices(args.devices)
    ways: dict[str, dict[str, tuple[float, int]] | str] = {
        "ours": ours(devs), "ours cold": ours_cold(devs), "cel-expr": cel_expr(devs),
    }
    few = devs[:min(args.others, len(devs))]
    ways[f"celpy ({len(few)})"] = celpy(few)
    expected = {name: cel.compile_selector(e) for name, e in SELECTORS.items()}
    print(f"evaluations/s over {len(devs)} devices (matching devices in parentheses)")
    print(f"{'selector':8} " + "".join(f"{way:>22}" for way in ways))
    for name in SELECTORS:
        cells = []
        for way, figures in ways.items():
            if isinstance(figures, str):
                cells.append(f"{figures[:21]:>22}")
                continue
            per_second, matched = figures[name]
            sample = few if way.startswith("celpy") else devs
            agree = matched == sum(1 for d in sample if expected[name].matches(d))
            cells.append(f"{per_second:>13,.0f} ({matched:>5}){'' if agree else '!'}")
        print(f"{name:8} " + "".join(cells))
    print("(! = a count that differs from ours)")


if __name__ == "__main__":
    main()
