"""The standalone scheduler against the API: watches in, bindings out.

One loop thread owns the watched model (scheduler_core.watched), the queue and every decision;
node and pod watches and the binder threads only post events to it, so the model needs no locks
and an assumption is never raced by an update. A decision is assumed into the model at once and
bound asynchronously (one Binding that carries the devices annotation, then, once the bindings pause, a
status condition that records them), so the loop never waits on an API round trip. A binding that fails is re-checked: the binder thread reads the pod and reports
what the API says; bound somewhere, the model follows; still pending (the same UID), the pod is
retried after a backoff; gone, or another pod of its name, it is forgotten.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import queue
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import rawapi, watching
from gpu_scheduler.runtime import binding, events, metrics
from scheduler_core import framework, gangs, podgroups, pods, preemption, queueing, volumes, warmup, watched
from webhook import config

log = logging.getLogger(__name__)

REPORT_INTERVAL = 60.0  # seconds between repeated reports of the same unschedulable reason
TRAILING_WAIT = 10.0  # seconds a bound pod's event and devices record wait at most for the bindings to pause
VOLUME_BIND_TIMEOUT = 600.0  # seconds a pod waits for its claims to bind before it is scheduled again (upstream's)
WARMUP_RETRY = 30.0
UNREAD = object()  # after a failed binding: the API could not be asked what became of the pod
EVENT_KINDS = {"node": "Node", "nodes": "Node", "pod": "Pod", "pods": "Pod", "bound": "Pod", "refused": "Pod",
               "unreported": "Pod", "config": "Config", "namespace": "Namespace", "namespaces": "Namespace",
               "volumes-written": "Pod", "preempted": "Pod", "budget": "PodDisruptionBudget",
               "budgets": "PodDisruptionBudget", "group": "PodGroup", "groups": "PodGroup", "gang-cancelled": "Pod",
               "gang-preempted": "PodGroup"}


@dataclasses.dataclass
class GangAttempt:
    """The members of one gang decision being bound. Once one fails, those whose binding has not started go back
    to pending with it (`cancelled`); those bound stay bound and count toward minMember next time."""

    group: podgroups.GroupRef
    cancelled: bool = False


@dataclasses.dataclass
class AwaitingVolumes:
    """A pod whose volume plan was written: it is bound once every claim is (see volumes.settled)."""

    pending: watched.PendingPod
    decision: framework.Decision
    written: dict[str, str]
    deadline: float


class LiveScheduler:
    def __init__(self, api: client.ApiClient, settings: config.Config, *, binder_threads: int = 32,
                 promotions_per_second: float = 20.0, volume_bind_timeout: float = VOLUME_BIND_TIMEOUT):
        self.api = api
        self.core: Any = client.CoreV1Api(api)
        self.settings = settings
        self.model = watched.WatchedCluster(gpu_resources=settings.admission.gpu_resources,
                                            scheduling=settings.scheduling, scheduler_name=settings.scheduler_name,
                                            warm_up=True)
        self.framework = framework.Framework(self.model.cluster, settings.scheduling)
        self.queue = queueing.SchedulingQueue()  # keyed by pod UID, as the model is
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.queued_at: dict[str, float] = {}
        self.reported: dict[str, tuple[str, float]] = {}
        self.warming: dict[str, float] = {}
        self.promotions_per_second = promotions_per_second
        self.binder = ThreadPoolExecutor(binder_threads, thread_name_prefix="binder")
        # Unschedulable reports go through their own small pool, so they never hold up a binding, and at
        # most two at a time compete with the bindings for the apiserver.
        self.reporter = ThreadPoolExecutor(2, thread_name_prefix="reporter")
        # A bound pod's Scheduled event and devices record trail the bindings: they wait until no binding is in
        # flight, up to TRAILING_WAIT, so during a burst the apiserver spends itself on bindings first.
        self.recorder = ThreadPoolExecutor(2, thread_name_prefix="recorder")
        # A PodGroup's event and status go through one thread, in the order they were decided: a group's "Pending"
        # must never land after the "Scheduling" that followed it.
        self.group_writer = ThreadPoolExecutor(1, thread_name_prefix="group-writer")
        # Preemptions are carried out by their own pool: each is a few writes in order, for one pod at a time.
        self.evictor = ThreadPoolExecutor(8, thread_name_prefix="evictor")
        self.binding_now = 0
        self.volume_bind_timeout = volume_bind_timeout
        self.awaiting_volumes: dict[str, AwaitingVolumes] = {}  # by pod UID: plans written, claims not all bound
        self.preemptor = preemption.Evaluator(self.framework)
        # preemptor uid (a gang's GroupRef) -> its victims' uids, from the decision until the watch shows each gone
        # or being deleted by the preemption (None while the API calls are in flight): one preemption at a time
        self.preempting: dict[str | podgroups.GroupRef, set[str] | None] = {}
        self.gang_attempts: dict[str, GangAttempt] = {}  # member uid -> its gang decision, until bound or not
        self.group_reported: dict[podgroups.GroupRef, tuple[str, float]] = {}  # the last FailedScheduling per group
        self.partial_since: dict[podgroups.GroupRef, float] = {}  # gangs partly placed and waiting, since
        self.timed_out: set[podgroups.GroupRef] = set()  # those told they waited past scheduleTimeoutSeconds
        self.bindings_pause = threading.Condition()
        self.stopped = threading.Event()
        self.alive = threading.Event()
        self.identity = f"gpu-scheduler-{uuid.uuid4().hex[:8]}"
        self.watches = watching.ClusterWatches.of_cluster(
            self.core, on_nodes=lambda items: self.events.put(("nodes", items)),
            on_node=lambda kind, obj: self.events.put(("node", kind, obj)),
            on_pods=lambda items: self.events.put(("pods", items)),
            on_pod=lambda kind, obj: self.events.put(("pod", kind, obj)),
            on_namespaces=lambda items: self.events.put(("namespaces", items)),
            on_namespace=lambda kind, obj: self.events.put(("namespace", kind, obj)),
            apps=client.AppsV1Api(api), on_selectors=lambda kind, items: self.events.put(("selectors", kind, items)),
            on_selector=lambda kind, event, obj: self.events.put(("selector", kind, event, obj)),
            storage=client.StorageV1Api(api), on_storage_list=lambda kind, items: self.events.put(("storages", kind, items)),
            on_storage=lambda kind, event, obj: self.events.put(("storage", kind, event, obj)),
            policy=client.PolicyV1Api(api), on_budgets=lambda items: self.events.put(("budgets", items)),
            on_budget=lambda event, obj: self.events.put(("budget", event, obj)),
            custom=client.CustomObjectsApi(api), group_apis=podgroups.APIS,
            on_groups=lambda group_api, items: self.events.put(("groups", group_api, items)),
            on_group=lambda group_api, event, obj: self.events.put(("group", group_api, event, obj)))
        self._loop = threading.Thread(target=self._run, name="scheduling-loop", daemon=True)
        self._last_housekeeping = 0.0  # parked-pool flush, warm-up, pending gauges: once a second

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> LiveScheduler:
        self.watches.start()
        self._loop.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.watches.stop()
        self.binder.shutdown(wait=False, cancel_futures=True)
        self.reporter.shutdown(wait=False, cancel_futures=True)
        self.recorder.shutdown(wait=False, cancel_futures=True)
        self.evictor.shutdown(wait=False, cancel_futures=True)
        self.group_writer.shutdown(wait=False, cancel_futures=True)
        with self.bindings_pause:
            self.bindings_pause.notify_all()  # a record waiting for a pause writes now, not at TRAILING_WAIT

    @property
    def synced(self) -> bool:
        return self.watches.synced

    def configure(self, settings: config.Config) -> None:
        """Called from the config watch: scoring changes apply to the next decision."""
        self.events.put(("config", settings))

    # --- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        """One pod per turn. Scans of the whole queue (the next wake-up, the parked pool, the pending
        gauges) happen only when nothing was ready last turn, or once a second: during a burst of
        thousands of pending pods, a scan per pod would cost more than the decisions."""
        self.alive.set()
        scheduled_last_turn = False
        while not self.stopped.is_set():
            now = time.monotonic()
            if scheduled_last_turn:
                wait: float | None = 0.0  # another pod is likely ready: take what events have come, go on
            else:
                wait = self.queue.next_ready_in(now) if self.synced else None
            self._drain(timeout=1.0 if wait is None else min(wait, 1.0))
            if not self.synced:
                continue
            now = time.monotonic()
            if now - self._last_housekeeping >= 1.0:
                self._last_housekeeping = now
                self.queue.flush_parked(now)
                self._check_volumes()
                self._warm_up()
                parked = self.queue.parked()
                metrics.PENDING.labels("active").set(self.queue.pending() - parked)
                metrics.PENDING.labels("unschedulable").set(parked)
            uid = self.queue.pop(now)
            scheduled_last_turn = uid is not None
            if uid is not None:
                try:
                    self._schedule(uid)
                except Exception:  # a bug must not stop the scheduler: count it and retry later
                    log.exception("scheduling %s failed", self._name(uid))
                    metrics.ATTEMPTS.labels("error").inc()
                    self.queue.failed(uid, time.monotonic(), unschedulable=False)

    def _drain(self, timeout: float) -> None:
        try:
            event = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(event)
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, event: tuple[Any, ...]) -> None:
        """One event into the model; never raises (the model guards each object, this guards the rest)."""
        kind = event[0]
        try:
            if kind == "node":
                self._apply(self.model.node_event(event[1], event[2], now=_now()))
            elif kind == "nodes":
                self._apply(self.model.nodes_relisted(event[1], now=_now()))
            elif kind == "pod":
                self._apply(self.model.pod_event(event[1], event[2], now=_now()))
            elif kind == "pods":
                self._apply(self.model.pods_relisted(event[1], now=_now()))
            elif kind == "namespace":
                self._apply(self.model.namespace_event(event[1], event[2], now=_now()))
            elif kind == "namespaces":
                self._apply(self.model.namespaces_relisted(event[1], now=_now()))
            elif kind == "selector":
                self._apply(self.model.selector_event(event[1], event[2], event[3], now=_now()))
            elif kind == "selectors":
                self._apply(self.model.selectors_relisted(event[1], event[2], now=_now()))
            elif kind == "storage":
                self._apply(self.model.storage_event(event[1], event[2], event[3], now=_now()))
                self._check_volumes()
            elif kind == "storages":
                self._apply(self.model.storage_relisted(event[1], event[2], now=_now()))
                self._check_volumes()
            elif kind == "budget":
                self._apply(self.model.budget_event(event[1], event[2], now=_now()))
            elif kind == "budgets":
                self._apply(self.model.budgets_relisted(event[1], now=_now()))
            elif kind == "group":
                self._apply(self.model.group_event(event[1], event[2], event[3], now=_now()))
            elif kind == "groups":
                self._apply(self.model.groups_relisted(event[1], event[2], now=_now()))
            elif kind == "gang-preempted":
                self._on_gang_preempted(*event[1:])
            elif kind == "gang-cancelled":
                self._on_gang_cancelled(*event[1:])
            elif kind == "preempted":
                self._on_preempted(*event[1:])
            elif kind == "volumes-written":
                self._on_volumes_written(*event[1:])
            elif kind == "bound":
                self._on_bound(*event[1:])
            elif kind == "refused":
                self._on_refused(*event[1:])
            elif kind == "unreported":
                if self.reported.get(event[1], ("",))[0] == event[2]:
                    del self.reported[event[1]]
            elif kind == "config":
                self._on_config(event[1])
        except Exception:
            rejected = (event[1] if kind in ("selector", "selectors", "storage", "storages")
                        else EVENT_KINDS.get(kind, str(kind)))
            self.model.rejected[rejected] += 1
            log.exception("handling a %s event failed; going on", kind)
        for facts, message in self.model.take_conflicts():
            namespace, _, name = facts.key.partition("/")
            self.reporter.submit(self._record_event, watched.PendingPod(namespace, name, facts.uid, facts),
                                 "Warning", "GPUDevicesConflict", message)

    def _apply(self, change: watched.Change) -> None:
        """The model's change, applied to the queue."""
        for uid in change.settled:
            self._forget_pending(uid)
        for uid, priority in change.queued.items():
            self.queued_at.setdefault(uid, time.monotonic())
            self.queue.add(uid, priority)
        if change.freed:
            self.queue.cluster_changed()

    def _forget_pending(self, uid: str) -> None:
        self.queue.remove(uid)
        self.gang_attempts.pop(uid, None)
        self.preempting.pop(uid, None)
        self.reported.pop(uid, None)
        self.queued_at.pop(uid, None)

    def _name(self, uid: str) -> str:
        pending = self.model.pending.get(uid)
        return pending.key if pending is not None else uid

    def _on_config(self, settings: config.Config) -> None:
        if settings.scheduler_name != self.settings.scheduler_name:
            log.warning("schedulerName changed to %s: restart the scheduler to serve the new name",
                        settings.scheduler_name)
        self.settings = dataclasses.replace(settings, scheduler_name=self.settings.scheduler_name)
        self.framework.configure(settings.scheduling)
        self.model.configure(settings.scheduling)
        self.queue.cluster_changed()

    # --- scheduling and binding -----------------------------------------------------------------

    def _schedule(self, uid: str) -> None:
        pending = self.model.pending.get(uid)
        if pending is None:
            self.queue.done(uid)
            return
        if uid in self.preempting and self._still_preempting(uid):
            self.queue.failed(uid, time.monotonic(), unschedulable=True)  # waits for its victims (upstream's
            return                                                        # PreEnqueue keeps it out meanwhile)
        nominees = self.model.nominees()
        if pending.facts.group is not None and self._schedule_gang(pending.facts.group, nominees):
            return
        decision, excluded = preemption.decide(self.framework, pending.facts, nominees)
        if decision.node is None:
            metrics.ATTEMPTS.labels("unschedulable").inc()
            self.queue.failed(uid, time.monotonic(), unschedulable=True)
            self._preempt_or_report(pending, decision.reason or "unschedulable", nominees, list(excluded))
            return
        self._assume_and_bind(pending, decision)

    def _assume_and_bind(self, pending: watched.PendingPod, decision: framework.Decision) -> None:
        """Account the decision in the model at once; bind (after the volume writes its plan needs) on a binder."""
        assert decision.node is not None
        plan = decision.volume_plan
        changes = volumes.writes(self.model.cluster.storage, plan) if plan else []
        self.model.assume(pending.facts, decision.node, decision.devices, now=_now())
        self._binding_started()
        if plan:
            self.model.cluster.storage.assume(plan)
            self.binder.submit(self._write_volumes, pending, decision, changes)
        else:
            self.binder.submit(self._bind, pending, decision)

    # --- gangs ----------------------------------------------------------------------------------

    def _schedule_gang(self, ref: podgroups.GroupRef, nominees: list[tuple[Any, str]]) -> bool:
        """A member of a pod group came up: the whole group is decided at once (scheduler_core.gangs), all its
        placed members assumed and bound, or none. False for a group that is no gang (the Workload API's basic
        policy): its pods go one by one."""
        group, members, placed = self.model.gang(ref)
        if group is not None and not group.gang:
            return False
        if group is None:
            message = (self.model.group_problems.get(ref)
                       or f"waiting for PodGroup {ref.key} ({ref.api}) to be created")
            self._gang_waits(ref, None, members, message)
            return True
        if ref in self.preempting and self._still_preempting(ref):  # waits for its victims to go
            now = time.monotonic()
            for member in members:
                self.queue.failed(member.uid, now, unschedulable=True)
            return True
        decision = gangs.place(self.framework, group, [m.facts for m in members], placed=placed, nominees=nominees)
        if decision.reason is not None:
            metrics.GANG_ATTEMPTS.labels("unschedulable").inc()
            reason = decision.reason
            if not gangs.missing(group, len(members), placed) and members:
                reason = self._preempt_for_gang(group, members, placed, nominees, reason)
            self._gang_waits(ref, group, members, reason, placed=placed)
            return True
        metrics.GANG_ATTEMPTS.labels("scheduled").inc()
        self.preempting.pop(ref, None)
        self.partial_since.pop(ref, None)
        self.timed_out.discard(ref)
        by_uid = {m.uid: m for m in members}
        attempt = GangAttempt(ref)
        for facts, placement in decision.placements:
            member = by_uid[facts.identity]
            self.gang_attempts[member.uid] = attempt
            self._assume_and_bind(member, placement)
        for facts, reason in decision.unplaced:
            member = by_uid[facts.identity]
            self.queue.failed(member.uid, time.monotonic(), unschedulable=True)
            self._report_unschedulable(member, reason)
        nodes = sorted({placement.node or "" for _, placement in decision.placements})
        message = (f"gang {ref.key}: {len(decision.placements)} member(s) placed ({placed} placed before, "
                   f"minMember {group.min_member}) in {decision.scope}: {', '.join(nodes)}")
        log.info("%s", message)
        self.group_reported.pop(ref, None)
        self.group_writer.submit(self._write_group, group, "Normal", "Scheduled", message, scheduled=True)
        return True

    def _preempt_for_gang(self, group: podgroups.PodGroup, members: list[watched.PendingPod], placed: int,
                          nominees: list[tuple[Any, str]], reason: str) -> str:
        """PostFilter for a gang as a unit (scheduler_core.gangs.preempt): evict only if the whole gang then fits.
        The members are nominated to the nodes made room on; the gang is decided again once its victims are seen
        going. Returns what the members' condition and the group's event say."""
        metrics.PREEMPTION_ATTEMPTS.inc()
        facts = [dataclasses.replace(m.facts, nominated_node=self.model.nominated.get(m.uid) or m.facts.nominated_node)
                 for m in members]
        plan = gangs.preempt(self.preemptor, group, facts, placed=placed, budgets=list(self.model.budgets.values()),
                             nominees=nominees, offset=int(self.framework.rng.integers(1 << 30)))
        if isinstance(plan, str):
            return f"{reason}; {plan}"
        by_uid = {m.uid: m for m in members}
        nominated = [(by_uid[member.identity], node) for member, node in plan.nominations]
        for member, node in nominated:
            self.model.nominate(member.uid, node)
        self.preempting[group.ref] = None
        metrics.PREEMPTION_VICTIMS.observe(len(plan.victims))
        message = (f"{reason}; preempting {len(plan.victims)} pod(s) of lower priority to place the gang: "
                   f"{', '.join(victim.key for victim in plan.victims)}")
        log.info("%s", message)
        self.evictor.submit(self._carry_out_for_gang, group.ref, nominated, plan.victims, message)
        return message

    def _carry_out_for_gang(self, ref: podgroups.GroupRef, nominated: list[tuple[watched.PendingPod, str]],
                            victims: tuple[pods.PodFacts, ...], message: str) -> None:
        """Runs on an evictor thread: every member's nomination first, then each victim marked, deleted and told
        (as _carry_out does for one pod); the first member is named as the preemptor."""
        evicted: set[str] = set()
        try:
            for member, node in nominated:
                self._write_unschedulable(member, message, nominate=node, event=False)
            for victim in victims:
                if not victim.terminating:
                    self._evict(nominated[0][0], victim, victim.node_name or "")
                evicted.add(victim.identity)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("preemption for gang %s stopped: %s", ref, watching.describe_error(err))
            self.events.put(("gang-preempted", ref, None))
            return
        self.events.put(("gang-preempted", ref, evicted))

    def _on_gang_preempted(self, ref: podgroups.GroupRef, evicted: set[str] | None) -> None:
        """The gang's preemption calls are done: its members wait for the victims to go (or, after a failure, the
        gang may try again at once)."""
        if evicted is None:
            self.preempting.pop(ref, None)
            _, members, _ = self.model.gang(ref)
            for member in members:
                self.queue.failed(member.uid, time.monotonic(), unschedulable=False)
            return
        self.preempting[ref] = evicted
        self._still_preempting(ref)

    def _gang_waits(self, ref: podgroups.GroupRef, group: podgroups.PodGroup | None,
                    members: list[watched.PendingPod], message: str, *, placed: int = 0) -> None:
        """No member of the group is placed: each waits parked with the reason in its PodScheduled condition, and
        the group gets one FailedScheduling event (its members each get one while its PodGroup is not there).

        A gang some of whose members are placed already (a binding failed, members were re-created) holds their
        GPUs while the rest waits. Past its scheduleTimeoutSeconds, that is said once on the PodGroup (a
        `GangTimeout` event naming the members holding room; coscheduling's phase `Unknown`, which its API defines
        as exactly this): bound pods are not unbound, and their owner decides what to do."""
        now = time.monotonic()
        for member in members:
            self.queue.failed(member.uid, now, unschedulable=True)
            self._report_unschedulable(member, message, event=group is None)
        if group is None:
            return
        if group.gang and 0 < placed < group.min_member:
            since = self.partial_since.setdefault(ref, now)
            if now - since > group.timeout_seconds and ref not in self.timed_out:
                self.timed_out.add(ref)
                holding = sorted(self.model.cluster.assignments[uid].pod.key
                                 for uid in self.model.cluster.group_pods.get(ref, ()))
                timeout = (f"gang {ref.key}: {placed}/{group.min_member} members placed for more than "
                           f"{group.timeout_seconds} s (scheduleTimeoutSeconds) while the rest cannot be; "
                           f"{', '.join(holding)} hold their room meanwhile")
                log.warning("%s", timeout)
                self.group_writer.submit(self._write_group, group, "Warning", "GangTimeout", timeout, scheduled=False,
                                     phase="Unknown")
        else:
            self.partial_since.pop(ref, None)
            self.timed_out.discard(ref)
        last = self.group_reported.get(ref)
        if last is not None and last[0] == message and now - last[1] < REPORT_INTERVAL:
            return
        self.group_reported[ref] = (message, now)
        self.group_writer.submit(self._write_group, group, "Warning", "FailedScheduling", message, scheduled=False)

    def _write_group(self, group: podgroups.PodGroup, kind: str, reason: str, message: str, *,
                     scheduled: bool, phase: str | None = None) -> None:
        """Runs on a reporter thread: the group's event, and its status where its API has one the scheduler keeps
        (the Workload API's PodGroupScheduled condition, which never goes back from True, as upstream's; the phase
        of a coscheduling PodGroup: Pending until minMember members are placed, then Scheduling)."""
        ref = group.ref
        events.record(self.api, namespace=ref.namespace, name=ref.name, uid=group.uid, kind=kind, reason=reason,
                      message=message, component=self.settings.scheduler_name, instance=self.identity,
                      involved=(ref.api, "PodGroup"))
        status: dict[str, Any] | None = None
        if ref.api == podgroups.WORKLOAD and not (group.scheduled and not scheduled):
            status = {"conditions": [{
                "type": podgroups.PODGROUP_SCHEDULED, "status": "True" if scheduled else "False",
                "reason": "Scheduled" if scheduled else "Unschedulable", "message": message[:events.MAX_MESSAGE],
                "observedGeneration": group.generation, "lastTransitionTime": _timestamp()}]}
        elif ref.api == podgroups.COSCHEDULING and group.phase in (None, "Pending", "Scheduling", "Unknown"):
            status = {"phase": phase or ("Scheduling" if scheduled else "Pending")}
            if scheduled and group.phase != "Scheduling":
                status["scheduleStartTime"] = _timestamp()
        if status is None:
            return
        path = f"/apis/{ref.api}/namespaces/{quote(ref.namespace)}/podgroups/{quote(ref.name)}/status"
        patch: dict[str, Any] = {"status": status}
        if group.uid:
            patch["metadata"] = {"uid": group.uid}  # fails on another PodGroup of its name (uid is immutable)
        try:  # a built-in type merges conditions by type; a custom resource takes a merge patch
            rawapi.request(self.api, "PATCH", path, patch, content_type=rawapi.STRATEGIC_MERGE_PATCH
                           if ref.api == podgroups.WORKLOAD else rawapi.MERGE_PATCH)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("cannot update the status of PodGroup %s: %s", ref, watching.describe_error(err))

    # --- preemption -----------------------------------------------------------------------------

    def _preempt_or_report(self, pending: watched.PendingPod, reason: str, nominees: list[tuple[Any, str]],
                           excluded: list[int]) -> None:
        """PostFilter: a pod that fits nowhere may make room by evicting pods of lower priority (DefaultPreemption),
        the room nominated to pods of its priority or higher kept (`excluded`: rows it fits only without them)."""
        facts = dataclasses.replace(pending.facts, nominated_node=self.model.nominated.get(pending.uid)
                                    or pending.facts.nominated_node)
        if facts.problems or facts.unsupported:  # no node was looked at: nothing for preemption to weigh
            self._report_unschedulable(pending, reason)
            return
        metrics.PREEMPTION_ATTEMPTS.inc()
        outcome = self.preemptor.preempt(facts, list(self.model.budgets.values()),
                                         offset=int(self.framework.rng.integers(1 << 30)), nominees=nominees,
                                         also=excluded)
        if outcome in (preemption.NEVER, preemption.TERMINATING):  # not eligible: a nomination stands
            self._report_unschedulable(pending, f"{reason} preemption: {outcome}")
            return
        if isinstance(outcome, str):  # no candidate: a nomination it had is released
            released = facts.nominated_node is not None
            self.model.nominate(pending.uid, None)
            self._report_unschedulable(pending, f"{reason} preemption: {outcome}", nominate="" if released else None)
            return
        node = outcome.node
        self.model.nominate(pending.uid, node)
        cleared = [(nominee, n) for nominee, n in nominees if n == node and nominee.priority < facts.priority]
        for nominee, _ in cleared:
            self.model.nominate(nominee.identity, None)
        if cleared:
            self.queue.cluster_changed()  # they may fit elsewhere now
        self.preempting[pending.uid] = None
        metrics.PREEMPTION_VICTIMS.observe(len(outcome.pods))
        log.info("pod %s preempts %d pod(s) on %s: %s", pending.key, len(outcome.pods), node,
                 ", ".join(victim.key for victim in outcome.pods))
        self.reported[pending.uid] = (reason, time.monotonic())
        self.evictor.submit(self._carry_out, pending, reason, outcome,
                             [self.model.pending[n.identity] for n, _ in cleared if n.identity in self.model.pending])

    def _still_preempting(self, uid: str | podgroups.GroupRef) -> bool:
        """Whether the pod's (the gang's) last preemption is still under way: its API calls in flight, or a victim
        the watch does not show gone or being deleted yet."""
        victims = self.preempting[uid]
        if victims is not None:
            assignments = self.model.cluster.assignments
            victims -= {v for v in victims if v not in assignments or assignments[v].pod.terminating}
            if not victims:
                del self.preempting[uid]
                return False
        return True

    def _carry_out(self, pending: watched.PendingPod, reason: str, chosen: preemption.Victims,
                   cleared: list[watched.PendingPod]) -> None:
        """Runs on an evictor thread, as kube-scheduler carries out a preemption: first the nomination (so a
        scheduler restarted midway finds it, and waits for the victims instead of evicting more), then each victim
        marked DisruptionTarget and deleted with its own grace period, with a Preempted event; last, the
        nominations of lower-priority pods on that node cleared."""
        evicted: set[str] = set()
        try:
            self._write_unschedulable(pending, reason, nominate=chosen.node)
            for victim in chosen.pods:
                if not victim.terminating:
                    self._evict(pending, victim, chosen.node)
                evicted.add(victim.identity)
            for other in cleared:
                self._write_nomination(other, None)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("preemption for %s on %s stopped: %s", pending.key, chosen.node, watching.describe_error(err))
            self.events.put(("preempted", pending.uid, None))
            return
        self.events.put(("preempted", pending.uid, evicted))

    def _evict(self, preemptor: watched.PendingPod, victim: Any, node: str) -> None:
        namespace, _, name = victim.key.partition("/")
        condition = {"type": "DisruptionTarget", "status": "True", "reason": pods.PREEMPTED,
                     "message": f"{self.settings.scheduler_name}: preempting to accommodate a higher priority pod",
                     "lastTransitionTime": _timestamp()}
        try:
            # the uid in the patch makes it fail on another pod of the victim's name (422: uid is immutable)
            self._patch_status(namespace, name, {"metadata": {"uid": victim.identity},
                                                 "status": {"conditions": [condition]}})
            rawapi.request(self.api, "DELETE", _pod_path(namespace, name),
                           {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": victim.identity}})
        except ApiException as err:
            if err.status in (404, 409, 422):  # gone already, or another pod of its name now: nothing to evict
                log.info("victim %s of %s not evicted: %s", victim.key, preemptor.key, watching.describe_error(err))
                return
            raise
        events.record(self.api, namespace=namespace, name=name, uid=victim.identity, kind="Normal",
                      reason="Preempted", message=f"Preempted by pod {preemptor.uid} on node {node}",
                      component=self.settings.scheduler_name, instance=self.identity)

    def _on_preempted(self, uid: str, evicted: set[str] | None) -> None:
        """The preemption's API calls are done: wait for the watch to show the victims going (`evicted`), or,
        after a failure, let the pod try again at once."""
        if evicted is None or uid not in self.model.pending:
            self.preempting.pop(uid, None)
            if evicted is None:  # the pod must not wait parked for a change its own failed preemption never made
                self.queue.failed(uid, time.monotonic(), unschedulable=False)
            return
        self.preempting[uid] = evicted
        self._still_preempting(uid)

    def _write_nomination(self, pending: watched.PendingPod, node: str | None) -> None:
        self._patch_status(pending.namespace, pending.name, {"status": {"nominatedNodeName": node}})

    def _patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        rawapi.request(self.api, "PATCH", f"{_pod_path(namespace, name)}/status", patch,
                       content_type=rawapi.STRATEGIC_MERGE_PATCH)

    # --- binding --------------------------------------------------------------------------------

    def _write_volumes(self, pending: watched.PendingPod, decision: framework.Decision,
                       changes: list[volumes.Write]) -> None:
        """Runs on a binder thread: what kube-scheduler's VolumeBinding PreBind writes (a chosen volume's claimRef, a
        claim's selected node), before the pod is bound; the loop then waits for the claims to bind
        (_check_volumes) without holding a thread."""
        try:
            written = binding.write_volumes(self.api, changes)
        except (ApiException, HTTPError, OSError, ValueError) as err:
            self.events.put(("refused", pending, decision, err, self._read(pending)))
            return
        finally:
            self._binding_done()
        self.events.put(("volumes-written", pending, decision, written))

    def _on_volumes_written(self, pending: watched.PendingPod, decision: framework.Decision,
                            written: dict[str, str]) -> None:
        self.awaiting_volumes[pending.uid] = AwaitingVolumes(pending, decision, written,
                                                             time.monotonic() + self.volume_bind_timeout)
        self._check_volumes()

    def _check_volumes(self) -> None:
        """Bind the pods whose claims have all bound; schedule again those whose volumes failed (provisioning
        failed, a volume taken by another claim) or did not bind in time, as kube-scheduler's PreBind does."""
        storage, now = self.model.cluster.storage, time.monotonic()
        for uid, waiting in list(self.awaiting_volumes.items()):
            plan = waiting.decision.volume_plan
            assert plan is not None
            if uid not in self.model.assumed:  # deleted, or bound by someone else meanwhile
                del self.awaiting_volumes[uid]
                storage.forget(plan)
                continue
            row = self.model.cluster.index.get(plan.node)
            labels = self.model.cluster.node(row).labels if row is not None else None
            state = (volumes.settled(storage, plan, waiting.written, labels) if labels is not None
                     else f'node "{plan.node}" is gone')
            if state is False and now < waiting.deadline:
                continue
            del self.awaiting_volumes[uid]
            storage.forget(plan)
            if state is True:
                self._binding_started()
                self.binder.submit(self._bind, waiting.pending, waiting.decision)
                continue
            reason = state if isinstance(state, str) else (
                f"timed out after {self.volume_bind_timeout:.0f} s waiting for the claims to bind")
            self._volumes_failed(waiting.pending, f'running PreBind plugin "VolumeBinding": binding volumes: {reason}')

    def _volumes_failed(self, pending: watched.PendingPod, message: str) -> None:
        log.warning("pod %s: %s; scheduling it again", pending.key, message)
        self._apply(self.model.forget(pending.uid, pending=pending))
        metrics.ATTEMPTS.labels("error").inc()
        self.queue.failed(pending.uid, time.monotonic(), unschedulable=False)
        self._report_unschedulable(pending, message)

    def _binding_started(self) -> None:
        with self.bindings_pause:
            self.binding_now += 1

    def _binding_done(self) -> None:
        with self.bindings_pause:
            self.binding_now -= 1
            if self.binding_now == 0:
                self.bindings_pause.notify_all()

    def _bind(self, pending: watched.PendingPod, decision: framework.Decision) -> None:
        """Runs on a binder thread: bind, with the devices annotation. Reports back to the loop; after a
        failure, with what the API says of the pod now (read here, so the loop never waits on the API).

        The devices travel on the Binding (see gpu_scheduler.runtime.binding): one call, and no pod is
        ever bound without its devices, so a restart restores them from the pod. Then the devices are
        recorded where tenants cannot rewrite them (a status condition), with the Scheduled event, by the
        recorder pool once the bindings pause (_record_bound). Until its record lands, a pod is still told
        apart from a tenant's edit by its managed fields (scheduler_core.watched).
        """
        try:
            attempt = self.gang_attempts.get(pending.uid)
            if attempt is not None and attempt.cancelled:  # another member of its gang failed to bind
                self.events.put(("gang-cancelled", pending, decision))
                return
            binding.bind(self.api, namespace=pending.namespace, name=pending.name, uid=pending.uid,
                         node=decision.node or "", devices=decision.devices)
        except (ApiException, HTTPError, OSError) as err:
            self.events.put(("refused", pending, decision, err, self._read(pending)))
            return
        finally:
            self._binding_done()
        self.events.put(("bound", pending, decision.node))
        self.recorder.submit(self._record_bound, pending, decision)

    def _record_bound(self, pending: watched.PendingPod, decision: framework.Decision) -> None:
        """Runs on a recorder thread: the devices record and the Scheduled event of a bound pod, written when
        no binding is in flight or after TRAILING_WAIT. Each is a write the apiserver handles (and
        watchers, this scheduler too, hear of) like a binding; during a burst they would take its time from
        the bindings of the pods still waiting, which kube-scheduler's event sink, one write per pod, does not."""
        with self.bindings_pause:
            self.bindings_pause.wait_for(lambda: self.binding_now == 0 or self.stopped.is_set(),
                                         timeout=TRAILING_WAIT)
        if decision.devices:
            binding.record_devices(self.api, namespace=pending.namespace, name=pending.name, uid=pending.uid,
                                   devices=decision.devices)
        self._record_event(pending, "Normal", "Scheduled", f"Successfully assigned {pending.key} to {decision.node}")

    def _read(self, pending: watched.PendingPod) -> Any:
        """The pod as the API has it (None: not found), or UNREAD when the API cannot be asked."""
        try:
            return binding.read_pod(self.core, namespace=pending.namespace, name=pending.name)
        except ApiException as err:
            if err.status == 404:
                return None
            log.warning("cannot read %s after its binding failed: %s", pending.key, watching.describe_error(err))
        except (HTTPError, OSError, ValueError) as err:
            log.warning("cannot read %s after its binding failed: %s", pending.key, watching.describe_error(err))
        return UNREAD

    def _on_bound(self, pending: watched.PendingPod, node: str) -> None:
        self.gang_attempts.pop(pending.uid, None)
        self.model.finish_binding(pending.uid, now=_now())
        metrics.ATTEMPTS.labels("scheduled").inc()
        started = self.queued_at.pop(pending.uid, None)
        if started is not None:
            metrics.LATENCY.observe(time.monotonic() - started)
        self.queue.done(pending.uid)
        self.reported.pop(pending.uid, None)

    def _on_gang_cancelled(self, pending: watched.PendingPod, decision: framework.Decision) -> None:
        """A gang member not bound because another failed: pending again, and its group retried after a backoff."""
        self.gang_attempts.pop(pending.uid, None)
        self._apply(self.model.forget(pending.uid, pending=pending))
        if pending.uid in self.model.pending:
            self.queue.failed(pending.uid, time.monotonic(), unschedulable=False)

    def _on_refused(self, pending: watched.PendingPod, decision: framework.Decision, error: Exception,
                    seen: Any) -> None:
        """The binding failed: the model follows what the API says of the pod (`seen`), and a pod still
        pending is retried after a backoff, not dropped."""
        uid = pending.uid
        metrics.BIND_ERRORS.labels(str(getattr(error, "status", None) or type(error).__name__)).inc()
        attempt = self.gang_attempts.pop(uid, None)
        if attempt is not None and not attempt.cancelled:
            attempt.cancelled = True  # the members of its gang not bound yet go back to pending with it
            log.warning("gang %s: member %s failed to bind; its members not bound yet are scheduled again",
                        attempt.group.key, pending.key)
        node = decision.node
        if decision.volume_plan:  # a refused volume write: the claimRefs and selected nodes it assumed go too
            self.model.cluster.storage.forget(decision.volume_plan)
        if seen is UNREAD:
            self._apply(self.model.forget(uid, pending=pending))
        else:
            self._apply(self.model.confirm(uid, seen, now=_now()))
        if uid in self.model.pending:
            log.warning("binding %s to %s failed (%s); will retry", pending.key, node, watching.describe_error(error))
            self.queue.failed(uid, time.monotonic(), unschedulable=False)
            return
        where = ("gone" if seen is None or (seen.get("metadata") or {}).get("uid") != uid
                 else f"bound to {(seen.get('spec') or {}).get('nodeName')}")
        log.info("binding %s to %s refused (%s); the API has it %s", pending.key, node,
                 watching.describe_error(error), where)
        self.queue.done(uid)
        self._forget_pending(uid)

    def _report_unschedulable(self, pending: watched.PendingPod, message: str, *, nominate: str | None = None,
                              event: bool = True) -> None:
        """PodScheduled=False and (unless not `event`) a FailedScheduling event, not more than once per
        REPORT_INTERVAL for the same message; `nominate` "" clears the pod's nominated node in the same write."""
        now = time.monotonic()
        last = self.reported.get(pending.uid)
        if nominate is None and last is not None and last[0] == message and now - last[1] < REPORT_INTERVAL:
            return
        self.reported[pending.uid] = (message, now)
        self.reporter.submit(self._report, pending, message, nominate, event)

    def _report(self, pending: watched.PendingPod, message: str, nominate: str | None, event: bool = True) -> None:
        try:
            self._write_unschedulable(pending, message, nominate=nominate, event=event)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("cannot set PodScheduled=False on %s: %s", pending.key, watching.describe_error(err))
            self.events.put(("unreported", pending.uid, message))  # say it again at the next attempt

    def _write_unschedulable(self, pending: watched.PendingPod, message: str, *, nominate: str | None = None,
                             event: bool = True) -> None:
        """PodScheduled=False with the reason (and, given `nominate`, status.nominatedNodeName: a node, or "" to
        clear it), then (unless not `event`) the FailedScheduling event."""
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": _timestamp()}
        status: dict[str, Any] = {"conditions": [condition]}
        if nominate is not None:
            status["nominatedNodeName"] = nominate or None
        self._patch_status(pending.namespace, pending.name, {"status": status})
        if event:
            self._record_event(pending, "Warning", "FailedScheduling", message)

    def _record_event(self, pending: watched.PendingPod, kind: str, reason: str, message: str) -> None:
        events.record(self.api, namespace=pending.namespace, name=pending.name, uid=pending.uid, kind=kind,
                      reason=reason, message=message, component=self.settings.scheduler_name,
                      instance=self.identity)

    # --- deletion-cost warm-up ------------------------------------------------------------------

    def _warm_up(self) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        budget = int(self.promotions_per_second)
        clock = time.monotonic()
        candidates = self.model.warm
        for uid in [uid for uid in self.warming if uid not in candidates]:
            del self.warming[uid]
        for uid, candidate in list(candidates.items()):
            if budget <= 0:
                return
            if clock - self.warming.get(uid, -WARMUP_RETRY) < WARMUP_RETRY:
                continue
            patch = warmup.due(candidate, now=now, warmup=self.settings.scheduling.warmup)
            if patch is None:
                continue
            self.warming[uid] = clock
            budget -= 1
            self.reporter.submit(self._promote, candidate, patch)

    def _promote(self, candidate: warmup.Candidate, patch: list[dict[str, Any]]) -> None:
        try:
            rawapi.request(self.api, "PATCH", _pod_path(candidate.namespace, candidate.name), patch,
                           content_type=rawapi.JSON_PATCH)
            metrics.PROMOTIONS.labels("promoted").inc()
        except ApiException as err:
            result = "skipped" if err.status == 422 else "error"  # 422: the test op failed, a user changed it
            metrics.PROMOTIONS.labels(result).inc()
            log.info("deletion cost of %s not raised: %s", candidate.key, watching.describe_error(err))
        except (HTTPError, OSError) as err:
            metrics.PROMOTIONS.labels("error").inc()
            log.warning("deletion cost of %s not raised: %s", candidate.key, err)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"


def _timestamp() -> str:
    return _now().strftime("%Y-%m-%dT%H:%M:%SZ")
