"""Preemption of one pod, as kube-scheduler's DefaultPreemption (plugins/defaultpreemption, v1.36): a PostFilter
that, for a pod fitting nowhere, picks a node and the pods of lower priority to evict there
(scheduler_core.preemption decides), nominates the pod to it and evicts the victims on an evictor thread; and a
PreEnqueue that keeps the pod out of the queue while its preemption is under way, so it never evicts twice.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import watching
from gpu_scheduler.runtime import metrics, writes
from gpu_scheduler.runtime.framework import Handle, Plugin
from scheduler_core import preemption, watched

log = logging.getLogger(__name__)


class DefaultPreemption(Plugin):
    name = "DefaultPreemption"

    def __init__(self, handle: Handle, *, evictors: int = 8):
        super().__init__(handle)
        self.under_way = writes.UnderWay()
        # each preemption is a few writes in order, for one pod at a time
        self.evictor = ThreadPoolExecutor(evictors, thread_name_prefix="evictor")

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
        if facts.problems or facts.unsupported:  # no node was looked at: nothing for preemption to weigh
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
