"""Gangs: a pod group placed all at once, or not at all.

A member of a pod group (scheduler_core.podgroups: the Workload API, coscheduling, Volcano, or a rule's annotations)
is decided with its whole group in one step over one snapshot (scheduler_core.gangs, beside the core as upstream's
schedule_one_podgroup.go is beside schedule_one.go): every member reserved and bound, or none. Its points:

  PodGroup    the group's decision, its FailedScheduling or Scheduled event, its status
  PostFilter  a gang that fits nowhere may preempt as a unit, only if every member then fits
  Permit      a member whose sibling failed to bind is not bound (it goes back with the rest)
  Unreserve   the first member that fails sends its unbound siblings back
  tick        the waiting stage's deadline: members placed earlier hold room while the rest cannot be placed; past
              scheduleTimeoutSeconds from when it began, one GangTimeout event on the PodGroup and coscheduling's
              phase Unknown, kept until the group is whole again (bound pods are never unbound)
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import rawapi, watching
from gpu_scheduler.runtime import events, metrics, writes
from gpu_scheduler.runtime.framework import REPORT_INTERVAL, BindingCycle, Plugin, Rejected, SchedulerHandle
from scheduler_core import gangs, podgroups, pods, watched

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Attempt:
    """The members of one gang decision being bound. Once one fails, those whose binding has not started go back
    to pending with it (`cancelled`); those bound stay bound and count toward minMember next time."""

    group: podgroups.GroupRef
    cancelled: bool = False


class Gangs(Plugin):
    name = "Gangs"

    handle: SchedulerHandle

    def __init__(self, handle: SchedulerHandle):
        super().__init__(handle)
        self.attempts: dict[str, Attempt] = {}  # member uid -> its gang decision, until bound or not
        self.under_way = writes.UnderWay()  # gang preemptions, by GroupRef
        self.reported: dict[podgroups.GroupRef, tuple[str, float]] = {}  # the last FailedScheduling per group
        self.partial_since: dict[podgroups.GroupRef, float] = {}  # gangs partly placed and waiting, since
        self.timed_out: set[podgroups.GroupRef] = set()  # told they waited past scheduleTimeoutSeconds
        # A PodGroup's event and status go through one thread, in the order they were decided: a group's "Pending"
        # must never land after the "Scheduling" that followed it.
        self.group_writer = ThreadPoolExecutor(1, thread_name_prefix="group-writer")
        self.evictor = ThreadPoolExecutor(2, thread_name_prefix="gang-evictor")

    def watches(self, put: Callable[[tuple[Any, ...]], None]) -> list[watching.Reflector]:
        """The PodGroups of each API that names groups (scheduler_core.podgroups.APIS), where served."""
        return watching.group_watches(client.CustomObjectsApi(self.handle.api), podgroups.APIS,
                                      lambda api, items: put(("groups", api, items)),
                                      lambda api, event, obj: put(("group", api, event, obj)))

    def stop(self) -> None:
        self.group_writer.shutdown(wait=False, cancel_futures=True)
        self.evictor.shutdown(wait=False, cancel_futures=True)

    # --- the points ------------------------------------------------------------------------------

    def pod_settled(self, uid: str) -> None:
        self.attempts.pop(uid, None)

    def permit(self, cycle: BindingCycle) -> None:
        attempt = self.attempts.get(cycle.uid)
        if attempt is not None and attempt.cancelled:
            raise Rejected(f"another member of gang {attempt.group.key} failed to bind")

    def unreserve(self, cycle: BindingCycle) -> None:
        attempt = self.attempts.pop(cycle.uid, None)
        if attempt is not None and not attempt.cancelled:
            attempt.cancelled = True  # the members of its gang not bound yet go back to pending with it
            log.warning("gang %s: member %s failed to bind; its members not bound yet are scheduled again",
                        attempt.group.key, cycle.pending.key)

    def post_bind(self, cycle: BindingCycle) -> None:
        self.attempts.pop(cycle.uid, None)

    def schedule_group(self, pending: watched.PendingPod, nominees: list[tuple[Any, str]]) -> bool:
        """The whole group decided at once, all its placed members reserved and bound, or none. False for a pod of
        no group, or of a group that is no gang (the Workload API's basic policy): such pods go one by one."""
        ref = pending.facts.group
        if ref is None:
            return False
        handle = self.handle
        group, members, placed = handle.model.gang(ref)
        if group is not None and not group.gang:
            return False
        members = [member for member in members if handle.pre_enqueue(member) is None]  # gated ones wait apart
        if group is None:
            message = (handle.model.group_problems.get(ref)
                       or f"waiting for PodGroup {ref.key} ({ref.api}) to be created")
            self._waits(ref, None, members, message)
            return True
        if self.under_way.still(ref, handle.model.cluster.assignments):  # waits for its victims to go
            now = time.monotonic()
            for member in members:
                handle.queue.failed(member.uid, now, unschedulable=True)
            return True
        decision = gangs.place(handle.framework, group, [m.facts for m in members], placed=placed, nominees=nominees)
        if decision.reason is not None:
            metrics.GANG_ATTEMPTS.labels("unschedulable").inc()
            reason = decision.reason
            if not gangs.missing(group, len(members), placed) and members:
                reason = self._preempt(group, members, placed, nominees, reason)
            self._waits(ref, group, members, reason, placed=placed)
            return True
        metrics.GANG_ATTEMPTS.labels("scheduled").inc()
        self.under_way.drop(ref)
        self.partial_since.pop(ref, None)
        self.timed_out.discard(ref)
        by_uid = {m.uid: m for m in members}
        attempt = Attempt(ref)
        for facts, placement in decision.placements:
            member = by_uid[facts.identity]
            self.attempts[member.uid] = attempt
            handle.reserve_and_bind(member, placement)
        for facts, reason in decision.unplaced:
            member = by_uid[facts.identity]
            handle.queue.failed(member.uid, time.monotonic(), unschedulable=True)
            handle.report_unschedulable(member, reason)
        nodes = sorted({placement.node or "" for _, placement in decision.placements})
        message = (f"gang {ref.key}: {len(decision.placements)} member(s) placed ({placed} placed before, "
                   f"minMember {group.min_member}) in {decision.scope}: {', '.join(nodes)}")
        log.info("%s", message)
        self.reported.pop(ref, None)
        self.group_writer.submit(self._write_group, group, "Normal", "Scheduled", message, scheduled=True)
        return True

    def tick(self, now: float) -> None:
        """The waiting stage's deadline, whether or not a member was tried again meanwhile."""
        for ref, since in list(self.partial_since.items()):
            if ref in self.timed_out:
                continue
            group, _, placed = self.handle.model.gang(ref)
            if group is None or not group.gang or not 0 < placed < group.min_member:
                del self.partial_since[ref]  # whole, or holding no room any more
            elif now - since >= group.timeout_seconds:
                self._time_out(group, placed)

    # --- waiting ---------------------------------------------------------------------------------

    def _waits(self, ref: podgroups.GroupRef, group: podgroups.PodGroup | None, members: list[watched.PendingPod],
               message: str, *, placed: int = 0) -> None:
        """No member of the group is placed: each waits parked with the reason in its PodScheduled condition, and
        the group gets one FailedScheduling event (its members each get one while its PodGroup is not there). A gang
        some of whose members are placed already (a binding failed, members were re-created) enters the waiting
        stage whose deadline `tick` keeps."""
        handle = self.handle
        now = time.monotonic()
        for member in members:
            handle.queue.failed(member.uid, now, unschedulable=True)
            handle.report_unschedulable(member, message, event=group is None)
        if group is None:
            return
        if group.gang and 0 < placed < group.min_member:
            since = self.partial_since.setdefault(ref, now)
            if now - since >= group.timeout_seconds and ref not in self.timed_out:
                self._time_out(group, placed)
        last = self.reported.get(ref)
        if last is not None and last[0] == message and now - last[1] < REPORT_INTERVAL:
            return
        self.reported[ref] = (message, now)
        self.group_writer.submit(self._write_group, group, "Warning", "FailedScheduling", message, scheduled=False,
                                 phase="Unknown" if ref in self.timed_out else None)

    def _time_out(self, group: podgroups.PodGroup, placed: int) -> None:
        """Said once on the PodGroup: a `GangTimeout` event naming the members holding room, and coscheduling's
        phase `Unknown`, which its API defines as exactly this. Their owner decides what to do."""
        ref = group.ref
        self.timed_out.add(ref)
        cluster = self.handle.model.cluster
        holding = sorted(cluster.assignments[uid].pod.key for uid in cluster.group_pods.get(ref, ()))
        message = (f"gang {ref.key}: {placed}/{group.min_member} members placed for more than "
                   f"{group.timeout_seconds} s (scheduleTimeoutSeconds) while the rest cannot be; "
                   f"{', '.join(holding)} hold their room meanwhile")
        log.warning("%s", message)
        self.group_writer.submit(self._write_group, group, "Warning", "GangTimeout", message, scheduled=False,
                                 phase="Unknown")

    def _write_group(self, group: podgroups.PodGroup, kind: str, reason: str, message: str, *,
                     scheduled: bool, phase: str | None = None) -> None:
        """On the group writer: the group's event, and its status where its API has one the scheduler keeps (the
        Workload API's PodGroupScheduled condition, which never goes back from True, as upstream's; the phase of a
        coscheduling PodGroup: Pending until minMember members are placed, then Scheduling; Unknown past its
        timeout until whole)."""
        handle = self.handle
        ref = group.ref
        events.record(handle.api, namespace=ref.namespace, name=ref.name, uid=group.uid, kind=kind, reason=reason,
                      message=message, component=handle.settings.scheduler_name, instance=handle.identity,
                      involved=(ref.api, "PodGroup"))
        status: dict[str, Any] | None = None
        if ref.api == podgroups.WORKLOAD and not (group.scheduled and not scheduled):
            status = {"conditions": [{
                "type": podgroups.PODGROUP_SCHEDULED, "status": "True" if scheduled else "False",
                "reason": "Scheduled" if scheduled else "Unschedulable", "message": message[:events.MAX_MESSAGE],
                "observedGeneration": group.generation, "lastTransitionTime": writes.timestamp()}]}
        elif ref.api == podgroups.COSCHEDULING and group.phase in (None, "Pending", "Scheduling", "Unknown"):
            status = {"phase": phase or ("Scheduling" if scheduled else "Pending")}
            if scheduled and group.phase != "Scheduling":
                status["scheduleStartTime"] = writes.timestamp()
        if status is None:
            return
        path = f"/apis/{ref.api}/namespaces/{quote(ref.namespace)}/podgroups/{quote(ref.name)}/status"
        patch: dict[str, Any] = {"status": status}
        if group.uid:
            patch["metadata"] = {"uid": group.uid}  # fails on another PodGroup of its name (uid is immutable)
        try:  # a built-in type merges conditions by type; a custom resource takes a merge patch
            rawapi.request(handle.api, "PATCH", path, patch, content_type=rawapi.STRATEGIC_MERGE_PATCH
                           if ref.api == podgroups.WORKLOAD else rawapi.MERGE_PATCH)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("cannot update the status of PodGroup %s: %s", ref, watching.describe_error(err))

    # --- preemption as a unit --------------------------------------------------------------------

    def _preempt(self, group: podgroups.PodGroup, members: list[watched.PendingPod], placed: int,
                 nominees: list[tuple[Any, str]], reason: str) -> str:
        """PostFilter for a gang (scheduler_core.gangs.preempt): evict only if the whole gang then fits. The members
        are nominated to the nodes made room on; the gang is decided again once its victims are seen going.
        Returns what the members' condition and the group's event say."""
        handle = self.handle
        metrics.PREEMPTION_ATTEMPTS.inc()
        facts = [dataclasses.replace(m.facts, nominated_node=handle.model.nominated.get(m.uid) or m.facts.nominated_node)
                 for m in members]
        plan = gangs.preempt(handle.preemptor, group, facts, placed=placed, budgets=list(handle.model.budgets.values()),
                             nominees=nominees, offset=int(handle.framework.rng.integers(1 << 30)))
        if isinstance(plan, str):
            return f"{reason}; {plan}"
        by_uid = {m.uid: m for m in members}
        nominated = [(by_uid[member.identity], node) for member, node in plan.nominations]
        for member, node in nominated:
            handle.model.nominate(member.uid, node)
        self.under_way.start(group.ref)
        metrics.PREEMPTION_VICTIMS.observe(len(plan.victims))
        message = (f"{reason}; preempting {len(plan.victims)} pod(s) of lower priority to place the gang: "
                   f"{', '.join(victim.key for victim in plan.victims)}")
        log.info("%s", message)
        self.evictor.submit(self._carry_out, group.ref, nominated, plan.victims, message)
        return message

    def _carry_out(self, ref: podgroups.GroupRef, nominated: list[tuple[watched.PendingPod, str]],
                   victims: tuple[pods.PodFacts, ...], message: str) -> None:
        """On an evictor thread: every member's nomination first, then each victim evicted (writes.evict), the
        first member named as the preemptor."""
        handle = self.handle
        evicted: set[str] = set()
        first = nominated[0][0]
        try:
            for member, node in nominated:
                handle.write_unschedulable(member, message, nominate=node, event=False)
            for victim in victims:
                if not victim.terminating:
                    writes.evict(handle.api, victim, preemptor_key=first.key, preemptor_uid=first.uid,
                                 node=victim.node_name or "", scheduler_name=handle.settings.scheduler_name,
                                 identity=handle.identity)
                evicted.add(victim.identity)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("preemption for gang %s stopped: %s", ref, watching.describe_error(err))
            handle.post(self._carried_out, ref, None)
            return
        handle.post(self._carried_out, ref, evicted)

    def _carried_out(self, ref: podgroups.GroupRef, evicted: set[str] | None) -> None:
        """On the loop: the members wait for the victims to go (or, after a failure, the gang may try again at
        once)."""
        if evicted is None:
            self.under_way.drop(ref)
            _, members, _ = self.handle.model.gang(ref)
            for member in members:
                self.handle.queue.failed(member.uid, time.monotonic(), unschedulable=False)
            return
        self.under_way.carried_out(ref, evicted)
        self.under_way.still(ref, self.handle.model.cluster.assignments)
