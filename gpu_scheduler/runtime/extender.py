"""The scheduler core as kube-scheduler's HTTP extender: `/filter`, `/prioritize`, `/bind`, `/preempt`.

For clusters that keep kube-scheduler. kube-scheduler runs its own filters, then POSTs
extender/v1 JSON (Go field names as keys, no JSON tags) about the nodes left; we answer from
our own model of the cluster, fed by Node and Pod watches, and we bind, because only the
binder can choose the GPU devices and record them (`gpu-scheduler.io/gpu-devices`, then the
pod's devices condition) before the pod starts. kube-scheduler's preemption knows nothing of
GPU devices either: it asks `/preempt` about its candidate nodes, and we keep only those where
the victims free room on a GPU the pod can use, each with only the victims that takes.

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
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import orjson
from flask import Flask, Response, jsonify, request
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from urllib3.exceptions import HTTPError
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from gpu_scheduler import sources, watching
from gpu_scheduler.runtime import binding, events, model_metrics
from scheduler_core import cluster, framework, pods, preemption, watched
from webhook import config, reloading
from webhook import metrics as shared_metrics

log = logging.getLogger(__name__)

MAX_PRIORITY = 10  # extender/v1 MaxExtenderPriority; kube-scheduler adds score * weight * 10
MAX_BODY_BYTES = 128 * 2**20  # full Nodes (nodeCacheCapable: false) of a few thousand nodes
NOT_CACHED = "node not in the extender's cache yet"
COMPONENT = "gpu-scheduler-extender"  # the source of its events
REMEMBERED_PODS = 4096  # Pods from /filter kept for /bind, whose arguments carry only names
FILTERED_SCORES = 64  # the scores /filter computed, kept for the /prioritize of the same pod that follows
# Rejections that evicting pods can cure. Every other rejection (GPU model, taints, affinity, a node we
# do not know ...) is also reported in FailedAndUnresolvableNodes, so kube-scheduler's preemption, which
# cannot ask us, never evicts pods from a node this pod could not use anyway.
RESOLVABLE_BY_PREEMPTION = frozenset({"NodePorts", "NodeResourcesFit", "GPUDevices"})

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


# --- the wire (k8s.io/kube-scheduler/extender/v1) --------------------------------------------------


class ExtenderFilterResult(TypedDict):
    Nodes: dict[str, Any] | None  # a v1 NodeList, when full Nodes were sent
    NodeNames: list[str] | None  # when NodeNames were sent (nodeCacheCapable: true)
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


class ExtenderBindingResult(TypedDict):
    Error: str


class MetaPod(TypedDict):
    UID: str


class MetaVictims(TypedDict):
    Pods: list[MetaPod]
    NumPDBViolations: int


class ExtenderPreemptionResult(TypedDict):
    NodeNameToMetaVictims: dict[str, MetaVictims]  # a node left out is no candidate; none may have no victims


class RequestError(ValueError):
    """A malformed request: the caller's fault, answered with HTTP 400; the message names the field."""


@dataclass(frozen=True)
class Candidates:
    """ExtenderArgs: the pod, and the nodes kube-scheduler asks about."""

    pod: dict[str, Any]
    names: tuple[str, ...]
    node_list: dict[str, Any] | None  # the NodeList when full Nodes were sent; None with NodeNames


@dataclass(frozen=True)
class BindingArgs:
    """ExtenderBindingArgs."""

    pod_name: str
    namespace: str
    uid: str
    node: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod_name}"


@dataclass(frozen=True)
class NodeVictims:
    """The pods kube-scheduler would evict on one node, by UID (most important first, as it sends them), and how
    many PodDisruptionBudgets that violates."""

    uids: tuple[str, ...]
    pdb_violations: int


@dataclass(frozen=True)
class PreemptionArgs:
    """ExtenderPreemptionArgs: the preemptor, and each candidate node's victims."""

    pod: dict[str, Any]
    victims: dict[str, NodeVictims]


