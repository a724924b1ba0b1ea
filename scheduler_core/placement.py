"""Placement-quality score plugins: how well a node choice keeps the cluster's GPUs usable.

The baselines are written from their published descriptions, as compared in "Beware of
Fragmentation" (Weng et al., USENIX ATC '23): `random`, `bestfit`, `dotproduct`, `gpupacking`
and `fgd` (fragmentation gradient descent). `gpu-fragmentation` is ours and the product default.

Every plugin scores the candidate rows 0..100 like the other score plugins; those that rank by a
cost stretch it so the cheapest candidate gets 100 and the dearest 0 (kube-scheduler's
NormalizeScore), so each can be weighted against the rest of the framework's plugins.

Fragmentation is measured against a `workloads.Workload`: the shapes (cpu, memory, whole GPUs or
share, GPU model) of pods and how often each occurs. FGD uses the typical shapes of a known workload,
as the paper does; ours learns the shapes online from the pods the scheduler has seen, and adds the
idle GPU stranded without cpu or memory and the contention for scarce GPU models (see
`gpu_fragmentation`). Costs are kept between decisions and recomputed only for the nodes whose
usage changed (`Cluster.row_version`), which keeps the default policy cheap enough to run per pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler_core import podaffinity, spread, workloads
from scheduler_core.cluster import Cluster, Reach, Rule, constrained_groups
from scheduler_core.nodes import GPU_MILLI
from scheduler_core.plugins import Cycle, reach_mismatch, topology_domains

BESTFIT_CPU_SCALE = 128_000  # milli-cpu: BestFit's leftover CPU is counted against 128 cores
BESTFIT_GPU_SCALE = 8 * GPU_MILLI  # ... and its leftover GPU against 8 GPUs


# --- the state of candidate nodes before and after the pod --------------------------------------


def before(cycle: Cycle, rows: np.ndarray) -> workloads.NodeState:
    return workloads.state_of(cycle.cluster, rows)


def after(cycle: Cycle, rows: np.ndarray, now: workloads.NodeState | None = None) -> workloads.NodeState:
    """The rows (as they are `now`, if given) as they would be with the pod on each, on the devices the framework
    gives it: the lowest-numbered idle GPUs for whole GPUs, the tightest-fitting GPU for a share."""
    pod = cycle.pod
    state = now if now is not None else before(cycle, rows)
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
    return workloads.NodeState(free, state.cpu_free - pod.requests.get("cpu", 0),
                     state.memory_free - pod.requests.get("memory", 0))


def least_fragmenting(cycle: Cycle, rows: np.ndarray, shapes: workloads.Shapes, matches: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """For a share: per row, the expected fragmentation after it on the GPU that leaves the least
    (FGD's GPU choice), and that GPU's index; ties to the lowest index. Other pods: `after`."""
    pod = cycle.pod
    if not pod.gpu_milli:
        return workloads.fragmentation(after(cycle, rows), shapes, matches), np.full(rows.size, -1, dtype=np.int64)
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
        found = workloads.fragmentation(workloads.NodeState(trial, cpu, memory), shapes, matches)
        better = room & (found < best - 1e-9)
        best[better], device[better] = found[better], index
    return np.where(np.isfinite(best), best, 0.0), device


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

    cost, device = workload.cost(("fgd", workloads.shape_of(cycle.pod)), cycle.cluster, rows, growth)
    _propose_devices(cycle, "fgd", rows, device)
    return _best_first(cost) + _jitter(cycle, rows.size)


def _propose_devices(cycle: Cycle, plugin: str, rows: np.ndarray, device: np.ndarray) -> None:
    """Tell the framework which GPU a share should take on each candidate row (see Framework)."""
    if cycle.pod.gpu_milli:
        proposal = np.full(cycle.rows, -1, dtype=np.int64)
        proposal[rows] = device
        cycle.extras.setdefault("share_devices", {})[plugin] = proposal


STRANDING_WEIGHT = 1.0
CONTENTION_WEIGHT = 1.0
SHARED_STANDING_ABOVE = 64  # rows measured for one decision past which the standing measure is shared by shapes


def gpu_fragmentation(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Ours: the node where the pod costs the fewest usable GPU thousandths.

    Three costs, all in GPU thousandths: the growth of FGD's expected fragmentation against the
    shapes seen so far; the growth of stranding, idle GPU left without the cpu or memory to feed
    it (most GPU left unused in production traces sits on nodes whose cpu is gone); and, for a pod
    that does not need the node's GPU model, its demand times how much more the pods that do
    need that model ask for it than its share of the cluster (so scarce models stay free for them).
    """
    if cycle.node_policy != "binpack":
        return cycle.no_score(rows)  # spreading is the admin's choice: this plugin stands aside
    workload = _workload(cycle)
    shapes = workload.shapes()
    pod = cycle.pod

    def lost(subset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        now = before(cycle, subset)
        then = after(cycle, subset, now)
        matches = workload.matches(cycle.cluster)[subset]
        if subset.size > SHARED_STANDING_ABOVE:
            # many rows: the first decision of this shape since the shapes were summarised again. The rows as they
            # are now are measured once for every shape (Workload.standing), only the pod's effect per shape
            fragmented_now, stranded_now = workload.standing(cycle.cluster, subset)
            fragmented_then = workloads.fragmentation(then, shapes, matches)
            stranded_then = workloads.stranding(then, shapes)
        else:
            # few rows (those changed since this shape's last decision): now and with the pod in one call each, as
            # numpy's cost per call, not per row, is what a decision pays here
            both = workloads.NodeState(*(np.concatenate(pair) for pair in zip(
                (now.gpu_free, now.cpu_free, now.memory_free), (then.gpu_free, then.cpu_free, then.memory_free))))
            fragmented = workloads.fragmentation(both, shapes, np.concatenate((matches, matches)))
            stranded = workloads.stranding(both, shapes)
            size = subset.size
            fragmented_now, fragmented_then = fragmented[:size], fragmented[size:]
            stranded_now, stranded_then = stranded[:size], stranded[size:]
        cost = fragmented_then - fragmented_now + STRANDING_WEIGHT * (stranded_then - stranded_now)
        if pod.wants_gpu and shapes.constrained:
            cost += CONTENTION_WEIGHT * (pod.gpus * GPU_MILLI + pod.gpu_milli) * workload.contention(
                cycle.cluster, pod.models)[subset]
        return cost, np.full(subset.size, -1, dtype=np.int64)  # shares: the gpuPolicy's GPU

    cost, _ = workload.cost(("ours", workloads.shape_of(pod), cycle.gpu_policy), cycle.cluster, rows, lost)
    return _best_first(cost)


ROOM_PLENTY = 100  # a group with more places than this (nodes, or GPUs per GPU asked) is not short of room


def group_room(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Keep room where constrained groups can still go: 100 minus the share of each group's room the pod takes.

    Pods on nodes leave rules for the pods that follow them (scheduler_core.cluster.constrained_groups). A host port,
    or required anti-affinity, keeps later pods of the group off the nodes (domains) that hold one: the others within
    the group's reach (its pods' nodeSelector and required node affinity), with a GPU free, are the group's places.
    Required pod affinity keeps them in the domains that hold a pod it selects: the free GPUs there, within reach, are
    its room. Packing fills a node's last GPU, or an affinity zone's GPUs, with pods that could have gone anywhere,
    and the next pods of such groups find no place left where kube-scheduler's spreading leaves them some
    (benchmarks/parity_core.py measures it). So a candidate costs the pod, for each group it is not part of, the place
    it takes (a share of the group's places) or the GPUs it takes in the group's room (a share of that room). A
    group with plenty of room (more than ROOM_PLENTY places, or GPUs per GPU asked) costs nothing: in a large cluster
    that is every group, and nothing changes; with no such pod placed (openb's trace) every candidate scores 0.
    Counted in device-plugin GPUs (`nvidia.com/gpu` and shares); taints, and terms that select namespaces by label,
    are not looked at. Node-wide rules (host ports, anti-affinity per hostname) are counted for all groups at once,
    so a hundred such groups cost about what one does.
    """
    cluster, pod = cycle.cluster, cycle.pod
    if not pod.wants_gpu or not cluster.constrained:
        return cycle.no_score(rows)
    own = {rule for rule, _ in constrained_groups(pod)}
    size = cycle.rows
    free = cluster.gpu_count[:size] * GPU_MILLI - cluster.gpu_used[:size]
    open_rows = cluster.present[:size] & (free >= GPU_MILLI)  # a place for a pod asking one GPU
    demand = pod.gpus * GPU_MILLI + pod.gpu_milli
    takes_place = open_rows[rows] & (free[rows] - demand < GPU_MILLI)
    reaches: dict[Reach, np.ndarray] = {}

    def within(reach: Reach) -> np.ndarray:
        if reach not in reaches:
            reaches[reach] = open_rows & ~reach_mismatch(cycle, *reach)
        return reaches[reach]

    taken = np.zeros(rows.size)
    incidence = _NodeWide.kept(cycle)
    for reach, groups in incidence.by_reach.items():
        places = within(reach)
        count = np.count_nonzero(places)
        if count - max(len(_holders(cluster, rule)) for rule in groups) > ROOM_PLENTY:
            continue  # each group has more places left than that: none is short (a large pool)
        holder_rows, holder_group = incidence.holders(cluster, reach)
        hits = places[holder_rows].astype(float)
        left = float(count) - np.bincount(holder_group, weights=hits, minlength=len(groups))
        share = np.where(left <= ROOM_PLENTY, 1.0 / np.maximum(left, 1), 0.0)
        if own:
            share[[index for index, rule in enumerate(groups) if rule in own]] = 0.0
        if share.any():  # the candidate takes a place of every group that does not hold its node already
            held_share = np.bincount(holder_rows, weights=share[holder_group], minlength=size)
            taken += (takes_place & places[rows]) * (share.sum() - held_share[rows])
    for rule, reach in incidence.others:
        if rule in own:
            continue
        term = rule[1]
        if rule[0] == "affinity":
            selected = (group.rows for group in cluster.pod_index.select([term]))
            inside = _domains_holding(cycle, term.topology_key, selected)
            inside &= cluster.present[:size] & ~reach_mismatch(cycle, *reach)
            room = int(free[inside].sum())
            if room <= ROOM_PLENTY * demand:
                taken += inside[rows] * np.minimum(demand, free[rows]) / max(room, 1)
            continue
        # anti-affinity over a wider domain (a zone): held domain-wide
        held = _domains_holding(cycle, term.topology_key, [cluster.pod_index.anti_terms.rows.get((term, 1), Counter())])
        places = within(reach)
        places_left = int(np.count_nonzero(places & ~held))
        if places_left <= ROOM_PLENTY:
            taken += (takes_place & places[rows] & ~held[rows]) / max(places_left, 1)
    return 100.0 * np.clip(1.0 - taken, 0.0, 1.0)


def _node_wide(rule: Rule) -> bool:
    """A rule that keeps the group's later pods off the very nodes holding it: a host port, or required
    anti-affinity per hostname."""
    return rule[0] == "port" or (rule[0] == "anti" and rule[1].topology_key == spread.HOSTNAME
                                 and not rule[1].reads_namespace_labels)


def _holders(cluster: Cluster, rule: Rule) -> Mapping[int, Any]:
    """The rows holding a node-wide rule (by any pod, of the group or not), as keys."""
    if rule[0] == "port":
        return cluster.port_holders.get(rule[1:], {})
    return cluster.pod_index.anti_terms.rows.get((rule[1], 1), {})


@dataclass
class _NodeWide:
    """The groups with node-wide rules, by reach, and (made when a reach's groups may be short of places) every (row
    holding the rule, group) pair as two arrays. Made again only when such a group or a holder of its rule comes or
    goes (Cluster.constrained_version), so a decision counts all groups' places in a few array operations. `others`:
    the groups whose rules are counted one by one (affinity, anti-affinity over wider domains), leaving out terms that
    select namespaces by label."""

    by_reach: dict[Reach, list[Rule]]
    others: list[tuple[Rule, Reach]]
    _pairs: dict[Reach, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @classmethod
    def kept(cls, cycle: Cycle) -> _NodeWide:
        """The cluster's, kept in the cycle's caches in one slot (it changes with every such pod placed)."""
        cluster = cycle.cluster
        version = (cluster.constrained_version, cluster.labels_version, cluster.size)
        found = cycle.caches.get("group-room")
        if found is None or found[0] != version:
            found = cycle.caches["group-room"] = (version, cls.of(cluster))
        return found[1]

    @classmethod
    def of(cls, cluster: Cluster) -> _NodeWide:
        by_reach: dict[Reach, list[Rule]] = {}
        others = []
        for rule, reach in cluster.constrained:
            if _node_wide(rule):
                by_reach.setdefault(reach, []).append(rule)
            elif not rule[1].reads_namespace_labels:
                others.append((rule, reach))
        return cls(by_reach, others)

    def holders(self, cluster: Cluster, reach: Reach) -> tuple[np.ndarray, np.ndarray]:
        """(row, group's index in by_reach[reach]) for every row holding each group's rule."""
        if reach not in self._pairs:
            held = [_holders(cluster, rule) for rule in self.by_reach[reach]]
            rows = np.fromiter((row for found in held for row in found), dtype=np.int64,
                               count=sum(len(found) for found in held))
            self._pairs[reach] = (rows, np.repeat(np.arange(len(held)), [len(found) for found in held]))
        return self._pairs[reach]


def _domains_holding(cycle: Cycle, key: str, pods: Iterable[Counter[int]]) -> np.ndarray:
    """The rows in a domain of `key` that holds one of `pods` (counts by row)."""
    domains = topology_domains(cycle)(key)
    return (domains.per_domain(*podaffinity.rows_of(pods)) > 0)[domains.ids][: cycle.rows]


def _workload(cycle: Cycle) -> workloads.Workload:
    if cycle.workload is None:
        cycle.workload = workloads.Workload()
        cycle.workload.observe(cycle.pod)
    return cycle.workload


SCORES: dict[str, Callable[[Cycle, np.ndarray], np.ndarray]] = {
    "random": random_fit,
    "bestfit": best_fit,
    "dotproduct": dot_product,
    "gpupacking": gpu_packing,
    "fgd": fgd,
    "gpu-fragmentation": gpu_fragmentation,
    "group-room": group_room,
}
