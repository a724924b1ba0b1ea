"""Filter, score, pick, explain: one scheduling decision over the cluster model.

Like kube-scheduler's framework: filters in a fixed order, each node counted under the
first filter that rejects it; scores 0..100 per plugin, weighted and summed; ties go to
the first node by name, so the same input always gives the same answer. Unschedulable
pods get kube-scheduler's message shape: `0/7 nodes are available: 3 Insufficient
nvidia.com/gpu, 2 node(s) had untolerated taint(s).`
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_core import placement, plugins, profile, utilization, volumes, workloads
from scheduler_core.cluster import Cluster
from scheduler_core.dra import allocator as dra_allocator
from scheduler_core.dra import extended as dra_extended
from scheduler_core.dra import state as dra_state
from scheduler_core.nodes import GPU_MILLI
from scheduler_core.pods import Device, PodFacts


@dataclass(frozen=True)
class Decision:
    pod: str
    node: str | None
    devices: tuple[Device, ...] = ()
    reason: str | None = None  # why not, when node is None
    scores: dict[str, dict[str, float]] | None = None  # explain: node -> plugin -> weighted score
    volume_plan: volumes.Plan | None = None  # claims to bind or provision on `node` before the pod is bound there
    # DRA: the allocation of each ResourceClaim (namespace, name) the pod allocates on `node`, written before binding
    claim_allocations: tuple[tuple[tuple[str, str], dict[str, Any]], ...] = ()
    # DRA: the claim to make for the pod's extended resources on `node` (where DRA serves them), and its allocation
    extended_claim: tuple[dra_state.NodeClaim, dict[str, Any]] | None = None

    def held_claims(self, pod: PodFacts) -> tuple[tuple[tuple[str, str], dict[str, Any]], ...]:
        """Every allocation the decision makes, by the key the model assumes it under until the claim's status
        shows it: the pod's claims, and the claim for its extended resources (not named yet)."""
        if self.extended_claim is None:
            return self.claim_allocations
        pending = dra_extended.pending_key(pod.namespace, pod.identity)
        return (*self.claim_allocations, (pending, self.extended_claim[1]))

    def dra_devices(self, pod: PodFacts) -> tuple[tuple[str, str, str], ...]:
        """The DRA devices the decision allocates (driver, pool, device), in the claims' order."""
        return tuple(device_id for _, allocation in self.held_claims(pod)
                     for device_id, _, _ in dra_allocator.results_in(allocation))


