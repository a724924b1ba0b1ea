"""Workloads: the shapes of the pods a cluster runs, and how fragmented a node's free GPUs are for them.

Fragmentation is measured against a `Workload`: the shapes (cpu, memory, whole GPUs or share,
GPU model) of pods and how often each occurs. FGD ("Beware of Fragmentation", Weng et al.,
USENIX ATC '23) uses the typical shapes of a known workload; `gpu-scheduler` learns them online
from the pods it sees. The score plugins that use these measures are in scheduler_core.placement;
a scheduling cycle carries its workload (scheduler_core.plugins.Cycle).
"""

from __future__ import annotations

import functools
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_core import predicates
from scheduler_core.cluster import Cluster, RowMemo
from scheduler_core.nodes import GPU_MILLI
from scheduler_core.pods import PodFacts

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

    @functools.cached_property
    def needs(self) -> np.ndarray:
        """4 x shapes: the free cpu, memory, idle GPUs and room on one GPU a node needs for each shape (in the
        order of `fragmentation`'s `have`)."""
        return np.stack((self.cpu, self.memory, self.gpus, self.gpu_milli)).astype(np.int64)


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
        self._contention: dict[tuple[int, int, tuple[frozenset[str], ...], int], np.ndarray] = {}
        self._costs: dict[tuple[Any, ...], RowMemo] = {}
        self._standing: tuple[tuple[int, int], RowMemo] | None = None
        self._models: tuple[tuple[int, int, int], list[str | None], np.ndarray] | None = None

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
            found = self._matches[key] = self._model_matrix(cluster, self.shapes().models)
        return found


    def cost(self, key: tuple[Any, ...], cluster: Cluster, rows: np.ndarray,
             compute: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        """A per-row cost of placing pods of one shape, and the GPU a share would take (-1: the
        framework's choice), kept between decisions: only rows whose usage or facts changed since
        (`Cluster.row_version`) are computed again."""
        key = (*key, cluster.labels_version, cluster.size)
        memo = self._costs.get(key)
        if memo is None:
            if len(self._costs) >= 256:
                self._costs.clear()
            memo = self._costs[key] = RowMemo(cluster.size, float, np.int64)
        cost, device = memo.read(cluster, rows, compute)
        return cost, device

    def standing(self, cluster: Cluster, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(fragmentation, stranding) of rows as they are now, kept per row version like `cost`:
        shared by every pod shape, so each changed row is measured once."""
        key = (cluster.labels_version, cluster.size)
        if self._standing is None or self._standing[0] != key:
            self._standing = (key, RowMemo(cluster.size, float, float))

        def measure(stale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            shapes, state = self.shapes(), state_of(cluster, stale)
            return fragmentation(state, shapes, self.matches(cluster)[stale]), stranding(state, shapes)

        fragmented, stranded = self._standing[1].read(cluster, rows, measure)
        return fragmented, stranded

    def contention(self, cluster: Cluster, models: tuple[frozenset[str], ...]) -> np.ndarray:
        """Per row: how far the pods that need the node's GPU model (other than `models`) outweigh
        that model's share of the cluster, as GPU demand share over GPU capacity share, summed (a node's GPUs:
        the device plugin's, or its DRA GPUs)."""
        key = (cluster.labels_version, cluster.size, models, cluster.dra.devices_version)
        found = self._contention.get(key)
        if found is None:
            if len(self._contention) > 64:
                self._contention.clear()
            found = np.zeros(cluster.size)
            capacity = cluster.gpu_capacity()
            total = float(capacity.sum()) or 1.0
            for wanted, share in self.shapes().constrained:
                if wanted == models:
                    continue
                suits = self._model_matrix(cluster, (wanted,))[:, 0]
                own = float(capacity[suits].sum())
                if own > 0:
                    found += np.where(suits, share * total / own, 0.0)
            self._contention[key] = found
        return found

    def _model_matrix(self, cluster: Cluster, wanted: Sequence[tuple[frozenset[str], ...]]) -> np.ndarray:
        """rows x `wanted`: whether each node's GPU model suits each list of alternatives (() suits all).
        Each row's model is looked up once per label change, not once per question (a pass over every node)."""
        key = (id(cluster), cluster.labels_version, len(cluster.facts))
        if self._models is None or self._models[0] != key:
            names: dict[str | None, int] = {}
            model_of_row = np.array([names.setdefault(facts.gpu_model if facts is not None else None, len(names))
                                     for facts in cluster.facts], dtype=np.int64)
            self._models = (key, list(names), model_of_row)
        _, models_seen, model_of_row = self._models
        verdicts = np.array([[not models or predicates.model_matches(models, name) for models in wanted]
                             for name in models_seen], dtype=bool).reshape(len(models_seen), len(wanted))
        return verdicts[model_of_row] if model_of_row.size else np.ones((0, len(wanted)), dtype=bool)


# --- the free resources of nodes, and what a workload cannot use of them ------------------------


@dataclass
class NodeState:
    """Free resources of some rows: GPU thousandths per device, cpu and memory (milli)."""

    gpu_free: np.ndarray  # rows x devices
    cpu_free: np.ndarray
    memory_free: np.ndarray


def state_of(cluster: Cluster, rows: np.ndarray) -> NodeState:
    cpu, memory = cluster.resources["cpu"], cluster.resources["memory"]
    return NodeState(
        cluster.device_free(rows),
        cluster.alloc[cpu, rows] - cluster.used[cpu, rows],
        cluster.alloc[memory, rows] - cluster.used[memory, rows],
    )


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
    # in as few numpy calls as the measure allows: a decision measures a row or two, where each call's fixed cost,
    # not the rows, is what it pays
    unusable = (free[:, :, None] * (free[:, :, None] < shapes.demands)).sum(axis=1)  # rows x demands
    have = np.concatenate((state.cpu_free, state.memory_free, (free == GPU_MILLI).sum(axis=1), free.max(axis=1)))
    fits = matches & (have.reshape(4, -1, 1) >= shapes.needs[:, None, :]).all(axis=0)  # rows x shapes
    per_shape = np.where(fits, unusable[:, shapes.demand_of], idle[:, None])
    return per_shape @ shapes.popularity


def stranding(state: NodeState, shapes: Shapes) -> np.ndarray:
    """Idle GPU thousandths that the node's free cpu and memory cannot feed, at the cpu and memory
    per GPU thousandth the typical GPU-using shapes ask for."""
    idle = state.gpu_free.sum(axis=1).astype(float)
    usable = np.minimum(idle, np.maximum(state.cpu_free, 0) / max(shapes.cpu_per_milli, 1e-9))
    usable = np.minimum(usable, np.maximum(state.memory_free, 0) / max(shapes.memory_per_milli, 1e-9))
    return idle - usable