def parse_candidates(body: object) -> Candidates:
    """ExtenderArgs from decoded JSON; RequestError names the first field that is wrong."""
    if not isinstance(body, dict):
        raise RequestError(f"body: must be a JSON object (ExtenderArgs), got {_show(body)}")
    pod = _parse_pod(body)
    node_names, node_list = body.get("NodeNames"), body.get("Nodes")
    if node_names is None and node_list is None:
        raise RequestError("NodeNames, Nodes: one must be given (NodeNames when nodeCacheCapable is true)")
    if node_names is not None and node_list is not None:
        raise RequestError("NodeNames, Nodes: only one may be given")
    if node_names is not None:
        if not isinstance(node_names, list):
            raise RequestError(f"NodeNames: must be a list of node names, got {_show(node_names)}")
        for i, name in enumerate(node_names):
            if not isinstance(name, str) or not name:
                raise RequestError(f"NodeNames[{i}]: must be a non-empty string, got {_show(name)}")
        return Candidates(pod, tuple(node_names), None)
    if not isinstance(node_list, dict):
        raise RequestError(f"Nodes: must be an object (a v1 NodeList), got {_show(node_list)}")
    items = node_list.get("items")
    if items is None:
        items = []  # Go encodes an empty NodeList's items as null
    if not isinstance(items, list):
        raise RequestError(f"Nodes.items: must be a list, got {_show(items)}")
    names = []
    for i, item in enumerate(items):
        name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise RequestError(f"Nodes.items[{i}].metadata.name: must be a non-empty string, got {_show(name)}")
        names.append(name)
    return Candidates(pod, tuple(names), {**node_list, "items": items})


def _parse_pod(body: dict[str, Any]) -> dict[str, Any]:
    """The `Pod` of a verb's arguments, with what every verb reads of it checked."""
    if "Pod" not in body:
        raise RequestError("Pod: missing")
    pod = body["Pod"]
    if not isinstance(pod, dict):
        raise RequestError(f"Pod: must be an object (a v1 Pod), got {_show(pod)}")
    metadata = pod.get("metadata")
    if not isinstance(metadata, dict):
        raise RequestError(f"Pod.metadata: must be an object, got {_show(metadata)}")
    for field in ("name", "uid"):
        if not isinstance(metadata.get(field), str) or not metadata[field]:
            raise RequestError(f"Pod.metadata.{field}: must be a non-empty string, got {_show(metadata.get(field))}")
    if not isinstance(pod.get("spec"), dict):
        raise RequestError(f"Pod.spec: must be an object, got {_show(pod.get('spec'))}")
    return pod


def parse_preemption(body: object) -> PreemptionArgs:
    """ExtenderPreemptionArgs from decoded JSON: victims by UID (NodeNameToMetaVictims, as kube-scheduler sends them
    with nodeCacheCapable: true) or as full Pods (NodeNameToVictims); RequestError names the first field that is
    wrong."""
    if not isinstance(body, dict):
        raise RequestError(f"body: must be a JSON object (ExtenderPreemptionArgs), got {_show(body)}")
    pod = _parse_pod(body)
    by_uid, by_pod = body.get("NodeNameToMetaVictims"), body.get("NodeNameToVictims")
    if by_uid is None and by_pod is None:
        raise RequestError("NodeNameToMetaVictims, NodeNameToVictims: one must be given "
                           "(NodeNameToMetaVictims when nodeCacheCapable is true)")
    if by_uid is not None and by_pod is not None:
        raise RequestError("NodeNameToMetaVictims, NodeNameToVictims: only one may be given")
    field, victims = ("NodeNameToMetaVictims", by_uid) if by_uid is not None else ("NodeNameToVictims", by_pod)
    if not isinstance(victims, dict):
        raise RequestError(f"{field}: must be an object of node names to victims, got {_show(victims)}")
    parsed = {}
    for node, given in victims.items():
        path = f"{field}[{json.dumps(node)}]"
        if not node:
            raise RequestError(f"{path}: must be keyed by a node name")
        parsed[node] = _parse_victims(path, given, by_uid=by_uid is not None)
    return PreemptionArgs(pod, parsed)


