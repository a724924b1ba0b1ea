"""A gang decision: every member of a pod group placed together over one snapshot, or none.

kube-scheduler's alpha GangScheduling (v1.36, `schedule_one_podgroup.go`) and scheduler-plugins' coscheduling
hold a group's pods until `minMember` of them exist, then place members one by one and let none bind until the
quorum is placed (Permit). Here the whole group is decided at once, beside the framework rather than inside it:
each member in turn by the framework's own filters and scores (GPU- and fragmentation-aware), accounted in the
model before the next is decided, and all taken back at the end, so the caller binds all of them or none.

Members are tried in the tightest topology first, as the locality score prefers pods of one application close:

1. one node (when more than one member is to be placed), the candidates with the least free GPU room first;
2. one domain of `topology.kubernetes.io/zone`, again the tightest that takes them all;
3. the whole cluster.

A Workload-API group with `schedulingConstraints.topology` keys is tried only inside one domain of each key.
Members already placed count toward `minMember`, as they do for coscheduling, and are never placed again.
Pure: the model is changed during a decision and restored before it returns.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler_core import preemption
from scheduler_core.cluster import Assignment
from scheduler_core.framework import Decision, Framework
from scheduler_core.nodes import GPU_MILLI, ZONE_LABEL
from scheduler_core.podgroups import PodGroup
from scheduler_core.pods import PodFacts

NODE_TRIES = 4  # single nodes tried for a gang before its zones: each try costs a decision per member
DOMAIN_TRIES = 8  # domains of one topology key tried, the tightest first


@dataclass(frozen=True)
class GroupDecision:
    """Where a group's members go (`placements`, each member with its decision), which stay pending and why
    (`unplaced`), in which domain (`scope`: "node a-1", "zone eu-1a", "cluster"), or, when none may be placed,
    `reason`: what is short, for the group's event and every member's condition."""

    group: PodGroup
    placements: tuple[tuple[PodFacts, Decision], ...] = ()
    unplaced: tuple[tuple[PodFacts, str], ...] = ()
    scope: str | None = None
    reason: str | None = None


def order(members: Sequence[PodFacts]) -> list[PodFacts]:
    """The order members are placed in: higher priority first (as upstream sorts a group's pods), then the largest
    GPU demand first (large pieces first pack tighter), then by name, so the same group always lands the same."""
    return sorted(members, key=lambda m: (-m.priority, -(m.gpus * GPU_MILLI + m.gpu_milli), m.key))


def missing(group: PodGroup, members: int, placed: int) -> str | None:
    """Why the group waits before any decision: fewer members exist than `minMember` (upstream's PreEnqueue)."""
    exist = members + placed
    if not group.gang or exist >= group.min_member:
        return None
    return (f"gang {group.ref.key}: {exist}/{group.min_member} members exist; waiting for "
            f"{group.min_member - exist} more")


def place(framework: Framework, group: PodGroup, members: Sequence[PodFacts], *, placed: int = 0,
          nominees: Sequence[tuple[PodFacts, str]] = ()) -> GroupDecision:
    """Decide the pending `members` of `group` together, `placed` of its members being placed already. Changes
    nothing. The room nominated to other pods of the members' priority or higher is kept from them."""
    members = order(members)
    if not members:
        return GroupDecision(group)
    waiting = missing(group, len(members), placed)
    if waiting:
        return GroupDecision(group, unplaced=tuple((m, waiting) for m in members), reason=waiting)
    needed = max(group.min_member - placed, 0) if group.gang else 0
    cluster = framework.cluster
    short = _resource_gap(framework, group)
    if short:
        reason = f"gang {group.ref.key}: the cluster's free resources are short of its minResources: {short}"
        return GroupDecision(group, unplaced=tuple((m, reason) for m in members), reason=reason)
    names = {m.identity for m in members}
    others = [(nominee, node) for nominee, node in nominees if nominee.identity not in names]
    with preemption.reserving(cluster, others, members[-1]):
        return _decide(framework, group, members, placed=placed, needed=needed)


def _decide(framework: Framework, group: PodGroup, members: list[PodFacts], *, placed: int,
            needed: int) -> GroupDecision:
    scopes: list[tuple[str, np.ndarray]] = []
    cluster = framework.cluster
    near = {cluster.assignments[uid].node for uid in cluster.group_pods.get(group.ref, ())}  # members placed before
    if group.topology_keys:
        scopes = _domains(framework, members, group.topology_keys, required=True, near=near)
    else:
        if len(members) > 1:
            scopes += _nodes(framework, members, near=near)
        scopes += _domains(framework, members, (ZONE_LABEL,), required=False, near=near)
    for scope, mask in scopes:
        decided, unplaced = _trial(framework, members, mask, stop_at_first_miss=True)
        if not unplaced:
            return GroupDecision(group, tuple(decided), scope=scope)
    if group.topology_keys:
        reason = (f"gang {group.ref.key}: no single domain of {', '.join(group.topology_keys)} takes all "
                  f"{len(members)} pending members")
        return GroupDecision(group, unplaced=tuple((m, reason) for m in members), reason=reason)
    decided, unplaced = _trial(framework, members, None, stop_at_first_miss=False)
    if decided and len(decided) >= needed:
        return GroupDecision(group, tuple(decided), tuple(unplaced), scope="cluster")
    if not group.gang:
        return GroupDecision(group, unplaced=tuple(unplaced), reason=unplaced[0][1])
    fit = placed + len(decided)
    reason = f"gang {group.ref.key}: {fit}/{group.min_member} members fit; {_shortfall(unplaced, needed - len(decided))}"
    return GroupDecision(group, unplaced=tuple((m, reason) for m in members), reason=reason)


@dataclass(frozen=True)
class GangPreemption:
    """Room made for a gang: the node each member is nominated to (those that fit without evictions too), and the
    pods to evict, all of lower priority than the members that need them gone."""

    nominations: tuple[tuple[PodFacts, str], ...]
    victims: tuple[PodFacts, ...]


def preempt(evaluator: preemption.Evaluator, group: PodGroup, members: Sequence[PodFacts], *, placed: int = 0,
            budgets: Sequence[preemption.Budget] = (), nominees: Sequence[tuple[PodFacts, str]] = (),
            offset: int = 0) -> GangPreemption | str:
    """DefaultPreemption for a gang as a unit: evict only if the whole gang then fits. Members are taken in `order`;
    each is placed where it fits as the model is, or else where DefaultPreemption (`evaluator`) would make room for
    it, its victims taken away before the next member is looked at. Once `minMember` members are placed, that is the
    plan; if a member needed for the quorum finds no room, nothing is evicted and the reason says why. The model is
    as it was when this returns."""
    framework = evaluator.framework
    cluster = framework.cluster
    members = order(members)
    needed = max(group.min_member - placed, 0) if group.gang else 1
    names = {m.identity for m in members}
    others = [(nominee, node) for nominee, node in nominees if nominee.identity not in names]
    assigned: list[str] = []
    removed: list[tuple[str, Assignment]] = []
    nominations: list[tuple[PodFacts, str]] = []
    victims: list[PodFacts] = []
    try:
        with preemption.reserving(cluster, others, members[-1]):
            for member in members:
                if len(nominations) >= needed:
                    break
                decision = framework.decide(member)
                node, devices = decision.node, decision.devices
                if node is None:
                    outcome = evaluator.preempt(member, budgets, offset=offset)
                    if isinstance(outcome, str):
                        return (f"preemption: room for {placed + len(nominations)}/{group.min_member} members; "
                                f"{member.key}: {outcome}")
                    node = outcome.node
                    for victim in outcome.pods:
                        taken = cluster.unassign(victim.identity)
                        if taken is not None:
                            removed.append((node, taken))
                            victims.append(victim)
                    devices = framework.devices_for(member, cluster.index[node])
                cluster.assign(dataclasses.replace(member, node_name=node, devices=devices), node, devices)
                assigned.append(member.identity)
                nominations.append((member, node))
    finally:
        for identity in assigned:
            cluster.unassign(identity)
        for node, taken in reversed(removed):
            cluster.assign(taken.pod, node, taken.devices)
    if not victims:
        return "preemption: the gang fits without evicting any pod now"
    return GangPreemption(tuple(nominations), tuple(victims))


def _trial(framework: Framework, members: list[PodFacts], within: np.ndarray | None, *,
           stop_at_first_miss: bool) -> tuple[list[tuple[PodFacts, Decision]], list[tuple[PodFacts, str]]]:
    """Decide each member in turn, each accounted before the next; then take them all back."""
    cluster = framework.cluster
    decided: list[tuple[PodFacts, Decision]] = []
    unplaced: list[tuple[PodFacts, str]] = []
    try:
        for member in members:
            decision = framework.decide(member, within=within)
            if decision.node is None:
                unplaced.append((member, decision.reason or "unschedulable"))
                if stop_at_first_miss:
                    break
                continue
            cluster.assign(dataclasses.replace(member, node_name=decision.node, devices=decision.devices),
                           decision.node, decision.devices)
            if decision.volume_plan is not None:  # the volumes it would bind or provision are not the next one's
                cluster.storage.assume(decision.volume_plan)
            for claim_key, allocation in decision.held_claims(member):  # nor are the devices its claims would hold
                cluster.dra.assume(claim_key, allocation)
            decided.append((member, decision))
    finally:
        for member, decision in decided:
            cluster.unassign(member.identity)
            if decision.volume_plan is not None:
                cluster.storage.forget(decision.volume_plan)
            for claim_key, _ in decision.held_claims(member):
                cluster.dra.forget(claim_key)
    return decided, unplaced


def _demand(members: Sequence[PodFacts]) -> tuple[int, int]:
    """Whole GPUs, and GPU thousandths in all, the members ask for."""
    return sum(m.gpus for m in members), sum(m.gpus * GPU_MILLI + m.gpu_milli for m in members)


def _nodes(framework: Framework, members: list[PodFacts], *, near: set[int]) -> list[tuple[str, np.ndarray]]:
    """Single nodes that could take every member, those of members placed before (`near`) first, then the least
    free GPU room first (at most NODE_TRIES)."""
    cluster = framework.cluster
    whole, milli = _demand(members)
    free = cluster.gpu_free[: cluster.size].sum(axis=1)
    able = framework.fitting(members[0]) & (cluster.whole_free[: cluster.size] >= whole) & (free >= milli)
    rows = np.flatnonzero(able)
    if rows.size == 0:
        return []
    away = np.array([row not in near for row in rows.tolist()])
    chosen = rows[np.lexsort((cluster.ranks()[rows], free[rows], away))][:NODE_TRIES]
    scopes = []
    for row in chosen:
        mask = np.zeros(cluster.size, dtype=bool)
        mask[row] = True
        scopes.append((f"node {cluster.node(int(row)).name}", mask))
    return scopes


def _domains(framework: Framework, members: list[PodFacts], keys: tuple[str, ...], *, required: bool,
             near: set[int]) -> list[tuple[str, np.ndarray]]:
    """The domains of the node labels `keys` (nodes sharing a value of each) with room for every member by GPU
    count, those holding members placed before (`near`) first, then the tightest (at most DOMAIN_TRIES). Unless `required`, a key that puts every node in one domain adds
    nothing over the whole cluster: no domain."""
    cluster = framework.cluster
    present = cluster.present[: cluster.size]
    domain = np.full(cluster.size, -1, dtype=np.int64)
    values: dict[tuple[str, ...], int] = {}
    for row in np.flatnonzero(present):
        labels = cluster.node(int(row)).labels
        value = tuple(labels.get(key) for key in keys)
        if None not in value:
            domain[row] = values.setdefault(value, len(values))  # type: ignore[arg-type]
    if not values or (not required and len(values) == 1 and bool(np.all(domain[present] >= 0))):
        return []
    whole, milli = _demand(members)
    free = cluster.gpu_free[: cluster.size].sum(axis=1)
    whole_free = cluster.whole_free[: cluster.size]
    found = []
    for value, number in values.items():
        mask = domain == number
        room = int(free[mask].sum())
        if int(whole_free[mask].sum()) >= whole and room >= milli:
            found.append((not any(mask[row] for row in near if row < mask.size), room, value, mask))
    found.sort(key=lambda item: (item[0], item[1], item[2]))
    shown = (lambda value: f"zone {value[0]}") if keys == (ZONE_LABEL,) else (
        lambda value: ",".join(f"{key}={v}" for key, v in zip(keys, value)))
    return [(shown(value), mask) for _, _, value, mask in found[:DOMAIN_TRIES]]


def _resource_gap(framework: Framework, group: PodGroup) -> str | None:
    """What of coscheduling's `minResources` the cluster lacks (its pods of the group counted as free, as
    coscheduling counts them): `nvidia.com/gpu 8`; None when nothing is short."""
    if not group.min_resources:
        return None
    cluster = framework.cluster
    present = cluster.present[: cluster.size]
    mine = Counter[str]()
    for uid in cluster.group_pods.get(group.ref, ()):
        mine.update(cluster.assignments[uid].pod.requests)
    gaps = []
    for name, wanted in sorted(group.min_resources.items()):
        column = cluster.column(name)
        have = 0 if column is None else int((cluster.alloc[column, : cluster.size][present]
                                             - cluster.used[column, : cluster.size][present]).sum())
        have += mine.get(name, 0)
        if have < wanted:
            gaps.append(f"{name} {_amount(name, wanted - have)}")
    return ", ".join(gaps) or None


def _amount(name: str, milli: int) -> str:
    return f"{milli}m" if name == "cpu" else f"{-(-milli // 1000)}"


def _shortfall(unplaced: Sequence[tuple[PodFacts, str]], count: int) -> str:
    """`3 x 8 GPUs A100 short`: the members beyond those that fit, by what they ask for, with the reason the first
    of them was given."""
    if count <= 0 or not unplaced:
        return "short"
    shapes = Counter(_shape(member) for member, _ in list(unplaced)[:count])
    parts = [f"{n} x {shape}" for shape, n in sorted(shapes.items(), key=lambda item: (-item[1], item[0]))]
    return f"{', '.join(parts)} short ({unplaced[0][1].rstrip('.')})"


def _shape(member: PodFacts) -> str:
    if member.gpus:
        what = f"{member.gpus} GPU{'s' if member.gpus > 1 else ''}"
    elif member.gpu_milli:
        what = f"{member.gpu_milli / GPU_MILLI:g} GPU"
    else:
        what = "pod"
    return f"{what} {member.model}" if member.model else what