class Framework:
    """Decisions over one cluster model.

    `workload` holds the pod shapes the placement-quality plugins measure fragmentation against
    (default: learned from the pods this framework decides on); `rng` drives the plugins that break
    ties at random (the default is seeded, so the same input still gives the same placement).
    """

    def __init__(self, cluster: Cluster, scheduling: profile.Scheduling = profile.Scheduling(), *,
                 workload: workloads.Workload | None = None, rng: np.random.Generator | None = None):
        self.cluster = cluster
        self.workload = workload if workload is not None else workloads.Workload()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.configure(scheduling)
        self._caches: dict[Any, Any] = {}

    def configure(self, scheduling: profile.Scheduling) -> None:
        """Apply new scoring settings; validated already by the config parser."""
        self.scheduling = scheduling
        self.scores = [
            (name, plugin, scheduling.weight_of(name))
            for name, plugin in (plugins.SCORES | placement.SCORES).items()
            if scheduling.weight_of(name) > 0
        ]

    def decide(self, pod: PodFacts, *, explain: bool = False, excluded: Mapping[int, str] | None = None,
               within: np.ndarray | None = None) -> Decision:
        """Choose a node and GPU devices for `pod`, or say why none fits. Changes nothing.

        The rows in `excluded` are left out, each counted
        under the reason given (a node that fits only without the pods nominated to it); given `within` (a mask
        over the rows), only its rows are candidates (a gang tried in one topology domain)."""
        if pod.problems:
            return Decision(pod.key, None, reason="; ".join(pod.problems))
        cluster = self.cluster
        if cluster.node_count == 0:
            return Decision(pod.key, None, reason="0/0 nodes are available: no nodes in the cluster.")
        self.workload.observe(pod)
        cycle = self._cycle(pod)
        message = _pre_filtered(cycle)
        if message is not None:
            return Decision(pod.key, None, reason=f"0/{cluster.node_count} nodes are available: {message}.")
        alive = cluster.present[: cluster.size].copy()
        if excluded:
            alive[list(excluded)] = False
        if within is not None:
            alive &= within[: cluster.size]
        cycle.extras["alive"] = alive
        for _, filter_plugin in plugins.FILTERS:
            for mask, _ in filter_plugin(cycle):
                np.greater(alive, mask, out=alive)  # alive and not rejected
            if not np.count_nonzero(alive):  # (faster than alive.any() on a bool array)
                return Decision(pod.key, None, reason=self._rejections(cycle, excluded or {}))
        rows = np.flatnonzero(alive)
        problem = self._pre_score_problem(pod) if rows.size > 1 else None
        if problem:
            return Decision(pod.key, None, reason=f"{problem} (needed to score the {rows.size} nodes that fit)")

        total = np.zeros(rows.size)
        weighted: dict[str, np.ndarray] = {}
        nothing = cycle.no_score(rows)
        for name, plugin, weight in self.scores:
            part = plugin(cycle, rows)
            if part is nothing and not explain:
                continue  # the plugin has nothing to say of this pod (most pods, most plugins): nothing to add
            part = weight * part
            total += part
            if explain:
                weighted[name] = part
        best = total.max()
        tied = rows[total >= best - 1e-9]
        row = int(tied[np.argmin(cluster.ranks()[tied])])
        node = cluster.node(row).name
        devices = self._devices(row, pod, self._proposed_device(cycle, row))
        scores = None
        if explain:
            top = rows[np.argsort(-total, kind="stable")[:5]]
            position = {int(r): i for i, r in enumerate(rows)}
            scores = {
                cluster.node(int(r)).name: {
                    **{name: round(float(part[position[int(r)]]), 1) for name, part in weighted.items()},
                    "total": round(float(total[position[int(r)]]), 1),
                }
                for r in top
            }
        return Decision(pod.key, node, devices, scores=scores, volume_plan=plugins.volume_plan(cycle, row),
                        claim_allocations=plugins.claim_allocations(cycle, row),
                        extended_claim=plugins.extended_claim(cycle, row))

    def _pre_score_problem(self, pod: PodFacts) -> str | None:
        """Why kube-scheduler's PreScore fails the pod, in its plugins' order: what a score plugin in use scores
        by cannot be read. It scores, and so fails, only when more than one node fits."""
        soft_problem = pod.topology_spread.soft_problem if pod.topology_spread is not None else None
        for plugin, problem in (("node-affinity", pod.preferred_problem), ("pod-topology-spread", soft_problem)):
            if problem and self.scheduling.weight_of(plugin) > 0:
                return problem
        return None

    def _cycle(self, pod: PodFacts) -> plugins.Cycle:
        return plugins.Cycle(self.cluster, pod, self._caches, self.scheduling.node_policy, self.scheduling.gpu_policy,
                             rng=self.rng, workload=self.workload)

    def _rejections(self, cycle: plugins.Cycle, excluded: Mapping[int, str]) -> str:
        """Why no node fits: each node counted under the first filter that rejects it, or its reason in `excluded`.

        Only unschedulable pods pay for this pass; a pod that fits needs no counting.
        """
        alive = self.cluster.present[: self.cluster.size].copy()
        reasons: Counter[str] = Counter(excluded.values())
        if excluded:
            alive[list(excluded)] = False
        cycle.extras["alive"] = alive
        for _, filter_plugin in plugins.FILTERS:
            rejected = np.zeros_like(alive)
            for mask, reason in filter_plugin(cycle):
                hit = mask & alive
                count = int(np.count_nonzero(hit))
                if count:
                    reasons[reason] += count
                    rejected |= hit
            alive &= ~rejected
        return _unschedulable(self.cluster.node_count, reasons)

    def fits(self, pod: PodFacts, row: int) -> bool:
        """Whether every pre-filter and filter lets `pod` onto the node of `row`, as the model is now (preemption
        asks this with pods taken away)."""
        return bool(self.fitting(pod)[row])

    def fitting(self, pod: PodFacts) -> np.ndarray:
        """For every row, whether every pre-filter and filter lets `pod` onto its node as the model is now."""
        cluster = self.cluster
        alive = cluster.present[: cluster.size].copy()
        cycle = self._filtering(pod)
        if cycle is None:
            return np.zeros_like(alive)
        cycle.extras["alive"] = alive
        for _, filter_plugin in plugins.FILTERS:
            for mask, _ in filter_plugin(cycle):
                np.greater(alive, mask, out=alive)
        return alive

    def _filtering(self, pod: PodFacts) -> plugins.Cycle | None:
        """The cycle to run `pod`'s filters in, or None when no node can take it whatever its filters say (its spec
        has problems, or a pre-filter rejects it)."""
        if pod.problems:
            return None
        cycle = self._cycle(pod)
        return cycle if _pre_filtered(cycle) is None else None

    def first_rejections(self, pod: PodFacts, rows: list[int]) -> dict[int, str]:
        """For each of `rows` that rejects `pod`, the reason of the first filter that does (as the model is now)."""
        if not rows:
            return {}
        cycle = self._cycle(pod)
        message = _pre_filtered(cycle)
        if message is not None:
            return dict.fromkeys(rows, message)
        found: dict[int, str] = {}
        cycle.extras["alive"] = np.isin(np.arange(self.cluster.size), rows)
        for _, filter_plugin in plugins.FILTERS:
            for mask, reason in filter_plugin(cycle):
                for row in rows:
                    if row not in found and mask[row]:
                        found[row] = reason
            if len(found) == len(rows):
                break
        return found

    def preemptible_rows(self, pod: PodFacts) -> np.ndarray:
        """The rows that reject `pod` now, each first for a reason evicting pods may cure
        (plugins.RESOLVABLE_BY_PREEMPTION): preemption's potential nodes."""
        cluster = self.cluster
        cycle = self._filtering(pod)
        if cycle is None:
            return np.zeros(0, dtype=np.int64)
        alive = cluster.present[: cluster.size].copy()
        potential = np.zeros_like(alive)
        cycle.extras["alive"] = alive
        for name, filter_plugin in plugins.FILTERS:
            rejected = np.zeros_like(alive)
            incurable = np.zeros_like(alive)  # rejected for a reason no eviction cures
            for mask, reason in filter_plugin(cycle):
                hit = mask & alive
                rejected |= hit
                if name not in plugins.RESOLVABLE_BY_PREEMPTION or reason in plugins.UNRESOLVABLE_REASONS:
                    incurable |= hit
            potential |= rejected & ~incurable
            alive &= ~rejected
        return np.flatnonzero(potential)

    def devices_for(self, pod: PodFacts, row: int) -> tuple[Device, ...]:
        """The GPU devices `pod` would get on the node of `row` as the model is now."""
        return self._devices(row, pod)

    def devices_on(self, free: np.ndarray, pod: PodFacts) -> tuple[Device, ...]:
        """The GPU devices `pod` would get on a node whose devices have `free` thousandths free."""
        return self._devices_on(free, pod)

    def place(self, pod: PodFacts, *, explain: bool = False) -> Decision:
        """Decide, and account the decision in the cluster model."""
        decision = self.decide(pod, explain=explain)
        if decision.node is not None:
            self.cluster.assign(pod, decision.node, decision.devices)
            for claim_key, allocation in decision.held_claims(pod):
                self.cluster.dra.assume(claim_key, allocation)
        return decision

    def _proposed_device(self, cycle: plugins.Cycle, row: int) -> int | None:
        """The GPU the highest-weighted plugin that proposes one (FGD's choice) wants a share on."""
        proposals = cycle.extras.get("share_devices")
        if not proposals:
            return None
        for name, _, _ in sorted(self.scores, key=lambda score: -score[2]):
            if name in proposals and proposals[name][row] >= 0:
                return int(proposals[name][row])
        return None

    def _devices(self, row: int, pod: PodFacts, proposed: int | None = None) -> tuple[Device, ...]:
        if self.cluster.dra_serves_gpus(row, pod):
            return ()  # DRA's devices, allocated in the pod's claim
        count = self.cluster.gpu_count[row]
        busy = self.cluster.gpu_busy[row, :count]
        return self._devices_on(self.cluster.gpu_free[row, :count], pod, proposed,
                                busy=None if np.isnan(busy).all() else busy)  # no reading: no order to follow

    def _devices_on(self, free: np.ndarray, pod: PodFacts, proposed: int | None = None, *,
                    busy: np.ndarray | None = None) -> tuple[Device, ...]:
        """Whole GPUs: the idle ones, the less busy first (`busy`: each GPU's live utilization, NaN unknown).
        A share: the GPU the gpuPolicy ranks first, blended with how idle it is as the seed's node score blends
        them (7 parts policy, 3 parts idleness), unless the proposing plugin (FGD) chose already."""
        if pod.gpu_milli and proposed is not None and proposed < free.size and free[proposed] >= pod.gpu_milli:
            return (Device(proposed, pod.gpu_milli),)
        idleness = None if busy is None else 1.0 - np.nan_to_num(busy, nan=utilization.UNKNOWN)
        if pod.gpus:
            idle = np.flatnonzero(free == GPU_MILLI)
            if idleness is not None:
                idle = idle[np.argsort(-idleness[idle], kind="stable")]
            return tuple(Device(int(i), GPU_MILLI) for i in sorted(idle[: pod.gpus].tolist()))
        if pod.gpu_milli:
            candidates = np.flatnonzero(free >= pod.gpu_milli)
            left = (free[candidates] - pod.gpu_milli) / GPU_MILLI
            policy = 1.0 - left if self.scheduling.gpu_policy == "binpack" else left
            rank = 7 * policy + (3 * idleness[candidates] if idleness is not None else 0.0)
            return (Device(int(candidates[np.argmax(rank)]), pod.gpu_milli),)
        return ()

    def evaluate(self, pod: PodFacts, node_names: list[str], *, score: bool = True
                 ) -> tuple[list[str], dict[str, tuple[str, str]], dict[str, float]]:
        """Filter and score only `node_names`, as kube-scheduler asks an extender about its candidates.

        The filters in plugins.KUBE_SCHEDULER_FILTERS and the scores in plugins.KUBE_SCHEDULER_SCORES are left
        out: kube-scheduler has evaluated those itself.

        Returns the feasible names (input order, duplicates dropped); for each rejected node the
        first filter that rejects it and that filter's reasons for it, joined with ", "; and for
        each feasible node the weighted score as an average over the plugins' weights, 0..100.
        Names the model does not hold appear in none of the three. Changes nothing.
        """
        cluster = self.cluster
        names = [name for name in dict.fromkeys(node_names) if name in cluster.index]
        if pod.problems:
            reason = "; ".join(pod.problems)
            return [], {name: ("PodProblems", reason) for name in names}, {}
        rows = np.array([cluster.index[name] for name in names], dtype=np.int64)
        if score:
            self.workload.observe(pod)
        cycle = self._cycle(pod)
        alive = np.ones(rows.size, dtype=bool)
        failed: dict[str, tuple[str, str]] = {}
        for filter_name, filter_plugin in plugins.FILTERS:
            if not alive.any():
                break
            if filter_name in plugins.KUBE_SCHEDULER_FILTERS:
                continue
            reasons: dict[int, list[str]] = {}
            for mask, reason in filter_plugin(cycle):
                for hit in np.flatnonzero(mask[rows] & alive):
                    reasons.setdefault(int(hit), []).append(reason)
            for position, texts in reasons.items():
                failed[names[position]] = (filter_name, ", ".join(texts))
                alive[position] = False
        feasible_rows = rows[alive]
        feasible = [names[int(kept)] for kept in np.flatnonzero(alive)]
        if not score or not feasible:
            return feasible, failed, {}
        _allocate_for_scores(cycle, feasible_rows)
        total = np.zeros(feasible_rows.size)
        weights = 0
        for name, plugin, weight in self.scores:
            if name in plugins.KUBE_SCHEDULER_SCORES:
                continue
            total += weight * plugin(cycle, feasible_rows)
            weights += weight
        average = total / weights if weights else total
        return feasible, failed, {name: float(value) for name, value in zip(feasible, average)}


def _allocate_for_scores(cycle: plugins.Cycle, rows: np.ndarray) -> None:
    """For an extender: kube-scheduler has allocated the pod's claims (its DynamicResources decided which nodes
    can take them), so ours never refuses a node for them; it allocates them on the feasible `rows` only to score
    them by our device policy (dra-devices, dra-demand). A node where ours finds no allocation scores 0 there."""
    if plugins.dynamic_resources_pre(cycle) is not None or "dra" not in cycle.extras:
        return
    alive = np.zeros(cycle.rows, dtype=bool)
    alive[rows] = True
    cycle.extras["alive"] = alive
    plugins.dynamic_resources(cycle)


def _pre_filtered(cycle: plugins.Cycle) -> str | None:
    """The message of the first pre-filter that rejects the pod whatever the node, or None."""
    return next((message for _, pre_filter in plugins.PRE_FILTERS if (message := pre_filter(cycle)) is not None), None)


def _unschedulable(nodes: int, reasons: Counter[str]) -> str:
    parts = [f"{count} {reason}" for reason, count in sorted(reasons.items(), key=lambda item: (-item[1], item[0]))]
    return f"0/{nodes} nodes are available: {', '.join(parts)}."
