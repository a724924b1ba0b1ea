"""The cluster as the Node and Pod watches show it (with the Namespaces, and for `run` the Services and
controllers whose selectors system default spreading reads, and the storage objects the volume plugins read),
plus our own bindings: one model for both modes.

`gpu-scheduler run` drives it from its loop thread and `gpu-scheduler extender` under its lock; each
is a thin driver that feeds it watch events and relists, tells it what it decided and how the
binding went, and decides over `cluster` (the arrays of scheduler_core.cluster). Pure: it takes the
API's JSON as dicts and the time as an argument; reading and writing the API is the drivers' part.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_core import cluster, fields, nodes, podgroups, pods, preemption, profile, spread, warmup

log = logging.getLogger(__name__)

# An assumption whose binding went through is given this long for the watch to show the pod bound;
# only a relist that still shows it unbound after that expires it (see WatchedCluster).
ASSUMED_TTL = datetime.timedelta(seconds=30)


@dataclass(frozen=True)
class PendingPod:
    """A pending pod of ours: its names for the API and its facts, not the object (a tenant's
    annotations may be hundreds of KiB, and thousands of pods may wait)."""

    namespace: str
    name: str
    uid: str
    facts: pods.PodFacts

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class Assumption:
    node: str
    since: datetime.datetime  # when we decided
    bound_at: datetime.datetime | None = None  # when our binding went through; None while it is in flight


@dataclass
class Change:
    """What a verb changed that a scheduling queue cares about (`run` applies it; the extender has no queue)."""

    freed: bool = False  # room may have been made: a node came or changed, or a pod left a node
    queued: dict[str, int] = field(default_factory=dict)  # uid -> priority: pending pods, new or updated
    settled: set[str] = field(default_factory=set)  # uids no longer pending: bound, gone, or not ours any more

    def add(self, other: Change) -> Change:
        self.freed |= other.freed
        for uid in other.settled:
            self.queued.pop(uid, None)
        self.queued.update(other.queued)
        self.settled = (self.settled - set(other.queued)) | other.settled
        return self


class WatchedCluster:
    """One watched model of the cluster. Pods are keyed by UID (`metadata.uid`), as kube-scheduler's
    cache keys them, so a refusal or a late event of an old incarnation never touches a new pod of
    the same name.

    A pod's states, as in kube-scheduler's cache (pkg/scheduler/backend/cache/interface.go), with
    the pending pods (`run` only) and the orphans added:

                    assume                 the watch shows it bound          deleted, terminal, or
      Pending   ------------->  Assumed  --------------------------> Bound  ----------------------> Deleted
      (Initial) <-------------     |                                  ^  |   absent from a relist
                    forget         | its node is deleted              |  | its node is deleted
                                   v                                  |  v
                                 Orphan  ---- a node of that name registers (again) ----> accounted
      the watch shows it bound to a node the model has not seen ----> Orphan

    The verbs: `node_event` / `nodes_relisted` and `pod_event` / `pods_relisted` take in what the
    watches show; `assume` accounts our decision; `finish_binding` notes that our Binding went
    through; `forget` undoes an assumption whose Binding failed, and `confirm` then takes in what
    the API says of the pod. Pod verbs return a `Change` for the caller's queue.

    - Pending: unbound, `schedulerName` ours, not being deleted. Kept (as a PendingPod) only when
      the model is built with a `scheduler_name`: `run` queues them; the extender is handed each pod.
    - Assumed: our decision, accounted in `cluster` at once so the next decision sees it, until the
      watch shows the pod bound (Bound) or our binding fails (`forget`, then `confirm` with what the
      API says). Unbound events meanwhile predate the binding and change nothing.
    - Bound (Added): the API shows `spec.nodeName`; accounted with the devices it records.
    - Orphan: bound (or assumed) to a node the model does not hold, because the node has not been
      seen yet or was deleted. Never forgotten while the API has the pod: kept with its devices,
      not accounted, and accounted again when a node of that name registers.
    - Deleted: a DELETED event, a terminal phase, or absence from a relist (a relist of pods is the
      truth for which pods exist; of nodes, for which nodes do).

    Assumptions and relists: kube-scheduler v1.36 keeps an assumed pod until its Add or a Forget,
    with no expiry. Our drivers always report a binding's outcome, so that rule holds for events;
    a relist is handled as follows. An assumed pod the list does not show bound survives while its
    binding is in flight (the list may have been read before the binding landed; a pod that is gone
    fails the binding, and `forget` follows). Once the binding has gone through, the pod survives a
    relist for ASSUMED_TTL more, as older kube-schedulers expired an assumed pod a TTL after its
    binding finished; after that a list still showing it unbound is believed, and the pod is pending
    again. An assumed pod absent from a list whose binding went through is gone.

    Every object is taken in under a guard: one the parsers choke on is logged (kind, namespace/name,
    the error), counted in `rejected`, and skipped; the watch and the loop go on.
    """

    def __init__(self, *, gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",),
                 scheduling: profile.Scheduling = profile.Scheduling(), scheduler_name: str | None = None,
                 warm_up: bool = False):
        self.cluster = cluster.Cluster(gpu_resources=gpu_resources)
        self.scheduling = scheduling
        self.scheduler_name = scheduler_name  # keep the pending pods of this scheduler (None: none)
        self.warm_up = warm_up  # keep warm-up candidates (bound pods whose cost the webhook wrote)
        self.pending: dict[str, PendingPod] = {}
        self.assumed: dict[str, Assumption] = {}
        self.orphans: dict[str, pods.PodFacts] = {}  # uid -> facts with node_name and devices
        self._orphans_of: defaultdict[str, set[str]] = defaultdict(set)  # node name -> uids
        self.warm: dict[str, warmup.Candidate] = {}
        self.rejected: Counter[str] = Counter()  # objects not taken in, by kind
        # uid -> why its recorded devices were not believed; `new_conflicts` holds those not yet taken by
        # the driver, which reports each once (an event on the pod), not again at every relist
        self.conflicts: dict[str, str] = {}
        self.new_conflicts: list[tuple[pods.PodFacts, str]] = []
        # uids of pending pods that other pods landing may let through: required pod affinity, DoNotSchedule
        # topology spread (some may be gone)
        self._awaiting: set[str] = set()
        self.budgets: dict[str, preemption.Budget] = {}  # PodDisruptionBudgets by uid, as preemption reads them
        # uid -> node: where a preemption made room for a pending pod (status.nominatedNodeName, or ours before the
        # API shows it); entries of pods no longer pending are dropped as `nominees` meets them
        self.nominated: dict[str, str] = {}
        self.groups: dict[podgroups.GroupRef, podgroups.PodGroup] = {}  # the PodGroups of every API watched
        self.group_problems: dict[podgroups.GroupRef, str] = {}  # why a PodGroup could not be read (never was)
        self._group_pending: defaultdict[podgroups.GroupRef, set[str]] = defaultdict(set)  # may hold stale uids

    def configure(self, scheduling: profile.Scheduling) -> None:
        """Objects parsed from now on use these locality labels and utilization age."""
        self.scheduling = scheduling

    # --- nodes ------------------------------------------------------------------------------------

    def node_event(self, kind: str, obj: Mapping[str, Any], *, now: datetime.datetime) -> Change:
        if kind == "DELETED":
            return self._guarded("Node", obj, functools.partial(self._remove_node, obj))
        return self._guarded("Node", obj, functools.partial(self._set_node, obj, now))

    def nodes_relisted(self, items: Iterable[Mapping[str, Any]], *, now: datetime.datetime) -> Change:
        """The nodes as a list shows them: those absent are deleted (their pods become orphans)."""
        items = list(items)
        names = {_name(obj) for obj in items}
        for name in [name for name in self.cluster.index if name not in names]:
            self._remove_node({"metadata": {"name": name}})
        for obj in items:
            self._guarded("Node", obj, functools.partial(self._set_node, obj, now))
        return Change(freed=True)

    def _set_node(self, obj: Mapping[str, Any], now: datetime.datetime) -> Change:
        facts = nodes.parse(obj, gpu_resources=self.cluster.gpu_resources, now=now,
                            utilization_max_age=self.scheduling.utilization_max_age_seconds)
        row = self.cluster.index.get(facts.name)
        before = self.cluster.node(row) if row is not None else None
        self.cluster.set_node(facts)
        for uid in sorted(self._orphans_of.pop(facts.name, ())):
            self._restore(self.orphans.pop(uid))
        return Change(freed=before is None or _relevant(before) != _relevant(facts))

    def _remove_node(self, obj: Mapping[str, Any]) -> Change:
        """The node goes; the pods on it stay known, as orphans of its name, with their devices."""
        name = str(obj["metadata"]["name"])
        row = self.cluster.index.get(name)
        if row is not None:
            for uid in list(self.cluster.node_pods.get(row, ())):
                assignment = self.cluster.assignments[uid]
                self._orphan(uid, dataclasses.replace(assignment.pod, node_name=name, devices=assignment.devices))
            self.cluster.remove_node(name)
        return Change()

    # --- namespaces -------------------------------------------------------------------------------

    def namespace_event(self, kind: str, obj: Mapping[str, Any], *, now: datetime.datetime) -> Change:
        """A Namespace added, changed or deleted: its labels are what namespaceSelectors of pod affinity see."""
        return self._guarded("Namespace", obj, functools.partial(self._set_namespace, kind, obj))

    def namespaces_relisted(self, items: Iterable[Mapping[str, Any]], *, now: datetime.datetime) -> Change:
        """The namespaces as a list shows them. Until the first list, a pod whose inter-pod affinity selects
        namespaces by label cannot be evaluated, and waits."""
        labels = {}
        for obj in items:
            name = _name(obj)
            if name is None:
                self.rejected["Namespace"] += 1
                log.error("Namespace %s not taken into the model: it has no name", _describe(obj))
                continue
            labels[name] = _labels(obj)
        return Change(freed=self.cluster.set_namespaces(labels))

    def _set_namespace(self, kind: str, obj: Mapping[str, Any]) -> Change:
        name = str(obj["metadata"]["name"])
        return Change(freed=self.cluster.set_namespace(name, None if kind == "DELETED" else _labels(obj)))

    # --- services and controllers -----------------------------------------------------------------

    def selector_event(self, kind: str, event: str, obj: Mapping[str, Any], *, now: datetime.datetime) -> Change:
        """A Service, ReplicationController, ReplicaSet or StatefulSet (`kind`) added, changed or deleted: its
        selector is part of the default selector of the pods it selects or controls (`run` only). Only scores
        change, so no pod is queued."""
        def update() -> Change:
            namespace, name, selector = spread.DefaultSelectors.read(kind, obj)
            self.cluster.default_selectors.set(kind, namespace, name, None if event == "DELETED" else selector)
            return Change()
        return self._guarded(kind, obj, update)

    def selectors_relisted(self, kind: str, items: Iterable[Mapping[str, Any]], *,
                           now: datetime.datetime) -> Change:
        """Every object of `kind` as a list shows them; from the first list on, pods that depend on the kind have a
        known default selector."""
        found: list[tuple[str, str, Any]] = []

        def read(obj: Mapping[str, Any]) -> Change:
            found.append(spread.DefaultSelectors.read(kind, obj))
            return Change()
        for obj in items:
            self._guarded(kind, obj, functools.partial(read, obj))
        self.cluster.default_selectors.relisted(kind, found)
        return Change()

    # --- storage ----------------------------------------------------------------------------------

    def storage_event(self, kind: str, event: str, obj: Mapping[str, Any], *, now: datetime.datetime) -> Change:
        """A PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode, CSIDriver, CSIStorageCapacity or
        VolumeAttachment (`kind`, one of volumes.KINDS) added, changed or deleted (`run` only): a claim bound or a
        volume created may let a waiting pod through."""
        def update() -> Change:
            self.cluster.storage.set(kind, obj, deleted=event == "DELETED")
            return Change(freed=True)
        return self._guarded(kind, obj, update)

    def storage_relisted(self, kind: str, items: Iterable[Mapping[str, Any]], *,
                         now: datetime.datetime) -> Change:
        """Every object of `kind` as a list shows them. Pods with claims wait until every kind has listed once."""
        self.cluster.storage.clear(kind)
        for obj in items:
            self.storage_event(kind, "ADDED", obj, now=now)
        return Change(freed=True)

    # --- dynamic resource allocation ------------------------------------------------------------------

    def resource_event(self, kind: str, event: str, obj: Mapping[str, Any], *, now: datetime.datetime) -> Change:
        """A ResourceSlice, DeviceClass or ResourceClaim (`kind`, one of dra.state.KINDS) added, changed or deleted
        (`run` only): devices published or freed, a claim created for a pod, may let a waiting pod through."""
        def update() -> Change:
            self.cluster.dra.set(kind, obj, deleted=event == "DELETED")
            return Change(freed=True)
        return self._guarded(kind, obj, update)

    def resources_relisted(self, kind: str, items: Iterable[Mapping[str, Any]], *,
                           now: datetime.datetime) -> Change:
        """Every object of `kind` as a list shows them. Pods with claims wait until every kind has listed once."""
        self.cluster.dra.clear(kind)
        for obj in items:
            self.resource_event(kind, "ADDED", obj, now=now)
        return Change(freed=True)

    # --- disruption budgets and nominations ---------------------------------------------------------

    def budget_event(self, event: str, obj: Mapping[str, Any], *, now: datetime.datetime) -> Change:
        """A PodDisruptionBudget added, changed or deleted: which victims preemption would rather spare."""
        def update() -> Change:
            if event == "DELETED":
                self.budgets.pop(_uid(obj), None)
            else:
                self.budgets[_uid(obj)] = preemption.Budget.of(obj)
            return Change()
        return self._guarded("PodDisruptionBudget", obj, update)

    def budgets_relisted(self, items: Iterable[Mapping[str, Any]], *, now: datetime.datetime) -> Change:
        self.budgets.clear()
        for obj in items:
            self.budget_event("ADDED", obj, now=now)
        return Change()

    def nominate(self, uid: str, node: str | None) -> None:
        """Our preemption made room on `node` for the pending pod `uid` (None: it no longer needs it)."""
        if node and uid in self.pending:
            self.nominated[uid] = node
        else:
            self.nominated.pop(uid, None)

    def nominees(self) -> list[tuple[pods.PodFacts, str]]:
        """The pending pods a preemption made room for, each with its node."""
        found = []
        for uid, node in list(self.nominated.items()):
            pending = self.pending.get(uid)
            if pending is None:
                del self.nominated[uid]
            else:
                found.append((pending.facts, node))
        return found

    # --- pod groups ---------------------------------------------------------------------------------

    def group_event(self, api: str, event: str, obj: Mapping[str, Any], *, now: datetime.datetime) -> Change:
        """A PodGroup of `api` (scheduler_core.podgroups.APIS) added, changed or deleted. One that cannot be read
        keeps the last version that could; its members wait, told why, if none ever could."""
        metadata = fields.mapping(obj.get("metadata"))
        ref = podgroups.GroupRef(api, str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""))
        if event == "DELETED":
            self.groups.pop(ref, None)
            self.group_problems.pop(ref, None)
            return Change()
        try:
            self.groups[ref] = podgroups.PodGroup.of(api, obj)
        except ValueError as err:
            self.rejected["PodGroup"] += 1
            log.error("PodGroup %s not taken into the model: %s", ref, err)
            if ref not in self.groups:
                self.group_problems[ref] = f"PodGroup {ref.key} ({api}) cannot be read: {err}"
            return Change()
        self.group_problems.pop(ref, None)
        return Change(freed=True)  # its members may be placed now

    def groups_relisted(self, api: str, items: Iterable[Mapping[str, Any]], *, now: datetime.datetime) -> Change:
        """Every PodGroup of `api` as a list shows them (none when the API does not serve them)."""
        for ref in [ref for ref in self.groups if ref.api == api]:
            del self.groups[ref]
        for ref in [ref for ref in self.group_problems if ref.api == api]:
            del self.group_problems[ref]
        for obj in items:
            self._guarded("PodGroup", obj, functools.partial(self.group_event, api, "ADDED", obj, now=now))
        return Change(freed=True)

    def gang(self, ref: podgroups.GroupRef) -> tuple[podgroups.PodGroup | None, list[PendingPod], int]:
        """A group's PodGroup (None: not seen), its pending members, and how many of its members are placed."""
        uids = self._group_pending.get(ref, set())
        members = []
        for uid in list(uids):
            pending = self.pending.get(uid)
            if pending is None or pending.facts.group != ref:
                uids.discard(uid)
            else:
                members.append(pending)
        if not uids:
            self._group_pending.pop(ref, None)
        placed = self.cluster.group_pods.get(ref, set())
        if ref.api == podgroups.RULE:  # no PodGroup object: what its members carry
            said = [m.facts.group_min_member for m in members] + [
                self.cluster.assignments[uid].pod.group_min_member for uid in placed]
            return podgroups.formed(ref, [n for n in said if n]), members, len(placed)
        return self.groups.get(ref), members, len(placed)

    # --- pods -------------------------------------------------------------------------------------

    def pod_event(self, kind: str, obj: Mapping[str, Any], *, now: datetime.datetime) -> Change:
        return self._guarded("Pod", obj, functools.partial(self._pod, kind, obj, now))

    def pods_relisted(self, items: Iterable[Mapping[str, Any]], *, now: datetime.datetime) -> Change:
        """The pods as a list shows them: what it does not hold is gone, whatever we knew of it."""
        listed: set[str] = set()
        change = Change(freed=True)
        # Pods whose devices the binder recorded first, then those whose annotation only a Binding wrote: a
        # tenant's edit of the annotation must not win a GPU from the pod that really holds it just because
        # the list happens to show the editor first.
        for obj in sorted(items, key=_distrust):
            change.add(self._guarded("Pod", obj, functools.partial(self._relisted, obj, now, listed)))
        known = set(self.cluster.assignments) | set(self.orphans) | set(self.pending) | set(self.warm)
        for uid in known - listed:
            assumption = self.assumed.get(uid)
            if assumption is not None and assumption.bound_at is None:
                continue  # our binding is in flight: its outcome decides
            change.add(self._delete(uid))
        return change

    def _relisted(self, obj: Mapping[str, Any], now: datetime.datetime, listed: set[str]) -> Change:
        listed.add(_uid(obj))  # first: a pod the API lists is not forgotten because its new version fails to parse
        return self._pod("MODIFIED", obj, now, relisted=True)

    def _pod(self, kind: str, obj: Mapping[str, Any], now: datetime.datetime, *, relisted: bool = False) -> Change:
        uid = _uid(obj)
        metadata, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        if kind == "DELETED" or (obj.get("status") or {}).get("phase") in pods.TERMINAL_PHASES:
            return self._delete(uid)
        if spec.get("nodeName"):
            return self._seen_bound(uid, obj)
        change = Change()
        assumption = self.assumed.get(uid)
        if assumption is not None:
            if not (relisted and _expired(assumption, now)):
                return change  # bound or being bound by us: this view predates the binding
            log.warning("pod %s was assumed on %s and bound %s ago, yet a relist shows it unbound: "
                        "pending again", pods.key_of(obj), assumption.node, now - (assumption.bound_at or now))
            change.add(self.forget(uid))
        elif uid in self.cluster.assignments or uid in self.orphans:
            return change  # the watch has shown it bound: an unbound view of it is older
        ours = (self.scheduler_name is not None and spec.get("schedulerName") == self.scheduler_name
                and not metadata.get("deletionTimestamp"))
        if ours:
            facts = self.facts_of(obj)
            self._pend(PendingPod(str(metadata.get("namespace") or "default"), str(metadata.get("name")), uid, facts))
            change.queued[uid] = facts.priority
        elif self.pending.pop(uid, None) is not None:
            change.settled.add(uid)
        return change

    def _seen_bound(self, uid: str, obj: Mapping[str, Any]) -> Change:
        current = self.cluster.assignments.get(uid)
        if current is not None and uid not in self.pending:
            seen = _seen_as(obj)
            if seen[0] == current.pod.node_name:
                # the common case, our binding confirmed (with the node's topology labels the apiserver adds) or
                # a placed pod's status updated: nothing to parse. Confirmed, our pod may be what a parked pod's
                # pod affinity or topology spread waits for, as one bound elsewhere (upstream moves such pods on
                # the assigned pod's add event, whoever bound it)
                awaited = self.assumed.pop(uid, None) is not None and self._awaiting_pods()
                self._keep_warm_up(uid, obj)
                if seen == _counted_as(current.pod):
                    return Change(freed=awaited)
                _, labels, terminating, started, preempted = seen
                return Change(freed=self.cluster.relabel(
                    uid, labels=labels, app=pods.app_of(labels, self.scheduling.locality_labels),
                    terminating=terminating, started=started, preempted=preempted) or awaited)
        facts = self.facts_of(obj)
        node = facts.node_name or ""
        change = Change()
        if self.pending.pop(uid, None) is not None:
            change.settled.add(uid)
        self.assumed.pop(uid, None)  # the watch confirms it: no longer ours to forget
        orphan = self.orphans.get(uid)
        if current is not None and self.cluster.node(current.node).name == node:
            # accounted there already, and the devices our decision chose stand; new labels, or its deletion
            # begun, change what topology spread and pod affinity count
            if _counted_as(current.pod) != _counted_as(facts):
                change.freed = self.cluster.relabel(uid, labels=facts.labels, app=facts.app,
                                                    terminating=facts.terminating, started=facts.started,
                                                    preempted=facts.preempted)
        elif current is None and orphan is not None and orphan.node_name == node:
            # waiting for its node with the devices first recorded: a later edit of the annotation moves nothing
            self.orphans[uid] = dataclasses.replace(orphan, labels=facts.labels, app=facts.app,
                                                    terminating=facts.terminating, started=facts.started,
                                                    preempted=facts.preempted)
        else:
            # a pod now on a node may be what a parked pod's pod affinity or topology spread waits for
            change.freed = self._release(uid) or self._awaiting_pods()
            self._place(uid, facts)
        self._keep_warm_up(uid, obj)
        return change

    def _keep_warm_up(self, uid: str, obj: Mapping[str, Any]) -> None:
        if self.warm_up:
            candidate = warmup.Candidate.of(obj)
            if candidate.initial_cost is not None:
                self.warm[uid] = candidate
            else:
                self.warm.pop(uid, None)

    def _delete(self, uid: str) -> Change:
        change = Change(freed=self._release(uid))
        self.assumed.pop(uid, None)
        self.conflicts.pop(uid, None)
        self.warm.pop(uid, None)
        if self.pending.pop(uid, None) is not None:
            change.settled.add(uid)
        return change

    def _place(self, uid: str, facts: pods.PodFacts) -> None:
        if facts.node_name in self.cluster.index:
            self._restore(facts)
        else:
            self._orphan(uid, facts)

    def _restore(self, facts: pods.PodFacts) -> None:
        problem = self.cluster.restore(facts)
        if problem is not None:  # its recorded devices were not believed: say which it holds instead
            log.warning("pod %s on node %s: %s", facts.key, facts.node_name, problem)
            if self.conflicts.get(facts.uid) != problem:
                self.conflicts[facts.uid] = problem
                self.new_conflicts.append((facts, problem))

    def take_conflicts(self) -> list[tuple[pods.PodFacts, str]]:
        """Pods whose recorded GPU devices were not believed since the last call, each with why: the
        driver reports them on the pod. The model's own record stands (see scheduler_core.cluster)."""
        taken, self.new_conflicts = self.new_conflicts, []
        return taken

    def _orphan(self, uid: str, facts: pods.PodFacts) -> None:
        self.orphans[uid] = facts
        self._orphans_of[facts.node_name or ""].add(uid)

    def _release(self, uid: str) -> bool:
        """Take the pod out of the accounting and the orphans; whether it held room on a node."""
        orphan = self.orphans.pop(uid, None)
        if orphan is not None:
            waiting = self._orphans_of.get(orphan.node_name or "")
            if waiting is not None:
                waiting.discard(uid)
                if not waiting:
                    del self._orphans_of[orphan.node_name or ""]
        return self.cluster.unassign(uid) is not None

    def _pend(self, pending: PendingPod) -> None:
        self.pending[pending.uid] = pending
        facts = pending.facts
        if facts.group is not None:
            self._group_pending[facts.group].add(pending.uid)
        if facts.nominated_node:  # an update without it (a view older than our own nomination) clears nothing
            self.nominated[pending.uid] = facts.nominated_node
        if (facts.pod_affinity is not None and facts.pod_affinity.required) or (
                facts.topology_spread is not None and facts.topology_spread.hard):
            self._awaiting.add(pending.uid)

    def _awaiting_pods(self) -> bool:
        """Whether a pending pod has required pod affinity or a DoNotSchedule spread constraint, which a pod
        landing may satisfy (more pods in the emptiest domain). Pods no longer pending leave the set here, each
        once, so a stream of bound pods costs next to nothing."""
        while self._awaiting:
            uid = next(iter(self._awaiting))
            if uid in self.pending:
                return True
            self._awaiting.discard(uid)
        return False

    def facts_of(self, obj: Mapping[str, Any]) -> pods.PodFacts:
        """A pod's facts, parsed as the model parses the pods it keeps."""
        return pods.parse(obj, gpu_resources=self.cluster.gpu_resources,
                          locality_labels=self.scheduling.locality_labels)

    # --- our own decisions ------------------------------------------------------------------------

    def assume(self, facts: pods.PodFacts, node: str, devices: tuple[pods.Device, ...], *,
               now: datetime.datetime) -> None:
        """Pending (or handed over) -> Assumed on `node` with `devices`; raises OvercommitError
        rather than give away what is taken."""
        uid = facts.identity
        placed = dataclasses.replace(facts, node_name=node, devices=devices)
        self.cluster.assign(placed, node, devices)
        self.pending.pop(uid, None)
        self.assumed[uid] = Assumption(node, since=now)

    def finish_binding(self, uid: str, *, now: datetime.datetime) -> None:
        """Our binding of an assumed pod went through; the watch will show it (see ASSUMED_TTL)."""
        assumption = self.assumed.get(uid)
        if assumption is not None:
            assumption.bound_at = now

    def forget(self, uid: str, *, pending: PendingPod | None = None) -> Change:
        """Assumed -> not accounted: our binding failed. Only an assumed pod is forgotten: one the
        watch has shown bound (or gone) meanwhile stays as the API has it. Given `pending` (when the
        API could not be asked what became of the pod), the pod is pending again."""
        if self.assumed.pop(uid, None) is None:
            return Change()
        change = Change(freed=self._release(uid))
        if pending is not None and self.scheduler_name is not None:
            self._pend(pending)
            change.queued[uid] = pending.facts.priority
        return change

    def confirm(self, uid: str, pod: Mapping[str, Any] | None, *, now: datetime.datetime) -> Change:
        """After a failed binding, what the API says of the pod (None: not found): bound somewhere, the
        model follows; unbound with the same UID, it is pending again; gone, or another pod of that
        name, it is forgotten for good."""
        change = self.forget(uid)
        if pod is None or _uid(pod) != uid:
            return change.add(self._delete(uid))
        return change.add(self.pod_event("MODIFIED", pod, now=now))

    # --- the model's view, for metrics -------------------------------------------------------------

    def gpu_use(self) -> list[tuple[str, str, float, int]]:
        """(node, GPU model, GPUs allocated with shares summed, GPUs there) for every node with GPUs: the device
        plugin's (by model label), and NVIDIA's DRA GPUs (by product name), so a cluster with both kinds shows one
        count."""
        model = self.cluster
        found: dict[tuple[str, str], tuple[float, int]] = {}
        for name, row in list(model.index.items()):
            if (facts := model.facts[row]) is not None and facts.gpu_count:
                found[(name, facts.gpu_model or "unknown")] = (float(model.gpu_used[row]) / 1000, facts.gpu_count)
        for _, facts, products in model.dra_gpus():
            for product, (gpus, in_use) in products.items():
                used, total = found.get((facts.name, product), (0.0, 0))
                found[(facts.name, product)] = (used + in_use, total + gpus)
        return [(node, gpu_model, used, total) for (node, gpu_model), (used, total) in found.items()]

    # --- the guard --------------------------------------------------------------------------------

    def _guarded(self, kind: str, obj: Any, update: Callable[[], Change]) -> Change:
        try:
            return update()
        except Exception as err:  # one object the parsers choke on must not stop the watch or the loop
            self.rejected[kind] += 1
            log.error("%s %s not taken into the model: %s: %s", kind, _describe(obj), type(err).__name__, err)
            return Change()


