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

Gang mode keeps that protocol and groups the arrivals that ask for more than one GPU into jobs of
2-16 pods (`job_positions`): each job arrives when its first pod's turn comes, all its pods with it,
and is placed whole by `gangs.place` or not at all. The same jobs placed pod by pod (the plain
replay) show what gangs save: the GPUs held by jobs only partly placed, which run nothing.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from scheduler_core import cluster as cluster_model
from scheduler_core import framework, gangs, nodes, podgroups, pods, profile, workloads
from scheduler_core.nodes import GPU_MILLI

CHECKPOINTS = (100, 110, 120, 130)  # arrived GPU demand, percent of capacity
INFLATION = 1.3  # the workload grows to this multiple of the cluster's GPUs
POD_SLOTS = "100000"  # the protocol has no pod-count limit per node
NAMESPACE = "openb"
BASELINES = ("random", "dotproduct", "gpupacking", "bestfit", "fgd")  # the paper's order
OURS = "ours"  # the product's default scheduling settings
POLICIES = (*BASELINES, OURS)
JOB_SIZES = (2, 16)  # gang mode: the fewest and the most pods of a job
# How a replay treats the jobs of gang mode: no jobs (the plain protocol); the plain placement, the jobs only
# counted ("pod-by-pod"); or each job placed whole or not at all ("gang").
JobMode = Literal["pod-by-pod", "gang"]


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
    mode: JobMode | None = None
    jobs: int = 0  # gang mode: jobs, and their pods
    job_pods: int = 0
    jobs_whole: int = 0  # jobs with every pod placed at the end
    jobs_partial: int = 0  # jobs with some but not all pods placed at the end
    partial_job_gpus: int = 0  # GPUs allocated to the pods of those


def scheduling_for(policy: str) -> profile.Scheduling:
    """`ours`: the product's defaults; a baseline: its plugin alone."""
    if policy == OURS:
        return profile.Scheduling()
    if policy not in BASELINES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
    return profile.Scheduling(weights=tuple((name, int(name == policy)) for name in profile.SCORE_PLUGINS))


def arrival_order(trace: Trace, seed: int) -> list[int]:
    return arrivals([demand(pod) for pod in trace.pod_facts], trace.capacity_milli, seed)


def job_positions(trace: Trace, order: Sequence[int], seed: int) -> tuple[tuple[int, ...], ...]:
    """Gang mode's jobs, as positions in the arrival `order`: the arrivals asking for more than one GPU, in the
    order they arrive, cut into runs of JOB_SIZES pods, each size drawn from the seed (its own stream, so the
    arrivals stay those of the plain protocol). A job's pods arrived near each other, as a job's pods are created
    together. A single such arrival left over joins the job before it (or takes one pod of a job of 16)."""
    rng = random.Random(f"openb-jobs-{seed}")
    multi = [position for position, index in enumerate(order) if trace.pod_facts[index].gpus > 1]
    smallest, largest = JOB_SIZES
    jobs: list[tuple[int, ...]] = []
    start = 0
    while len(multi) - start >= smallest:
        left = len(multi) - start
        size = min(rng.randint(smallest, largest), left)
        if left - size == 1:  # no job of one pod
            size += 1 if size < largest else -1
        jobs.append(tuple(multi[start:start + size]))
        start += size
    return tuple(jobs)


def replay(trace: Trace, policy: str, seed: int, *, jobs: JobMode | None = None,
           progress: Callable[[int], None] | None = None) -> Replay:
    """Place the seed's arrivals one at a time, or with `jobs="gang"` each job of `job_positions` whole when its
    first pod's turn comes; `progress(n)` hears of every `n` arrivals done."""
    model = cluster_model.Cluster()
    for node in trace.node_facts:
        model.set_node(node)
    capacity = trace.capacity_milli
    demands = [demand(pod) for pod in trace.pod_facts]
    order = arrival_order(trace, seed)
    workload = workloads.Workload.of(trace.pod_facts) if policy == "fgd" else None
    core = framework.Framework(model, scheduling_for(policy), workload=workload, rng=np.random.default_rng(seed))
    arriving = _arriving(trace, order)
    grouped = job_positions(trace, order, seed) if jobs else ()
    job_of = {position: number for number, positions in enumerate(grouped) for position in positions} \
        if jobs == "gang" else {}
    placed_at = [False] * len(order)
    checkpoints = list(CHECKPOINTS)
    ratios: dict[int, float] = {}
    curve: list[float] = []
    arrived = used = placed = 0
    for done, (position, index) in enumerate(enumerate(order), start=1):
        number = job_of.get(position)
        if number is None:
            arrived += demands[index]
            if core.place(arriving[position]).node is not None:
                placed_at[position] = True
                used += demands[index]
                placed += 1
        elif grouped[number][0] == position:  # a job arrives whole, at its first pod's turn
            members = grouped[number]
            arrived += sum(demands[order[p]] for p in members)
            for member in _place_job(core, number, {p: arriving[p] for p in members}):
                placed_at[member] = True
                used += demands[order[member]]
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
    whole = partial = partial_gpus = 0
    for members in grouped:
        done_members = [p for p in members if placed_at[p]]
        if len(done_members) == len(members):
            whole += 1
        elif done_members:
            partial += 1
            partial_gpus += sum(trace.pod_facts[order[p]].gpus for p in done_members)
    return Replay(seed, ratios, tuple(curve), len(order), placed, mode=jobs, jobs=len(grouped),
                  job_pods=sum(len(members) for members in grouped), jobs_whole=whole, jobs_partial=partial,
                  partial_job_gpus=partial_gpus)


