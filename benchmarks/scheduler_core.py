"""Scheduler core throughput: kube-scheduler's SchedulingBasic shape with GPUs.

For each cluster size (default 500, 5000, 15000 nodes; 8 GPUs each, mixed models, two
zones, spot and on-demand) it places 1000 pods already bound, then schedules 10000 GPU pods
one by one through the core (decide + account), in a fresh process so peak memory is its
own. Side by side, the same pods go through a baseline: a plain Python loop over the nodes
doing best-fit on free GPUs and model, the way a simple Python scheduler decides.

Targets (issue 4): >= 1000 pods/s at 5000 nodes (kube-scheduler's own threshold for this
shape: 680 pods/s including binding, 180 with extended resources), cost growing no worse
than linearly in nodes, under 300 MB resident.

With --constrained 0.3, 30% of the pods carry required pod anti-affinity per node or a zone spread
constraint (issue 13's target: still >= 1000 pods/s at 5000 nodes); the baseline ignores them.

    python benchmarks/scheduler_core.py [--nodes 500,5000,15000] [--pods 10000] [--constrained 0.3] [--json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = [("NVIDIA-A100-SXM4-40GB", 40960), ("NVIDIA-A100-SXM4-80GB", 81920), ("NVIDIA-H100-80GB-HBM3", 81559),
          ("NVIDIA-L4", 23034)]
KUBE_SCHEDULER_THRESHOLD = 680  # pods/s, SchedulingBasic at 5000 nodes


def make_node(i: int, rng: random.Random) -> dict:
    model, memory = MODELS[i % len(MODELS)]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": f"node-{i:05d}", "labels": {
            "kubernetes.io/hostname": f"node-{i:05d}", "gpu.nvidia.com/model": model,
            "gpu.nvidia.com/memory": str(memory), "topology.kubernetes.io/zone": f"zone-{i % 2}",
            "karpenter.sh/capacity-type": "spot" if rng.random() < 0.3 else "on-demand"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": "8"}},
    }


def make_pod(i: int, rng: random.Random, node: str | None = None, constrained: float = 0.0) -> dict:
    roll = rng.random()
    annotations = {}
    limits = {}
    if roll < 0.05:
        annotations["gpu-scheduler.io/gpu-milli"] = str(rng.choice([250, 500]))
    else:
        limits["nvidia.com/gpu"] = str(1 if roll < 0.65 else 2 if roll < 0.85 else 4 if roll < 0.95 else 8)
    if rng.random() < 0.5:
        annotations["gpu.nvidia.com/model"] = rng.choice(["A100", "H100", "A100|H100", "L4"])
    spec = {"schedulerName": "gpu-scheduler", "containers": [{"name": "main", "image": "x", "resources": {
        "requests": {"cpu": "2", "memory": "8Gi"}, "limits": limits}}]}
    if node:
        spec["nodeName"] = node
    if constrained and rng.random() < constrained:  # half anti-affinity per node, half zone spread, by app
        selector = {"matchLabels": {"app": f"app-{i % 50}"}}
        if i % 2:
            spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}
        else:
            spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                  "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"pod-{i}", "namespace": "bench", "annotations": annotations,
        "labels": {"app": f"app-{i % 50}"}}, "spec": spec}


def run_core(node_count: int, pod_count: int, bound: int, constrained: float, queue) -> None:
    from scheduler_core import cluster, framework, nodes, pods

    rng = random.Random(42)
    node_objects = [make_node(i, rng) for i in range(node_count)]
    bound_pods = [make_pod(i, rng, node=f"node-{rng.randrange(node_count):05d}", constrained=constrained)
                  for i in range(bound)]
    pending = [pods.parse(make_pod(bound + i, rng, constrained=constrained)) for i in range(pod_count)]
    started = time.perf_counter()
    model = cluster.Cluster()
    for obj in node_objects:
        model.set_node(nodes.parse(obj))
    for obj in bound_pods:
        model.restore(pods.parse(obj))
    core = framework.Framework(model)
    setup = time.perf_counter() - started
    latencies = []
    placed = 0
    began = time.perf_counter()
    for pod in pending:
        t = time.perf_counter()
        placed += core.place(pod).node is not None
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - began
    latencies.sort()
    queue.put({"setup_s": setup, "pods_per_s": pod_count / elapsed, "placed": placed,
               "p50_ms": 1000 * latencies[len(latencies) // 2], "p99_ms": 1000 * latencies[int(0.99 * len(latencies))],
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def run_baseline(node_count: int, pod_count: int, bound: int, constrained: float, queue) -> None:
    """Best-fit over a Python list of nodes: free GPU count and model, nothing else (no pod constraints)."""
    rng = random.Random(42)
    node_objects = [make_node(i, rng) for i in range(node_count)]
    [make_pod(i, rng, node=f"node-{rng.randrange(node_count):05d}", constrained=constrained)
     for i in range(bound)]  # the same random stream
    pending = [make_pod(bound + i, rng, constrained=constrained) for i in range(pod_count)]
    free = [8] * node_count
    models = [n["metadata"]["labels"]["gpu.nvidia.com/model"].lower() for n in node_objects]
    placed = 0
    began = time.perf_counter()
    for pod in pending:
        want = int(pod["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", "1"))
        model = pod["metadata"]["annotations"].get("gpu.nvidia.com/model", "").lower().split("|")
        best, best_free = -1, 99
        for i in range(node_count):
            if want <= free[i] < best_free and (model == [""] or any(m in models[i] for m in model)):
                best, best_free = i, free[i]
        if best >= 0:
            free[best] -= want
            placed += 1
    elapsed = time.perf_counter() - began
    queue.put({"pods_per_s": pod_count / elapsed, "placed": placed,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def in_child(target, *args) -> dict:
    context = multiprocessing.get_context("spawn")  # a clean process: its peak RSS is this run's alone
    queue = context.Queue()
    process = context.Process(target=target, args=(*args, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="500,5000,15000", help="comma-separated cluster sizes")
    parser.add_argument("--pods", type=int, default=10000, help="GPU pods to schedule (default 10000)")
    parser.add_argument("--bound", type=int, default=1000, help="pods already placed (default 1000)")
    parser.add_argument("--constrained", type=float, default=0.0,
                        help="the fraction of pods (bound and pending) with required pod anti-affinity per node or a "
                             "DoNotSchedule zone spread constraint, half each, by application (e.g. 0.3)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from tqdm import tqdm

    sizes = [int(s) for s in args.nodes.split(",")]
    results = {}
    for size in tqdm(sizes, desc="cluster sizes", disable=args.json):
        results[size] = {"core": in_child(run_core, size, args.pods, args.bound, args.constrained),
                         "baseline": in_child(run_baseline, size, args.pods, args.bound, args.constrained)}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"\n{'nodes':>6} {'core pods/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'placed':>7} {'RSS MB':>7} {'setup s':>8}"
          f" {'baseline pods/s':>16} {'core/baseline':>14}")
    for size, r in results.items():
        core, base = r["core"], r["baseline"]
        print(f"{size:>6} {core['pods_per_s']:>12.0f} {core['p50_ms']:>8.3f} {core['p99_ms']:>8.3f} "
              f"{core['placed']:>7} {core['peak_rss_mb']:>7.0f} {core['setup_s']:>8.2f} {base['pods_per_s']:>16.0f} "
              f"{core['pods_per_s'] / base['pods_per_s']:>14.2f}")
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        cost_ratio = results[small]["core"]["pods_per_s"] / results[large]["core"]["pods_per_s"]
        print(f"\ncost per decision grew {cost_ratio:.1f}x for {large / small:.0f}x the nodes "
              f"({'sub-linear' if cost_ratio <= large / small else 'SUPER-linear'})")
    if 5000 in results:
        rate = results[5000]["core"]["pods_per_s"]
        print(f"at 5000 nodes: {rate:.0f} pods/s (target >= 1000: {'met' if rate >= 1000 else 'NOT met'}; "
              f"{rate / KUBE_SCHEDULER_THRESHOLD:.2f}x kube-scheduler's {KUBE_SCHEDULER_THRESHOLD} pods/s threshold)")
    peak = max(r["core"]["peak_rss_mb"] for r in results.values())
    print(f"peak resident memory: {peak:.0f} MB (target < 300 MB: {'met' if peak < 300 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
