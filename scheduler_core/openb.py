"""The openb placement-quality experiment (Weng et al., USENIX ATC '23), replayed through the core.

The trace's rows become Node and Pod objects that the core parses as it parses the API's: the
openb `model` is the node's `gpu.nvidia.com/model` label, a pod's `gpu_spec` its model annotation,
`gpu_milli` < 1000 on one GPU a `gpu-scheduler.io/gpu-milli` share. Every pod goes through
`framework.Framework.place`, the filters and scores `gpu-scheduler run` uses.

The protocol (data/openb/README.md): all pods of the list, plus pods drawn at random with
replacement, appended while the total GPU request stays within 1.3x the cluster's GPUs; the
whole list shuffled is the arrival order (one seed drives draws and shuffle); no departures.
The GPU allocation ratio is recorded when the arrived GPU demand first reaches 100, 110, 120 and
130% of capacity; the last checkpoint, which the demand can only reach by exact equality, is
taken when the last pod has arrived. Pure: rows in, numbers out; reading files is the caller's.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_core import cluster as cluster_model
from scheduler_core import framework, nodes, pods, profile, workloads
from scheduler_core.nodes import GPU_MILLI

CHECKPOINTS = (100, 110, 120, 130)  # arrived GPU demand, percent of capacity
INFLATION = 1.3  # the workload grows to this multiple of the cluster's GPUs
POD_SLOTS = "100000"  # the protocol has no pod-count limit per node
NAMESPACE = "openb"
BASELINES = ("random", "dotproduct", "gpupacking", "bestfit", "fgd")  # the paper's order
OURS = "ours"  # the product's default scheduling settings
POLICIES = (*BASELINES, OURS)


class TraceError(ValueError):
    """A row of the trace that does not say what a node or pod needs."""


def node_object(row: Mapping[str, str]) -> dict[str, Any]:
    """A Node for a row of `openb_node_list_*.csv` (sn, cpu_milli, memory_mib, gpu, model)."""
    try:
        name, cpu, memory, gpus = row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"])
    except (KeyError, ValueError) as err:
        raise TraceError(f"node row {dict(row)}: {err}") from err
    labels = {"kubernetes.io/hostname": name}
    if gpus and row.get("model"):
        labels[nodes.MODEL_LABELS[0]] = row["model"]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"allocatable": {"cpu": f"{cpu}m", "memory": f"{memory}Mi", "pods": POD_SLOTS,
                                       "nvidia.com/gpu": str(gpus)}}}


def pod_object(row: Mapping[str, str]) -> dict[str, Any]:
    """A Pod for a row of `openb_pod_list_*.csv` (name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec])."""
    try:
        name, cpu, memory = row["name"], int(row["cpu_milli"]), int(row["memory_mib"])
        gpus, milli = int(row["num_gpu"]), int(row["gpu_milli"])
    except (KeyError, ValueError) as err:
        raise TraceError(f"pod row {dict(row)}: {err}") from err
    requests: dict[str, str] = {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}
    annotations: dict[str, str] = {}
    if gpus == 1 and 0 < milli < GPU_MILLI:
        annotations[pods.MILLI_ANNOTATION] = str(milli)
    elif gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    if gpus and row.get("gpu_spec"):
        annotations[pods.MODEL_ANNOTATION] = row["gpu_spec"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
            "spec": {"schedulerName": "gpu-scheduler",
                     "containers": [{"name": "main", "resources": {"requests": requests, "limits": {
                         k: v for k, v in requests.items() if k == "nvidia.com/gpu"}}}]}}


@dataclass(frozen=True)
class Trace:
    node_facts: tuple[nodes.NodeFacts, ...]
    pod_facts: tuple[pods.PodFacts, ...]

    @property
    def capacity_milli(self) -> int:
        return sum(node.gpu_count for node in self.node_facts) * GPU_MILLI


def load(node_rows: Sequence[Mapping[str, str]], pod_rows: Sequence[Mapping[str, str]]) -> Trace:
    facts = tuple(pods.parse(pod_object(row)) for row in pod_rows)
    for pod in facts:
        if pod.problems:
            raise TraceError(f"pod {pod.key}: {'; '.join(pod.problems)}")
    return Trace(tuple(nodes.parse(node_object(row)) for row in node_rows), facts)


def demand(pod: pods.PodFacts) -> int:
    """GPU thousandths the pod asks for."""
    return pod.gpus * GPU_MILLI + pod.gpu_milli


def arrivals(demands: Sequence[int], capacity_milli: int, seed: int, *, inflation: float = INFLATION) -> list[int]:
    """The arrival order, as indices into the pod list: every pod once, then copies drawn with
    replacement while the total demand stays within `inflation` x capacity, all shuffled."""
    rng = random.Random(seed)
    order = list(range(len(demands)))
    total = sum(demands)
    limit = inflation * capacity_milli
    while demands:
        drawn = rng.randrange(len(demands))
        if total + demands[drawn] > limit:
            break
        order.append(drawn)
        total += demands[drawn]
    rng.shuffle(order)
    return order


@dataclass(frozen=True)
class Replay:
    seed: int
    alloc_ratio: dict[int, float]  # checkpoint percent -> allocation percent
    curve: tuple[float, ...]  # allocation % when the arrived demand first reached 1, 2, ... 130%
    pods: int
    placed: int


def scheduling_for(policy: str) -> profile.Scheduling:
    """`ours`: the product's defaults; a baseline: its plugin alone."""
    if policy == OURS:
        return profile.Scheduling()
    if policy not in BASELINES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    return profile.Scheduling(weights=tuple((name, int(name == policy)) for name in profile.SCORE_PLUGINS))


