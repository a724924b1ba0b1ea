"""Preemption, as kube-scheduler's DefaultPreemption decides it (k8s.io/kubernetes v1.36, plugins/defaultpreemption and
framework/preemption), over the core's model, and aware of GPU devices.

For a pod that fits nowhere: the candidate nodes are those whose rejection evicting pods may cure
(plugins.RESOLVABLE_BY_PREEMPTION); on each, every pod of strictly lower priority is taken away and, if the pod then
fits (every filter re-run on that node, so a share fits only where the victims free enough of one GPU, whole GPUs
only where they free idle devices), the victims are reprieved one by one, most important first, those whose
PodDisruptionBudget would be violated first, keeping each reprieved pod that still lets the pod fit. Then one node
is picked by upstream's order (fewest budget violations, lowest highest victim priority, smallest priority sum,
fewest victims), with one criterion of ours before the last tie-break: the least GPU room left stranded on partly
used devices. Upstream's last tie-break, the latest start of the earliest victim, follows; then the first name.

Pure: the model is changed only for a moment (victims taken away, then put back as they were), never left changed.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_core import fields, podaffinity
from scheduler_core.nodes import GPU_MILLI
from scheduler_core.pods import PodFacts

NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
PRIORITY_OFFSET = 2**31  # upstream adds MaxInt32 + 1 to each priority it sums, so negative priorities sum right


@dataclass(frozen=True)
class Budget:
    """A PodDisruptionBudget, as preemption reads it."""

    namespace: str
    selector: podaffinity.Selector  # None or empty: selects nothing
    allowed: int  # status.disruptionsAllowed
    disrupted: frozenset[str]  # status.disruptedPods: names the apiserver already counted

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Budget:
        meta, spec, status = (fields.mapping(obj.get(part)) for part in ("metadata", "spec", "status"))
        selector = spec.get("selector")
        allowed = status.get("disruptionsAllowed")
        return cls(str(meta.get("namespace") or "default"),
                   podaffinity.parse_selector(selector) if selector is not None else None,
                   allowed if isinstance(allowed, int) else 0,
                   frozenset(str(name) for name in fields.mapping(status.get("disruptedPods"))))


@dataclass(frozen=True)
class Victims:
    """One candidate node: the pods to evict there, most important first, and how many budgets that violates."""

    node: str
    pods: tuple[PodFacts, ...]
    pdb_violations: int
    stranded: int = 0  # thousandths of GPU this preemption leaves free on partly used devices, beyond those before


def eligible(pod: PodFacts, cluster: Any = None, *, nominated_unresolvable: bool = False) -> str | None:
    """PodEligibleToPreemptOthers: why the pod may not preempt, or None. A pod whose nominated node still has a
    lower-priority pod terminating by preemption waits for it, rather than evict more, unless that node can no
    longer take it whatever is evicted (`nominated_unresolvable`)."""
    if pod.never_preempts:
        return NEVER
    row = cluster.index.get(pod.nominated_node) if cluster is not None and pod.nominated_node else None
    if row is not None and not nominated_unresolvable:
        for uid in cluster.node_pods.get(row, ()):
            other = cluster.assignments[uid].pod
            if other.priority < pod.priority and other.preempted:
                return TERMINATING
    return None


def started_at(pod: PodFacts) -> tuple[int, int]:
    """status.startTime as (seconds, nanoseconds) since the epoch, to compare instants written with any fraction;
    a pod without one counts as started now, later than any that has one (upstream's GetPodStartTime)."""
    match = _RFC3339.fullmatch(pod.started or "")
    if match is None:
        return (2**62, 0)
    seconds = datetime.datetime.strptime(match["seconds"], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    offset = 0
    if match["zone"] not in ("Z", "z"):
        sign = 1 if match["zone"][0] == "+" else -1
        offset = sign * (int(match["zone"][1:3]) * 3600 + int(match["zone"][4:6]) * 60)
    return (int(seconds.timestamp()) - offset, int((match["fraction"] or "").ljust(9, "0")[:9]))


_RFC3339 = re.compile(r"(?P<seconds>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<fraction>\d+))?(?P<zone>[Zz]|[+-]\d\d:\d\d)")


def more_important_first(pods: Iterable[PodFacts]) -> list[PodFacts]:
    """MoreImportantPod: higher priority first, then the earlier start (a pod not started yet counts as now)."""
    return sorted(pods, key=lambda pod: (-pod.priority, started_at(pod)))


def violating(pods: Sequence[PodFacts], budgets: Sequence[Budget]) -> tuple[list[PodFacts], list[PodFacts]]:
    """filterPodsWithPDBViolation: (pods whose eviction would violate a budget, the others), order kept. Each pod a
    budget selects uses one of its allowed disruptions, unless the apiserver counted it already."""
    allowed = [budget.allowed for budget in budgets]
    bad: list[PodFacts] = []
    good: list[PodFacts] = []
    for pod in pods:
        violated = False
        if pod.labels:
            for i, budget in enumerate(budgets):
                if budget.namespace != pod.namespace or not budget.selector \
                        or not podaffinity.selects(budget.selector, pod.labels):
                    continue
                if pod.key.partition("/")[2] in budget.disrupted:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (bad if violated else good).append(pod)
    return bad, good


class Evaluator:
    """Preemption over one framework's model. `fits(pod, row)` runs every filter for the pod on one node."""

    def __init__(self, framework: Any):
        self.framework = framework
        self.cluster = framework.cluster

    def candidates(self, pod: PodFacts, budgets: Sequence[Budget] = (), rows: Iterable[int] | None = None
                   ) -> list[Victims]:
        """DryRunPreemption over `rows` (default: every node whose rejection preemption may cure)."""
        found = []
        for row in self.framework.preemptible_rows(pod) if rows is None else rows:
            victims = self.select_victims(pod, int(row), budgets)
            if victims is not None:
                found.append(victims)
        return found

    def select_victims(self, pod: PodFacts, row: int, budgets: Sequence[Budget] = ()) -> Victims | None:
        """SelectVictimsOnNode: the fewest lower-priority pods whose eviction lets `pod` fit on `row`, or None."""
        cluster = self.cluster
        lower = [cluster.assignments[uid] for uid in sorted(cluster.node_pods.get(row, ()))
                 if cluster.assignments[uid].pod.priority < pod.priority]
        if not lower:
            return None
        node = cluster.node(row).name
        removed = {assignment.pod.identity: assignment for assignment in lower}
        for uid in removed:
            cluster.unassign(uid)
        try:
            if not self.framework.fits(pod, row):
                return None
            bad, good = violating(more_important_first(a.pod for a in lower), budgets)
            victims: list[PodFacts] = []
            violations = 0
            for candidate in bad + good:
                assignment = removed[candidate.identity]
                cluster.assign(assignment.pod, node, assignment.devices)
                if self.framework.fits(pod, row):
                    del removed[candidate.identity]  # reprieved: stays
                    continue
                cluster.unassign(candidate.identity)
                victims.append(candidate)
                violations += candidate in bad
            if not victims:  # every pod reprieved: the pod fits as the node is, no candidate (preemption.go:445)
                return None
            if bad and good:
                victims = more_important_first(victims)
            return Victims(node, tuple(victims), violations, self._stranded(pod, row, [removed[v.identity]
                                                                                        for v in victims]))
        finally:
            for assignment in removed.values():
                cluster.assign(assignment.pod, node, assignment.devices)

    def _stranded(self, pod: PodFacts, row: int, victims: Sequence[Any]) -> int:
        """How many more thousandths of GPU this preemption leaves free on partly used devices of the node (the
        victims gone, as now, and the pod on its devices) than there are with the victims: the fragmentation it
        leaves behind."""
        cluster = self.cluster
        now = cluster.gpu_free[row, : cluster.gpu_count[row]].copy()
        before, after = now.copy(), now.copy()
        for assignment in victims:
            for device in assignment.devices:
                before[device.index] -= device.milli
        for device in self.framework.devices_for(pod, row):
            after[device.index] -= device.milli
        return stranded_of(after) - stranded_of(before)

    def pick(self, candidates: Sequence[Victims]) -> Victims | None:
        """pickOneNodeForPreemption, with the least stranded GPU room before the latest-start tie-break."""
        if not candidates:
            return None

        def earliest_start(victims: Victims) -> tuple[int, int]:
            """GetEarliestPodStartTime: the earliest start among the victims of the highest priority."""
            top = max(pod.priority for pod in victims.pods)
            return min(started_at(pod) for pod in victims.pods if pod.priority == top)

        keys = [
            lambda v: -v.pdb_violations,
            lambda v: -max(pod.priority for pod in v.pods),
            lambda v: -sum(pod.priority + PRIORITY_OFFSET for pod in v.pods),
            lambda v: -len(v.pods),
            lambda v: -v.stranded,
        ]
        remaining = sorted(candidates, key=lambda v: v.node)
        for key in keys:
            best = max(key(v) for v in remaining)
            remaining = [v for v in remaining if key(v) == best]
            if len(remaining) == 1:
                return remaining[0]
        latest = max(earliest_start(v) for v in remaining)
        return next(v for v in remaining if earliest_start(v) == latest)

    def preempt(self, pod: PodFacts, budgets: Sequence[Budget] = ()) -> Victims | str:
        """The node to free for `pod` and its victims, or why there is none (upstream's words)."""
        reason = eligible(pod, self.cluster)
        if reason is not None:
            return reason
        chosen = self.pick(self.candidates(pod, budgets))
        if chosen is None:
            return f"0/{self.cluster.node_count} nodes are available: {NOT_HELPFUL}."
        return chosen


def stranded_of(free: np.ndarray) -> int:
    """Thousandths free on partly used devices."""
    return int(free[(free > 0) & (free < GPU_MILLI)].sum())
