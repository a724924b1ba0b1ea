"""The scheduler core as kube-scheduler's HTTP extender: `/filter`, `/prioritize`, `/bind`, `/preempt`.

For clusters that keep kube-scheduler. kube-scheduler runs its own filters, then POSTs
extender/v1 JSON (gpu_scheduler.runtime.wire) about the nodes left; we answer from
our own model of the cluster, fed by Node and Pod watches, and we bind, because only the
binder can choose the GPU devices and record them (`gpu-scheduler.io/gpu-devices`, then the
pod's devices condition) before the pod starts: through the same Reserve and binding cycle as
`gpu-scheduler run` (runtime.framework). kube-scheduler's preemption knows nothing of
GPU devices either: it asks `/preempt` about its candidate nodes, and the preemption module
(runtime.plugins.preemption) keeps only those where the victims free room on a GPU the pod can
use, each with only the victims that takes. The plugins that serve in this mode
(plugins.EXTENDER: the deletion-cost warm-up, live utilization) run here too; the warm-up ticks on the replica
holding the extender's Lease.

One process, one model, one lock. Requests arrive on several threads (gunicorn gthread), and
a bind must see every earlier bind's devices; several worker processes would each hold a
model of their own and could hand one GPU to two pods, so `gpu-scheduler extender` runs
exactly one worker. kube-scheduler binds asynchronously, so the next pod may be filtered
before the previous bind reaches us: devices are chosen at bind time, under the lock, against
the model as it is then, and a node without room any more answers with an Error, after which
kube-scheduler retries the pod. The model never overcommits.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from flask import Flask, Response, jsonify, request
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from urllib3.exceptions import HTTPError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from gpu_scheduler import sources, watching
from gpu_scheduler.runtime import binding, events, model_metrics, plugins, wire
from gpu_scheduler.runtime import framework as runtime
from gpu_scheduler.runtime.plugins import preemption as preempting
from scheduler_core import cluster, framework, pods, watched
from webhook import config, reloading
from webhook import metrics as shared_metrics

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 128 * 2**20  # full Nodes (nodeCacheCapable: false) of a few thousand nodes
NOT_CACHED = "node not in the extender's cache yet"
COMPONENT = "gpu-scheduler-extender"  # the source of its events
REMEMBERED_PODS = 4096  # Pods from /filter kept for /bind, whose arguments carry only names
FILTERED_SCORES = 64  # the scores /filter computed, kept for the /prioritize of the same pod that follows
# Rejections that evicting pods can cure. Every other rejection (GPU model, taints, affinity, a node we
# do not know ...) is also reported in FailedAndUnresolvableNodes, so kube-scheduler's preemption, which
# cannot ask us, never evicts pods from a node this pod could not use anyway.
RESOLVABLE_BY_PREEMPTION = frozenset({"NodePorts", "NodeResourcesFit", "GPUDevices"})
LEASE = ("gpu-scheduler-system", "gpu-scheduler-extender")  # held by the replica that warms up deletion costs

REQUESTS = Counter(
    "gpu_scheduler_extender_requests_total",
    "Extender calls answered, by verb (filter, prioritize, bind, preempt) and outcome "
    "(ok, bound, refused: bind answered with an Error, no_candidates: preempt kept no node, invalid, not_ready, "
    "error).",
    ["verb", "outcome"],
)
PREEMPTION_NODES = Counter(
    "gpu_scheduler_extender_preemption_nodes_total",
    "Candidate nodes of kube-scheduler's preemption answered by /preempt, by result (kept: with the victims "
    "given, trimmed: with fewer, dropped: its victims free no GPU room the pod can use, or the node is unknown).",
    ["result"],
)
LATENCY = Histogram(
    "gpu_scheduler_extender_request_duration_seconds",
    "Time to answer one extender call, by verb (bind includes its two API calls).",
    ["verb"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


# --- the model and the verbs -------------------------------------------------------------------


class BindError(Exception):
    """A bind that did not happen; the message goes back to kube-scheduler as the result's Error."""