def arrival_order(trace: Trace, seed: int) -> list[int]:
    return arrivals([demand(pod) for pod in trace.pod_facts], trace.capacity_milli, seed)


def replay(trace: Trace, policy: str, seed: int, *, progress: Callable[[int], None] | None = None) -> Replay:
    """Place the seed's arrivals one at a time; `progress(n)` hears of every `n` pods done."""
    model = cluster_model.Cluster()
    for node in trace.node_facts:
        model.set_node(node)
    capacity = trace.capacity_milli
    demands = [demand(pod) for pod in trace.pod_facts]
    order = arrival_order(trace, seed)
    workload = workloads.Workload.of(trace.pod_facts) if policy == "fgd" else None
    core = framework.Framework(model, scheduling_for(policy), workload=workload, rng=np.random.default_rng(seed))
    checkpoints = list(CHECKPOINTS)
    ratios: dict[int, float] = {}
    curve: list[float] = []
    arrived = used = placed = 0
    copies: dict[int, int] = {}
    for done, index in enumerate(order, start=1):
        pod = trace.pod_facts[index]
        copy = copies[index] = copies.get(index, -1) + 1
        if copy:
            pod = dataclasses.replace(pod, key=f"{pod.key}-copy{copy}")
        decision = core.place(pod)
        arrived += demands[index]
        if decision.node is not None:
            used += demands[index]
            placed += 1
        arrived_pct = 100.0 * arrived / capacity
        while checkpoints and arrived_pct >= checkpoints[0]:
            ratios[checkpoints.pop(0)] = 100.0 * used / capacity
        while len(curve) < CHECKPOINTS[-1] and arrived_pct >= len(curve) + 1:
            curve.append(100.0 * used / capacity)
        if progress is not None and done % 500 == 0:
            progress(500)
    for checkpoint in checkpoints:  # the total stays within 1.3x: the last is reached when all arrived
        ratios[checkpoint] = 100.0 * used / capacity
    curve.extend([100.0 * used / capacity] * (CHECKPOINTS[-1] - len(curve)))
    if progress is not None:
        progress(len(order) % 500)
    return Replay(seed, ratios, tuple(curve), len(order), placed)


def summary(replays: Sequence[Replay]) -> dict[str, Any]:
    """The `bench openb --json` entry of one policy: mean ratios, their spread, and the seeds."""
    by_point = {point: [r.alloc_ratio[point] for r in replays] for point in CHECKPOINTS}
    return {
        "alloc_ratio": {str(p): round(float(np.mean(v)), 3) for p, v in by_point.items()},
        "alloc_ratio_std": {str(p): round(float(np.std(v)), 3) for p, v in by_point.items()},
        "seeds": [r.seed for r in replays],
        "per_seed": {str(r.seed): {str(p): round(r.alloc_ratio[p], 3) for p in CHECKPOINTS} for r in replays},
    }
