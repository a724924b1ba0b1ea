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

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduler_core import fields, podaffinity
from scheduler_core.cluster import Assignment
from scheduler_core.nodes import GPU_MILLI
from scheduler_core.pods import PodFacts

NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
PRIORITY_OFFSET = 2**31  # upstream adds MaxInt32 + 1 to each priority it sums, so negative priorities sum right
MIN_CANDIDATES_PERCENTAGE = 10  # DefaultPreemptionArgs' defaults: the dry run stops once it has found this share of
MIN_CANDIDATES_ABSOLUTE = 100  # the nodes as candidates, and at least this many


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
    return fields.instant(pod.started or "")



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
    """Preemption over one framework's model (its filters decide whether the pod fits a node with pods gone)."""

    def __init__(self, framework: Any, *, min_percentage: int = MIN_CANDIDATES_PERCENTAGE,
                 min_absolute: int = MIN_CANDIDATES_ABSOLUTE):
        self.framework = framework
        self.cluster = framework.cluster
        self.min_percentage = min_percentage  # DefaultPreemptionArgs
        self.min_absolute = min_absolute
        self.statuses: dict[int, str] = {}  # row -> why the last dry run found no victims there
        # the last shape of pod dry-run (see _dry_run), and per row: the row's state then, its victims or why none
        self._kept_shape: Any = None
        self._kept: dict[int, tuple[int, Victims | None, str | None]] = {}
        self._stranded: dict[tuple[Any, ...], int] = {}  # see stranded: by node and its state, victims, pod's GPUs

    def candidates(self, pod: PodFacts, budgets: Sequence[Budget] = (), rows: Iterable[int] | None = None,
                   offset: int = 0, nominees: Sequence[tuple[PodFacts, str]] = (),
                   also: Iterable[int] = ()) -> list[Victims]:
        """DryRunPreemption over `rows` (default: every node whose rejection preemption may cure), walked from the
        `offset`-th on, round, as upstream walks them one at a time: candidates violating no budget and those
        violating some are kept apart, each list up to calculateNumCandidates long, and the walk stops once there
        is one of the first kind and as many in all. The nodes are evaluated a chunk of that length at a time, with
        the pods nominated to them (`nominees`) of the pod's priority or higher. `also`: rows that fit only without
        those nominated pods, potential too."""
        self.statuses = {}
        potential = [int(row) for row in (self.framework.preemptible_rows(pod) if rows is None else rows)]
        if also:
            potential = sorted(set(potential) | {int(row) for row in also})
        if not potential:
            return []
        start = offset % len(potential)
        potential = potential[start:] + potential[:start]
        wanted = self.wanted(len(potential))
        clean: list[Victims] = []
        violating_budgets: list[Victims] = []
        for first in range(0, len(potential), wanted):
            by_row = self._dry_run(pod, potential[first: first + wanted], budgets, nominees)
            for row in potential[first: first + wanted]:
                victims = by_row.get(row)
                if victims is None:
                    continue
                kept = violating_budgets if victims.pdb_violations else clean
                if len(kept) < wanted:
                    kept.append(victims)
                if clean and len(clean) + len(violating_budgets) >= wanted:
                    return clean + violating_budgets
        return clean + violating_budgets

    def _dry_run(self, pod: PodFacts, rows: list[int], budgets: Sequence[Budget],
                 nominees: Sequence[tuple[PodFacts, str]]) -> dict[int, Victims]:
        """SelectVictimsOnNode for each of `rows`, with the pods nominated there added. For a pod whose fit reads
        only requests and devices, a node's answer is kept for the next pod of the same shape, until that node or
        its pods change (Cluster.row_state): a burst of like pods walks the same nodes (upstream's own dry run
        redoes each)."""
        cluster = self.cluster
        there = [(nominee, node) for nominee, node in nominees
                 if _counts_against(nominee, node, pod, cluster) and cluster.index[node] in rows]
        if not _node_local(pod, cluster):
            with reserving(cluster, there, pod):
                return {row: victims for row in rows if (victims := self.select_victims(pod, row, budgets))}
        shape = _shape(pod, budgets)
        if shape != self._kept_shape:
            self._kept, self._kept_shape = {}, shape
        reserved = {cluster.index[node] for _, node in there}
        state = cluster.row_state
        todo = [row for row in rows if row in reserved or shape is None or row not in self._kept
                or self._kept[row][0] != state[row]]
        with reserving(cluster, there, pod):
            found = self._victims_at_once(pod, todo, budgets)
        if shape is not None:
            for row in todo:
                if row not in reserved:
                    self._kept[row] = (int(state[row]), found.get(row), self.statuses.get(row))
        done = set(todo)
        for row in rows:
            if row not in found and row in self._kept and row not in done:
                _, victims, status = self._kept[row]
                if victims is not None:
                    found[row] = victims
                elif status is not None:
                    self.statuses[row] = status
        return found

    def wanted(self, potential: int) -> int:
        """calculateNumCandidates: how many candidates the dry run looks for among `potential` nodes."""
        wanted = max(potential * self.min_percentage // 100, self.min_absolute)
        return min(wanted, potential)

    def _victims_at_once(self, pod: PodFacts, rows: Sequence[int], budgets: Sequence[Budget]) -> dict[int, Victims]:
        """SelectVictimsOnNode for many nodes in one pass per step: each node's lower-priority pods set aside
        together (their requests and devices only: `_node_local`), the k-th of each node put back together."""
        cluster = self.cluster
        aside: dict[int, dict[str, Any]] = {}  # row -> uid -> assignment, while set aside
        assignments, priority = cluster.assignments, pod.priority
        for row in rows:
            placed = ((uid, assignments[uid]) for uid in sorted(cluster.node_pods.get(row, ())))
            lower = {uid: assignment for uid, assignment in placed if assignment.pod.priority < priority}
            if lower:
                aside[row] = lower
            else:
                self.statuses[row] = NO_VICTIMS
        cluster.set_aside([assignment for lower in aside.values() for assignment in lower.values()])
        try:
            fitting = self.framework.fitting(pod)
            self.statuses.update(self.framework.first_rejections(pod, [row for row in aside if not fitting[row]]))
            split = {row: violating(more_important_first(a.pod for a in lower.values()), budgets)
                     for row, lower in aside.items() if fitting[row]}
            orders = {row: bad + good for row, (bad, good) in split.items()}  # the order of the reprieves
            victims: dict[int, list[PodFacts]] = {row: [] for row in orders}
            violations = dict.fromkeys(orders, 0)
            steps = max(map(len, orders.values()), default=0)
            for step in range(steps):
                trying = {row: order[step] for row, order in orders.items() if step < len(order)}
                cluster.put_back([aside[row].pop(candidate.identity) for row, candidate in trying.items()])
                fitting = self.framework.fitting(pod)
                evicted = [(row, candidate) for row, candidate in trying.items() if not fitting[row]]  # others stay
                for row, candidate in evicted:
                    aside[row][candidate.identity] = cluster.assignments[candidate.identity]
                    victims[row].append(candidate)
                    violations[row] += candidate in split[row][0]
                cluster.set_aside([aside[row][candidate.identity] for row, candidate in evicted])
            found = {}
            for row, chosen in victims.items():
                if not chosen:
                    self.statuses[row] = f'expected at least one victim pod on node "{cluster.node(row).name}"'
                    continue
                bad, good = split[row]
                if bad and good:
                    chosen = more_important_first(chosen)
                found[row] = Victims(cluster.node(row).name, tuple(chosen), violations[row])
            return found
        finally:
            cluster.put_back([assignment for lower in aside.values() for assignment in lower.values()])

    def select_victims(self, pod: PodFacts, row: int, budgets: Sequence[Budget] = ()) -> Victims | None:
        """SelectVictimsOnNode: the fewest lower-priority pods whose eviction lets `pod` fit on `row`, or None."""
        cluster = self.cluster
        lower = [cluster.assignments[uid] for uid in sorted(cluster.node_pods.get(row, ()))
                 if cluster.assignments[uid].pod.priority < pod.priority]
        if not lower:
            self.statuses[row] = NO_VICTIMS
            return None
        node = cluster.node(row).name
        removed = {assignment.pod.identity: assignment for assignment in lower}
        for uid in removed:
            cluster.unassign(uid)
        try:
            if not self.framework.fits(pod, row):
                self.statuses.update(self.framework.first_rejections(pod, [row]))
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
                self.statuses[row] = f'expected at least one victim pod on node "{node}"'
                return None
            if bad and good:
                victims = more_important_first(victims)
            return Victims(node, tuple(victims), violations)
        finally:
            for assignment in removed.values():
                cluster.assign(assignment.pod, node, assignment.devices)

    def stranded(self, pod: PodFacts, victims: Victims) -> int:
        """How many more thousandths of GPU evicting `victims` and placing `pod` leaves free on partly used devices
        of that node than there are now: the fragmentation the preemption leaves behind. The model is as it is now,
        the victims in place."""
        cluster = self.cluster
        row = cluster.index[victims.node]
        key = (row, int(cluster.row_state[row]), tuple(victim.identity for victim in victims.pods), pod.gpus,
               pod.gpu_milli, self.framework.scheduling.gpu_policy)
        if key not in self._stranded:
            if len(self._stranded) > 100_000:
                self._stranded.clear()
            self._stranded[key] = self._stranded_now(pod, row, victims)
        return self._stranded[key]

    def _stranded_now(self, pod: PodFacts, row: int, victims: Victims) -> int:
        cluster = self.cluster
        before = cluster.gpu_free[row, : cluster.gpu_count[row]].copy()
        now = stranded_of(before)
        for victim in victims.pods:
            assignment = cluster.assignments.get(victim.identity)
            for device in assignment.devices if assignment is not None else ():
                before[device.index] += device.milli
        after = before.copy()
        for device in self.framework.devices_on(before, pod):
            after[device.index] -= device.milli
        return stranded_of(after) - now

    def pick(self, candidates: Sequence[Victims], pod: PodFacts | None = None) -> Victims | None:
        """pickOneNodeForPreemption; given the `pod`, with the least stranded GPU room before the latest-start
        tie-break (worked out only for the candidates still tied by then)."""
        if not candidates:
            return None

        def earliest_start(victims: Victims) -> tuple[int, int]:
            """GetEarliestPodStartTime: the earliest start among the victims of the highest priority."""
            top = max(victim.priority for victim in victims.pods)
            return min(started_at(victim) for victim in victims.pods if victim.priority == top)

        keys = [
            lambda v: -v.pdb_violations,
            lambda v: -max(victim.priority for victim in v.pods),
            lambda v: -sum(victim.priority + PRIORITY_OFFSET for victim in v.pods),
            lambda v: -len(v.pods),
        ]
        if pod is not None:
            keys.append(lambda v: -self.stranded(pod, v))
        remaining = sorted(candidates, key=lambda v: v.node)
        for key in keys:
            best = max(key(v) for v in remaining)
            remaining = [v for v in remaining if key(v) == best]
            if len(remaining) == 1:
                return remaining[0]
        latest = max(earliest_start(v) for v in remaining)
        return next(v for v in remaining if earliest_start(v) == latest)

    def preempt(self, pod: PodFacts, budgets: Sequence[Budget] = (), *, offset: int = 0,
                nominees: Sequence[tuple[PodFacts, str]] = (), also: Iterable[int] = ()) -> Victims | str:
        """The node to free for `pod` and its victims, or why there is none (upstream's words: NEVER or TERMINATING
        when the pod may not preempt now, else the nodes counted by why none is a candidate)."""
        potential = self.framework.preemptible_rows(pod) if not pod.never_preempts else np.zeros(0, dtype=np.int64)
        # a nominated node gone, or rejecting the pod for a reason no eviction cures, is no reason to wait for it
        row = self.cluster.index.get(pod.nominated_node or "")
        unresolvable = bool(pod.nominated_node) and (row is None or row not in set(potential.tolist()))
        reason = eligible(pod, self.cluster, nominated_unresolvable=unresolvable)
        if reason is not None:
            return reason
        chosen = self.pick(self.candidates(pod, budgets, potential, offset=offset, nominees=nominees, also=also), pod)
        return chosen if chosen is not None else self.none_found()

    def none_found(self) -> str:
        """Why the last dry run found no candidate, as upstream's FitError: each node under why it is none (a
        node the dry run did not reach, or whose rejection no eviction cures: not helpful)."""
        reasons = Counter(self.statuses.values())
        reasons[NOT_HELPFUL] += self.cluster.node_count - len(self.statuses)
        parts = [f"{count} {reason}" for reason, count in sorted(reasons.items(), key=lambda i: (-i[1], i[0])) if count]
        return f"0/{self.cluster.node_count} nodes are available: {', '.join(parts)}."


def _node_local(pod: PodFacts, cluster: Any) -> bool:
    """Whether the pod fits a node or not by the requests and GPU devices of the pods there alone: no inter-pod
    affinity or hard topology spread of its own, no placed pod's required anti-affinity anywhere, no host ports, no
    volumes (whose filters read the pods' own), no DRA claims or extended resources DRA may serve (whose fit is the
    claim's, not the requests')."""
    return (pod.pod_affinity is None and (pod.topology_spread is None or not pod.topology_spread.hard)
            and not cluster.pod_index.anti_terms and not pod.host_ports and not pod.volumes
            and not pod.resource_claims
            and not any(cluster.dra.serving(r) for ask in pod.extended_asks for r in ask.asks))


def decide(framework: Any, pod: PodFacts, nominees: Sequence[tuple[PodFacts, str]]) -> tuple[Any, dict[int, str]]:
    """A decision that keeps the room nominated to pods of `pod`'s priority or higher, and the rows it left out for
    that, each with its reason. Upstream runs a node's filters with its nominated pods added, and again without
    them; here the decision runs without them, and if the node it chooses has pods nominated to it, every node
    with nominated pods is checked again with them at once: those that refuse the pod are left out and the
    decision runs again. The scores are the same (upstream scores without nominated pods), so the choice is
    upstream's, at the cost of one more decision only when the best node is a nominated one."""
    cluster = framework.cluster
    decision = framework.decide(pod)
    nominated = {node for nominee, node in nominees if _counts_against(nominee, node, pod, cluster)}
    if decision.node is None or decision.node not in nominated:
        return decision, {}
    with reserving(cluster, nominees, pod):
        fitting = framework.fitting(pod)
        rows = {cluster.index[node] for node in nominated}
        excluded = framework.first_rejections(pod, sorted(row for row in rows if not fitting[row]))
        if not excluded:
            row = cluster.index[decision.node]
            return dataclasses.replace(decision, devices=framework.devices_for(pod, row)), {}
    decision = framework.decide(pod, excluded=excluded)
    if decision.node is not None and cluster.index[decision.node] in rows:
        with reserving(cluster, [(n, node) for n, node in nominees if node == decision.node], pod):
            decision = dataclasses.replace(decision, devices=framework.devices_for(pod, cluster.index[decision.node]))
    return decision, excluded


def _shape(pod: PodFacts, budgets: Sequence[Budget]) -> Any:
    """What the filters of a pod whose fit reads only requests and devices read of it, and the budgets: pods of
    one shape have the same victims on a node in the same state. None when it cannot be a key."""
    shape = (pod.namespace, pod.priority, tuple(sorted(pod.requests.items())), pod.gpus, pod.gpu_milli, pod.model,
             pod.models, pod.min_gpu_memory_mib, pod.tolerations, tuple(sorted(pod.node_selector.items())),
             pod.required_terms, pod.spot, pod.problems, tuple(budgets))
    try:
        hash(shape)
    except TypeError:
        return None
    return shape


def _counts_against(nominee: PodFacts, node: str, pod: PodFacts, cluster: Any) -> bool:
    """Whether a nominated pod's room is kept from `pod`: another pod, of its priority or higher, nominated to a
    node the model holds (a nomination may outlive its node), and not placed yet."""
    return (nominee.identity != pod.identity and nominee.priority >= pod.priority and node in cluster.index
            and nominee.identity not in cluster.assignments)


@contextlib.contextmanager
def reserving(cluster: Any, nominees: Iterable[tuple[PodFacts, str]], pod: PodFacts) -> Iterator[None]:
    """The pods a preemption nominated a node for, of `pod`'s priority or higher, accounted on those nodes while
    `pod` is decided (upstream's filters run with them added to the node), so room made for a more important pod
    is not taken meanwhile. Each takes the devices free for it there, as many as there are while victims still
    terminate; the requests it adds keep the rest. Taken away again afterwards. For a pod whose fit reads only
    requests and devices (`_node_local`), only those of the nominated pods are added (Cluster.put_back)."""
    restored: list[str] = []
    light: list[Any] = []  # put back, to be set aside again
    pending: dict[int, Any] = {}  # row -> a light reservation not put back yet

    def put_back() -> None:
        cluster.put_back(list(pending.values()))
        light.extend(pending.values())
        pending.clear()

    light_only = _node_local(pod, cluster)
    try:
        for nominee, node in nominees:
            if not _counts_against(nominee, node, pod, cluster):
                continue
            row = cluster.index[node]
            if light_only:
                if row in pending:  # its devices depend on those of the one before it there
                    put_back()
                pending[row] = Assignment(nominee, row, cluster.first_fit(row, nominee))
            else:
                cluster.restore(dataclasses.replace(nominee, node_name=node, devices=None))
                restored.append(nominee.identity)
        put_back()
        yield
    finally:
        cluster.set_aside(light)
        for uid in restored:
            cluster.unassign(uid)


def stranded_of(free: np.ndarray) -> int:
    """Thousandths free on partly used devices."""
    return int(free[(free > 0) & (free < GPU_MILLI)].sum())
