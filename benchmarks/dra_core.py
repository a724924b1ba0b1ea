"""Scheduler core throughput for pods with DRA ResourceClaims, beside the same pods asking nvidia.com/gpu through the
device plugin, on the same cluster shape.

N nodes (96 CPUs, 1 TiB, 8 GPUs each; two thirds A100-SXM4-80GB, one third H100 80GB HBM3). With DRA, each node's
GPUs are published in one ResourceSlice as NVIDIA's DRA driver publishes them: driver and DeviceClass
`gpu.nvidia.com`, pool = node name, devices gpu-0..7 with `type`, `productName`, `uuid`, `cudaComputeCapability`
(a version), `resource.kubernetes.io/pcieRoot` (two roots of four) and 80Gi of `memory`; the nodes advertise no
nvidia.com/gpu. The device-plugin twin: the same nodes with `nvidia.com/gpu: 8` allocatable and no slices.

M pods, a fixed seeded mix: 1, 2, 4 or 8 GPUs (50/25/15/10%); 20% select H100s (DRA: a CEL selector on
`productName`; twin: the `gpu.nvidia.com/model: H100` annotation), 15% at least 40Gi of memory (DRA: `quantity`;
twin: `gpu.nvidia.com/memory`); 30% of the 2- and 4-GPU claims add `matchAttribute: resource.kubernetes.io/pcieRoot`
(the twin has no equivalent). Each DRA pod has its own claim, made from a template (ownerReference, status), as
with NVIDIA's examples. Each pod is decided and accounted (`Framework.place`: the devices assigned, the claim's
allocation assumed), as `gpu-scheduler run` does between decisions. The first decision (selector compilation,
device conversion) is timed apart from the rest (steady state).

The mix has few distinct claim specs (pods of one template ask the same), and the core keeps each node's Filter
outcome per claim spec until a pool of the node changes. With --unique-specs every claim carries an opaque
GpuConfig of its own, so no outcome is reused and every decision runs the allocator on every node: the worst case.

Then the raw allocator, the per-node cost of the DynamicResources filter: `Allocator.allocate()` calls per second
on one node with an empty slice, for a claim of 1 GPU and one of 4 GPUs with matchAttribute, in upstream's device
order and in the binpack order the filter passes.

    python benchmarks/dra_core.py [--nodes 1000,5000] [--pods 2000] [--unique-specs] [--limit SECONDS] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the package, not benchmarks/scheduler_core.py

from scheduler_core import cluster, framework, nodes, pods  # noqa: E402
from scheduler_core.dra import allocator, claims, policy, slices, state  # noqa: E402

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
DRIVER = "gpu.nvidia.com"
CLASS_SELECTOR = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"
H100_SELECTOR = f"device.attributes['{DRIVER}'].productName.startsWith('NVIDIA H100')"
MEMORY_SELECTOR = f"device.capacity['{DRIVER}'].memory.compareTo(quantity('40Gi')) >= 0"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
PRODUCTS = [  # productName, compute capability, node label
    ("NVIDIA A100-SXM4-80GB", "8.0.0", "NVIDIA-A100-SXM4-80GB"),
    ("NVIDIA A100-SXM4-80GB", "8.0.0", "NVIDIA-A100-SXM4-80GB"),
    ("NVIDIA H100 80GB HBM3", "9.0.0", "NVIDIA-H100-80GB-HBM3"),
]


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def node(i: int, dra: bool) -> dict:
    name, label = node_name(i), PRODUCTS[i % len(PRODUCTS)][2]
    allocatable = {"cpu": "96", "memory": "1Ti", "pods": "110"}
    if not dra:
        allocatable["nvidia.com/gpu"] = "8"
    return {"kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"zone-{i % 3}",
        "gpu.nvidia.com/model": label, "gpu.nvidia.com/memory": "81920"}},
        "status": {"allocatable": allocatable, "capacity": allocatable,
                   "conditions": [{"type": "Ready", "status": "True"}]}}


def resource_slice(i: int) -> dict:
    name = node_name(i)
    product, compute, _ = PRODUCTS[i % len(PRODUCTS)]
    devices = [{"name": f"gpu-{d}", "capacity": {"memory": {"value": "80Gi"}}, "attributes": {
        "type": {"string": "gpu"}, "productName": {"string": product},
        "uuid": {"string": f"GPU-{i:08x}-{d:04x}-4000-8000-000000000000"},
        "cudaComputeCapability": {"version": compute}, PCIE_ROOT: {"string": f"pci0000:{d // 4:02x}"}}}
        for d in range(8)]
    return {"kind": "ResourceSlice", "metadata": {"name": f"{name}-gpu.nvidia.com-0", "uid": f"slice-{i}"},
            "spec": {"driver": DRIVER, "nodeName": name, "devices": devices,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}}}


DEVICE_CLASS = {"kind": "DeviceClass", "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]}}


def shapes(count: int, seed: int = 42) -> list[tuple[int, str | None, bool]]:
    """Per pod: GPUs, "h100" / "memory" / None, matchAttribute on the PCIe root."""
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        gpus = rng.choices([1, 2, 4, 8], weights=[50, 25, 15, 10])[0]
        roll = rng.random()
        selector = "h100" if roll < 0.20 else "memory" if roll < 0.35 else None
        found.append((gpus, selector, gpus in (2, 4) and rng.random() < 0.3))
    return found


def claim(i: int, gpus: int, selector: str | None, match_root: bool, unique: bool = False) -> dict:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": gpus}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": H100_SELECTOR if selector == "h100" else MEMORY_SELECTOR}}]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if match_root:
        devices["constraints"] = [{"requests": ["gpus"], "matchAttribute": PCIE_ROOT}]
    if unique:  # a spec no other claim has
        devices["config"] = [{"requests": ["gpus"], "opaque": {"driver": DRIVER, "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "metadata": {"name": f"claim-{i}"}}}}]
    return {"kind": "ResourceClaim", "metadata": {
        "name": f"pod-{i}-gpus-x{i:05d}", "namespace": "bench", "uid": f"claim-{i}", "resourceVersion": "1",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"pod-{i}", "uid": f"p{i}",
                             "controller": True}]},
        "spec": {"devices": devices}, "status": {}}


def pod(i: int, gpus: int, selector: str | None, dra: bool) -> pods.PodFacts:
    resources: dict[str, Any] = {"requests": {"cpu": "4", "memory": "32Gi"}}
    annotations = {}
    spec: dict[str, Any] = {"schedulerName": "gpu-scheduler"}
    status: dict[str, Any] = {}
    if dra:
        resources["claims"] = [{"name": "gpus"}]
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{gpus}"}]
        status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": f"pod-{i}-gpus-x{i:05d}"}]
    else:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
        if selector == "h100":
            annotations["gpu.nvidia.com/model"] = "H100"
        elif selector == "memory":
            annotations["gpu.nvidia.com/memory"] = "40960"
    spec["containers"] = [{"name": "main", "image": "x", "resources": resources}]
    return pods.parse({"metadata": {"name": f"pod-{i}", "namespace": "bench", "uid": f"p{i}",
                                    "annotations": annotations}, "spec": spec, "status": status})


def build(size: int, count: int, dra: bool, unique: bool = False) -> tuple[framework.Framework, list[pods.PodFacts]]:
    model = cluster.Cluster()
    for i in range(size):
        model.set_node(nodes.parse(node(i, dra), now=NOW))
    resources = model.dra
    for kind in state.KINDS:
        resources.clear(kind)
    mix = shapes(count)
    if dra:
        resources.set("DeviceClass", DEVICE_CLASS)
        for i in range(size):
            resources.set("ResourceSlice", resource_slice(i))
        for i, (gpus, selector, match_root) in enumerate(mix):
            resources.set("ResourceClaim", claim(i, gpus, selector, match_root, unique))
    return framework.Framework(model), [pod(i, gpus, selector, dra) for i, (gpus, selector, _) in enumerate(mix)]


def run(size: int, count: int, dra: bool, unique: bool, limit: float | None) -> dict:
    label = f"{size} nodes, {'DRA' if dra else 'device plugin'}"
    started = time.perf_counter()
    scheduler, pending = build(size, count, dra, unique)
    setup = time.perf_counter() - started
    print(f"... {label}: built in {setup:.1f} s, deciding {count} pods", file=sys.stderr, flush=True)
    gc.collect()
    latencies: list[float] = []
    placed = 0
    began = last_report = time.perf_counter()
    for one in pending:
        t = time.perf_counter()
        placed += scheduler.place(one).node is not None
        now = time.perf_counter()
        latencies.append(now - t)
        if now - last_report > 10:
            print(f"    {label}: {len(latencies)}/{count} decided, {len(latencies) / (now - began):.1f}/s",
                  file=sys.stderr, flush=True)
            last_report = now
        if limit is not None and now - began > limit:
            print(f"    {label}: time limit of {limit:.0f} s reached after {len(latencies)} pods",
                  file=sys.stderr, flush=True)
            break
    elapsed = time.perf_counter() - began
    decided = len(latencies)
    steady = sorted(latencies[1:])
    return {"nodes": size, "pods": count, "dra": dra, "unique_specs": unique and dra, "decided": decided, "placed": placed,
            "unplaced": decided - placed, "setup_s": round(setup, 2), "elapsed_s": round(elapsed, 2),
            "first_ms": round(1000 * latencies[0], 1),
            "decisions_per_s": round(decided / elapsed, 2),
            "steady_decisions_per_s": round(len(steady) / sum(steady), 2) if steady else None,
            "steady_p50_ms": round(1000 * steady[len(steady) // 2], 2) if steady else None,
            "steady_p99_ms": round(1000 * steady[int(0.99 * len(steady))], 2) if steady else None,
            "steady_max_ms": round(1000 * steady[-1], 1) if steady else None}


def allocator_rate(gpus: int, match_root: bool, ordered: bool, seconds: float = 1.5) -> dict:
    """allocate() calls/s for one claim on one node with all 8 GPUs free (the allocator made once, as within a
    decision; its per-device selector verdicts warm after the first call, timed apart)."""
    facts = nodes.parse(node(0, True), now=NOW)
    made = allocator.Allocator({DRIVER: claims.parse_class(DEVICE_CLASS)}, [slices.parse(resource_slice(0))],
                               allocator.Allocated())
    wanted = [claims.parse(claim(0, gpus, None, match_root))]
    order = policy.order("binpack", made.allocated) if ordered else None
    t = time.perf_counter()
    first = made.allocate(facts, wanted, order=order)
    first_s = time.perf_counter() - t
    assert first is not None  # a benchmark of nothing otherwise
    calls, began = 0, time.perf_counter()
    while True:
        for _ in range(200):
            made.allocate(facts, wanted, order=order)
        calls += 200
        elapsed = time.perf_counter() - began
        if elapsed > seconds:
            break
    return {"gpus": gpus, "match_attribute": match_root, "order": "binpack" if ordered else "upstream",
            "first_us": round(1e6 * first_s, 1), "calls_per_s": round(calls / elapsed), "us_per_call":
            round(1e6 * elapsed / calls, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="5000", help="comma-separated cluster sizes (default 5000)")
    parser.add_argument("--pods", type=int, default=2000, help="GPU pods to schedule (default 2000)")
    parser.add_argument("--unique-specs", action="store_true",
                        help="give every claim a spec of its own (no per-spec Filter outcome reused: the worst case)")
    parser.add_argument("--limit", type=float, default=None,
                        help="stop a run after this many seconds of deciding, reporting the pods decided so far")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    print("... raw allocator, one node", file=sys.stderr, flush=True)
    raw = [allocator_rate(gpus, match_root, ordered) for gpus, match_root in ((1, False), (4, True))
           for ordered in (False, True)]
    results = []
    for size in (int(part) for part in args.nodes.split(",")):
        for dra in (False, True):
            results.append(run(size, args.pods, dra, args.unique_specs, args.limit))
            gc.collect()
    if args.json:
        print(json.dumps({"runs": results, "allocator": raw}, indent=2))
        return 0
    print(f"{'nodes':>6} {'way':>13} {'decided':>8} {'placed':>7} {'unplaced':>8} {'first ms':>9} {'dec/s':>9} "
          f"{'steady/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for r in results:
        print(f"{r['nodes']:>6} {('DRA unique' if r['unique_specs'] else 'DRA') if r['dra'] else 'device plugin':>13} {r['decided']:>8} {r['placed']:>7} "
              f"{r['unplaced']:>8} {r['first_ms']:>9.1f} {r['decisions_per_s']:>9.2f} "
              f"{r['steady_decisions_per_s'] or 0:>9.2f} {r['steady_p50_ms'] or 0:>8.2f} {r['steady_p99_ms'] or 0:>8.2f} {r['steady_max_ms'] or 0:>8.1f}")
    for plugin, dra in zip(results[::2], results[1::2]):
        if plugin["steady_decisions_per_s"] and dra["steady_decisions_per_s"]:
            ratio = dra["steady_decisions_per_s"] / plugin["steady_decisions_per_s"]
            print(f"{plugin['nodes']} nodes: DRA/device plugin (steady) = {ratio:.4f} "
                  f"(device plugin {1 / ratio:.0f}x faster)")
    print(f"\nraw allocator, one node with 8 free GPUs: {'claim':>22} {'order':>9} {'first us':>9} {'calls/s':>9} "
          f"{'us/call':>8}")
    for r in raw:
        shape = f"{r['gpus']} GPU{'s' if r['gpus'] > 1 else ''}" + (" + matchAttribute" if r["match_attribute"] else "")
        print(f"{'':>41} {shape:>22} {r['order']:>9} {r['first_us']:>9.1f} {r['calls_per_s']:>9} "
              f"{r['us_per_call']:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
