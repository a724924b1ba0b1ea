"""The standalone scheduler against the API: watches in, bindings out.

One loop thread owns the cluster model, the queue and every decision; node and pod
watches and the binder threads only post events to it, so the model needs no locks and
an assumption is never raced by an update. A decision is assumed into the model at
once and bound asynchronously (one Binding that carries the devices annotation), so the loop
never waits on an API round trip; a bind that fails un-assumes and requeues the pod.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from urllib.parse import quote
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import REGISTRY, Collector
from urllib3.exceptions import HTTPError

from gpu_scheduler import rawapi, watching
from gpu_scheduler.runtime import binding, metrics
from scheduler_core import cluster, framework, nodes, pods, profile, queueing, warmup
from webhook import config

log = logging.getLogger(__name__)

REPORT_INTERVAL = 60.0  # seconds between repeated reports of the same unschedulable reason
WARMUP_RETRY = 30.0


class LiveScheduler:
    def __init__(self, api: client.ApiClient, settings: config.Config, *, binder_threads: int = 32,
                 promotions_per_second: float = 20.0):
        self.api = api
        self.core: Any = client.CoreV1Api(api)
        self.settings = settings
        self.model = cluster.Cluster(gpu_resources=settings.admission.gpu_resources)
        self.framework = framework.Framework(self.model, settings.scheduling)
        self.queue = queueing.SchedulingQueue()
        self.events: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.pending: dict[str, dict[str, Any]] = {}  # latest object of each pending pod of ours
        self.warm_candidates: dict[str, dict[str, Any]] = {}  # bound pods with a webhook-written cost
        # pod -> node: assumed into the model, until a watch event shows the pod bound (or gone). A stale
        # event from before the binding must not send the pod round again, nor free its GPUs.
        self.assumed: dict[str, str] = {}
        # bound pods whose node the model has not seen yet (a pod list can arrive before the node list)
        self.orphans: dict[str, dict[str, dict[str, Any]]] = {}
        self.queued_at: dict[str, float] = {}
        self.reported: dict[str, tuple[str, float]] = {}
        self.warming: dict[str, float] = {}
        self.promotions_per_second = promotions_per_second
        self.binder = ThreadPoolExecutor(binder_threads, thread_name_prefix="binder")
        # Events and status reports go through their own small pool, so they never hold up a binding.
        self.reporter = ThreadPoolExecutor(2, thread_name_prefix="reporter")
        self.stopped = threading.Event()
        self.alive = threading.Event()
        self.identity = f"gpu-scheduler-{uuid.uuid4().hex[:8]}"
        self._reflectors = [
            watching.Reflector(self.core.list_node, name="Nodes",
                               on_replace=lambda items: self.events.put(("nodes", items)),
                               on_event=lambda kind, obj: self.events.put(("node", kind, obj))),
            watching.Reflector(self.core.list_pod_for_all_namespaces, name="Pods",
                               list_kwargs={"field_selector": "status.phase!=Succeeded,status.phase!=Failed"},
                               on_replace=lambda items: self.events.put(("pods", items)),
                               on_event=lambda kind, obj: self.events.put(("pod", kind, obj))),
        ]
        self._loop = threading.Thread(target=self._run, name="scheduling-loop", daemon=True)
        self._last_housekeeping = 0.0  # parked-pool flush, warm-up, pending gauges: once a second

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> LiveScheduler:
        for reflector in self._reflectors:
            reflector.start()
        self._loop.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        for reflector in self._reflectors:
            reflector.stop()
        self.binder.shutdown(wait=False, cancel_futures=True)
        self.reporter.shutdown(wait=False, cancel_futures=True)

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self._reflectors)

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
                self._warm_up()
                parked = self.queue.parked()
                metrics.PENDING.labels("active").set(self.queue.pending() - parked)
                metrics.PENDING.labels("unschedulable").set(parked)
            key = self.queue.pop(now)
            scheduled_last_turn = key is not None
            if key is not None:
                try:
                    self._schedule(key)
                except Exception:  # a bug must not stop the scheduler: count it and retry later
                    log.exception("scheduling %s failed", key)
                    metrics.ATTEMPTS.labels("error").inc()
                    self.queue.failed(key, time.monotonic(), unschedulable=False)

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
        kind = event[0]
        if kind == "node":
            self._on_node(event[1], event[2])
        elif kind == "pod":
            self._on_pod(event[1], event[2])
        elif kind == "nodes":
            self._replace_nodes(event[1])
        elif kind == "pods":
            self._replace_pods(event[1])
        elif kind == "bound":
            self._on_bound(*event[1:])
        elif kind == "config":
            self._on_config(event[1])

    # --- cluster state --------------------------------------------------------------------------

    def _node_facts(self, obj: dict[str, Any]) -> nodes.NodeFacts:
        return nodes.parse(obj, gpu_resources=self.settings.admission.gpu_resources,
                           now=datetime.datetime.now(datetime.timezone.utc),
                           utilization_max_age=self.settings.scheduling.utilization_max_age_seconds)

    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.model.remove_node(name)
            return
        facts = self._node_facts(obj)
        row = self.model.index.get(name)
        before = self.model.node(row) if row is not None else None
        self.model.set_node(facts)
        self._adopt_orphans(name)
        if before is None or _relevant(before) != _relevant(facts):
            self.queue.cluster_changed()

    def _adopt_orphans(self, node: str) -> None:
        for obj in self.orphans.pop(node, {}).values():
            self.model.restore(self._pod_facts(obj))

    def _replace_nodes(self, items: list[dict[str, Any]]) -> None:
        names = {obj["metadata"]["name"] for obj in items}
        for name in [n for n in self.model.index if n not in names]:
            self.model.remove_node(name)
        for obj in items:
            self.model.set_node(self._node_facts(obj))
            self._adopt_orphans(obj["metadata"]["name"])
        self.queue.cluster_changed()

    def _pod_facts(self, obj: dict[str, Any]) -> pods.PodFacts:
        return pods.parse(obj, gpu_resources=self.settings.admission.gpu_resources,
                          locality_labels=self.settings.scheduling.locality_labels)

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        key = pods.key_of(obj)
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if kind == "DELETED" or status.get("phase") in pods.TERMINAL_PHASES:
            self._forget_pending(key)
            for waiting in self.orphans.values():
                waiting.pop(key, None)
            self.warm_candidates.pop(key, None)
            self.assumed.pop(key, None)
            if self.model.unassign(key) is not None:
                self.queue.cluster_changed()
            return
        node = spec.get("nodeName")
        if node:
            self._forget_pending(key)
            self.assumed.pop(key, None)
            current = self.model.assignments.get(key)
            if current is None or self.model.node(current.node).name != node:
                self.model.unassign(key)
                if node in self.model.index:
                    self.model.restore(self._pod_facts(obj))
                else:
                    self.orphans.setdefault(node, {})[key] = obj
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            if profile.INITIAL_COST_ANNOTATION in annotations:
                self.warm_candidates[key] = obj
            else:
                self.warm_candidates.pop(key, None)
            return
        if key in self.assumed:
            return  # bound or being bound by us; this event predates the binding
        if spec.get("schedulerName") == self.settings.scheduler_name and not obj["metadata"].get("deletionTimestamp"):
            self.pending[key] = obj
            self.queued_at.setdefault(key, time.monotonic())
            self.queue.add(key, int(spec.get("priority") or 0))

    def _replace_pods(self, items: list[dict[str, Any]]) -> None:
        keys = {pods.key_of(obj) for obj in items}
        self.orphans.clear()
        for key in [k for k in self.model.assignments if k not in keys]:
            self.model.unassign(key)
            self.assumed.pop(key, None)
        for key in [k for k in self.pending if k not in keys]:
            self._forget_pending(key)
        for obj in items:
            self._on_pod("MODIFIED", obj)
        self.queue.cluster_changed()

    def _forget_pending(self, key: str) -> None:
        self.pending.pop(key, None)
        self.queue.remove(key)
        self.reported.pop(key, None)

    def _on_config(self, settings: config.Config) -> None:
        if settings.scheduler_name != self.settings.scheduler_name:
            log.warning("schedulerName changed to %s: restart the scheduler to serve the new name",
                        settings.scheduler_name)
        self.settings = dataclasses.replace(settings, scheduler_name=self.settings.scheduler_name)
        self.framework.configure(settings.scheduling)
        self.queue.cluster_changed()

    # --- scheduling and binding -----------------------------------------------------------------

    def _schedule(self, key: str) -> None:
        obj = self.pending.get(key)
        if obj is None:
            self.queue.done(key)
            return
        facts = self._pod_facts(obj)
        decision = self.framework.decide(facts)
        if decision.node is None:
            metrics.ATTEMPTS.labels("unschedulable").inc()
            self.queue.failed(key, time.monotonic(), unschedulable=True)
            self._report_unschedulable(key, obj, decision.reason or "unschedulable")
            return
        self.model.assign(facts, decision.node, decision.devices)
        self.assumed[key] = decision.node
        self.binder.submit(self._bind, obj, decision)

    def _bind(self, obj: dict[str, Any], decision: framework.Decision) -> None:
        """Runs on a binder thread: bind, with the devices annotation. Reports back to the loop.

        The devices travel on the Binding (see gpu_scheduler.runtime.binding): one call, and no pod is
        ever bound without its devices, so a restart restores them from the pod.
        """
        metadata = obj["metadata"]
        name, namespace = metadata["name"], metadata.get("namespace") or "default"
        annotations = {pods.DEVICES_ANNOTATION: pods.format_devices(decision.devices)} if decision.devices else {}
        try:
            binding.bind(self.api, namespace=namespace, name=name, uid=metadata.get("uid"), node=decision.node or "",
                         annotations=annotations)
        except (ApiException, HTTPError, OSError) as err:
            self.events.put(("bound", decision.pod, decision.node, err))
            return
        self.events.put(("bound", decision.pod, decision.node, None))
        self.reporter.submit(self._record_event, obj, "Normal", "Scheduled",
                             f"Successfully assigned {decision.pod} to {decision.node}")

    def _on_bound(self, key: str, node: str, error: Exception | None) -> None:
        if error is None:
            metrics.ATTEMPTS.labels("scheduled").inc()
            started = self.queued_at.pop(key, None)
            if started is not None:
                metrics.LATENCY.observe(time.monotonic() - started)
            self.queue.done(key)
            self.pending.pop(key, None)
            self.reported.pop(key, None)
            return
        self.assumed.pop(key, None)
        status = getattr(error, "status", None)
        metrics.BIND_ERRORS.labels(str(status or type(error).__name__)).inc()
        assignment = self.model.assignments.get(key)
        if assignment is not None and self.model.node(assignment.node).name == node:
            self.model.unassign(key)
        if status in (404, 409):  # the pod is gone, or bound by someone else: its next event says where
            log.info("binding %s to %s refused (%s); not retrying", key, node, status)
            self.queue.done(key)
            self.pending.pop(key, None)
            return
        log.warning("binding %s to %s failed (%s); will retry", key, node, watching.describe_error(error))
        if key in self.pending:
            self.queue.failed(key, time.monotonic(), unschedulable=False)

    def _report_unschedulable(self, key: str, obj: dict[str, Any], message: str) -> None:
        now = time.monotonic()
        last = self.reported.get(key)
        if last is not None and last[0] == message and now - last[1] < REPORT_INTERVAL:
            return
        self.reported[key] = (message, now)
        self.reporter.submit(self._write_unschedulable, obj, message)

    def _write_unschedulable(self, obj: dict[str, Any], message: str) -> None:
        metadata = obj["metadata"]
        name, namespace = metadata["name"], metadata.get("namespace") or "default"
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
                     "lastTransitionTime": _timestamp()}
        try:
            rawapi.request(self.api, "PATCH", f"{_pod_path(namespace, name)}/status",
                           {"status": {"conditions": [condition]}}, content_type=rawapi.STRATEGIC_MERGE_PATCH)
        except (ApiException, HTTPError, OSError) as err:
            log.warning("cannot set PodScheduled=False on %s/%s: %s", namespace, name, watching.describe_error(err))
        self._record_event(obj, "Warning", "FailedScheduling", message)

    def _record_event(self, obj: dict[str, Any], kind: str, reason: str, message: str) -> None:
        metadata = obj["metadata"]
        namespace = metadata.get("namespace") or "default"
        now = _timestamp()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{metadata['name']}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "namespace": namespace,
                               "uid": metadata.get("uid")},
            "type": kind, "reason": reason, "message": message[:1024],
            "source": {"component": self.settings.scheduler_name},
            "reportingComponent": self.settings.scheduler_name, "reportingInstance": self.identity,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            rawapi.request(self.api, "POST", f"/api/v1/namespaces/{quote(namespace)}/events", event)
        except (ApiException, HTTPError, OSError) as err:
            log.debug("cannot record event %s on %s: %s", reason, metadata["name"], watching.describe_error(err))

    # --- deletion-cost warm-up ------------------------------------------------------------------

    def _warm_up(self) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        budget = int(self.promotions_per_second)
        clock = time.monotonic()
        for key, obj in list(self.warm_candidates.items()):
            if budget <= 0:
                return
            if clock - self.warming.get(key, -WARMUP_RETRY) < WARMUP_RETRY:
                continue
            patch = warmup.due(obj, now=now, warmup=self.settings.scheduling.warmup)
            if patch is None:
                continue
            self.warming[key] = clock
            budget -= 1
            self.reporter.submit(self._promote, obj, patch)

    def _promote(self, obj: dict[str, Any], patch: list[dict[str, Any]]) -> None:
        metadata = obj["metadata"]
        try:
            rawapi.request(self.api, "PATCH", _pod_path(metadata.get("namespace") or "default", metadata["name"]),
                           patch, content_type=rawapi.JSON_PATCH)
            metrics.PROMOTIONS.labels("promoted").inc()
        except ApiException as err:
            result = "skipped" if err.status == 422 else "error"  # 422: the test op failed, a user changed it
            metrics.PROMOTIONS.labels(result).inc()
            log.info("deletion cost of %s not raised: %s", pods.key_of(obj), watching.describe_error(err))
        except (HTTPError, OSError) as err:
            metrics.PROMOTIONS.labels("error").inc()
            log.warning("deletion cost of %s not raised: %s", pods.key_of(obj), err)


def _relevant(facts: nodes.NodeFacts) -> nodes.NodeFacts:
    """A node's facts without the fast-changing utilization: a change here may make room."""
    return dataclasses.replace(facts, gpu_utilization=None)


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"


def _timestamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class AllocationCollector(Collector):
    """Allocated GPUs per node and model, read from the model at scrape time."""

    def __init__(self, scheduler: Callable[[], LiveScheduler | None]):
        self._scheduler = scheduler

    def collect(self) -> Any:
        family = GaugeMetricFamily("gpu_scheduler_allocated_gpus", "GPUs allocated (shares summed), by node and model.",
                                   labels=["node", "model"])
        scheduler = self._scheduler()
        if scheduler is not None:
            model = scheduler.model
            for name, row in list(model.index.items()):
                facts = model.facts[row]
                if facts is not None and facts.gpu_count:
                    family.add_metric([name, facts.gpu_model or "unknown"], float(model.gpu_used[row]) / 1000)
        yield family


def register_collector(scheduler: Callable[[], LiveScheduler | None]) -> None:
    REGISTRY.register(AllocationCollector(scheduler))
