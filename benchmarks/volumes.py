"""Scheduler core throughput for pods with persistent volumes, beside the same pods without volumes.

In the shape of kube-scheduler's scheduler_perf volume workloads (SchedulingCSIPVs, SchedulingWithMixedVolumes):
N GPU nodes in three zones, one local PersistentVolume per node (node affinity on its hostname, a
WaitForFirstConsumer class without a provisioner, as for local NVMe), and GPU pods each with a claim of its own:
half claim a local volume (VolumeBinding chooses one on each candidate node), half a zonal volume already bound
(VolumeBinding and VolumeZone keep the pod in its zone). Each decision is accounted, its volume plan assumed, as
`gpu-scheduler run` does before it writes the plan. The baseline: the same pods, same nodes, without volumes.

    python benchmarks/volumes.py [--nodes 1000,5000] [--pods 2000] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduler_core import cluster, framework, nodes, pods, volumes  # noqa: E402

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)
ZONE = "topology.kubernetes.io/zone"


def node(i: int) -> dict:
    name = f"node-{i:05d}"
    allocatable = {"cpu": "96", "memory": "1Ti", "pods": "110", "nvidia.com/gpu": "8"}
    return {"kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, ZONE: f"zone-{i % 3}", "gpu.nvidia.com/model": "NVIDIA-A100-SXM4-80GB"}},
        "status": {"allocatable": allocatable, "capacity": allocatable,
                   "conditions": [{"type": "Ready", "status": "True"}]}}


def affinity(key: str, value: str) -> dict:
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": key, "operator": "In", "values": [value]}]}]}}


def storage_objects(size: int, pods: int) -> list[dict]:
    found: list[dict] = [{"kind": "StorageClass", "metadata": {"name": "local"}, "provisioner": volumes.NO_PROVISIONER,
                          "volumeBindingMode": "WaitForFirstConsumer"}]
    for i in range(size):
        found.append({"kind": "PersistentVolume", "metadata": {"name": f"local-{i}", "resourceVersion": "1"},
                      "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteOnce"],
                               "storageClassName": "local",
                               "nodeAffinity": affinity("kubernetes.io/hostname", f"node-{i:05d}")},
                      "status": {"phase": "Available"}})
    for i in range(pods):
        spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}}
        annotations = {}
        if i % 2:
            spec |= {"storageClassName": "", "volumeName": f"zonal-{i}"}
            annotations = {volumes.BIND_COMPLETED: "yes"}
            found.append({"kind": "PersistentVolume", "metadata": {"name": f"zonal-{i}", "resourceVersion": "1"},
                          "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"],
                                   "storageClassName": "", "nodeAffinity": affinity(ZONE, f"zone-{i % 3}"),
                                   "claimRef": {"namespace": "bench", "name": f"claim-{i}", "uid": f"c{i}"}},
                          "status": {"phase": "Bound"}})
        else:
            spec["storageClassName"] = "local"
        found.append({"kind": "PersistentVolumeClaim", "spec": spec, "metadata": {
            "name": f"claim-{i}", "namespace": "bench", "uid": f"c{i}", "resourceVersion": "1",
            "annotations": annotations}})
    return found


def pod(i: int, with_volume: bool) -> pods.PodFacts:
    spec: dict = {"schedulerName": "gpu-scheduler", "containers": [{"name": "main", "image": "x", "resources": {
        "requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]}
    if with_volume:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"claim-{i}"}}]
    return pods.parse({"metadata": {"name": f"pod-{i}", "namespace": "bench", "uid": f"p{i}"}, "spec": spec})


def run(size: int, count: int, with_volumes: bool) -> dict:
    model = cluster.Cluster()
    for i in range(size):
        model.set_node(nodes.parse(node(i), now=NOW))
    for kind in volumes.KINDS:
        model.storage.clear(kind)
    for obj in storage_objects(size, count) if with_volumes else ():
        model.storage.set(obj["kind"], obj)
    scheduler = framework.Framework(model)
    facts = [pod(i, with_volumes) for i in range(count)]
    placed, started = 0, time.perf_counter()
    for one in facts:
        decision = scheduler.place(one)
        if decision.node is not None:
            placed += 1
            if decision.volume_plan:
                model.storage.assume(decision.volume_plan)
    elapsed = time.perf_counter() - started
    return {"nodes": size, "pods": count, "volumes": with_volumes, "placed": placed,
            "pods_per_second": round(count / elapsed, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1000,5000", help="comma-separated cluster sizes")
    parser.add_argument("--pods", type=int, default=2000, help="GPU pods to schedule (default 2000)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = []
    for size in (int(part) for part in args.nodes.split(",")):
        for with_volumes in (False, True):
            print(f"... {size} nodes, {args.pods} pods, {'with' if with_volumes else 'without'} volumes",
                  file=sys.stderr, flush=True)
            results.append(run(size, args.pods, with_volumes))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'nodes':>6} {'pods':>6} {'no volumes':>14} {'with volumes':>14} {'ratio':>6}  placed")
    for plain, with_volumes in zip(results[::2], results[1::2]):
        ratio = with_volumes["pods_per_second"] / plain["pods_per_second"]
        print(f"{plain['nodes']:>6} {plain['pods']:>6} {plain['pods_per_second']:>10} p/s "
              f"{with_volumes['pods_per_second']:>10} p/s {ratio:>6.2f}  {with_volumes['placed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