class Extender:
    """The verbs over the watched model (scheduler_core.watched), which the Node and Pod watches keep;
    every access to the model under `lock`."""

    def __init__(self, settings: config.Config, *, core: Any = None, lease: tuple[str, str] | None = LEASE):
        self.settings = settings
        self.core = core  # a CoreV1Api; None only where nothing is bound (unit tests with a model filled directly)
        self.api = core.api_client if core is not None else None
        self.lease = lease  # (namespace, name) of the Lease whose holder warms up deletion costs; None: no election
        self.lock = threading.Lock()
        # its `warm` pods: deletion-cost warm-up runs here too, so that clusters on this mode raise costs as `run` does
        self.model = watched.WatchedCluster(gpu_resources=settings.admission.gpu_resources,
                                            scheduling=settings.scheduling, warm_up=True)
        self.framework = framework.Framework(self.model.cluster, settings.scheduling)
        self.remembered: OrderedDict[str, dict[str, Any]] = OrderedDict()  # pod uid -> Pod from /filter
        # pod uid -> (the nodes /filter was asked about, the feasible ones' scores), for the /prioritize
        # that follows in the same scheduling cycle: kube-scheduler, too, scores against the snapshot it filtered
        self.filtered: OrderedDict[str, tuple[frozenset[str], dict[str, float]]] = OrderedDict()
        self.watches = watching.ClusterWatches([])  # none until start(): unit tests fill the model directly
        self.unsettled: set[str] = set()  # uids whose Binding may or may not have been stored (see _settle)
        # Device records and events go through their own small pool: never under the lock, never in the
        # way of kube-scheduler's calls.
        self.reporter = ThreadPoolExecutor(2, thread_name_prefix="reporter")
        self.identity = f"{COMPONENT}-{uuid.uuid4().hex[:8]}"
        self.stopped = threading.Event()
        self.leading = threading.Event()  # this replica holds the Lease: its plugins' ticks run
        handle: runtime.Handle = self  # checked: the extender lends what a plugin of its mode may use
        self.plugins: list[runtime.Plugin] = [kind(handle) for kind in plugins.EXTENDER]

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> Extender:
        """Start the watches (requests are answered once Nodes and Pods have listed), the election for the Lease
        and the plugins' ticks."""
        if self.core is None:
            raise ValueError("the extender needs a CoreV1Api to watch nodes and pods")
        self.watches = self.cluster_watches().start()
        if self.lease is None:
            self.leading.set()
        else:
            threading.Thread(target=self._elect, name="lease", daemon=True).start()
        threading.Thread(target=self._ticks, name="ticks", daemon=True).start()
        return self

    def _elect(self) -> None:
        """Contend for the Lease as long as the process runs: two replicas (a rolling update) never both warm up."""
        assert self.lease is not None and self.api is not None
        lock = LeaseLock(self.lease[1], self.lease[0], self.identity)
        lock.api_instance = client.CoordinationV1Api(self.api)
        while not self.stopped.is_set():
            try:
                leaderelection.LeaderElection(electionconfig.Config(
                    lock, lease_duration=15, renew_deadline=10, retry_period=2, onstarted_leading=self._lead,
                    onstopped_leading=self.leading.clear)).run()
            except Exception:  # an API error inside the client's loop: contend again after a pause
                log.exception("the election for the Lease %s/%s failed; trying again", *self.lease)
            self.leading.clear()
            self.stopped.wait(2.0)

    def _lead(self) -> None:
        log.info("%s holds the Lease %s/%s: warming up deletion costs", self.identity, *(self.lease or ("", "")))
        self.leading.set()

    def _ticks(self) -> None:
        while not self.stopped.wait(1.0):
            self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        """Once a second, while this replica leads and the model has listed: every plugin's tick, under the lock."""
        if not self.leading.is_set() or not self.synced:
            return
        with self.lock:
            for plugin in self.plugins:
                try:
                    plugin.tick(now)
                except Exception:
                    log.exception("plugin %s failed its tick; going on", plugin.name)

    def post(self, call: Callable[..., None], *args: Any) -> None:
        """Run `call` under the lock, at once: for a plugin's own threads, never from a tick (which holds it)."""
        with self.lock:
            call(*args)

    def submit_report(self, call: Callable[..., Any], *args: Any) -> None:
        self._report(call, *args)

    def cluster_watches(self) -> watching.ClusterWatches:
        """The watches that keep the model, not started: Nodes, Pods, Namespaces, the PodDisruptionBudgets
        /preempt recounts violations with, and DRA's objects (kube-scheduler allocates the claims; the model counts
        the devices they hold, and knows which nodes DRA serves `nvidia.com/gpu` on)."""
        return watching.ClusterWatches.of_cluster(
            self.core, on_nodes=self.replace_nodes, on_node=self.node_event, on_pods=self.replace_pods,
            on_pod=self.pod_event, on_namespaces=self.replace_namespaces, on_namespace=self.namespace_event,
            extra=[watching.budget_watch(client.PolicyV1Api(self.core.api_client), self.replace_budgets,
                                         self.budget_event),
                   *watching.resource_watches(client.ResourceV1Api(self.core.api_client), self.replace_resources,
                                              self.resource_event)])

    def stop(self) -> None:
        self.stopped.set()
        self.watches.stop()
        self.reporter.shutdown(wait=False, cancel_futures=True)
        for plugin in self.plugins:
            plugin.stop()

    @property
    def synced(self) -> bool:
        return self.watches.synced

    def configure(self, settings: config.Config) -> None:
        """A new valid configuration: scoring applies to the next call."""
        with self.lock:
            if settings.admission.gpu_resources != self.settings.admission.gpu_resources:
                log.warning("admission.gpuResources changed to %s: restart the extender to apply it",
                            ", ".join(settings.admission.gpu_resources))
            self.settings = settings
            self.framework.configure(settings.scheduling)
            self.model.configure(settings.scheduling)
        for plugin in self.plugins:
            plugin.configure(settings)

    # --- the model, from the watches: the Reflector's callbacks, which must never raise ----------------

    def replace_nodes(self, items: list[dict[str, Any]]) -> None:
        self._update("Node", lambda: self.model.nodes_relisted(items, now=_now()))

    def node_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._update("Node", lambda: self.model.node_event(kind, obj, now=_now()))

    def replace_pods(self, items: list[dict[str, Any]]) -> None:
        self._update("Pod", lambda: self.model.pods_relisted(items, now=_now()))

    def pod_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._update("Pod", lambda: self.model.pod_event(kind, obj, now=_now()))

    def replace_namespaces(self, items: list[dict[str, Any]]) -> None:
        self._update("Namespace", lambda: self.model.namespaces_relisted(items, now=_now()))

    def namespace_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._update("Namespace", lambda: self.model.namespace_event(kind, obj, now=_now()))

    def replace_budgets(self, items: list[dict[str, Any]]) -> None:
        self._update("PodDisruptionBudget", lambda: self.model.budgets_relisted(items, now=_now()))

    def budget_event(self, kind: str, obj: dict[str, Any]) -> None:
        self._update("PodDisruptionBudget", lambda: self.model.budget_event(kind, obj, now=_now()))

    def replace_resources(self, kind: str, items: list[dict[str, Any]]) -> None:
        self._update(kind, lambda: self.model.resources_relisted(kind, items, now=_now()))

    def resource_event(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        self._update(kind, lambda: self.model.resource_event(kind, event, obj, now=_now()))

    def _update(self, kind: str, update: Callable[[], watched.Change]) -> None:
        with self.lock:
            try:
                update()  # the model guards each object; this guards against the rest
            except Exception:
                self.model.rejected[kind] += 1
                log.exception("a %s update of the model failed; going on", kind)
            conflicts = self.model.take_conflicts()
        for facts, message in conflicts:
            self._report(self._record_event, facts, "Warning", "GPUDevicesConflict", message)

    def model_view(self) -> model_metrics.ModelView:
        with self.lock:
            return model_metrics.ModelView.of(self.model)

    def _remember(self, pod: dict[str, Any]) -> None:
        uid = str(pod["metadata"]["uid"])
        self.remembered[uid] = pod
        self.remembered.move_to_end(uid)
        while len(self.remembered) > REMEMBERED_PODS:
            self.remembered.popitem(last=False)

    # --- verbs --------------------------------------------------------------------------------------

    def filter(self, candidates: wire.Candidates) -> wire.ExtenderFilterResult:
        facts = self.model.facts_of(candidates.pod)
        if facts.uid in self.unsettled:  # kube-scheduler tries it again: ask the API what our bind did
            metadata = candidates.pod["metadata"]
            self._settle(wire.BindingArgs(metadata["name"], metadata.get("namespace") or "default", facts.uid, ""))
        with self.lock:
            self._remember(candidates.pod)
            known = [name for name in candidates.names if name in self.model.cluster.index]
            feasible, failed, scores = self.framework.evaluate(facts, known)
            self._keep_scores(facts.uid, frozenset(candidates.names), scores)
        failed_nodes = {name: reason for name, (_, reason) in failed.items()}
        unresolvable = {name: reason for name, (plugin, reason) in failed.items()
                        if plugin not in RESOLVABLE_BY_PREEMPTION}
        passing = set(feasible)
        for name in candidates.names:
            if name not in failed_nodes and name not in passing:
                failed_nodes[name] = unresolvable[name] = NOT_CACHED
        if candidates.node_list is None:
            return {"Nodes": None, "NodeNames": feasible, "FailedNodes": failed_nodes,
                    "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        items = [item for item in candidates.node_list["items"] if item["metadata"]["name"] in passing]
        return {"Nodes": {**candidates.node_list, "items": items}, "NodeNames": None, "FailedNodes": failed_nodes,
                "FailedAndUnresolvableNodes": unresolvable, "Error": ""}

    def prioritize(self, candidates: wire.Candidates) -> list[wire.HostPriority]:
        facts = self.model.facts_of(candidates.pod)
        with self.lock:
            self._remember(candidates.pod)
            asked, scores = self.filtered.pop(facts.uid, (frozenset(), {}))
            if not asked.issuperset(candidates.names):  # no /filter before (filterVerb unset), or other nodes
                known = [name for name in candidates.names if name in self.model.cluster.index]
                _, _, scores = self.framework.evaluate(facts, known)
        return wire.priorities(candidates.names, scores)

    def preempt(self, args: wire.PreemptionArgs) -> wire.ExtenderPreemptionResult:
        """kube-scheduler's preemption candidates, each kept only where its victims make room for the pod by our
        filters too (its own know nothing of GPU devices), with only the victims that takes. Any other node is
        left out, never answered with no victims: that fails kube-scheduler's whole preemption."""
        facts = self.model.facts_of(args.pod)
        answer: dict[str, wire.MetaVictims] = {}
        for node, given in args.victims.items():
            with self.lock:  # node by node: binds are not kept waiting behind a long list of candidates
                result, needed = preempting.victims_needed(self.model, self.framework, facts, node, given.uids,
                                                           given.pdb_violations)
            PREEMPTION_NODES.labels(result).inc()
            if needed is not None:
                uids, violations = needed
                answer[node] = {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
        return {"NodeNameToMetaVictims": answer}

    def _keep_scores(self, uid: str, asked: frozenset[str], scores: dict[str, float]) -> None:
        self.filtered[uid] = (asked, scores)
        self.filtered.move_to_end(uid)
        while len(self.filtered) > FILTERED_SCORES:
            self.filtered.popitem(last=False)

    def bind(self, args: wire.BindingArgs) -> wire.ExtenderBindingResult:
        """Choose the devices and Reserve them, then the binding cycle (runtime.framework.bind) that posts the Binding
        recording them on the pod: the same steps as `gpu-scheduler run`'s, synchronous here."""
        try:
            facts = self.model.facts_of(self._pod_for(args))
            with self.lock:
                cycle, assumed = self._reserve(facts, args)
        except BindError as err:
            log.info("not binding %s to %s: %s", args.key, args.node, err)
            return {"Error": str(err)}
        try:
            self._write(args, cycle)
        except BaseException as err:
            if assumed:  # this call's assumption (a retried bind leaves the first one's alone)
                self._settle(args)
                with self.lock:
                    runtime.unreserve(self.plugins, cycle)
            if not isinstance(err, BindError):
                raise
            log.warning("binding %s to %s failed: %s", args.key, args.node, err)
            return {"Error": str(err)}
        with self.lock:
            self.model.finish_binding(args.uid, now=_now())
        devices = cycle.decision.devices
        log.info("bound %s to %s with GPU devices %s", args.key, args.node, pods.format_devices(devices))
        if devices:
            self._report(binding.record_devices, self.core.api_client, namespace=args.namespace,
                         name=args.pod_name, uid=args.uid, devices=devices)
        return {"Error": ""}

    def _record_event(self, facts: pods.PodFacts, kind: str, reason: str, message: str) -> None:
        namespace, _, name = facts.key.partition("/")
        events.record(self.core.api_client, namespace=namespace, name=name, uid=facts.uid, kind=kind,
                      reason=reason, message=message, component=COMPONENT, instance=self.identity)

    def _report(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run `write` on the reporter pool; not at all without an API (unit tests) or once stopped."""
        if self.core is None:
            return
        try:
            self.reporter.submit(write, *args, **kwargs)
        except RuntimeError:  # shut down
            pass

    def _settle(self, args: wire.BindingArgs) -> None:
        """After a failed Binding, the model follows what the API says of the pod (by UID). The apiserver may
        have stored the Binding before the connection broke: forgetting it blindly would give its GPUs twice.
        When the API cannot be asked, the devices stay held, and the pod is asked about again when kube-scheduler
        filters it next (it retries only pods it sees unbound); until then the watch, or a relist after the
        assumption's TTL, may settle it (see scheduler_core.watched)."""
        pod: dict[str, Any] | None = None
        unknown = False
        try:
            pod = binding.read_pod(self.core, namespace=args.namespace, name=args.pod_name)
        except ApiException as err:
            unknown = err.status != 404  # 404: gone
        except (HTTPError, OSError, ValueError):
            unknown = True
        with self.lock:
            if unknown:
                self.model.finish_binding(args.uid, now=_now())
                self.unsettled.add(args.uid)
            else:
                self.model.confirm(args.uid, pod, now=_now())
                self.unsettled.discard(args.uid)

    def _pod_for(self, args: wire.BindingArgs) -> dict[str, Any]:
        """The Pod of the last /filter for this UID, else read from the API."""
        with self.lock:
            pod = self.remembered.get(args.uid)
        if pod is None:
            pod = self._read_pod(args)
        metadata = pod.get("metadata") or {}
        if metadata.get("uid") != args.uid or metadata.get("name") != args.pod_name or \
                (metadata.get("namespace") or "default") != args.namespace:
            raise BindError(f"pod {args.key} with UID {args.uid} no longer exists "
                            f"(found {pods.key_of(pod)} with UID {metadata.get('uid')})")
        return pod

    def _read_pod(self, args: wire.BindingArgs) -> dict[str, Any]:
        try:
            return binding.read_pod(self.core, namespace=args.namespace, name=args.pod_name)
        except (ApiException, HTTPError, OSError, ValueError) as err:
            raise BindError(f"cannot read pod {args.key}: {watching.describe_error(err)}") from err

    def _reserve(self, facts: pods.PodFacts, args: wire.BindingArgs) -> tuple[runtime.BindingCycle, bool]:
        """Under the lock: the binding cycle of `facts` on the node, its devices chosen and reserved in the model (and
        whether this call reserved them, or a bind before it); never overcommits."""
        node = args.node
        row = self.model.cluster.index.get(node)
        if row is None:
            raise BindError(f"node {node}: {NOT_CACHED}")
        pending = watched.PendingPod(args.namespace, args.pod_name, args.uid, facts)
        current = self.model.cluster.assignments.get(facts.identity)
        if current is not None:
            if current.node == row:  # bound or being bound there already: the same devices again
                return runtime.BindingCycle(pending, framework.Decision(facts.key, node, current.devices)), False
            raise BindError(f"pod {facts.key} is already assigned to node {self.model.cluster.node(current.node).name}")
        feasible, failed, _ = self.framework.evaluate(facts, [node], score=False)
        if not feasible:
            raise BindError(f"node {node} cannot take pod {facts.key} any more: {failed[node][1]}")
        devices = self.framework._devices(row, facts)  # the standalone scheduler's device choice
        cycle = runtime.BindingCycle(pending, framework.Decision(facts.key, node, devices))
        try:
            runtime.reserve(self.model, self.plugins, cycle)
        except cluster.OvercommitError as err:
            raise BindError(str(err)) from err
        return cycle, True

    def _write(self, args: wire.BindingArgs, cycle: runtime.BindingCycle) -> None:
        """Permit, PreBind and the Binding with the devices annotation, which the apiserver writes onto the pod in the
        same update that sets its node (as `gpu-scheduler run` binds); its UID refuses a pod recreated meanwhile.
        kube-scheduler has run its own PreBind plugins (volumes) before it calls /bind, so none here may wait."""
        try:
            if runtime.bind(self.api, self.plugins, cycle) is not None:
                raise BindError(f"binding {args.key} to {args.node}: a PreBind waits, which /bind cannot")
        except runtime.Rejected as err:
            raise BindError(f"binding {args.key} to {args.node}: {err}") from err
        except ApiException as err:
            if err.status == 409 and self._bound_there(args):
                return  # bound to this node already (a retried bind): done
            raise BindError(f"binding {args.key} to {args.node}: {watching.describe_error(err)}") from err
        except (HTTPError, OSError) as err:
            raise BindError(f"binding {args.key} to {args.node}: {watching.describe_error(err)}") from err

    def _bound_there(self, args: wire.BindingArgs) -> bool:
        try:
            pod = self._read_pod(args)
        except BindError:
            return False
        return bool((pod.get("metadata") or {}).get("uid") == args.uid
                    and (pod.get("spec") or {}).get("nodeName") == args.node)


# --- HTTP ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """What `gpu-scheduler extender` passes to the app; exactly one configuration source."""

    config_file: Path | None = None  # config.yaml or a ConfigMap volume's file, watched
    config_map: tuple[str, str] | None = None  # (namespace, name), watched through the API
    kubeconfig: str | None = None  # else in-cluster, else $KUBECONFIG / ~/.kube/config
    lease: tuple[str, str] | None = LEASE  # the Lease whose holder warms up deletion costs


class _Runtime:
    """The extender, built (and its watches started) when the first valid configuration arrives."""

    def __init__(self, core: Any, lease: tuple[str, str] | None = LEASE):
        self.core = core
        self.lease = lease
        self.extender: Extender | None = None
        self._lock = threading.Lock()

    def current(self) -> Extender | None:
        return self.extender

    def configure(self, settings: config.Config) -> None:
        with self._lock:
            if self.extender is None:
                self.extender = Extender(settings, core=self.core, lease=self.lease).start()
            else:
                self.extender.configure(settings)


def create_app(settings: Settings) -> Flask:
    """The app of the one gunicorn worker: configuration source, watches, routes."""
    if (settings.config_file is None) == (settings.config_map is None):
        raise ValueError("exactly one of config_file and config_map must be given")
    from gpu_scheduler import kubeclient

    core = client.CoreV1Api(kubeclient.api_client(settings.kubeconfig))
    served = _Runtime(core, settings.lease)
    holder = reloading.ConfigHolder(on_change=served.configure)
    sources.start(holder, config_file=settings.config_file, config_map=settings.config_map, core_api=core)
    return build_app(served.current)


def build_app(current: Callable[[], Extender | None]) -> Flask:
    """Routes over whatever extender `current()` returns (None: not configured yet)."""
    app = Flask("gpu-scheduler-extender")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    model_registry = CollectorRegistry()  # the model's view: one model, in this (the only) worker

    def view() -> model_metrics.ModelView | None:
        extender = current()
        return extender.model_view() if extender is not None else None

    model_metrics.register(view, model_registry)
    model_registry.register(watching.DownCollector(lambda: extender.watches if (extender := current()) else None))

    def serve(verb: str, parse: Callable[[object], Any],
              answer: Callable[[Extender, Any], tuple[Any, str]]) -> Any:
        started = time.perf_counter()
        try:
            args = parse(orjson.loads(request.get_data(cache=False)))
        except wire.RequestError as err:
            REQUESTS.labels(verb, "invalid").inc()
            return _error(400, str(err))
        except (ValueError, RecursionError) as err:
            REQUESTS.labels(verb, "invalid").inc()
            return _error(400, f"body: not valid JSON ({err})")
        extender = current()
        if extender is None or not extender.synced:
            REQUESTS.labels(verb, "not_ready").inc()
            message = ("gpu-scheduler extender: no valid configuration loaded yet" if extender is None
                       else "gpu-scheduler extender: nodes and pods not listed from the API yet")
            if verb in ("prioritize", "preempt"):  # answers without an Error field: kube-scheduler ignores a
                return _error(503, message)        # failed prioritize, and preempts nobody on a failed preempt
            if verb == "bind":
                return jsonify(Error=message)
            return jsonify(Nodes=None, NodeNames=None, FailedNodes={}, FailedAndUnresolvableNodes={}, Error=message)
        try:
            result, outcome = answer(extender, args)
        except Exception as err:  # a bug: say so with a 500, never an empty answer
            log.exception("/%s failed", verb)
            REQUESTS.labels(verb, "error").inc()
            return _error(500, f"internal error in /{verb}: {type(err).__name__}: {err}")
        REQUESTS.labels(verb, outcome).inc()
        LATENCY.labels(verb).observe(time.perf_counter() - started)
        return Response(orjson.dumps(result), content_type="application/json")

    @app.post("/filter")
    def filter_nodes() -> Any:
        return serve("filter", wire.parse_candidates, lambda extender, args: (extender.filter(args), "ok"))

    @app.post("/prioritize")
    def prioritize() -> Any:
        return serve("prioritize", wire.parse_candidates, lambda extender, args: (extender.prioritize(args), "ok"))

    @app.post("/bind")
    def bind() -> Any:
        def answer(extender: Extender, args: wire.BindingArgs) -> tuple[wire.ExtenderBindingResult, str]:
            result = extender.bind(args)
            return result, "refused" if result["Error"] else "bound"

        return serve("bind", wire.parse_binding, answer)

    @app.post("/preempt")
    def preempt() -> Any:
        def answer(extender: Extender, args: wire.PreemptionArgs) -> tuple[wire.ExtenderPreemptionResult, str]:
            result = extender.preempt(args)
            return result, "ok" if result["NodeNameToMetaVictims"] else "no_candidates"

        return serve("preempt", wire.parse_preemption, answer)

    @app.get("/healthz")
    def healthz() -> Any:
        extender = current()
        down = extender.watches.down() if extender is not None else []
        if down:
            return _error(500, "; ".join(down))
        lines = [(plugin.name, plugin.health()) for plugin in extender.plugins] if extender is not None else []
        return jsonify(status="ok", **{name: line for name, line in lines if line is not None})

    @app.get("/readyz")
    def readyz() -> Any:
        extender = current()
        if extender is None:
            return _error(503, "no valid configuration loaded yet")
        if not extender.synced:
            return _error(503, "nodes and pods not listed from the API yet")
        down = extender.watches.down()
        if down:
            return _error(503, "; ".join(down))
        with extender.lock:
            counts = {"nodes": extender.model.cluster.node_count, "pods": len(extender.model.cluster.assignments)}
        return jsonify(status="ready", **counts)

    @app.get("/metrics")
    def metrics_page() -> Response:
        return Response(shared_metrics.exposition() + generate_latest(model_registry),
                        content_type=shared_metrics.CONTENT_TYPE)

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_: HTTPException) -> Any:
        return _error(413, f"body: larger than the {MAX_BODY_BYTES // 2**20} MiB limit")

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Any:
        return _error(err.code or 500, err.description or err.name)

    return app


def _error(status: int, message: str) -> tuple[Response, int]:
    return jsonify(error=message, status=status), status


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)
