"""benchmarks/parity.py's workloads through the scheduler core alone: how many pods each placement policy strands,
and why, in a second instead of 35 s a seed on a control plane.

Each seed's nodes (12, 3 zones, one tainted) and pods (groups with required anti-affinity per node, affinity to
another group's zone, a DoNotSchedule zone spread, host ports, and plain ones) are those of tests/e2e/parity.py. The
pods are tried in creation order, and those that fit nowhere are tried again after each pass that placed any (the
runtime retries them when a pod lands), until a pass places none. Profiles side by side:

- ours: the product's default scoring;
- no group-room: the same without `group-room` (issue 35's second step);
- neither: without `group-room` and `zone-balance` (as before issue 35);
- kube-like: what kube-scheduler's default profile weighs here: cpu and memory LeastAllocated and balanced, the
  upstream preferences, no GPU packing, no locality, no zone balance (ties go to the first node, not at random).

    python benchmarks/parity_core.py [--seeds 1-20] [--why] [--json]

`--why` prints each pod ours leaves pending with the scheduler's reason: which constraint left it which nodes, and
that those were short of GPUs. Not a replacement for benchmarks/parity.py, which runs both real schedulers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.parity import seeds_of  # noqa: E402
from scheduler_core import cluster, framework, nodes, pods, profile  # noqa: E402
from tests.e2e.parity import POOL_LABEL, Scenario  # noqa: E402

POOL = "core"
PROFILES = {
    "ours": profile.Scheduling(),
    "no group-room": profile.Scheduling(weights=(("group-room", 0),)),
    "neither": profile.Scheduling(weights=(("group-room", 0), ("zone-balance", 0))),
    "kube-like": profile.Scheduling(node_policy="spread", weights=(
        ("gpu-placement", 0), ("zone-balance", 0), ("group-room", 0), ("locality", 0), ("spot", 0),
        ("gpu-utilization", 0))),
}


def node_object(spec: dict[str, Any]) -> dict[str, Any]:
    """The Node tests/e2e/controlplane.create_gpu_node makes of a scenario's node."""
    name = f"{POOL}-{spec['name']}"
    resources = {"cpu": spec["cpu"], "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(spec["gpus"])}
    labels = {"kubernetes.io/hostname": name, "gpu.nvidia.com/model": "NVIDIA-A100-SXM4-40GB",
              "gpu.nvidia.com/memory": "40960", "gpu.nvidia.com/count": str(spec["gpus"]),
              "topology.kubernetes.io/zone": spec["zone"], POOL_LABEL: POOL}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"taints": spec["taints"] or []},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def strand(seed: int, scheduling: profile.Scheduling) -> list[tuple[str, int, str]]:
    """The pods left pending in `seed` under `scheduling`: (name, GPUs, the scheduler's reason)."""
    scenario = Scenario.generate(seed)
    model = cluster.Cluster()
    for spec in scenario.nodes:
        model.set_node(nodes.parse(node_object(spec)))
    bodies = scenario.bodies("gpu-scheduler", POOL)
    for index, body in enumerate(bodies):
        body["metadata"].update(namespace="parity", uid=f"uid-{index}")
    core = framework.Framework(model, scheduling)
    waiting = [pods.parse(body) for body in bodies]
    reasons: dict[str, str] = {}
    placed_any = True
    while waiting and placed_any:
        placed_any, still = False, []
        for pod in waiting:
            decision = core.place(pod)
            if decision.node is None:
                still.append(pod)
                reasons[pod.key] = decision.reason or ""
            else:
                placed_any = True
        waiting = still
    return [(pod.key.partition("/")[2], pod.gpus, reasons[pod.key]) for pod in waiting]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-20", help="seeds, e.g. 1-20 or 3,7 (default 1-20)")
    parser.add_argument("--why", action="store_true", help="each pod ours leaves pending, with the reason")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    seeds = seeds_of(args.seeds)
    rows = {seed: {name: strand(seed, scheduling) for name, scheduling in PROFILES.items()} for seed in seeds}
    if args.json:
        print(json.dumps({"seeds": {str(seed): {name: len(left) for name, left in row.items()}
                                    for seed, row in rows.items()}}, indent=2))
        return 0
    print("pods left pending, per seed (benchmarks/parity.py's workloads, the scheduler core alone)")
    print(f"{'seed':>5}" + "".join(f"{name:>17}" for name in PROFILES))
    for seed, row in rows.items():
        print(f"{seed:>5}" + "".join(f"{len(left):>17}" for left in row.values()))
    totals = {name: sum(len(row[name]) for row in rows.values()) for name in PROFILES}
    print(f"{'total':>5}" + "".join(f"{total:>17}" for total in totals.values()))
    above = [seed for seed, row in rows.items() if len(row["ours"]) > len(row["kube-like"])]
    print(f"seeds where ours leaves more than kube-like: {above or 'none'}")
    if args.why:
        for seed, row in rows.items():
            for name, gpus, reason in row["ours"]:
                print(f"seed {seed}: {name} ({gpus} GPU): {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