def _arriving(trace: Trace, order: Sequence[int]) -> list[pods.PodFacts]:
    """The pod of each arrival; a copy drawn again is named apart (`-copy1`, ...), as the model keys pods by name."""
    copies: dict[int, int] = {}
    arriving = []
    for index in order:
        pod = trace.pod_facts[index]
        copy = copies[index] = copies.get(index, -1) + 1
        arriving.append(dataclasses.replace(pod, key=f"{pod.key}-copy{copy}") if copy else pod)
    return arriving


def _place_job(core: framework.Framework, number: int, members: Mapping[int, pods.PodFacts]) -> list[int]:
    """Place job `number` (its pods by arrival position) whole, as a group a rule formed, or not at all; the
    positions placed."""
    ref = podgroups.GroupRef(podgroups.RULE, NAMESPACE, f"job-{number}")
    size = len(members)
    position_of = {pod.key: position for position, pod in members.items()}
    tagged = [dataclasses.replace(pod, group=ref, group_min_member=size) for pod in members.values()]
    decision = gangs.place(core, podgroups.formed(ref, [size]), tagged)
    for member, chosen in decision.placements:  # accounted in the order the decision accounted them
        assert chosen.node is not None
        core.cluster.assign(dataclasses.replace(member, node_name=chosen.node, devices=chosen.devices),
                            chosen.node, chosen.devices)
    return [position_of[member.key] for member, _ in decision.placements]


def summary(replays: Sequence[Replay]) -> dict[str, Any]:
    """The `bench openb --json` entry of one policy: mean ratios, their spread, and the seeds."""
    by_point = {point: [r.alloc_ratio[point] for r in replays] for point in CHECKPOINTS}
    return {
        "alloc_ratio": {str(p): round(float(np.mean(v)), 3) for p, v in by_point.items()},
        "alloc_ratio_std": {str(p): round(float(np.std(v)), 3) for p, v in by_point.items()},
        "seeds": [r.seed for r in replays],
        "per_seed": {str(r.seed): {str(p): round(r.alloc_ratio[p], 3) for p in CHECKPOINTS} for r in replays},
    }


def gang_summary(pod_by_pod: Sequence[Replay], gang: Sequence[Replay]) -> dict[str, Any]:
    """The `gangs` entry of one policy in gang mode: its jobs (means per seed); what placing their pods one by one
    left (`pod_by_pod`, the replays of the plain protocol); and the ratios and jobs of placing each job whole."""
    return {
        "jobs": _mean(r.jobs for r in pod_by_pod),
        "job_pods": _mean(r.job_pods for r in pod_by_pod),
        "pod_by_pod": _jobs_summary(pod_by_pod),
        "gang": {**{key: value for key, value in summary(gang).items() if key != "seeds"}, **_jobs_summary(gang)},
    }


def _jobs_summary(replays: Sequence[Replay]) -> dict[str, Any]:
    return {
        "jobs_whole": _mean(r.jobs_whole for r in replays),
        "jobs_partial": _mean(r.jobs_partial for r in replays),
        "partial_job_gpus": _mean(r.partial_job_gpus for r in replays),
        "partial_job_gpus_per_seed": {str(r.seed): r.partial_job_gpus for r in replays},
    }


def _mean(values: Iterable[int]) -> float:
    return round(float(np.mean(list(values))), 3)