def _parse_victims(path: str, given: object, *, by_uid: bool) -> NodeVictims:
    """One node's MetaVictims (Pods of {UID}) or Victims (Pods of v1 Pods)."""
    if not isinstance(given, dict):
        raise RequestError(f"{path}: must be an object (Victims), got {_show(given)}")
    listed = given.get("Pods")
    if listed is None:
        listed = []  # Go encodes a nil slice as null
    if not isinstance(listed, list):
        raise RequestError(f"{path}.Pods: must be a list, got {_show(listed)}")
    uids = tuple(_victim_uid(f"{path}.Pods[{i}]", item, by_uid=by_uid) for i, item in enumerate(listed))
    violations = given.get("NumPDBViolations", 0)
    if type(violations) is not int or violations < 0:
        raise RequestError(f"{path}.NumPDBViolations: must be a non-negative integer, got {_show(violations)}")
    return NodeVictims(uids, violations)


def _victim_uid(path: str, item: object, *, by_uid: bool) -> str:
    if not isinstance(item, dict):
        raise RequestError(f"{path}: must be an object ({'MetaPod' if by_uid else 'a v1 Pod'}), got {_show(item)}")
    if by_uid:
        path, uid = f"{path}.UID", item.get("UID")
    else:
        metadata = item.get("metadata")
        path, uid = f"{path}.metadata.uid", metadata.get("uid") if isinstance(metadata, dict) else None
    if not isinstance(uid, str) or not uid:
        raise RequestError(f"{path}: must be a non-empty string, got {_show(uid)}")
    return uid


def parse_binding(body: object) -> BindingArgs:
    """ExtenderBindingArgs from decoded JSON; RequestError names the field."""
    if not isinstance(body, dict):
        raise RequestError(f"body: must be a JSON object (ExtenderBindingArgs), got {_show(body)}")
    values = []
    for field in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = body.get(field)
        if not isinstance(value, str) or not value:
            raise RequestError(f"{field}: must be a non-empty string, got {_show(value) if field in body else 'nothing'}")
        values.append(value)
    return BindingArgs(*values)


