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

DRA mode (`load(..., dra=True)`) gives each GPU node no `nvidia.com/gpu` in its allocatable but a ResourceSlice of
its GPUs as NVIDIA's DRA driver publishes them, and a DeviceClass `gpu.nvidia.com` that names the extended resource
`nvidia.com/gpu`: whole-GPU pods keep asking `nvidia.com/gpu: N`, and DRA serves them through the claim the
scheduler makes for them (DRA-backed extended resources). GPU-share pods are left out of the pod list
(`DRA.shares_left_out`): the core serves `gpu-milli` shares by the device plugin only, and the rest of it does not
yet see shares of DRA devices (consumable capacity) as shares. Beside the product's default scheduling (`ours`, our
device order) it replays upstream's first-fit device order, on our node choice (`ours-first-fit`) and on a node
drawn at random among those that fit (`kube-like`, as benchmarks/dra_placement.py emulates kube-scheduler), and,
for reference, `ours` on the same pods with the device plugin (`ours-device-plugin`).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from scheduler_core import cluster as cluster_model
from scheduler_core import framework, gangs, nodes, podgroups, pods, profile, workloads
from scheduler_core.dra import extended
from scheduler_core.dra import state as dra_state
from scheduler_core.nodes import GPU_MILLI

CHECKPOINTS = (100, 110, 120, 130)  # arrived GPU demand, percent of capacity
INFLATION = 1.3  # the workload grows to this multiple of the cluster's GPUs
POD_SLOTS = "100000"  # the protocol has no pod-count limit per node
NAMESPACE = "openb"
BASELINES = ("random", "dotproduct", "gpupacking", "bestfit", "fgd")  # the paper's order
OURS = "ours"  # the product's default scheduling settings
POLICIES = (*BASELINES, OURS)
# DRA mode only: upstream's first-fit device order on our node choice, and on a node drawn at random among those that
# fit (kube-scheduler emulated as benchmarks/dra_placement.py does); ours with the device plugin, for reference
OURS_FIRST_FIT, KUBE_LIKE, OURS_DEVICE_PLUGIN = "ours-first-fit", "kube-like", "ours-device-plugin"
DRA_ONLY = (OURS_FIRST_FIT, KUBE_LIKE, OURS_DEVICE_PLUGIN)
DRA_DEFAULT = (OURS, OURS_FIRST_FIT, KUBE_LIKE, OURS_DEVICE_PLUGIN)
DRA_POLICIES = (*POLICIES, *DRA_ONLY)
# NVIDIA's DRA driver: its driver name, the DeviceClass its chart installs (with the selector it has) and, here, the
# extended resource that class serves
DRA_DRIVER = DRA_CLASS = "gpu.nvidia.com"
DRA_CLASS_SELECTOR = f"device.driver == '{DRA_DRIVER}' && device.attributes['{DRA_DRIVER}'].type == 'gpu'"
GPUS_PER_PCIE_ROOT = 4
GPU_MEMORY = {"T4": "16Gi", "V100M16": "16Gi", "V100M32": "32Gi", "A10": "24Gi"}  # nominal; G2, G3, P100 unknown
JOB_SIZES = (2, 16)  # gang mode: the fewest and the most pods of a job
# How a replay treats the jobs of gang mode: no jobs (the plain protocol); the plain placement, the jobs only
# counted ("pod-by-pod"); or each job placed whole or not at all ("gang").
JobMode = Literal["pod-by-pod", "gang"]


class TraceError(ValueError):
    """A row of the trace that does not say what a node or pod needs."""


def _node_row(row: Mapping[str, str]) -> tuple[str, int, int, int]:
    try:
        return row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"])
    except (KeyError, ValueError) as err:
        raise TraceError(f"node row {dict(row)}: {err}") from err


def node_object(row: Mapping[str, str], *, dra: bool = False) -> dict[str, Any]:
    """A Node for a row of `openb_node_list_*.csv` (sn, cpu_milli, memory_mib, gpu, model); with `dra`, without
    `nvidia.com/gpu` in its allocatable (its GPUs are in `resource_slice(row)`)."""
    name, cpu, memory, gpus = _node_row(row)
    labels = {"kubernetes.io/hostname": name}
    if gpus and row.get("model"):
        labels[nodes.MODEL_LABELS[0]] = row["model"]
    allocatable = {"cpu": f"{cpu}m", "memory": f"{memory}Mi", "pods": POD_SLOTS}
    if not dra:
        allocatable["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {},
            "status": {"allocatable": allocatable}}


