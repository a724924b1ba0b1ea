"""Placement-quality score plugins: how well a node choice keeps the cluster's GPUs usable.

The baselines are written from their published descriptions, as compared in "Beware of
Fragmentation" (Weng et al., USENIX ATC '23): `random`, `bestfit`, `dotproduct`, `gpupacking`
and `fgd` (fragmentation gradient descent). `gpu-fragmentation` is ours and the product default.

Every plugin scores the candidate rows 0..100 like the other score plugins; those that rank by a
cost stretch it so the cheapest candidate gets 100 and the dearest 0 (kube-scheduler's
NormalizeScore), so each can be weighted against the rest of the framework's plugins.

Fragmentation is measured against a `Workload`: the shapes (cpu, memory, whole GPUs or share,
GPU model) of pods and how often each occurs. FGD uses the typical shapes of a known workload, as
the paper does; ours learns the shapes online from the pods the scheduler has seen, and adds the
idle GPU stranded without cpu or memory and the contention for scarce GPU models (see
`gpu_fragmentation`). Costs are kept between decisions and recomputed only for the nodes whose
usage changed (`Cluster.row_version`), which keeps the default policy cheap enough to run per pod.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_core import predicates
from scheduler_core.cluster import Cluster
from scheduler_core.nodes import GPU_MILLI
from scheduler_core.pods import PodFacts
from scheduler_core.plugins import Cycle

BESTFIT_CPU_SCALE = 128_000  # milli-cpu: BestFit's leftover CPU is counted against 128 cores
BESTFIT_GPU_SCALE = 8 * GPU_MILLI  # ... and its leftover GPU against 8 GPUs
TYPICAL_SHARE = 0.95  # FGD's typical shapes cover this share of the pods
RESUMMARISE = 1024  # a learned workload's shapes are summarised again every this many new pods


@dataclass(frozen=True)
class Shape:
    """What one pod asks for, as far as placement quality goes."""

    cpu: int  # milli-cpu
    memory: int  # milli-bytes, as the cluster model counts it
    gpus: int  # whole GPUs
    gpu_milli: int  # a share of one GPU, 0 for none
    models: tuple[frozenset[str], ...] = ()  # GPU model alternatives, () for any

    @property
    def per_gpu(self) -> int:
        """The free thousandths one GPU needs for this shape to use it (0: uses no GPU)."""
        return GPU_MILLI if self.gpus else self.gpu_milli

    @property
    def gpu_demand(self) -> int:
        return self.gpus * GPU_MILLI + self.gpu_milli


def shape_of(pod: PodFacts) -> Shape:
    return Shape(pod.requests.get("cpu", 0), pod.requests.get("memory", 0), pod.gpus, pod.gpu_milli,
                 pod.models if pod.wants_gpu else ())


@dataclass(frozen=True)
class Shapes:
    """The typical shapes as arrays, popularity summing to 1."""

    cpu: np.ndarray
    memory: np.ndarray
    gpus: np.ndarray
    gpu_milli: np.ndarray
    per_gpu: np.ndarray
    popularity: np.ndarray
    models: tuple[tuple[frozenset[str], ...], ...]
    cpu_per_milli: float  # cpu per GPU thousandth of the shapes that use GPUs, popularity-weighted
    memory_per_milli: float
    constrained: tuple[tuple[tuple[frozenset[str], ...], float], ...]  # models -> share of all GPU demand
    demands: np.ndarray  # the distinct per-GPU needs ...
    demand_of: np.ndarray  # ... and which of them each shape has


class Workload:
    """Pod shapes and their popularity, fixed (a known trace) or learned from the pods seen.

    Learned: each pod counts once (by key, over the last `memory` distinct pods), so a pod the
    scheduler retries does not outweigh the others; every `memory` pods all counts are halved, so
    the mix follows what the cluster runs now rather than what it ran months ago.
    """

    def __init__(self, counts: Counter[Shape] | None = None, *, learn: bool = True, memory: int = 100_000,
                 typical_share: float = TYPICAL_SHARE):
        self.counts: Counter[Shape] = Counter(counts or {})
        self.learn = learn
        self.memory = memory
        self.typical_share = typical_share
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._shapes: Shapes | None = None
        self._changes = 0
        self._matches: dict[tuple[int, int], np.ndarray] = {}
        self._contention: dict[tuple[int, int, tuple[frozenset[str], ...]], np.ndarray] = {}
        self._costs: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._standing: tuple[tuple[int, int], np.ndarray, np.ndarray, np.ndarray] | None = None

    @classmethod
    def of(cls, pods: Iterable[PodFacts], *, typical_share: float = TYPICAL_SHARE) -> Workload:
        """The fixed workload of a known pod list (FGD's typical pods)."""
        return cls(Counter(shape_of(pod) for pod in pods), learn=False, typical_share=typical_share)

    def observe(self, pod: PodFacts) -> None:
        if not self.learn or pod.key in self._seen:
            return
        self._seen[pod.key] = None
        if len(self._seen) > self.memory:
            self._seen.popitem(last=False)
        self.counts[shape_of(pod)] += 1
        self._changes += 1
        if self._changes % self.memory == 0:
            self.counts = Counter({shape: count // 2 for shape, count in self.counts.items() if count > 1})
        # the mix settles quickly: summarise it again after 1, 2, 4, ... 1024 pods, then every 1024
        if self._changes & (self._changes - 1) == 0 or self._changes % RESUMMARISE == 0:
            self._shapes = None
            self._matches.clear()
            self._contention.clear()
            self._costs.clear()
            self._standing = None

    def shapes(self) -> Shapes:
        if self._shapes is None:
            self._shapes = self._summarise()
        return self._shapes

    def _summarise(self) -> Shapes:
        ranked = self.counts.most_common()
        total = sum(count for _, count in ranked)
        kept: list[tuple[Shape, int]] = []
        covered = 0
        for shape, count in ranked:
            if covered >= self.typical_share * total:
                break
            kept.append((shape, count))
            covered += count
        popularity = np.array([count for _, count in kept], dtype=float) / (covered or 1)
        demands, demand_of = np.unique(np.array([s.per_gpu for s, _ in kept], dtype=np.int64), return_inverse=True)
        gpu = np.array([s.gpu_demand for s, _ in kept], dtype=float) * popularity
        using = gpu > 0
        gpu_total = float(gpu.sum()) or 1.0
        cpu = np.array([s.cpu for s, _ in kept], dtype=np.int64)
        memory = np.array([s.memory for s, _ in kept], dtype=np.int64)
        demand_all = float(sum(s.gpu_demand * count for s, count in ranked)) or 1.0
        by_models: Counter[tuple[frozenset[str], ...]] = Counter()
        for shape, count in ranked:
            if shape.models and shape.gpu_demand:
                by_models[shape.models] += shape.gpu_demand * count
        return Shapes(
            cpu=cpu, memory=memory,
            gpus=np.array([s.gpus for s, _ in kept], dtype=np.int64),
            gpu_milli=np.array([s.gpu_milli for s, _ in kept], dtype=np.int64),
            per_gpu=np.array([s.per_gpu for s, _ in kept], dtype=np.int64),
            popularity=popularity,
            models=tuple(s.models for s, _ in kept),
            cpu_per_milli=float((cpu * popularity)[using].sum()) / gpu_total,
            memory_per_milli=float((memory * popularity)[using].sum()) / gpu_total,
            constrained=tuple((models, amount / demand_all) for models, amount in by_models.items()),
            demands=demands, demand_of=demand_of,
        )

    def matches(self, cluster: Cluster) -> np.ndarray:
        """rows x typical shapes: whether the node's GPU model suits the shape (cached per label change)."""
        key = (cluster.labels_version, cluster.size)
        found = self._matches.get(key)
        if found is None:
            self._matches.clear()
            found = self._matches[key] = _model_matrix(cluster, self.shapes().models)
        return found


    def cost(self, key: tuple[Any, ...], cluster: Cluster, rows: np.ndarray,
             compute: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """A per-row cost of placing pods of one shape, and the GPU a share would take (-1: the
        framework's choice), kept between decisions: only rows whose usage or facts changed since
        (`Cluster.row_version`) are computed again."""
        size = cluster.size
        key = (*key, cluster.labels_version, size)
        entry = self._costs.get(key)
        if entry is None:
            if len(self._costs) >= 256:
                self._costs.clear()
            entry = self._costs[key] = (np.full(size, -1, dtype=np.int64), np.zeros(size),
                                        np.full(size, -1, dtype=np.int64))
        seen, cost, device = entry
        versions = cluster.row_version[:size]
        stale = rows[seen[rows] != versions[rows]]
        if stale.size:
            cost[stale], device[stale] = compute(stale)
            seen[stale] = versions[stale]
        return cost[rows], device[rows]

    def standing(self, cluster: Cluster, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fragmentation, stranding) of rows as they are now, kept per row version like `cost`:
        shared by every pod shape, so each changed row is measured once."""
        size = cluster.size
        key = (cluster.labels_version, size)
        if self._standing is None or self._standing[0] != key:
            self._standing = (key, np.full(size, -1, dtype=np.int64), np.zeros(size), np.zeros(size))
        _, seen, fragmented, stranded = self._standing
        versions = cluster.row_version[:size]
        stale = rows[seen[rows] != versions[rows]]
        if stale.size:
            shapes = self.shapes()
            state = _state(cluster, stale)
            fragmented[stale] = fragmentation(state, shapes, self.matches(cluster)[stale])
            stranded[stale] = stranding(state, shapes)
            seen[stale] = versions[stale]
        return fragmented[rows], stranded[rows]

    def contention(self, cluster: Cluster, models: tuple[frozenset[str], ...]) -> np.ndarray:
        """Per row: how far the pods that need the node's GPU model (other than `models`) outweigh
        that model's share of the cluster, as GPU demand share over GPU capacity share, summed."""
        key = (cluster.labels_version, cluster.size, models)
        found = self._contention.get(key)
        if found is None:
            if len(self._contention) > 64:
                self._contention.clear()
            found = np.zeros(cluster.size)
            capacity = cluster.gpu_count[: cluster.size] * cluster.present[: cluster.size]
            total = float(capacity.sum()) or 1.0
            for wanted, share in self.shapes().constrained:
                if wanted == models:
                    continue
                suits = _model_matrix(cluster, (wanted,))[:, 0]
                own = float(capacity[suits].sum())
                if own > 0:
                    found += np.where(suits, share * total / own, 0.0)
            self._contention[key] = found
        return found


def _model_matrix(cluster: Cluster, wanted: Sequence[tuple[frozenset[str], ...]]) -> np.ndarray:
    """rows x `wanted`: whether each node's GPU model suits each list of alternatives (() suits all)."""
    names: dict[str | None, int] = {}
    model_of_row = np.array([names.setdefault(facts.gpu_model if facts is not None else None, len(names))
                             for facts in cluster.facts], dtype=np.int64)
    verdicts = np.array([[not models or predicates.model_matches(models, name) for models in wanted]
                         for name in names], dtype=bool).reshape(len(names), len(wanted))
    return verdicts[model_of_row] if model_of_row.size else np.ones((0, len(wanted)), dtype=bool)


# --- the state of candidate nodes before and after the pod --------------------------------------


@dataclass
class NodeState:
    """Free resources of some rows: GPU thousandths per device, cpu and memory (milli)."""

    gpu_free: np.ndarray  # rows x devices
    cpu_free: np.ndarray
    memory_free: np.ndarray


def before(cycle: Cycle, rows: np.ndarray) -> NodeState:
    return _state(cycle.cluster, rows)


def _state(cluster: Cluster, rows: np.ndarray) -> NodeState:
    cpu, memory = cluster.resources["cpu"], cluster.resources["memory"]
    return NodeState(
        cluster.gpu_free[rows],
        cluster.alloc[cpu, rows] - cluster.used[cpu, rows],
        cluster.alloc[memory, rows] - cluster.used[memory, rows],
    )


def after(cycle: Cycle, rows: np.ndarray) -> NodeState:
    """The rows as they would be with the pod on each, on the devices the framework gives it:
    the lowest-numbered idle GPUs for whole GPUs, the tightest-fitting GPU for a share."""
    pod = cycle.pod
    state = before(cycle, rows)
    free = state.gpu_free.copy()
    if pod.gpus:
        idle = free == GPU_MILLI
        take = idle & (np.cumsum(idle, axis=1) <= pod.gpus)
        free[take] = 0
    elif pod.gpu_milli:
        fitting = np.where(free >= pod.gpu_milli, free, GPU_MILLI + 1)
        index = np.argmin(fitting, axis=1) if cycle.gpu_policy == "binpack" else np.argmax(
            np.where(free >= pod.gpu_milli, free, -1), axis=1)
        free[np.arange(rows.size), index] -= pod.gpu_milli
    return NodeState(free, state.cpu_free - pod.requests.get("cpu", 0),
                     state.memory_free - pod.requests.get("memory", 0))


def least_fragmenting(cycle: Cycle, rows: np.ndarray, shapes: Shapes, matches: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """For a share: per row, the expected fragmentation after it on the GPU that leaves the least
    (FGD's GPU choice), and that GPU's index; ties to the lowest index. Other pods: `after`."""
    pod = cycle.pod
    if not pod.gpu_milli:
        return fragmentation(after(cycle, rows), shapes, matches), np.full(rows.size, -1, dtype=np.int64)
    state = before(cycle, rows)
    cpu, memory = state.cpu_free - pod.requests.get("cpu", 0), state.memory_free - pod.requests.get("memory", 0)
    best = np.full(rows.size, np.inf)
    device = np.full(rows.size, -1, dtype=np.int64)
    for index in range(state.gpu_free.shape[1]):
        room = state.gpu_free[:, index] >= pod.gpu_milli
        if not room.any():
            continue
        trial = state.gpu_free.copy()
        trial[:, index] -= pod.gpu_milli
        found = fragmentation(NodeState(trial, cpu, memory), shapes, matches)
        better = room & (found < best - 1e-9)
        best[better], device[better] = found[better], index
    return np.where(np.isfinite(best), best, 0.0), device


def fragmentation(state: NodeState, shapes: Shapes, matches: np.ndarray) -> np.ndarray:
    """FGD's expected fragmentation of each row, in GPU thousandths.

    For each typical shape: the idle GPU share the shape cannot use, that is the free part of
    each GPU with less free than the shape needs per GPU (all of it for a shape without GPUs);
    or all idle GPU share when the shape does not fit the node at all (GPU model, cpu, memory,
    not enough idle GPUs or no GPU with room). Weighted by the shape's popularity.
    `matches` is rows x shapes, whether the node's GPU model suits the shape.
    """
    free = state.gpu_free
    idle = free.sum(axis=1)
    if shapes.popularity.size == 0:
        return np.zeros(free.shape[0])
    unusable = np.stack([np.where(free < d, free, 0).sum(axis=1) for d in shapes.demands], axis=1)  # rows x demands
    whole = (free == GPU_MILLI).sum(axis=1)
    largest = free.max(axis=1)
    fits = matches & (state.cpu_free[:, None] >= shapes.cpu[None, :])
    fits &= state.memory_free[:, None] >= shapes.memory[None, :]
    fits &= (whole[:, None] >= shapes.gpus[None, :]) & (largest[:, None] >= shapes.gpu_milli[None, :])
    per_shape = np.where(fits, unusable[:, shapes.demand_of], idle[:, None])
    return per_shape @ shapes.popularity


def _best_first(cost: np.ndarray) -> np.ndarray:
    """Cost to score: the cheapest candidate 100, the dearest 0, all 100 when they are equal."""
    low, high = cost.min(initial=0.0), cost.max(initial=0.0)
    if high - low < 1e-12:
        return np.full(cost.size, 100.0)
    return 100.0 * (high - cost) / (high - low)


def _jitter(cycle: Cycle, size: int) -> np.ndarray:
    """Below any real difference in score: equal candidates are chosen at random, not by name."""
    return cycle.rng.random(size) * 1e-6


# --- the policies ---------------------------------------------------------------------------------


def random_fit(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Random: any feasible node, uniformly."""
    return cycle.rng.random(rows.size) * 100.0


def best_fit(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """BestFit: the node left with the least resources, 1 - cpu_left/128 cores/2 - gpu_left/8 GPUs/2."""
    state = after(cycle, rows)
    left = 0.5 * state.cpu_free / BESTFIT_CPU_SCALE + 0.5 * state.gpu_free.sum(axis=1) / BESTFIT_GPU_SCALE
    return 100.0 * np.clip(1.0 - left, 0.0, 1.0) + _jitter(cycle, rows.size)


def dot_product(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """DotProduct (Tetris' alignment as the FGD paper uses it): the smallest dot product of the node's
    free cpu and GPU with the pod's request, each dimension over its largest node capacity."""
    cluster, pod = cycle.cluster, cycle.pod
    state = before(cycle, rows)
    cpu = cluster.resources["cpu"]
    cpu_scale = max(float(cluster.alloc[cpu, : cycle.rows].max(initial=0)), 1.0)
    gpu_scale = max(float(cluster.gpu_count[: cycle.rows].max(initial=0)) * GPU_MILLI, 1.0)
    product = (state.cpu_free / cpu_scale) * (pod.requests.get("cpu", 0) / cpu_scale)
    product += (state.gpu_free.sum(axis=1) / gpu_scale) * ((pod.gpus * GPU_MILLI + pod.gpu_milli) / gpu_scale)
    return _best_first(product) + _jitter(cycle, rows.size)


def gpu_packing(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """GPU Packing, in three tiers with integer scores, ties at random (as the FGD paper's simulator):
    a share onto an already shared GPU, 100 minus a tenth of that GPU's free percent (50 at least);
    a node with GPUs in use, 50 minus the idle GPUs the pod takes (33 at least); an idle node,
    33 minus its GPUs (but at least its GPUs). Pods without GPUs: all nodes alike."""
    cluster, pod = cycle.cluster, cycle.pod
    if not pod.wants_gpu:
        return _jitter(cycle, rows.size)
    count = cluster.gpu_count[rows]
    idle_node = cluster.whole_free[rows] == count
    scores = np.where(idle_node, np.maximum(33 - count, count), max(50 - max(pod.gpus, 1), 33)).astype(float)
    if pod.gpu_milli:
        best = cycle.extras["best_fit_free"][rows]
        shared = best < GPU_MILLI
        scores = np.where(shared & ~idle_node, np.maximum(100 - (best * 100 // GPU_MILLI) // 10, 50), scores)
    return scores + _jitter(cycle, rows.size)


def fgd(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """FGD: the node whose expected fragmentation grows least with the pod on it."""
    workload = _workload(cycle)
    shapes = workload.shapes()

    def growth(subset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        matches = workload.matches(cycle.cluster)[subset]
        then, device = least_fragmenting(cycle, subset, shapes, matches)
        return then - workload.standing(cycle.cluster, subset)[0], device

    cost, device = workload.cost(("fgd", shape_of(cycle.pod)), cycle.cluster, rows, growth)
    _propose_devices(cycle, "fgd", rows, device)
    return _best_first(cost) + _jitter(cycle, rows.size)


def _propose_devices(cycle: Cycle, plugin: str, rows: np.ndarray, device: np.ndarray) -> None:
    """Tell the framework which GPU a share should take on each candidate row (see Framework)."""
    if cycle.pod.gpu_milli:
        proposal = np.full(cycle.rows, -1, dtype=np.int64)
        proposal[rows] = device
        cycle.extras.setdefault("share_devices", {})[plugin] = proposal


def stranding(state: NodeState, shapes: Shapes) -> np.ndarray:
    """Idle GPU thousandths that the node's free cpu and memory cannot feed, at the cpu and memory
    per GPU thousandth the typical GPU-using shapes ask for."""
    idle = state.gpu_free.sum(axis=1).astype(float)
    usable = np.minimum(idle, np.maximum(state.cpu_free, 0) / max(shapes.cpu_per_milli, 1e-9))
    usable = np.minimum(usable, np.maximum(state.memory_free, 0) / max(shapes.memory_per_milli, 1e-9))
    return idle - usable


STRANDING_WEIGHT = 1.0
CONTENTION_WEIGHT = 1.0


def gpu_fragmentation(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Ours: the node where the pod costs the fewest usable GPU thousandths.

    Three costs, all in GPU thousandths: the growth of FGD's expected fragmentation against the
    shapes seen so far; the growth of stranding, idle GPU left without the cpu or memory to feed
    it (most GPU left unused in production traces sits on nodes whose cpu is gone); and, for a pod
    that does not need the node's GPU model, its demand times how much more the pods that do
    need that model ask for it than its share of the cluster (so scarce models stay free for them).
    """
    if cycle.node_policy != "binpack":
        return np.zeros(rows.size)  # spreading is the admin's choice: this plugin stands aside
    workload = _workload(cycle)
    shapes = workload.shapes()
    pod = cycle.pod

    def lost(subset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        matches = workload.matches(cycle.cluster)[subset]
        then = after(cycle, subset)
        fragmented, stranded = workload.standing(cycle.cluster, subset)
        cost = fragmentation(then, shapes, matches) - fragmented
        cost += STRANDING_WEIGHT * (stranding(then, shapes) - stranded)
        if pod.wants_gpu and shapes.constrained:
            cost += CONTENTION_WEIGHT * (pod.gpus * GPU_MILLI + pod.gpu_milli) * workload.contention(
                cycle.cluster, pod.models)[subset]
        return cost, np.full(subset.size, -1, dtype=np.int64)  # shares: the gpuPolicy's GPU

    cost, _ = workload.cost(("ours", shape_of(pod), cycle.gpu_policy), cycle.cluster, rows, lost)
    return _best_first(cost)


def _workload(cycle: Cycle) -> Workload:
    if cycle.workload is None:
        cycle.workload = Workload()
        cycle.workload.observe(cycle.pod)
    return cycle.workload


SCORES: dict[str, Callable[[Cycle, np.ndarray], np.ndarray]] = {
    "random": random_fit,
    "bestfit": best_fit,
    "dotproduct": dot_product,
    "gpupacking": gpu_packing,
    "fgd": fgd,
    "gpu-fragmentation": gpu_fragmentation,
}