def _show(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def priorities(names: tuple[str, ...], scores: Mapping[str, float]) -> list[HostPriority]:
    """Scores 0..10 for every asked-about node: the best candidate 10, the worst 0, linear between.

    Stretched over the candidates rather than divided by 10: the plugins' scores share constant
    parts (a taint nobody has, unknown utilization) that would otherwise squeeze every node
    into one or two integer steps, and the core's ranking would not reach kube-scheduler.
    Infeasible or unknown nodes get 0.
    """
    low, high = min(scores.values(), default=0.0), max(scores.values(), default=0.0)
    if high - low < 1e-9:
        scaled = dict.fromkeys(scores, MAX_PRIORITY)
    else:
        factor = MAX_PRIORITY / (high - low)
        scaled = {name: round((value - low) * factor) for name, value in scores.items()}
    return [{"Host": name, "Score": scaled.get(name, 0)} for name in dict.fromkeys(names)]


# --- the model and the verbs -------------------------------------------------------------------


class BindError(Exception):
    """A bind that did not happen; the message goes back to kube-scheduler as the result's Error."""


class Extender:
    """The verbs over the watched model (scheduler_core.watched), which the Node and Pod watches keep;
    every access to the model under `lock`."""

    def __init__(self, settings: config.Config, *, core: Any = None):
        self.settings = settings
        self.core = core  # a CoreV1Api; None only where nothing is bound (unit tests with a model filled directly)
        self.lock = threading.Lock()
        self.model = watched.WatchedCluster(gpu_resources=settings.admission.gpu_resources,
                                            scheduling=settings.scheduling)
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

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> Extender:
        """Start the watches; requests are answered once Nodes and Pods have listed."""
        if self.core is None:
            raise ValueError("the extender needs a CoreV1Api to watch nodes and pods")
        self.watches = self.cluster_watches().start()
        return self

    def cluster_watches(self) -> watching.ClusterWatches:
        """The watches that keep the model, not started: Nodes, Pods, Namespaces, and the PodDisruptionBudgets
        /preempt recounts violations with."""
        return watching.ClusterWatches.of_cluster(
            self.core, on_nodes=self.replace_nodes, on_node=self.node_event, on_pods=self.replace_pods,
            on_pod=self.pod_event, on_namespaces=self.replace_namespaces, on_namespace=self.namespace_event,
            policy=client.PolicyV1Api(self.core.api_client), on_budgets=self.replace_budgets,
            on_budget=self.budget_event)

    def stop(self) -> None:
        self.watches.stop()
        self.reporter.shutdown(wait=False, cancel_futures=True)

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

    def filter(self, candidates: Candidates) -> ExtenderFilterResult:
        facts = self.model.facts_of(candidates.pod)
        if facts.uid in self.unsettled:  # kube-scheduler tries it again: ask the API what our bind did
            metadata = candidates.pod["metadata"]
            self._settle(BindingArgs(metadata["name"], metadata.get("namespace") or "default", facts.uid, ""))
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

    def prioritize(self, candidates: Candidates) -> list[HostPriority]:
        facts = self.model.facts_of(candidates.pod)
        with self.lock:
            self._remember(candidates.pod)
            asked, scores = self.filtered.pop(facts.uid, (frozenset(), {}))
            if not asked.issuperset(candidates.names):  # no /filter before (filterVerb unset), or other nodes
                known = [name for name in candidates.names if name in self.model.cluster.index]
                _, _, scores = self.framework.evaluate(facts, known)
        return priorities(candidates.names, scores)

    def preempt(self, args: PreemptionArgs) -> ExtenderPreemptionResult:
        """kube-scheduler's preemption candidates, each kept only where its victims make room for the pod by our
        filters too (its own know nothing of GPU devices), with only the victims that takes. Any other node is
        left out, never answered with no victims: that fails kube-scheduler's whole preemption."""
        facts = self.model.facts_of(args.pod)
        answer: dict[str, MetaVictims] = {}
        for node, given in args.victims.items():
            with self.lock:  # node by node: binds are not kept waiting behind a long list of candidates
                result, needed = self._victims_needed(facts, node, given)
            PREEMPTION_NODES.labels(result).inc()
            if needed is not None:
                answer[node] = {"Pods": [{"UID": uid} for uid in needed.uids],
                                "NumPDBViolations": needed.pdb_violations}
        return {"NodeNameToMetaVictims": answer}

    def _victims_needed(self, facts: pods.PodFacts, node: str, given: NodeVictims) -> tuple[str, NodeVictims | None]:
        """Under the lock: ("dropped", None) when, with the victims the model holds on `node` gone, our filters
        still refuse the pod there; else the victims it needs: "trimmed" when fewer than given, "kept" when all
        of them (or when we would spare every one: kube-scheduler sees a need we do not). A victim the model does
        not hold there stays, as given. The model is changed only for the moment, as preemption.Evaluator does."""
        model = self.model.cluster
        row = model.index.get(node)
        if row is None or not given.uids:  # a node our filter calls unresolvable (not cached), or nothing to evict
            return "dropped", None
        held = {uid: model.assignments[uid] for uid in dict.fromkeys(given.uids)
                if uid in model.assignments and model.assignments[uid].node == row}
        evicted = dict(held)
        for uid in evicted:
            model.unassign(uid)
        try:
            if not self._passes(facts, node):
                return "dropped", None
            self._reprieve(facts, node, row, evicted)
        finally:
            for assignment in evicted.values():
                if assignment.pod.identity not in model.assignments:
                    model.assign(assignment.pod, node, assignment.devices)
        kept = tuple(uid for uid in given.uids if uid not in held or uid in evicted)
        if len(kept) == len(given.uids) or not kept:
            return "kept", given
        return "trimmed", NodeVictims(kept, self._violations(kept, held, given))

    def _reprieve(self, facts: pods.PodFacts, node: str, row: int, evicted: dict[str, cluster.Assignment]) -> None:
        """Put the victims back one at a time, as upstream's SelectVictimsOnNode reprieves them: those whose eviction
        would violate a PodDisruptionBudget first, each group most important first. One is spared (leaves
        `evicted`) only if the pod still passes our filters and every filter (Framework.fits, kube-scheduler's
        too) with it there: a victim kube-scheduler needed gone is never spared."""
        model = self.model.cluster
        violating, others = preemption.violating(
            preemption.more_important_first(assignment.pod for assignment in evicted.values()),
            list(self.model.budgets.values()))
        for victim in [*violating, *others]:
            assignment = evicted[victim.identity]
            model.assign(assignment.pod, node, assignment.devices)
            if self._passes(facts, node) and self.framework.fits(facts, row):
                del evicted[victim.identity]  # spared: stays
            else:
                model.unassign(victim.identity)

    def _passes(self, facts: pods.PodFacts, node: str) -> bool:
        """Whether our own filters (not those kube-scheduler has run itself) let the pod onto `node` now."""
        feasible, _, _ = self.framework.evaluate(facts, [node], score=False)
        return bool(feasible)

    def _violations(self, kept: tuple[str, ...], held: Mapping[str, cluster.Assignment], given: NodeVictims) -> int:
        """NumPDBViolations of the victims left: recounted when we watch budgets and hold every victim, else what
        kube-scheduler counted, at most one per victim left."""
        budgets = list(self.model.budgets.values())
        if budgets and all(uid in held for uid in kept):
            return len(preemption.violating([held[uid].pod for uid in kept], budgets)[0])
        return min(given.pdb_violations, len(kept))

    def _keep_scores(self, uid: str, asked: frozenset[str], scores: dict[str, float]) -> None:
        self.filtered[uid] = (asked, scores)
        self.filtered.move_to_end(uid)
        while len(self.filtered) > FILTERED_SCORES:
            self.filtered.popitem(last=False)

    def bind(self, args: BindingArgs) -> ExtenderBindingResult:
        """Choose and assume the devices, then POST the Binding that records them on the pod."""
        try:
            facts = self.model.facts_of(self._pod_for(args))
            with self.lock:
                devices, assumed = self._assume(facts, args.node)
        except BindError as err:
            log.info("not binding %s to %s: %s", args.key, args.node, err)
            return {"Error": str(err)}
        try:
            self._write(args, devices)
        except BaseException as err:
            if assumed:  # this call's assumption (a retried bind leaves the first one's alone)
                self._settle(args)
            if not isinstance(err, BindError):
                raise
            log.warning("binding %s to %s failed: %s", args.key, args.node, err)
            return {"Error": str(err)}
        with self.lock:
            self.model.finish_binding(args.uid, now=_now())
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

    def _settle(self, args: BindingArgs) -> None:
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

    def _pod_for(self, args: BindingArgs) -> dict[str, Any]:
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

    def _read_pod(self, args: BindingArgs) -> dict[str, Any]:
        try:
            return binding.read_pod(self.core, namespace=args.namespace, name=args.pod_name)
        except (ApiException, HTTPError, OSError, ValueError) as err:
            raise BindError(f"cannot read pod {args.key}: {watching.describe_error(err)}") from err

    def _assume(self, facts: pods.PodFacts, node: str) -> tuple[tuple[pods.Device, ...], bool]:
        """Under the lock: the devices for `facts` on `node`, accounted in the model (and whether this call
        assumed them, or a bind before it); never overcommits."""
        row = self.model.cluster.index.get(node)
        if row is None:
            raise BindError(f"node {node}: {NOT_CACHED}")
        current = self.model.cluster.assignments.get(facts.identity)
        if current is not None:
            if current.node == row:
                return current.devices, False  # bound or being bound there already: the same devices again
            raise BindError(f"pod {facts.key} is already assigned to node {self.model.cluster.node(current.node).name}")
        feasible, failed, _ = self.framework.evaluate(facts, [node], score=False)
        if not feasible:
            raise BindError(f"node {node} cannot take pod {facts.key} any more: {failed[node][1]}")
        devices = self.framework._devices(row, facts)  # the standalone scheduler's device choice
        try:
            self.model.assume(facts, node, devices, now=_now())
        except cluster.OvercommitError as err:
            raise BindError(str(err)) from err
        return devices, True

    def _write(self, args: BindingArgs, devices: tuple[pods.Device, ...]) -> None:
        """POST the Binding with the devices annotation, which the apiserver writes onto the pod in the same
        update that sets its node (as `gpu-scheduler run` binds); its UID refuses a pod recreated meanwhile."""
        try:
            binding.bind(self.core.api_client, namespace=args.namespace, name=args.pod_name, uid=args.uid,
                         node=args.node, devices=devices)
        except ApiException as err:
            if err.status == 409 and self._bound_there(args):
                return  # bound to this node already (a retried bind): done
            raise BindError(f"binding {args.key} to {args.node}: {watching.describe_error(err)}") from err
        except (HTTPError, OSError) as err:
            raise BindError(f"binding {args.key} to {args.node}: {watching.describe_error(err)}") from err

    def _bound_there(self, args: BindingArgs) -> bool:
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


class _Runtime:
    """The extender, built (and its watches started) when the first valid configuration arrives."""

    def __init__(self, core: Any):
        self.core = core
        self.extender: Extender | None = None
        self._lock = threading.Lock()

    def current(self) -> Extender | None:
        return self.extender

    def configure(self, settings: config.Config) -> None:
        with self._lock:
            if self.extender is None:
                self.extender = Extender(settings, core=self.core).start()
            else:
                self.extender.configure(settings)


def create_app(settings: Settings) -> Flask:
    """The app of the one gunicorn worker: configuration source, watches, routes."""
    if (settings.config_file is None) == (settings.config_map is None):
        raise ValueError("exactly one of config_file and config_map must be given")
    from gpu_scheduler import kubeclient

    core = client.CoreV1Api(kubeclient.api_client(settings.kubeconfig))
    runtime = _Runtime(core)
    holder = reloading.ConfigHolder(on_change=runtime.configure)
    sources.start(holder, config_file=settings.config_file, config_map=settings.config_map, core_api=core)
    return build_app(runtime.current)


def build_app(current: Callable[[], Extender | None]) -> Flask:
    """Routes over whatever extender `current()` returns (None: not configured yet)."""
    app = Flask("gpu-scheduler-extender")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    model_registry = CollectorRegistry()  # the model's view: one model, in this (the only) worker

    def view() -> model_metrics.ModelView | None:
        extender = current()
        return extender.model_view() if extender is not None else None

    model_metrics.register(view, model_registry)

    def serve(verb: str, parse: Callable[[object], Any],
              answer: Callable[[Extender, Any], tuple[Any, str]]) -> Any:
        started = time.perf_counter()
        try:
            args = parse(orjson.loads(request.get_data(cache=False)))
        except RequestError as err:
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
        return serve("filter", parse_candidates, lambda extender, args: (extender.filter(args), "ok"))

    @app.post("/prioritize")
    def prioritize() -> Any:
        return serve("prioritize", parse_candidates, lambda extender, args: (extender.prioritize(args), "ok"))

    @app.post("/bind")
    def bind() -> Any:
        def answer(extender: Extender, args: BindingArgs) -> tuple[ExtenderBindingResult, str]:
            result = extender.bind(args)
            return result, "refused" if result["Error"] else "bound"

        return serve("bind", parse_binding, answer)

    @app.post("/preempt")
    def preempt() -> Any:
        def answer(extender: Extender, args: PreemptionArgs) -> tuple[ExtenderPreemptionResult, str]:
            result = extender.preempt(args)
            return result, "ok" if result["NodeNameToMetaVictims"] else "no_candidates"

        return serve("preempt", parse_preemption, answer)

    @app.get("/healthz")
    def healthz() -> Any:
        extender = current()
        down = extender.watches.down() if extender is not None else []
        return _error(500, "; ".join(down)) if down else jsonify(status="ok")

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