def resource_slice(row: Mapping[str, str]) -> dict[str, Any] | None:
    """The ResourceSlice NVIDIA's DRA driver would publish for a node row's GPUs (None for a node without any): one
    pool named after the node, devices `gpu-0`, `gpu-1`, ... with the trace's model as `productName`, the `memory`
    capacity where the model's is known (GPU_MEMORY), and GPUS_PER_PCIE_ROOT GPUs under each PCIe root."""
    name, _, _, gpus = _node_row(row)
    if not gpus:
        return None
    model = row.get("model") or "unknown"
    devices = []
    for index in range(gpus):
        device: dict[str, Any] = {
            "name": f"gpu-{index}",
            "attributes": {"type": {"string": "gpu"}, "productName": {"string": model},
                           "uuid": {"string": f"GPU-{name}-{index}"},
                           "resource.kubernetes.io/pcieRoot": {"string": f"pci{index // GPUS_PER_PCIE_ROOT}"}}}
        if model in GPU_MEMORY:
            device["capacity"] = {"memory": {"value": GPU_MEMORY[model]}}
        devices.append(device)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{DRA_DRIVER}", "uid": f"slice-{name}"},
            "spec": {"driver": DRA_DRIVER, "nodeName": name, "devices": devices,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1}}}


def device_class() -> dict[str, Any]:
    """NVIDIA's `gpu.nvidia.com` DeviceClass, naming the extended resource `nvidia.com/gpu` so that DRA serves the
    pods asking for it on nodes whose allocatable has none."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": DRA_CLASS, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"selectors": [{"cel": {"expression": DRA_CLASS_SELECTOR}}],
                     "extendedResourceName": "nvidia.com/gpu"}}


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
class DRA:
    """The trace's GPUs as DRA devices: the nodes without `nvidia.com/gpu`, and the DeviceClass and ResourceSlices
    (kind, object) that publish their GPUs."""

    node_facts: tuple[nodes.NodeFacts, ...]
    objects: tuple[tuple[str, Mapping[str, Any]], ...]
    shares_left_out: int  # pods of the list asking for a GPU share, which the DRA replay leaves out

    @property
    def devices(self) -> int:
        return sum(len(obj["spec"]["devices"]) for kind, obj in self.objects if kind == "ResourceSlice")


@dataclass(frozen=True)
class Trace:
    node_facts: tuple[nodes.NodeFacts, ...]  # with the device plugin's nvidia.com/gpu
    pod_facts: tuple[pods.PodFacts, ...]
    dra: DRA | None = None

    @property
    def capacity_milli(self) -> int:
        return sum(node.gpu_count for node in self.node_facts) * GPU_MILLI


def load(node_rows: Sequence[Mapping[str, str]], pod_rows: Sequence[Mapping[str, str]], *, dra: bool = False
         ) -> Trace:
    """The trace as the core parses it; with `dra`, also as DRA publishes its GPUs, and without the GPU shares."""
    facts = tuple(pods.parse(pod_object(row)) for row in pod_rows)
    for pod in facts:
        if pod.problems:
            raise TraceError(f"pod {pod.key}: {'; '.join(pod.problems)}")
    device_plugin = tuple(nodes.parse(node_object(row)) for row in node_rows)
    if not dra:
        return Trace(device_plugin, facts)
    whole = tuple(pod for pod in facts if not pod.gpu_milli)
    slices = [found for row in node_rows if (found := resource_slice(row)) is not None]
    objects = (("DeviceClass", device_class()), *(("ResourceSlice", obj) for obj in slices))
    return Trace(device_plugin, whole, DRA(tuple(nodes.parse(node_object(row, dra=True)) for row in node_rows),
                                           objects, len(facts) - len(whole)))


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
    """`ours` (and the DRA mode's policies, whose node choice is ours or needs no scores): the product's defaults;
    a baseline: its plugin alone."""
    if policy == OURS or policy in DRA_ONLY:
        return profile.Scheduling()
    if policy not in BASELINES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(DRA_POLICIES)}")
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
           progress: Callable[[int], None] | None = None, progress_every: int = 500) -> Replay:
    """Place the seed's arrivals one at a time, or with `jobs="gang"` each job of `job_positions` whole when its
    first pod's turn comes; `progress(n)` hears of every `n` (`progress_every`) arrivals done. A trace loaded with
    DRA is replayed on its DRA nodes, but for `ours-device-plugin`."""
    if jobs is not None and policy in (OURS_FIRST_FIT, KUBE_LIKE):
        raise ValueError(f"policy {policy} places pods one by one: no jobs")
    model = _model(trace, policy)
    capacity = trace.capacity_milli
    demands = [demand(pod) for pod in trace.pod_facts]
    order = arrival_order(trace, seed)
    workload = workloads.Workload.of(trace.pod_facts) if policy == "fgd" else None
    core = framework.Framework(model, scheduling_for(policy), workload=workload, rng=np.random.default_rng(seed))
    place = _placer(core, policy)
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
            if place(arriving[position]):
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
        if progress is not None and done % progress_every == 0:
            progress(progress_every)
    for checkpoint in checkpoints:  # the total stays within 1.3x: the last is reached when all arrived
        ratios[checkpoint] = 100.0 * used / capacity
    curve.extend([100.0 * used / capacity] * (CHECKPOINTS[-1] - len(curve)))
    if progress is not None:
        progress(len(order) % progress_every)
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


def _model(trace: Trace, policy: str) -> cluster_model.Cluster:
    """The trace's nodes, as DRA publishes their GPUs when it was loaded with DRA (but for `ours-device-plugin`)."""
    if policy in DRA_ONLY and trace.dra is None:
        raise ValueError(f"policy {policy} replays the trace's GPUs as DRA devices: load it with dra=True")
    dra = trace.dra if policy != OURS_DEVICE_PLUGIN else None
    model = cluster_model.Cluster()
    for node in trace.node_facts if dra is None else dra.node_facts:
        model.set_node(node)
    if dra is not None:
        for kind in dra_state.KINDS:
            model.dra.clear(kind)  # listed: DRA serves the extended resource from now on
        for kind, obj in dra.objects:
            model.dra.set(kind, obj)
    return model


def _placer(core: framework.Framework, policy: str) -> Callable[[pods.PodFacts], bool]:
    """How `policy` places one pod and accounts it in the model; whether it was placed."""
    if policy == KUBE_LIKE:
        return functools.partial(_kube_like, core)
    if policy == OURS_FIRST_FIT:
        return functools.partial(_ours_first_fit, core)
    return lambda pod: core.place(pod).node is not None


def _ours_first_fit(core: framework.Framework, pod: pods.PodFacts) -> bool:
    """Our node choice, and there the devices upstream's allocator takes (first fit in slice order)."""
    decision = core.decide(pod)
    if decision.node is None:
        return False
    _account_first_fit(core, pod, core.cluster.index[decision.node], decision.devices)
    return True


def _kube_like(core: framework.Framework, pod: pods.PodFacts) -> bool:
    """kube-scheduler emulated as benchmarks/dra_placement.py does: a node drawn at random among those that fit (every
    filter of the core, DynamicResources' included), as equal scores leave it, and there upstream's first-fit
    devices."""
    fits = np.flatnonzero(core.fitting(pod))
    if not fits.size:
        return False
    row = int(fits[core.rng.integers(fits.size)])
    _account_first_fit(core, pod, row, core.devices_for(pod, row))
    return True


def _account_first_fit(core: framework.Framework, pod: pods.PodFacts, row: int, devices: tuple[pods.Device, ...]
                       ) -> None:
    node = core.cluster.node(row)
    held = first_fit_claims(core.cluster.dra, pod, node)
    core.cluster.assign(pod, node.name, devices)
    for claim_key, allocation in held:
        core.cluster.dra.assume(claim_key, allocation)


def first_fit_claims(resources: dra_state.Resources, pod: pods.PodFacts, node: nodes.NodeFacts
                     ) -> tuple[tuple[tuple[str, str], dict[str, Any]], ...]:
    """The allocations upstream's allocator makes on `node` (first fit in slice order) for the pod's claims and the
    claim for its extended resources where DRA serves them, keyed as `Decision.held_claims` keys ours. For a node
    the pod fits on: raises ValueError otherwise."""
    if not pod.resource_claims and not pod.extended_asks:
        return ()
    prepared = resources.pre_filter(pod.namespace, pod.key.partition("/")[2], pod.uid, pod.resource_claims,
                                    asks=pod.extended_asks)
    if isinstance(prepared, str):
        raise ValueError(f"{pod.key}: {prepared}")
    outcome = resources.filter(node, prepared, allocatable=node.allocatable, models=pod.models,
                               min_memory_mib=pod.min_gpu_memory_mib)
    if not isinstance(outcome, list):
        raise ValueError(f"{pod.key} on {node.name}: {outcome}")
    held = [((pod.namespace, prepared.records[index].claim.name), dict(allocation))
            for index, allocation in zip(prepared.to_allocate, outcome)]
    if len(outcome) > len(prepared.to_allocate):  # the claim for its extended resources comes last
        held.append((extended.pending_key(pod.namespace, pod.identity), dict(outcome[-1])))
    return tuple(held)


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
        for claim_key, allocation in chosen.held_claims(member):  # DRA: the devices its claims hold
            core.cluster.dra.assume(claim_key, allocation)
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