def _distrust(obj: Any) -> int:
    """0: the pod's devices are in the binder's record (see pods.DEVICES_CONDITION), which tenants cannot
    write. 1: no record, but no create, update or patch wrote the devices annotation (a Binding records no
    managed fields, so only such writes own it in `metadata.managedFields`). 2: anything else."""
    field = "f:" + pods.DEVICES_ANNOTATION
    try:
        if pods.recorded_devices(obj) is not None:
            return 0
        edited = any(field in ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:annotations", {})
                     for entry in obj["metadata"].get("managedFields") or ())
        return 2 if edited else 1
    except (AttributeError, KeyError, TypeError):
        return 2  # unreadable: trusted last


def _uid(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("uid") or pods.key_of(obj))


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return fields.strings(fields.mapping(obj.get("metadata")).get("labels"))


def _name(obj: Mapping[str, Any]) -> str | None:
    try:
        return str(obj["metadata"]["name"])
    except (KeyError, TypeError):
        return None


def _describe(obj: Any) -> str:
    """namespace/name as well as it can be read, for a log line about an object that did not parse."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        return f"<no metadata: {str(obj)[:80]}>"
    name = str(metadata.get("name"))[:253]
    return f"{str(metadata['namespace'])[:63]}/{name}" if metadata.get("namespace") else name


def _expired(assumption: Assumption, now: datetime.datetime) -> bool:
    return assumption.bound_at is not None and now - assumption.bound_at > ASSUMED_TTL


Counted = tuple[str | None, Mapping[str, str], bool, str | None, bool]


def _counted_as(facts: pods.PodFacts) -> Counted:
    """Where a placed pod is, what of it the plugins that select pods by label read, and what preemption reads of
    it (its start, whether a preemption is deleting it): what a watch update may change."""
    return facts.node_name, facts.labels, facts.terminating, facts.started, facts.preempted


def _seen_as(obj: Mapping[str, Any]) -> Counted:
    """`_counted_as` read from the pod itself, without parsing it all: most updates of placed pods are status."""
    metadata = obj.get("metadata") or {}
    status = fields.mapping(obj.get("status"))
    return ((obj.get("spec") or {}).get("nodeName"), fields.strings(metadata.get("labels")),
            metadata.get("deletionTimestamp") is not None, pods.started_of(status), pods.preempted_of(metadata, status))


def _relevant(facts: nodes.NodeFacts) -> nodes.NodeFacts:
    """A node's facts without the fast-changing utilization and the images, which only score: a change
    here may make room."""
    return dataclasses.replace(facts, gpu_utilization=None, images={})
