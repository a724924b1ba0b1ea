"""Preemption, in both modes.

For `gpu-scheduler run`, as kube-scheduler's DefaultPreemption (plugins/defaultpreemption, v1.36): a PostFilter
that, for a pod fitting nowhere, picks a node and the pods of lower priority to evict there
(scheduler_core.preemption decides), nominates the pod to it and evicts the victims on an evictor thread; and a
PreEnqueue that keeps the pod out of the queue while its preemption is under way, so it never evicts twice.

For the extender's `/preempt` (`victims_needed`): kube-scheduler's own DefaultPreemption has chosen candidates
knowing nothing of GPU devices; each is kept only where its victims free room the pod can use by our filters, with
only the victims that takes, reprieved in upstream's order.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import watching
from gpu_scheduler.runtime import metrics, writes
from gpu_scheduler.runtime.framework import Plugin, SchedulerHandle
from scheduler_core import cluster, pods, preemption, watched
from scheduler_core import framework as core

log = logging.getLogger(__name__)


class DefaultPreemption(Plugin):
    name = "DefaultPreemption"

    handle: SchedulerHandle

    def __init__(self, handle: SchedulerHandle, *, evictors: int = 8):
        super().__init__(handle)
        self.under_way = writes.UnderWay()
        # each preemption is a few writes in order, for one pod at a time
        self.evictor = ThreadPoolExecutor(evictors, thread_name_prefix="evictor")

    def watches(self, put: Callable[[tuple[Any, ...]], None]) -> list[watching.Reflector]:
        """PodDisruptionBudgets, whose violations rank the candidates."""
        return [watching.budget_watch(client.PolicyV1Api(self.handle.api), lambda items: put(("budgets", items)),
                                      lambda event, obj: put(("budget", event, obj)))]

    def stop(self) -> None:
        self.evictor.shutdown(wait=False, cancel_futures=True)

    def pod_settled(self, uid: str) -> None:
        self.under_way.drop(uid)

    def pre_enqueue(self, pending: watched.PendingPod) -> str | None:
        if self.under_way.still(pending.uid, self.handle.model.cluster.assignments):
            return "waiting for the victims of its preemption to go"
        return None

    def post_filter(self, pending: watched.PendingPod, reason: str, nominees: list[tuple[Any, str]],
                    excluded: list[int]) -> bool:
        """Make room by evicting pods of lower priority, the room nominated to pods of its priority or higher kept
        (`excluded`: rows it fits only without them)."""
        handle = self.handle
        model = handle.model
        facts = dataclasses.replace(pending.facts, nominated_node=model.nominated.get(pending.uid)
                                    or pending.facts.nominated_node)
        if facts.problems:  # no node was looked at: nothing for preemption to weigh
            return False
        metrics.PREEMPTION_ATTEMPTS.inc()
        outcome = handle.preemptor.preempt(facts, list(model.budgets.values()),
                                           offset=int(handle.framework.rng.integers(1 << 30)), nominees=nominees,
                                           also=excluded)
        if outcome in (preemption.NEVER, preemption.TERMINATING):  # not eligible: a nomination stands
            handle.report_unschedulable(pending, f"{reason} preemption: {outcome}")
            return True
        if isinstance(outcome, str):  # no candidate: a nomination it had is released
            released = facts.nominated_node is not None
            model.nominate(pending.uid, None)
            handle.report_unschedulable(pending, f"{reason} preemption: {outcome}", nominate="" if released else None)
            return True
        node = outcome.node
        model.nominate(pending.uid, node)
        cleared = [(nominee, n) for nominee, n in nominees if n == node and nominee.priority < facts.priority]
        for nominee, _ in cleared:
            model.nominate(nominee.identity, None)
        if cleared:
            handle.queue.cluster_changed()  # they may fit elsewhere now
        self.under_way.start(pending.uid)
        metrics.PREEMPTION_VICTIMS.observe(len(outcome.pods))
        log.info("pod %s preempts %d pod(s) on %s: %s", pending.key, len(outcome.pods), node,
                 ", ".join(victim.key for victim in outcome.pods))
        handle.remember_report(pending.uid, reason)
        self.evictor.submit(self._carry_out, pending, reason, outcome,
                            [model.pending[n.identity] for n, _ in cleared if n.identity in model.pending])
        return True

    def _carry_out(self, pending: watched.PendingPod, reason: str, chosen: preemption.Victims,
                   cleared: list[watched.PendingPod]) -> None:
        """On an evictor thread, as kube-scheduler carries out a preemption: first the nomination (so a scheduler
        restarted midway finds it, and waits for the victims instead of evicting more), then each victim evicted
        (writes.evict); last, the nominations of lower-priority pods on that node cleared."""
        handle = self.handle
        evicted: set[str] = set()
        try:
            handle.write_unschedulable(pending, reason, nominate=chosen.node)
            for victim in chosen.pods:
                if not victim.terminating:
                    writes.evict(handle.api, victim, preemptor_key=pending.key, preemptor_uid=pending.uid,
                                 node=chosen.node, scheduler_name=handle.settings.scheduler_name,
                                 identity=handle.identity)
                evicted.add(victim.identity)
            for other in cleared:
                writes.patch_status(handle.api, other.namespace, other.name, {"status": {"nominatedNodeName": None}})
        except (ApiException, HTTPError, OSError) as err:
            log.warning("preemption for %s on %s stopped: %s", pending.key, chosen.node, watching.describe_error(err))
            handle.post(self._carried_out, pending.uid, None)
            return
        handle.post(self._carried_out, pending.uid, evicted)

    def _carried_out(self, uid: str, evicted: set[str] | None) -> None:
        """On the loop: wait for the watch to show the victims going (`evicted`), or, after a failure, let the pod
        try again at once."""
        if evicted is None or uid not in self.handle.model.pending:
            self.under_way.drop(uid)
            if evicted is None:  # the pod must not wait parked for a change its own failed preemption never made
                self.handle.queue.failed(uid, time.monotonic(), unschedulable=False)
            return
        self.under_way.carried_out(uid, evicted)
        self.under_way.still(uid, self.handle.model.cluster.assignments)


def victims_needed(model: watched.WatchedCluster, framework: core.Framework, facts: pods.PodFacts, node: str,
                   given: tuple[str, ...], pdb_violations: int) -> tuple[str, tuple[tuple[str, ...], int] | None]:
    """For one candidate node of kube-scheduler's preemption (its victims by UID, most important first, and the
    budgets they violate), under the extender's lock: ("dropped", None) when, with the victims the model holds on
    `node` gone, our filters still refuse the pod there; else the victims it needs and their violations:
    "trimmed" when fewer than given, "kept" when all of them (or when we would spare every one: kube-scheduler sees
    a need we do not). A victim the model does not hold there stays, as given. The model is changed only for the
    moment, as preemption.Evaluator does."""
    arrays = model.cluster
    row = arrays.index.get(node)
    if row is None or not given:  # a node our filter calls unresolvable (not cached), or nothing to evict
        return "dropped", None
    held = {uid: arrays.assignments[uid] for uid in dict.fromkeys(given)
            if uid in arrays.assignments and arrays.assignments[uid].node == row}
    evicted = dict(held)
    for uid in evicted:
        arrays.unassign(uid)
    try:
        if not _passes(framework, facts, node):
            return "dropped", None
        _reprieve(model, framework, facts, node, row, evicted)
    finally:
        for assignment in evicted.values():
            if assignment.pod.identity not in arrays.assignments:
                arrays.assign(assignment.pod, node, assignment.devices)
    kept = tuple(uid for uid in given if uid not in held or uid in evicted)
    if len(kept) == len(given) or not kept:
        return "kept", (given, pdb_violations)
    budgets = list(model.budgets.values())
    if budgets and all(uid in held for uid in kept):  # recounted when we watch budgets and hold every victim
        violations = len(preemption.violating([held[uid].pod for uid in kept], budgets)[0])
    else:  # else what kube-scheduler counted, at most one per victim left
        violations = min(pdb_violations, len(kept))
    return "trimmed", (kept, violations)


def _reprieve(model: watched.WatchedCluster, framework: core.Framework, facts: pods.PodFacts, node: str, row: int,
              evicted: dict[str, cluster.Assignment]) -> None:
    """Put the victims back one at a time, as upstream's SelectVictimsOnNode reprieves them: those whose eviction
    would violate a PodDisruptionBudget first, each group most important first. One is spared (leaves `evicted`)
    only if the pod still passes our filters and every filter (Framework.fits, kube-scheduler's too) with it there:
    a victim kube-scheduler needed gone is never spared."""
    violating, others = preemption.violating(
        preemption.more_important_first(assignment.pod for assignment in evicted.values()),
        list(model.budgets.values()))
    for victim in [*violating, *others]:
        assignment = evicted[victim.identity]
        model.cluster.assign(assignment.pod, node, assignment.devices)
        if _passes(framework, facts, node) and framework.fits(facts, row):
            del evicted[victim.identity]  # spared: stays
        else:
            model.cluster.unassign(victim.identity)


def _passes(framework: core.Framework, facts: pods.PodFacts, node: str) -> bool:
    """Whether our own filters (not those kube-scheduler has run itself) let the pod onto `node` now."""
    feasible, _, _ = framework.evaluate(facts, [node], score=False)
    return bool(feasible)
