"""The standalone scheduler against the API: watches in, bindings out, capabilities as plugins.

One loop thread owns the watched model (scheduler_core.watched), the queue and every decision; the watches, the
binder threads and the plugins' own threads only post events to it, so the model needs no locks and an assumption is
never raced by an update. Each pod goes through the extension points of gpu_scheduler.runtime.framework: the runner
calls every plugin of `plugins.ALL` at each point and knows none by name. A decision is reserved in the model at once
and bound asynchronously by the binding cycle, written once here: Permit, PreBind (which may wait for the cluster
without holding a thread), then one Binding that carries the devices annotation; then, once the bindings pause, a
status condition that records them. Any failure after Reserve runs every plugin's Unreserve. A binding that fails is
re-checked: the binder thread reads the pod and reports what the API says; bound somewhere, the model follows; still
pending (the same UID), the pod is retried after a backoff; gone, or another pod of its name, it is forgotten.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import watching
from gpu_scheduler.runtime import binding, events, inorder, metrics, plugins, writes
from gpu_scheduler.runtime import framework as runtime
from gpu_scheduler.runtime.framework import REPORT_INTERVAL, BindingCycle, Plugin, Rejected, Wait
from scheduler_core import framework, preemption, queueing, watched
from webhook import config

log = logging.getLogger(__name__)

TRAILING_WAIT = 10.0  # seconds a bound pod's event and devices record wait at most for the bindings to pause
UNREAD = object()  # after a failed binding: the API could not be asked what became of the pod

# Watch events: (what a failure counts as in the model's rejected objects; None: the event's own kind), the model's
# verb that takes it.
MODEL_EVENTS: dict[str, tuple[str | None, str]] = {
    "node": ("Node", "node_event"),
    "nodes": ("Node", "nodes_relisted"),
    "pod": ("Pod", "pod_event"),
    "pods": ("Pod", "pods_relisted"),
    "namespace": ("Namespace", "namespace_event"),
    "namespaces": ("Namespace", "namespaces_relisted"),
    "selector": (None, "selector_event"),
    "selectors": (None, "selectors_relisted"),
    "storage": (None, "storage_event"),
    "storages": (None, "storage_relisted"),
    "resource": (None, "resource_event"),
    "resources": (None, "resources_relisted"),
    "budget": ("PodDisruptionBudget", "budget_event"),
    "budgets": ("PodDisruptionBudget", "budgets_relisted"),
    "group": ("PodGroup", "group_event"),
    "groups": ("PodGroup", "groups_relisted"),
}
WAKES_WAITS = frozenset({"storage", "storages", "resource", "resources"})  # events after which waiting PreBinds are checked at once


class LiveScheduler:
    """The runner. Also the plugins' Handle (gpu_scheduler.runtime.framework.Handle)."""

    def __init__(self, api: client.ApiClient, settings: config.Config, *, binder_threads: int = 32,
                 plugin_args: dict[str, dict[str, Any]] | None = None):
        self.api = api
        self.core: Any = client.CoreV1Api(api)
        self.settings = settings
        self.model = watched.WatchedCluster(gpu_resources=settings.admission.gpu_resources,
                                            scheduling=settings.scheduling, scheduler_name=settings.scheduler_name,
                                            warm_up=True)
        self.framework = framework.Framework(self.model.cluster, settings.scheduling)
        self.preemptor = preemption.Evaluator(self.framework)
        self.queue = queueing.SchedulingQueue()  # keyed by pod UID, as the model is
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.queued_at: dict[str, float] = {}
        self.reported: dict[str, tuple[str, float]] = {}
        self.gated: dict[str, str] = {}  # uid -> why a PreEnqueue keeps it out of the queue
        self.waits: dict[str, tuple[BindingCycle, Wait]] = {}  # by uid: a PreBind waiting for the cluster
        self.binder = ThreadPoolExecutor(binder_threads, thread_name_prefix="binder")
        # Unschedulable reports go through their own small pool, so they never hold up a binding, and at
        # most two at a time compete with the bindings for the apiserver.
        self.reporter = ThreadPoolExecutor(2, thread_name_prefix="reporter")
        self.reports = inorder.InOrder(self.reporter)  # one pod's reports reach the API in the order made
        # A bound pod's Scheduled event and devices record trail the bindings: they wait until the burst is over
        # (_record_bound), up to TRAILING_WAIT, so during a burst the apiserver spends itself on bindings first.
        self.recorder = ThreadPoolExecutor(2, thread_name_prefix="recorder")
        self.binding_now = 0
        self.deciding = False  # the loop found a pod ready on its last turn: a burst is under way
        self.bindings_pause = threading.Condition()
        self.stopped = threading.Event()
        self.alive = threading.Event()
        self.identity = f"gpu-scheduler-{uuid.uuid4().hex[:8]}"
        args = plugin_args or {}
        handle: runtime.SchedulerHandle = self  # checked: the runner lends all a plugin of `run` may use
        self.plugins: list[Plugin] = [kind(handle, **args.get(kind.name, {})) for kind in plugins.ALL]
        self.watches = watching.ClusterWatches.of_cluster(
            self.core, on_nodes=lambda items: self.events.put(("nodes", items)),
            on_node=lambda kind, obj: self.events.put(("node", kind, obj)),
            on_pods=lambda items: self.events.put(("pods", items)),
            on_pod=lambda kind, obj: self.events.put(("pod", kind, obj)),
            on_namespaces=lambda items: self.events.put(("namespaces", items)),
            on_namespace=lambda kind, obj: self.events.put(("namespace", kind, obj)),
            apps=client.AppsV1Api(api), on_selectors=lambda kind, items: self.events.put(("selectors", kind, items)),
            on_selector=lambda kind, event, obj: self.events.put(("selector", kind, event, obj)),
            extra=[reflector for plugin in self.plugins for reflector in plugin.watches(self.events.put)])
        self._loop = threading.Thread(target=self._run, name="scheduling-loop", daemon=True)
        self._last_housekeeping = 0.0  # parked-pool flush, plugins' ticks, pending gauges: once a second

    def plugin(self, name: str) -> Plugin:
        return next(plugin for plugin in self.plugins if plugin.name == name)

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> LiveScheduler:
        self.watches.start()
        self._loop.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.watches.stop()
        for pool in (self.binder, self.reporter, self.recorder):
            pool.shutdown(wait=False, cancel_futures=True)
        for plugin in self.plugins:
            plugin.stop()
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
                self._housekeeping(now)
            uid = self.queue.pop(now)
            scheduled_last_turn = uid is not None
            if scheduled_last_turn != self.deciding:
                with self.bindings_pause:
                    self.deciding = scheduled_last_turn
                    self.bindings_pause.notify_all()
            if uid is not None:
                try:
                    self._schedule(uid)
                except Exception:  # a bug must not stop the scheduler: count it and retry later
                    log.exception("scheduling %s failed", self._name(uid))
                    metrics.ATTEMPTS.labels("error").inc()
                    self.queue.failed(uid, time.monotonic(), unschedulable=False)

    def _housekeeping(self, now: float) -> None:
        self._last_housekeeping = now
        self.queue.flush_parked(now)
        self._check_waits()
        for plugin in self.plugins:
            try:
                plugin.tick(now)
            except Exception:
                log.exception("plugin %s failed its tick; going on", plugin.name)
        parked, gated = self.queue.parked(), len(self.gated)
        metrics.PENDING.labels("active").set(self.queue.pending() - parked)
        metrics.PENDING.labels("unschedulable").set(parked - gated)
        metrics.PENDING.labels("gated").set(gated)
        waiting = [since for uid, since in self.queued_at.items() if uid not in self.gated]
        metrics.OLDEST_PENDING.set(now - min(waiting) if waiting else 0.0)

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

    def post(self, call: Callable[..., None], *args: Any) -> None:
        self.events.put(("call", call, *args))

    def _handle(self, event: tuple[Any, ...]) -> None:
        """One event: a watch's into the model, or a call posted by a binder or a plugin; never raises (the model
        guards each object, this guards the rest)."""
        kind = event[0]
        try:
            if kind == "call":
                event[1](*event[2:])
            elif kind == "config":
                self._on_config(event[1])
            else:
                self._apply(getattr(self.model, MODEL_EVENTS[kind][1])(*event[1:], now=writes.now()))
                if kind in WAKES_WAITS:
                    self._check_waits()
        except Exception:
            if kind in MODEL_EVENTS:
                self.model.rejected[MODEL_EVENTS[kind][0] or str(event[1])] += 1
            log.exception("handling %s failed; going on", f"a {kind} event" if kind != "call"
                          else getattr(event[1], "__qualname__", "a call"))
        for facts, message in self.model.take_conflicts():
            namespace, _, name = facts.key.partition("/")
            self.reporter.submit(self.record_event, watched.PendingPod(namespace, name, facts.uid, facts),
                                 "Warning", "GPUDevicesConflict", message)

    def _apply(self, change: watched.Change) -> None:
        """The model's change, applied to the queue. A gated pod that changed is asked again at once: the update
        that lifts its last scheduling gate brings it back without waiting for a cluster change."""
        for uid in change.settled:
            self._forget_pending(uid)
        for uid, priority in change.queued.items():
            self.queued_at.setdefault(uid, time.monotonic())
            self.queue.add(uid, priority)
            if uid in self.gated:
                pending = self.model.pending.get(uid)
                if pending is not None and self.pre_enqueue(pending) is None:
                    del self.gated[uid]
                    self.queue.activate(uid)
        if change.freed:
            self.queue.cluster_changed()

    def _forget_pending(self, uid: str) -> None:
        self.queue.remove(uid)
        self.reported.pop(uid, None)
        self.queued_at.pop(uid, None)
        self.gated.pop(uid, None)
        for plugin in self.plugins:
            plugin.pod_settled(uid)

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
        for plugin in self.plugins:
            plugin.configure(self.settings)
        self.queue.cluster_changed()

    # --- the scheduling cycle -------------------------------------------------------------------

    def pre_enqueue(self, pending: watched.PendingPod) -> str | None:
        gate = self._gate(pending)
        return gate[1] if gate is not None else None

    def _gate(self, pending: watched.PendingPod) -> tuple[Plugin, str] | None:
        """The first plugin whose PreEnqueue keeps the pod out, with its reason."""
        for plugin in self.plugins:
            why = plugin.pre_enqueue(pending)
            if why is not None:
                return plugin, why
        return None

    def _schedule(self, uid: str) -> None:
        pending = self.model.pending.get(uid)
        if pending is None:
            self.queue.done(uid)
            return
        gate = self._gate(pending)
        if gate is not None:  # waits, not attempted (upstream's PreEnqueue)
            self.gated[uid] = gate[1]
            self.queue.failed(uid, time.monotonic(), unschedulable=True)
            if gate[0].reports_waiting:
                self.report_unschedulable(pending, f"0/{self.model.cluster.node_count} nodes are available: "
                                                   f"{gate[1]}.")
            return
        self.gated.pop(uid, None)
        nominees = self.model.nominees()
        if any(plugin.schedule_group(pending, nominees) for plugin in self.plugins):
            return
        decision, excluded = preemption.decide(self.framework, pending.facts, nominees)
        if decision.node is None:
            metrics.ATTEMPTS.labels("unschedulable").inc()
            self.queue.failed(uid, time.monotonic(), unschedulable=True)
            reason = decision.reason or "unschedulable"
            if not any(plugin.post_filter(pending, reason, nominees, list(excluded)) for plugin in self.plugins):
                self.report_unschedulable(pending, reason)
            return
        self.reserve_and_bind(pending, decision)

    # --- the binding cycle ----------------------------------------------------------------------

    def reserve_and_bind(self, pending: watched.PendingPod, decision: framework.Decision,
                         state: dict[str, Any] | None = None) -> None:
        """Reserve (runtime.framework.reserve), then the binding cycle on a binder thread."""
        assert decision.node is not None
        cycle = BindingCycle(pending, decision, dict(state or {}))
        runtime.reserve(self.model, self.plugins, cycle)
        self._binding_started()
        self.binder.submit(self._binding_cycle, cycle)

    def _binding_cycle(self, cycle: BindingCycle) -> None:
        """On a binder thread: Permit, PreBind and Bind (runtime.framework.bind). A PreBind's Wait hands the cycle
        back to the loop until the cluster is ready; it then resumes here at the next plugin. Reports back to the
        loop; after a failure, with what the API says of the pod now (read here, so the loop never waits on the
        API)."""
        try:
            wait = runtime.bind(self.api, self.plugins, cycle)
        except Rejected as err:
            self.post(self._on_rejected, cycle, str(err))
            return
        except (ApiException, HTTPError, OSError, ValueError) as err:
            self.post(self._on_refused, cycle, err, self._read(cycle.pending))
            return
        finally:
            self._binding_done()
        if wait is not None:
            self.post(self._wait, cycle, wait)
            return
        self.post(self._on_bound, cycle)
        self.recorder.submit(self._record_bound, cycle.pending, cycle.decision)

    def _wait(self, cycle: BindingCycle, wait: Wait) -> None:
        self.waits[cycle.uid] = (cycle, wait)
        self._check_waits()

    def _check_waits(self) -> None:
        """Resume the binding cycles whose PreBind waits are over; fail those that failed or timed out, as
        kube-scheduler's PreBind does (the pod is scheduled again)."""
        now = time.monotonic()
        for uid, (cycle, wait) in list(self.waits.items()):
            if uid not in self.model.assumed:  # deleted, or bound by someone else meanwhile
                del self.waits[uid]
                self._unreserve(cycle)
                continue
            state = wait.check()
            if state is False and now < wait.deadline:
                continue
            del self.waits[uid]
            if state is True:
                self._binding_started()
                self.binder.submit(self._binding_cycle, cycle)
            else:
                self._prebind_failed(cycle, state if isinstance(state, str) else wait.timeout)

    def _prebind_failed(self, cycle: BindingCycle, message: str) -> None:
        log.warning("pod %s: %s; scheduling it again", cycle.pending.key, message)
        self._unreserve(cycle)
        self._apply(self.model.forget(cycle.uid, pending=cycle.pending))
        metrics.ATTEMPTS.labels("error").inc()
        self.queue.failed(cycle.uid, time.monotonic(), unschedulable=False)
        self.report_unschedulable(cycle.pending, message)

    def _unreserve(self, cycle: BindingCycle) -> None:
        runtime.unreserve(self.plugins, cycle)

    def _binding_started(self) -> None:
        with self.bindings_pause:
            self.binding_now += 1

    def _binding_done(self) -> None:
        with self.bindings_pause:
            self.binding_now -= 1
            if self.binding_now == 0:
                self.bindings_pause.notify_all()

    def _record_bound(self, pending: watched.PendingPod, decision: framework.Decision) -> None:
        """On a recorder thread: the devices record and the Scheduled event of a bound pod, written once the burst
        is over (no pod ready to decide, no binding in flight) or after TRAILING_WAIT. Each is a write the apiserver
        handles (and watchers, this scheduler too, hear of) like a binding; during a burst they would take its time
        from the bindings of the pods still waiting: the apiserver, not this process, is what limits a burst here
        (benchmarks/scheduler_e2e.py's floor)."""
        with self.bindings_pause:
            self.bindings_pause.wait_for(
                lambda: (self.binding_now == 0 and not self.deciding) or self.stopped.is_set(), timeout=TRAILING_WAIT)
        dra = decision.dra_devices(pending.facts)
        if decision.devices or dra:
            binding.record_devices(self.api, namespace=pending.namespace, name=pending.name, uid=pending.uid,
                                   devices=decision.devices, dra=dra)
        self.record_event(pending, "Normal", "Scheduled", f"Successfully assigned {pending.key} to {decision.node}")

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

    def _on_bound(self, cycle: BindingCycle) -> None:
        uid = cycle.uid
        for plugin in self.plugins:
            plugin.post_bind(cycle)
        self.model.finish_binding(uid, now=writes.now())
        metrics.ATTEMPTS.labels("scheduled").inc()
        started = self.queued_at.pop(uid, None)
        if started is not None:
            metrics.LATENCY.observe(time.monotonic() - started)
        self.queue.done(uid)
        self.reported.pop(uid, None)

    def _on_rejected(self, cycle: BindingCycle, why: str) -> None:
        """A Permit refused the binding (a gang member whose sibling failed): pending again, retried after a
        backoff."""
        log.info("binding of %s not attempted: %s", cycle.pending.key, why)
        self._unreserve(cycle)
        self._apply(self.model.forget(cycle.uid, pending=cycle.pending))
        if cycle.uid in self.model.pending:
            self.queue.failed(cycle.uid, time.monotonic(), unschedulable=False)

    def _on_refused(self, cycle: BindingCycle, error: Exception, seen: Any) -> None:
        """A PreBind write or the Binding failed: the model follows what the API says of the pod (`seen`), and a
        pod still pending is retried after a backoff, not dropped."""
        pending, uid, node = cycle.pending, cycle.uid, cycle.node
        metrics.BIND_ERRORS.labels(metrics.bind_error_reason(error)).inc()
        self._unreserve(cycle)
        if seen is UNREAD:
            self._apply(self.model.forget(uid, pending=pending))
        else:
            self._apply(self.model.confirm(uid, seen, now=writes.now()))
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

    # --- what the runner writes for pods, for itself and its plugins ----------------------------

    def report_unschedulable(self, pending: watched.PendingPod, message: str, *, nominate: str | None = None,
                             event: bool = True) -> None:
        """PodScheduled=False and (unless not `event`) a FailedScheduling event, not more than once per
        REPORT_INTERVAL for the same message; `nominate` "" clears the pod's nominated node in the same write."""
        now = time.monotonic()
        last = self.reported.get(pending.uid)
        if nominate is None and last is not None and last[0] == message and now - last[1] < REPORT_INTERVAL:
            return
        self.reported[pending.uid] = (message, now)
        self.reports.submit(pending.uid, self._report, pending, message, nominate, event)

    def remember_report(self, uid: str, message: str) -> None:
        self.reported[uid] = (message, time.monotonic())

    def submit_report(self, call: Callable[..., Any], *args: Any) -> None:
        self.reporter.submit(call, *args)

    def _report(self, pending: watched.PendingPod, message: str, nominate: str | None, event: bool = True) -> None:
        try:
            self.write_unschedulable(pending, message, nominate=nominate, event=event)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("cannot set PodScheduled=False on %s: %s", pending.key, watching.describe_error(err))
            self.post(self._unreported, pending.uid, message)  # say it again at the next attempt

    def _unreported(self, uid: str, message: str) -> None:
        if self.reported.get(uid, ("",))[0] == message:
            del self.reported[uid]

    def write_unschedulable(self, pending: watched.PendingPod, message: str, *, nominate: str | None = None,
                            event: bool = True) -> None:
        """PodScheduled=False with the reason (and, given `nominate`, status.nominatedNodeName: a node, or "" to
        clear it), then (unless not `event`) the FailedScheduling event."""
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": writes.timestamp()}
        status: dict[str, Any] = {"conditions": [condition]}
        if nominate is not None:
            status["nominatedNodeName"] = nominate or None
        writes.patch_status(self.api, pending.namespace, pending.name, {"status": status})
        if event:
            self.record_event(pending, "Warning", "FailedScheduling", message)

    def record_event(self, pending: watched.PendingPod, kind: str, reason: str, message: str) -> None:
        events.record(self.api, namespace=pending.namespace, name=pending.name, uid=pending.uid, kind=kind,
                      reason=reason, message=message, component=self.settings.scheduler_name,
                      instance=self.identity)
