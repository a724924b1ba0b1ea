"""Filter and score plugins, in the manner of kube-scheduler's framework, over whole arrays.

A filter returns `(failing_rows_mask, reason)` pairs; a node counts under the first filter
that rejects it (a filter may give one node several reasons, as NodeResourcesFit does).
A score returns 0..100 per candidate row. Work that depends only on labels, taints or the
pod's constraints is cached per (cluster labels version, constraint), not redone per pod; a score
that depends on a node's usage and a few facts of the pod is kept per row (`Cycle.by_row`) and
recomputed only for the rows whose usage changed since.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scheduler_core import podaffinity, predicates, spread, utilization, volumes, workloads
from scheduler_core.dra import allocator as dra_allocator
from scheduler_core.dra import claims as dra_claims
from scheduler_core.dra import state as dra_state
from scheduler_core.cluster import Cluster, RowMemo
from scheduler_core.nodes import GPU_MILLI, MILLI, UNSCHEDULABLE_TAINT
from scheduler_core.pods import MILLI_ANNOTATION, PodFacts

Failures = list[tuple[np.ndarray, str]]
BALANCED_RESOURCES = ("cpu", "memory")  # NodeResourcesBalancedAllocation's default resources
MIB = 1024 * 1024
IMAGE_MIN = 23 * MIB  # ImageLocality: image sizes below this score 0 ...
IMAGE_MAX_PER_CONTAINER = 1000 * MIB  # ... and this much per container of the pod scores 100
BY_ROW_ENTRIES = 64  # per-row score caches kept (each two arrays of the cluster's size), least recently used out


@dataclass
class Cycle:
    """One scheduling attempt of one pod: what plugins share instead of recomputing."""

    cluster: Cluster
    pod: PodFacts
    caches: dict[Any, Any]
    node_policy: str = "binpack"
    gpu_policy: str = "binpack"
    extras: dict[str, Any] = field(default_factory=dict)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))  # random tie-breaks
    workload: workloads.Workload | None = None  # pod shapes, for the placement-quality plugins

    @property
    def rows(self) -> int:
        return self.cluster.size

    def cached(self, key: Any, compute: Callable[[], Any]) -> Any:
        full_key = (self.cluster.labels_version, self.cluster.size, key)
        found = self.caches.get(full_key)
        if found is None:
            if len(self.caches) > 4096:
                self.caches.clear()
            found = self.caches[full_key] = compute()
        return found

    def no_score(self, rows: np.ndarray) -> np.ndarray:
        """A score plugin's "nothing to say of this pod": zeros for `rows`, one read-only array for the whole
        decision, which the framework knows and skips unread (finding an array all zero costs a decision more than
        most plugins that have nothing to say)."""
        found = self.extras.get("no-score")
        if found is None or found.size != rows.size:
            found = self.extras["no-score"] = np.zeros(rows.size)
            found.flags.writeable = False
        return found

    def by_row(self, key: Any, rows: np.ndarray, compute: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """`compute(rows)`, for a per-row function of each node's facts and usage and of `key` (what it reads
        of the pod), kept between decisions in a `RowMemo` (the least recently used dropped past
        BY_ROW_ENTRIES)."""
        kept: OrderedDict[Any, RowMemo] = self.caches.setdefault("by-row", OrderedDict())
        full_key = (key, self.cluster.labels_version, self.cluster.size)
        memo = kept.get(full_key)
        if memo is None:
            if len(kept) >= BY_ROW_ENTRIES:
                kept.popitem(last=False)
            memo = kept[full_key] = RowMemo(self.cluster.size, float)
        else:
            kept.move_to_end(full_key)
        return memo.read(self.cluster, rows, lambda stale: (compute(stale),))[0]


# --- filters ----------------------------------------------------------------------------------


def node_unschedulable(cycle: Cycle) -> Failures:
    if any(t.tolerates(UNSCHEDULABLE_TAINT) for t in cycle.pod.tolerations):
        return []
    return [(cycle.cluster.unschedulable[: cycle.rows], "node(s) were unschedulable")]


def node_ready(cycle: Cycle) -> Failures:
    return [(~cycle.cluster.ready[: cycle.rows], "node(s) were not ready")]


def taint_toleration(cycle: Cycle) -> Failures:
    return [(_untolerated(cycle), "node(s) had untolerated taint(s)")]


def _untolerated(cycle: Cycle) -> np.ndarray:
    """Rows with a NoSchedule or NoExecute taint the pod does not tolerate, once per labels version."""
    def compute() -> np.ndarray:
        fails = np.zeros(cycle.rows, dtype=bool)
        for row, facts in enumerate(cycle.cluster.facts):
            if facts is not None and facts.taints:
                fails[row] = predicates.first_untolerated(facts.taints, cycle.pod.tolerations) is not None
        return fails

    return cycle.cached(("taints", cycle.pod.tolerations), compute)


def node_affinity(cycle: Cycle) -> Failures:
    pod = cycle.pod
    if not pod.node_selector and pod.required_terms is None:
        return []
    return [(_affinity_mismatch(cycle), "node(s) didn't match Pod's node affinity/selector")]


def _affinity_mismatch(cycle: Cycle) -> np.ndarray:
    """Rows the pod's nodeSelector and required node affinity rule out, once per labels version."""
    pod = cycle.pod
    return reach_mismatch(cycle, tuple(sorted(pod.node_selector.items())), pod.required_terms)


def reach_mismatch(cycle: Cycle, selector: tuple[tuple[str, str], ...],
                   required_terms: tuple[predicates.Term, ...] | None) -> np.ndarray:
    """Rows a nodeSelector (its items, sorted) and required node affinity rule out, once per labels version."""
    def compute() -> np.ndarray:
        fails = np.zeros(cycle.rows, dtype=bool)
        if not selector and required_terms is None:
            return fails
        for row, facts in enumerate(cycle.cluster.facts):
            if facts is None:
                continue
            labels = facts.labels
            ok = all(labels.get(k) == v for k, v in selector)
            if ok and required_terms is not None:
                ok = any(term.matches(labels, facts.name) for term in required_terms)
            fails[row] = not ok
        return fails

    return cycle.cached(("affinity", selector, required_terms), compute)


def node_ports(cycle: Cycle) -> Failures:
    """The nodes where a host port the pod asks for is held already; nothing to do for a pod without one."""
    if not cycle.pod.host_ports:
        return []
    fails = np.zeros(cycle.rows, dtype=bool)
    fails[list(cycle.cluster.rows_holding(cycle.pod.host_ports))] = True
    return [(fails, "node(s) didn't have free ports for the requested pod ports")]


def spot_policy(cycle: Cycle) -> Failures:
    spot = cycle.cluster.spot[: cycle.rows]
    if cycle.pod.spot == "require":
        return [(~spot, "node(s) were not spot capacity (pod requires spot)")]
    if cycle.pod.spot == "forbid":
        return [(spot, "node(s) were spot capacity (pod forbids spot)")]
    return []


def _gpus_by_dra(cycle: Cycle) -> np.ndarray | None:
    """The rows where DRA serves the pod's whole GPUs (Cluster.gpus_by_dra), once per cycle; the device-plugin GPU
    filters leave them to DynamicResources."""
    if "gpus-by-dra" not in cycle.extras:
        cycle.extras["gpus-by-dra"] = cycle.cluster.gpus_by_dra(cycle.pod)
    found: np.ndarray | None = cycle.extras["gpus-by-dra"]
    return found


def _device_plugin_rows(cycle: Cycle, fails: np.ndarray) -> np.ndarray:
    served = _gpus_by_dra(cycle)
    return fails if served is None else fails & ~served


SHARES_NOT_ON_DRA = (f"node(s) offer GPUs only through DRA, and {MILLI_ANNOTATION} shares are served by the "
                     "device plugin only (ask for a ResourceClaim instead)")


def gpu_present(cycle: Cycle) -> Failures:
    pod, cluster = cycle.pod, cycle.cluster
    if not pod.wants_gpu:
        return []
    none = cluster.gpu_count[: cycle.rows] == 0
    if pod.gpu_milli and none.any() and cluster.dra.ready and cluster.dra.slices:
        dra = np.zeros(cycle.rows, dtype=bool)
        for row in np.flatnonzero(none & cycle.extras.get("alive", cluster.present[: cycle.rows])).tolist():
            facts = cluster.facts[row]
            dra[row] = facts is not None and cluster.dra.devices_on(facts)[0] > 0
        return [(none & ~dra, "node(s) had no GPUs"), (dra, SHARES_NOT_ON_DRA)]
    return [(_device_plugin_rows(cycle, none), "node(s) had no GPUs")]


def gpu_model(cycle: Cycle) -> Failures:
    pod, cluster = cycle.pod, cycle.cluster
    if not pod.wants_gpu or not pod.models:
        return []

    def compute() -> np.ndarray:
        verdicts: dict[str | None, bool] = {}
        fails = np.zeros(cycle.rows, dtype=bool)
        for row, facts in enumerate(cluster.facts):
            if facts is None:
                continue
            model = facts.gpu_model
            if model not in verdicts:
                verdicts[model] = predicates.model_matches(pod.models, model)
            fails[row] = not verdicts[model]
        return fails

    return [(_device_plugin_rows(cycle, cycle.cached(("model", pod.models), compute)),
             f"GPU model mismatch (want {pod.model})")]


def gpu_memory(cycle: Cycle) -> Failures:
    want = cycle.pod.min_gpu_memory_mib
    if not cycle.pod.wants_gpu or not want:
        return []
    memory = cycle.cluster.gpu_memory[: cycle.rows]
    return [
        (_device_plugin_rows(cycle, memory == 0), f"GPU memory unknown (want >= {want} MiB per GPU)"),
        (_device_plugin_rows(cycle, (memory > 0) & (memory < want)),
         f"GPU memory too small (want >= {want} MiB per GPU)"),
    ]


def resources_fit(cycle: Cycle) -> Failures:
    cluster = cycle.cluster
    failures: Failures = []
    for resource, amount in cycle.pod.requests.items():
        column = cluster.column(resource)
        reason = "Too many pods" if resource == "pods" else f"Insufficient {resource}"
        if column is None:
            fails = np.ones(cycle.rows, dtype=bool)
        else:
            fails = cluster.alloc[column, : cycle.rows] - cluster.used[column, : cycle.rows] < amount
        if cycle.pod.extended_asks and (served := cluster.served_by_dra(resource)) is not None:
            fails &= ~served  # DynamicResources allocates it there
        failures.append((fails, reason))
    return failures


def gpu_devices(cycle: Cycle) -> Failures:
    pod, cluster = cycle.pod, cycle.cluster
    if pod.gpus:
        idle = cluster.whole_free[: cycle.rows]
        return [(_device_plugin_rows(cycle, idle < pod.gpus),
                 f"node(s) had fewer than {pod.gpus} idle GPU(s) (the rest are shared)")]
    if pod.gpu_milli:
        free = cluster.gpu_free[: cycle.rows]
        best = np.where(free >= pod.gpu_milli, free, GPU_MILLI + 1).min(axis=1)
        cycle.extras["best_fit_free"] = best
        return [(best > GPU_MILLI, f"node(s) had no GPU with {pod.gpu_milli}/1000 free")]
    return []


AFFINITY_MISMATCH = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_MISMATCH = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_MISMATCH = "node(s) didn't satisfy existing pods anti-affinity rules"
NAMESPACES_UNKNOWN = "node(s) not checked against pod affinity: namespaces not listed yet (namespaceSelector)"


def inter_pod_affinity(cycle: Cycle) -> Failures:
    """InterPodAffinity: the pod's required pod affinity and anti-affinity, and the required anti-affinity
    of the pods already on nodes (assumed ones too) towards it. Nothing to do, and nothing done, while
    neither the pod nor any placed pod has such terms."""
    cluster, terms = cycle.cluster, cycle.pod.pod_affinity
    index = cluster.pod_index
    if (terms is None or not (terms.required or terms.anti_required)) and not index.anti_terms:
        return []
    if cluster.namespace_labels is None and _reads_namespace_labels(terms, index):
        return [(np.ones(cycle.rows, dtype=bool), NAMESPACES_UNKNOWN)]
    affinity, anti, existing = podaffinity.required_failures(index, _incoming(cycle), topology_domains(cycle),
                                                             cycle.rows)
    return [(affinity, AFFINITY_MISMATCH), (anti, ANTI_AFFINITY_MISMATCH), (existing, EXISTING_ANTI_AFFINITY_MISMATCH)]


def _reads_namespace_labels(terms: podaffinity.PodAffinity | None, index: podaffinity.PodIndex) -> bool:
    """Whether the pod's required terms, or placed pods' required anti-affinity, select namespaces by label."""
    own = terms.required + terms.anti_required if terms is not None else ()
    return index.anti_terms.reading_namespace_labels > 0 or any(term.reads_namespace_labels for term in own)


def _incoming(cycle: Cycle) -> podaffinity.Incoming:
    """The pod as inter-pod affinity sees it, its terms' namespaceSelectors resolved to namespaces."""
    pod, cluster = cycle.pod, cycle.cluster
    known = cluster.namespace_labels or {}
    terms = pod.pod_affinity or podaffinity.PodAffinity()

    def resolve() -> podaffinity.PodAffinity:
        weighted = [tuple(podaffinity.WeightedTerm(w.weight, w.term.resolved(known)) for w in kind)
                    for kind in (terms.preferred, terms.anti_preferred)]
        return podaffinity.PodAffinity(tuple(t.resolved(known) for t in terms.required),
                                       tuple(t.resolved(known) for t in terms.anti_required), *weighted)

    resolved = cycle.cached(("pod-affinity", cluster.namespaces_version, terms), resolve)
    return podaffinity.Incoming(pod.namespace, pod.labels, known.get(pod.namespace, {}), resolved)


def topology_domains(cycle: Cycle, missing: str | None = None) -> Callable[[str], podaffinity.Domains]:
    """Each row's topology domain for a key (a node without it reading `missing`), once per labels version."""
    def domains(key: str) -> podaffinity.Domains:
        labels = (facts.labels if facts is not None else None for facts in cycle.cluster.facts)
        return cycle.cached(("topology", key, missing), lambda: podaffinity.Domains.of(labels, key, missing=missing))
    return domains


STORAGE_UNKNOWN = ("not checked against its volumes: the storage objects (PersistentVolumeClaims, PersistentVolumes, "
                   "StorageClasses, CSINodes, CSIDrivers, CSIStorageCapacities, VolumeAttachments) not listed yet")


def volume_restrictions_pre(cycle: Cycle) -> str | None:
    """VolumeRestrictions' PreFilter: a claim the pod names must exist. (Also where a pod with claims waits until
    the storage objects have been listed at all.)"""
    pod, storage = cycle.pod, cycle.cluster.storage
    if not pod.volumes:
        return None
    if pod.volumes.claims and not storage.ready:
        return STORAGE_UNKNOWN
    problem, used = volumes.restrictions_pre_filter(storage, pod.namespace, pod.volumes)
    cycle.extras["rwop-used"] = used
    return problem


def volume_binding_pre(cycle: Cycle) -> str | None:
    """VolumeBinding's PreFilter: the pod's claims exist, are usable, and none is an unbound Immediate one."""
    pod = cycle.pod
    if not pod.volumes or not pod.volumes.claims:
        return None
    name = pod.key.partition("/")[2]
    found = volumes.binding_pre_filter(cycle.cluster.storage, pod.namespace, name, pod.uid, pod.volumes)
    if isinstance(found, str):
        return found
    cycle.extras["claims"] = found
    return None


def volume_zone_pre(cycle: Cycle) -> str | None:
    """VolumeZone's PreFilter: the zone labels of the pod's bound volumes."""
    pod = cycle.pod
    if not pod.volumes or not pod.volumes.claims:
        return None
    found = volumes.zone_pre_filter(cycle.cluster.storage, pod.namespace, pod.volumes)
    if isinstance(found, str):
        return found
    cycle.extras["zones"] = found
    return None


# PreFilters that reject a pod whatever the node, in upstream's order; each returns its message, or None.
DRA_UNKNOWN = ("not checked against its resource claims: the DRA objects (ResourceSlices, DeviceClasses, "
               "ResourceClaims) not listed yet")


def dynamic_resources_pre(cycle: Cycle) -> str | None:
    """DynamicResources' PreEnqueue and PreFilter: every claim of the pod exists, is the pod's own (a template's),
    is not being deleted or allocated for another pod, and asks for classes that exist."""
    pod, resources = cycle.pod, cycle.cluster.dra
    if not pod.resource_claims and not any(resources.serving(r) for ask in pod.extended_asks for r in ask.asks):
        return None  # extended resources no class serves (or none known yet: the DRA objects not listed)
    if not resources.ready:
        return DRA_UNKNOWN
    found = resources.pre_filter(pod.namespace, pod.key.partition("/")[2], pod.uid, pod.resource_claims,
                                 asks=pod.extended_asks)
    if isinstance(found, str):
        return found
    if found.records or found.extended is not None:
        cycle.extras["dra"] = found
    return None


def dynamic_resources(cycle: Cycle) -> Failures:
    """DynamicResources' Filter: an allocated claim's node selector admits the node, and the claims to allocate
    fit on its devices (scheduler_core.dra.allocator, with the GPU policy's device order). Only the rows still
    alive are tried, each once per cycle; an error (a selector that fails, a search too long) ends the trying and
    rejects every node with that error, as upstream's Filter error ends the pod's cycle."""
    prepared = cycle.extras.get("dra")
    if prepared is None:
        return []
    outcomes: dict[int, Any] = cycle.extras.setdefault("dra-outcomes", {})
    alive = cycle.extras.get("alive")
    rows = np.flatnonzero(alive if alive is not None else cycle.cluster.present[: cycle.rows])
    resources, facts, pod = cycle.cluster.dra, cycle.cluster.facts, cycle.pod
    limited = bool(pod.models or pod.min_gpu_memory_mib)
    failed = cycle.extras.get("dra-error")
    for row in rows.tolist():
        node = facts[row]
        if row in outcomes or node is None:
            continue
        if failed is not None:
            outcomes[row] = failed
            continue
        try:
            outcome = resources.filter(node, prepared, allocatable=node.allocatable, gpu_policy=cycle.gpu_policy,
                                       models=pod.models, min_memory_mib=pod.min_gpu_memory_mib)
        except dra_allocator.AllocationError as err:
            # as upstream, an error ends the pod's attempt: no other node is tried, each is told this
            outcome = failed = cycle.extras["dra-error"] = str(err)
        if outcome == dra_state.CANNOT_ALLOCATE and limited:
            outcome = f"{outcome} ({_annotated_gpus(pod)})"
        outcomes[row] = outcome
    failures: dict[str, np.ndarray] = {}
    for row, outcome in outcomes.items():
        if isinstance(outcome, str):
            failures.setdefault(outcome, np.zeros(cycle.rows, dtype=bool))[row] = True
    return [(mask, reason) for reason, mask in failures.items()]


def _annotated_gpus(pod: PodFacts) -> str:
    """What the pod's GPU annotations allow, for the message of a node whose devices they rule out."""
    wanted = [f"model {pod.model}"] if pod.model else []
    if pod.min_gpu_memory_mib:
        wanted.append(f"at least {pod.min_gpu_memory_mib} MiB")
    return "GPUs limited by the pod's annotations to " + " and ".join(wanted)


def claim_allocations(cycle: Cycle, row: int) -> tuple[tuple[tuple[str, str], dict[str, Any]], ...]:
    """DynamicResources' choice for the chosen node: the allocation of each claim the pod allocates, by claim."""
    prepared = cycle.extras.get("dra")
    outcome = cycle.extras.get("dra-outcomes", {}).get(row)
    if prepared is None or not isinstance(outcome, list):
        return ()
    return tuple(((cycle.pod.namespace, prepared.records[index].claim.name), dict(allocation))
                 for index, allocation in zip(prepared.to_allocate, outcome))


def extended_claim(cycle: Cycle, row: int) -> tuple[dra_state.NodeClaim, dict[str, Any]] | None:
    """The claim to make for the pod's extended resources on the chosen node, with its allocation; None when DRA
    serves none of them there."""
    prepared = cycle.extras.get("dra")
    outcome = cycle.extras.get("dra-outcomes", {}).get(row)
    facts = cycle.cluster.facts[row]
    if prepared is None or prepared.extended is None or not isinstance(outcome, list) or facts is None:
        return None
    node_claim = prepared.extended.node_claim(facts.allocatable)
    if node_claim is None or len(outcome) <= len(prepared.to_allocate):
        return None
    return node_claim, dict(outcome[len(prepared.to_allocate)])


PRE_FILTERS: tuple[tuple[str, Callable[[Cycle], str | None]], ...] = (
    ("VolumeRestrictions", volume_restrictions_pre),
    ("VolumeBinding", volume_binding_pre),
    ("VolumeZone", volume_zone_pre),
    ("DynamicResources", dynamic_resources_pre),
)


def volume_restrictions(cycle: Cycle) -> Failures:
    """VolumeRestrictions: an inline disk (GCE PD, EBS, iSCSI, RBD) mounted by a pod on the node already, and a
    ReadWriteOncePod claim some placed pod uses (every node then)."""
    pod, cluster = cycle.pod, cycle.cluster
    if not pod.volumes:
        return []
    failures: Failures = []
    if pod.volumes.disks:
        taken = np.zeros(cycle.rows, dtype=bool)
        for row, pods_there in cluster.node_pods.items():
            disks = [disk for uid in pods_there if (other := cluster.assignments[uid].pod.volumes) is not None
                     for disk in other.disks]
            taken[row] = any(volumes.conflicts(disk, other) for disk in pod.volumes.disks for other in disks)
        failures.append((taken, volumes.DISK_CONFLICT))
    if cycle.extras.get("rwop-used"):
        failures.append((np.ones(cycle.rows, dtype=bool), volumes.RWOP_CONFLICT))
    return failures


def node_volume_limits(cycle: Cycle) -> Failures:
    """NodeVolumeLimits: the CSI volumes the pod adds to a node, per driver, within the node's CSINode limits."""
    pod, cluster = cycle.pod, cycle.cluster
    if not pod.volumes:
        return []
    storage, name = cluster.storage, pod.key.partition("/")[2]
    # what the pod adds, on a node with a CSINode (migrated in-tree volumes count there) and on one without
    adds = {has: volumes.attachable(storage, pod.namespace, name, pod.uid, pod.volumes, has_csi_node=has, new=True)
            for has in (True, False)}
    failures: Failures = []
    with_csi_node = np.zeros(cycle.rows, dtype=bool)
    for node_name in storage.csi_nodes:
        row = cluster.index.get(node_name)
        if row is not None:
            with_csi_node[row] = True
    for has, rows in ((True, with_csi_node), (False, ~with_csi_node & cluster.present[: cycle.rows])):
        if isinstance(adds[has], str) and rows.any():
            failures.append((rows, str(adds[has])))
    over = np.zeros(cycle.rows, dtype=bool)
    for node_name, limits in storage.csi_nodes.items():  # only a node with a CSINode has limits
        row = cluster.index.get(node_name)
        new = adds[True]
        if row is None or isinstance(new, str) or not new or all(limit is None for limit in limits.values()):
            continue
        facts = cluster.node(row)
        attached: dict[str, str] = {}
        for uid in cluster.node_pods.get(row, ()):
            other = cluster.assignments[uid].pod
            if other.volumes:
                found = volumes.attachable(storage, other.namespace, other.key.partition("/")[2], other.uid,
                                           other.volumes, has_csi_node=True, new=False)
                attached.update(found if isinstance(found, dict) else {})
        counts: dict[str, int] = {}
        for driver in attached.values():
            counts[driver] = counts.get(driver, 0) + 1
        for node, attacher, pv_name in storage.attachments.values():  # attached, by pods gone or not seen yet
            volume = storage.volume(pv_name)
            if node == facts.name and volume is not None and volume.csi is not None and not volume.migrated \
                    and f"{attacher}/{volume.csi[1]}" not in attached:
                counts[attacher] = counts.get(attacher, 0) + 1
        adding: dict[str, int] = {}
        for unique, driver in new.items():
            if unique not in attached:
                adding[driver] = adding.get(driver, 0) + 1
        over[row] = any(limits.get(driver) is not None and counts.get(driver, 0) + count > (limits[driver] or 0)
                        for driver, count in adding.items())
    return failures + [(over, volumes.MAX_VOLUME_COUNT)]


def volume_binding(cycle: Cycle) -> Failures:
    """VolumeBinding: bound claims' volumes reachable from the node; unbound WaitForFirstConsumer claims satisfiable
    there by an available volume, or by provisioning where the class's topology and published capacity allow."""
    claims = cycle.extras.get("claims")
    if claims is None or not (claims.bound or claims.delayed):
        return []
    found = volumes.bind(cycle.cluster.storage, claims, _VolumeNodes(cycle), cycle.rows)
    cycle.extras["binding"] = found
    order = {reason: i for i, reason in enumerate(volumes.BINDING_REASONS)}
    return [(mask, reason) for reason, mask in sorted(found.reasons.items(), key=lambda item: order.get(item[0], -1))]


def volume_plan(cycle: Cycle, row: int) -> volumes.Plan | None:
    """VolumeBinding's choice for the chosen node: what to bind or provision before the pod is bound there."""
    found = cycle.extras.get("binding")
    claims = cycle.extras.get("claims")
    if found is None or claims is None or not claims.delayed:
        return None
    return found.plan(row)


class _VolumeNodes:
    """The nodes as volumes.bind reads them: names, and label matching over all rows at once (a mask per set of
    terms, kept per labels version: many decisions ask about the same volumes)."""

    def __init__(self, cycle: Cycle):
        self.cycle = cycle
        self.names = [facts.name if facts is not None else None for facts in cycle.cluster.facts]

    def admits(self, terms: tuple[predicates.Term, ...] | None) -> np.ndarray:
        cycle = self.cycle
        if terms is None:
            return cycle.cluster.present[: cycle.rows].copy()

        def compute() -> np.ndarray:
            rows = np.zeros(cycle.rows, dtype=bool)
            for term in terms:
                if term.problem is None and term.expressions:  # an empty or unreadable term matches nothing
                    rows |= self._all_of(term.expressions)
            return rows & cycle.cluster.present[: cycle.rows]
        return cycle.cached(("volume-terms", terms), compute)

    def selects(self, selector: podaffinity.Selector) -> np.ndarray:
        if selector is None:
            return np.zeros(self.cycle.rows, dtype=bool)
        return self._all_of(selector) & self.cycle.cluster.present[: self.cycle.rows]

    def domains(self, key: str) -> podaffinity.Domains:
        return topology_domains(self.cycle)(key)

    def labels(self, row: int) -> Mapping[str, str]:
        return self.cycle.cluster.node(row).labels

    def _all_of(self, expressions: tuple[predicates.Expression, ...]) -> np.ndarray:
        rows = np.ones(self.cycle.rows, dtype=bool)
        for expression in expressions:
            rows &= self._matching(expression)
        return rows

    def _matching(self, expression: predicates.Expression) -> np.ndarray:
        """Rows whose labels satisfy one requirement, through the label's domains (a vector operation), but for Gt
        and Lt, which read the value as a number."""
        domains = topology_domains(self.cycle)(expression.key)
        if expression.operator in ("Exists", "DoesNotExist"):
            return domains.present if expression.operator == "Exists" else ~domains.present
        if expression.operator in ("In", "NotIn"):
            ids = [domains.index[value] for value in expression.values if value in domains.index]
            hit = np.isin(domains.ids, ids)
            return hit if expression.operator == "In" else ~hit
        return np.array([facts is not None and expression.matches(facts.labels) for facts in self.cycle.cluster.facts],
                        dtype=bool)


def volume_zone(cycle: Cycle) -> Failures:
    """VolumeZone: the zone and region labels of the pod's bound volumes against the node's."""
    zones = cycle.extras.get("zones")
    if not zones:
        return []

    def compute() -> np.ndarray:
        fails = np.zeros(cycle.rows, dtype=bool)
        for row, facts in enumerate(cycle.cluster.facts):
            fails[row] = facts is not None and not volumes.zone_fits(zones, facts.labels)
        return fails
    return [(cycle.cached(("volume-zone", tuple(zones)), compute), volumes.ZONE_CONFLICT)]


SPREAD_MISMATCH = "node(s) didn't match pod topology spread constraints"
SPREAD_MISSING_LABEL = SPREAD_MISMATCH + " (missing required label)"


def pod_topology_spread(cycle: Cycle) -> Failures:
    """PodTopologySpread: the pod's DoNotSchedule constraints. Nothing to do for a pod without them."""
    constraints = cycle.pod.topology_spread
    if constraints is None or not constraints.hard:
        return []
    missing, skewed = spread.filter_failures(constraints.hard, cycle.pod.labels, _spread_nodes(cycle))
    return [(missing, SPREAD_MISSING_LABEL), (skewed, SPREAD_MISMATCH)]


def _spread_nodes(cycle: Cycle) -> spread.Nodes:
    """The nodes as topology spread reads them, for the incoming pod: its namespace's pods counted."""
    index, namespace = cycle.cluster.pod_index, cycle.pod.namespace

    def counted(selector: podaffinity.Selector) -> tuple[np.ndarray, np.ndarray]:
        return podaffinity.rows_of(group.rows for group in index.counted(namespace, selector))

    domains = topology_domains(cycle)
    return spread.Nodes(cycle.cluster.present[: cycle.rows], domains, topology_domains(cycle, missing=""),
                        _affinity_mismatch(cycle), _untolerated(cycle), counted)


FILTERS: tuple[tuple[str, Callable[[Cycle], Failures]], ...] = (
    ("NodeUnschedulable", node_unschedulable),
    ("NodeReady", node_ready),
    ("TaintToleration", taint_toleration),
    ("NodeAffinity", node_affinity),
    ("NodePorts", node_ports),
    ("Spot", spot_policy),
    ("GPUPresent", gpu_present),
    ("GPUModel", gpu_model),
    ("GPUMemory", gpu_memory),
    ("NodeResourcesFit", resources_fit),
    ("GPUDevices", gpu_devices),
    ("VolumeRestrictions", volume_restrictions),
    ("NodeVolumeLimits", node_volume_limits),
    ("VolumeBinding", volume_binding),
    ("VolumeZone", volume_zone),
    ("PodTopologySpread", pod_topology_spread),
    ("InterPodAffinity", inter_pod_affinity),
    ("DynamicResources", dynamic_resources),
)
# Rejections that evicting pods may cure (upstream's Unschedulable, as against UnschedulableAndUnresolvable): a node
# rejected first by another filter, or for one of UNRESOLVABLE_REASONS, is no candidate for preemption.
RESOLVABLE_BY_PREEMPTION = frozenset({"NodePorts", "NodeResourcesFit", "GPUDevices", "VolumeRestrictions",
                                      "NodeVolumeLimits", "PodTopologySpread", "InterPodAffinity"})
UNRESOLVABLE_REASONS = frozenset({AFFINITY_MISMATCH, SPREAD_MISSING_LABEL, NAMESPACES_UNKNOWN})
# Filters the extender leaves out: kube-scheduler has evaluated them before it asks (PRE_FILTERS too).
KUBE_SCHEDULER_FILTERS = frozenset({"VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone",
                                    "PodTopologySpread", "InterPodAffinity", "DynamicResources"})


# --- scores -----------------------------------------------------------------------------------


def gpu_placement(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Binpack fills the nodes (and, for shares, the GPUs) that are already in use; spread the reverse.

    Whole-GPU pods go where the fewest idle GPUs remain afterwards, so large idle nodes stay
    whole for large pods; a share goes to the GPU it fits most tightly, so it does not break
    an idle GPU when a partly used one has room.
    """
    pod, cluster = cycle.pod, cycle.cluster
    if not pod.wants_gpu:
        return cycle.no_score(rows)
    total = cluster.gpu_count[rows] * GPU_MILLI
    demand = pod.gpus * GPU_MILLI + pod.gpu_milli
    after = (cluster.gpu_used[rows] + demand) / np.maximum(total, 1)
    node_score = 100.0 * after if cycle.node_policy == "binpack" else 100.0 * (1.0 - after)
    if not pod.gpu_milli:
        served = _gpus_by_dra(cycle)  # there the GPUs are DRA devices, which dra-devices scores
        return node_score if served is None else np.where(served[rows], 0.0, node_score)
    best = cycle.extras["best_fit_free"][rows]
    if cycle.gpu_policy == "binpack":
        device_score = 100.0 - (best - pod.gpu_milli) / 10.0
    else:
        device_score = cluster.gpu_free[rows].max(axis=1) / 10.0
    return 0.5 * node_score + 0.5 * device_score


def zone_balance(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Spread GPU use across zones: the zone with the most free GPUs among the pod's candidates scores 100, the others
    in proportion; gpu-fragmentation and gpu-placement still choose the node within a zone.

    Packing over the whole cluster fills one zone before the next, and a group that needs room in each zone (a zone
    spread with DoNotSchedule) or in one named zone (required affinity to another group's zone) then finds it full:
    benchmarks/parity_core.py measures it. Free GPUs, not the free share: such a group needs GPUs in the zone, however
    large the zone. Nodes without a zone count as one zone more; with one zone among the candidates (openb's nodes
    have none) every candidate scores the same, so placement there is unchanged.
    """
    cluster = cycle.cluster
    if not cycle.pod.wants_gpu:
        return cycle.no_score(rows)
    slots = cluster.zone[rows] + 1  # 0: no zone
    if rows.size == 0 or slots.min() == slots.max():
        return cycle.no_score(rows)
    free = cluster.gpu_count[rows] * GPU_MILLI - cluster.gpu_used[rows]
    in_zone = np.bincount(slots, weights=free).astype(np.int64)
    return _normalized(in_zone[slots], reverse=False)


def node_resources(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """MostAllocated (binpack) or LeastAllocated (spread) over cpu and memory, as upstream."""
    cluster, policy = cycle.cluster, cycle.node_policy
    requests = tuple(cycle.pod.requests.get(resource, 0) for resource in ("cpu", "memory"))

    def compute(subset: np.ndarray) -> np.ndarray:
        scores = np.zeros(subset.size)
        for resource, request in zip(("cpu", "memory"), requests):
            column = cluster.resources[resource]
            capacity = cluster.alloc[column][subset].astype(float)
            requested = cluster.used[column][subset] + request
            share = np.minimum(requested, capacity) / np.maximum(capacity, 1.0)
            scores += 100.0 * share if policy == "binpack" else 100.0 * (1.0 - share)
        return scores / 2.0

    return cycle.by_row(("node-resources", policy, requests), rows, compute)


def balanced_allocation(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """NodeResourcesBalancedAllocation with its default resources, cpu and memory: 50..100 by how much the
    pod brings the node's cpu and memory fractions closer together (75: no change), as upstream.

    A pod that requests neither is not scored (upstream skips it, so such pods do not all pile onto one
    node): every node gets 0. A resource the node has none of is left out.
    """
    pod, cluster = cycle.pod, cycle.cluster
    requests = [pod.requests.get(resource, 0) for resource in BALANCED_RESOURCES]
    if not any(requests):
        return cycle.no_score(rows)

    def compute(subset: np.ndarray) -> np.ndarray:
        before: list[np.ndarray] = []
        after: list[np.ndarray] = []
        counted = np.full(subset.size, 0.5)  # halves the deviation on nodes with some of each; 0 on the others
        for resource, request in zip(BALANCED_RESOURCES, requests):
            unit = 1 if resource == "cpu" else MILLI  # upstream's units (millicores, bytes): fractions round alike
            column = cluster.resources[resource]
            capacity = cluster.alloc[column, subset]
            used = cluster.used[column, subset]
            if unit != 1:
                capacity, used = capacity // unit, used // unit
            counted[capacity <= 0] = 0.0
            divisor = np.maximum(capacity, 1)  # a node without the resource: any fraction, not counted
            before.append(np.minimum(used / divisor, 1.0))
            after.append(np.minimum((used + request // unit) / divisor, 1.0))

        def balance(fractions: list[np.ndarray]) -> np.ndarray:
            return np.trunc((1.0 - np.abs(fractions[0] - fractions[1]) * counted) * 100.0)

        return 50.0 + np.floor_divide(50.0 + balance(after) - balance(before), 2.0)

    return cycle.by_row(("balanced-allocation", *requests), rows, compute)


def image_locality(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """ImageLocality: nodes that already hold the pod's images (containers, init containers, image volumes)
    score by their sizes, each scaled by the share of nodes that hold it (so one image everywhere does not
    pull every pod to the same few nodes), between 23 MiB and 1000 MiB per container, as upstream."""
    pod, cluster = cycle.pod, cycle.cluster
    if not pod.images or not cluster.images:
        return cycle.no_score(rows)
    held = np.zeros(cycle.rows, dtype=np.int64)
    for name, uses in pod.images:
        holders = cluster.image_holders(name)
        if holders is not None:
            held_by, sizes = holders
            spread = held_by.size / cluster.node_count
            held[held_by] += uses * (sizes * spread).astype(np.int64)
    ceiling = IMAGE_MAX_PER_CONTAINER * pod.containers
    total = held[rows]
    total = np.where(total < IMAGE_MIN, IMAGE_MIN, np.where(total > ceiling, ceiling, total))
    return (100 * (total - IMAGE_MIN) // (ceiling - IMAGE_MIN)).astype(float)


def gpu_utilization(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Less busy GPUs first, by the live source's reading (Prometheus) or else the node annotation's; a node
    with neither scores in the middle. For pods asking for GPUs, as extended resources or through DRA claims."""
    cluster = cycle.cluster
    if not cycle.pod.wants_gpu and not cycle.pod.resource_claims or not cluster.utilization_known():
        return cycle.no_score(rows)  # no reading anywhere: every node scores in the middle, so none is preferred
    busy = cluster.current_utilization(rows)
    return 100.0 * (1.0 - np.where(np.isnan(busy), utilization.UNKNOWN, busy))


def dra_devices(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Ours, for pods with DRA claims (or extended resources DRA serves): the share of the node's devices in use
    once the claims are allocated there, as nodePolicy wants it (binpack: fuller nodes first; spread: emptier).
    0 for other pods, and on nodes where nothing is allocated for the pod."""
    outcomes = cycle.extras.get("dra-outcomes")
    if not outcomes:
        return cycle.no_score(rows)
    resources, prepared = cycle.cluster.dra, cycle.extras["dra"]
    wanted = [request for index in prepared.to_allocate for request in prepared.records[index].claim.requests]
    fixed = (sum(request[0].count for request in wanted)  # the same on every node: exact counts, no alternatives
             if prepared.extended is None
             and all(len(request) == 1 and request[0].mode == dra_claims.EXACT_COUNT for request in wanted) else None)
    totals, used = np.zeros(rows.size), np.zeros(rows.size)  # per candidate: devices, and in use after
    all_facts, devices_on = cycle.cluster.facts, resources.devices_on
    for position, row in enumerate(rows.tolist()):
        outcome = outcomes.get(row)
        if outcome.__class__ is not list or not outcome or (facts := all_facts[row]) is None:
            continue
        total, in_use = devices_on(facts)
        totals[position] = total
        used[position] = in_use + (fixed if fixed is not None else dra_allocator.devices_in(outcome))
    share = np.divide(np.minimum(used, totals), totals, out=np.zeros(rows.size), where=totals > 0)
    scores = 100.0 * share if cycle.node_policy == "binpack" else np.where(totals > 0, 100.0 * (1.0 - share), 0.0)
    return scores


def dra_demand(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Ours, for pods with DRA claims: nodes whose allocation takes the devices the cluster's claims need least
    (scheduler_core.dra.demand), so a claim that can use any GPU leaves the narrow ones for claims that need them.
    The least pressed allocation scores 100, the most pressed 0. 0 for other pods."""
    outcomes = cycle.extras.get("dra-outcomes")
    if not outcomes:
        return cycle.no_score(rows)
    pressure = cycle.cluster.dra.pressure()
    found = np.array(pressure.of_each(map(outcomes.get, rows.tolist())), dtype=float)
    fits = ~np.isnan(found)
    if not fits.any():
        return cycle.no_score(rows)
    low, high = found[fits].min(), found[fits].max()
    if high - low < 1e-9:
        return cycle.no_score(rows)
    return np.where(fits, 100.0 * (high - np.where(fits, found, high)) / (high - low), 0.0)


def dynamic_resources_preference(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Upstream's DynamicResources Score: a node where a claim's earlier `firstAvailable` alternative could be
    allocated scores higher (8 - its index, summed), normalised to 0..100 over the candidates."""
    outcomes, prepared = cycle.extras.get("dra-outcomes"), cycle.extras.get("dra")
    if not outcomes or prepared is None or not any(any(r.claim.prioritized) for r in prepared.records):
        return cycle.no_score(rows)
    raw = np.zeros(rows.size, dtype=np.int64)
    already = sum(dra_allocator.alternative_score(record.claim, record.allocation or {})
                  for record in prepared.records if record.allocation is not None)
    for position, row in enumerate(rows.tolist()):
        outcome = outcomes.get(row)
        if isinstance(outcome, list):
            raw[position] = already + sum(
                dra_allocator.alternative_score(prepared.records[index].claim, allocation)
                for index, allocation in zip(prepared.to_allocate, outcome))
    return _normalized(raw, reverse=False)  # helper.DefaultNormalizeScore: whole numbers, rounded down


def spot_preference(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    spot = cycle.cluster.spot[rows]
    if cycle.pod.spot == "prefer":
        return np.where(spot, 100.0, 0.0)
    if cycle.pod.spot == "avoid":
        return np.where(spot, 0.0, 100.0)
    return cycle.no_score(rows)


def locality(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Same node as pods of the same application: 100; same zone: 50 (seed's AZ and network locality)."""
    app = cycle.pod.app
    if not app:
        return cycle.no_score(rows)
    cluster = cycle.cluster
    scores = np.zeros(rows.size)
    zones = [zone for zone, count in cluster.app_in_zone.get(app, {}).items() if count > 0]
    if zones:
        in_zone = np.zeros(len(cluster.zones) + 1, dtype=bool)  # slot 0: no zone
        in_zone[np.asarray(zones) + 1] = True
        scores[in_zone[cluster.zone[rows] + 1]] = 50.0
    nodes = [row for row, count in cluster.app_on_node.get(app, {}).items() if count > 0]
    if nodes:
        on_node = np.zeros(cycle.rows, dtype=bool)
        on_node[nodes] = True
        scores[on_node[rows]] = 100.0
    return scores


def node_affinity_preference(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """The weights of the preferred terms a node matches, scaled so the best candidate gets 100."""
    terms = cycle.pod.preferred_terms
    if not terms:
        return cycle.no_score(rows)

    def compute() -> np.ndarray:
        raw = np.zeros(cycle.rows, dtype=np.int64)
        for row, facts in enumerate(cycle.cluster.facts):
            if facts is not None:
                raw[row] = sum(weight for weight, term in terms if term.matches(facts.labels, facts.name))
        return raw

    return _normalized(cycle.cached(("preferred", terms), compute)[rows], reverse=False)


def taint_preference(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """Fewer untolerated PreferNoSchedule taints is better: none gets 100, the most among the candidates 0."""
    def compute() -> np.ndarray:
        raw = np.zeros(cycle.rows, dtype=np.int64)
        for row, facts in enumerate(cycle.cluster.facts):
            if facts is not None and facts.taints:
                raw[row] = predicates.count_untolerated(facts.taints, cycle.pod.tolerations, "PreferNoSchedule")
        return raw

    return _normalized(cycle.cached(("prefer-no-schedule", cycle.pod.tolerations), compute)[rows], reverse=True)


def _normalized(raw: np.ndarray, *, reverse: bool) -> np.ndarray:
    """helper.DefaultNormalizeScore: 0..100 in proportion to the highest, in whole numbers rounded down as
    kube-scheduler's integer arithmetic does; `reverse` turns it upside down (all zero: all 100)."""
    top = int(raw.max(initial=0))
    if top == 0:
        return np.full(raw.size, 100.0 if reverse else 0.0)
    scores = (100 * raw) // top
    return (100 - scores if reverse else scores).astype(float)


def inter_pod_affinity_preference(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """InterPodAffinity's score: the pod's preferred (anti-)affinity, and placed pods' affinity towards it,
    summed per topology domain and normalised from the lowest candidate (0) to the highest (100)."""
    terms, index = cycle.pod.pod_affinity, cycle.cluster.pod_index
    if (terms is None or not (terms.preferred or terms.anti_preferred)) and not index.scoring_terms:
        return cycle.no_score(rows)
    totals = podaffinity.preference_totals(index, _incoming(cycle), topology_domains(cycle), cycle.rows)
    return podaffinity.normalized(totals[rows])


def pod_topology_spread_preference(cycle: Cycle, rows: np.ndarray) -> np.ndarray:
    """PodTopologySpread's score: the pod's ScheduleAnyway constraints, or for a pod declaring none the system
    defaults, fewer matching pods in a candidate's domain scoring higher, normalised over the candidates as
    upstream. Nothing to do for a pod with neither."""
    constraints = cycle.pod.topology_spread
    if constraints is None:
        defaults = _system_defaults(cycle)
        if not defaults:
            return cycle.no_score(rows)
        return spread.scores(defaults, rows, _spread_nodes(cycle), system_defaulted=True)
    if not constraints.soft:
        return cycle.no_score(rows)
    return spread.scores(constraints.soft, rows, _spread_nodes(cycle))


def _system_defaults(cycle: Cycle) -> tuple[spread.Constraint, ...]:
    """The system default constraints over the pod's default selector, once per version of the selectors kept."""
    pod, known = cycle.pod, cycle.cluster.default_selectors
    key = ("default-selector", known.version, pod.namespace, tuple(sorted(pod.labels.items())), pod.controller)
    selector = cycle.cached(key, lambda: known.selector_for(pod.namespace, pod.labels, pod.controller))
    return spread.system_defaults(selector)


SCORES: dict[str, Callable[[Cycle, np.ndarray], np.ndarray]] = {
    "gpu-placement": gpu_placement,
    "zone-balance": zone_balance,
    "node-resources": node_resources,
    "balanced-allocation": balanced_allocation,
    "image-locality": image_locality,
    "gpu-utilization": gpu_utilization,
    "spot": spot_preference,
    "locality": locality,
    "node-affinity": node_affinity_preference,
    "taint-toleration": taint_preference,
    "inter-pod-affinity": inter_pod_affinity_preference,
    "pod-topology-spread": pod_topology_spread_preference,
    "dynamic-resources": dynamic_resources_preference,
    "dra-devices": dra_devices,
    "dra-demand": dra_demand,
}
# Scores the extender leaves out: kube-scheduler's own plugins of the same names (NodeResourcesBalancedAllocation,
# ImageLocality, NodeAffinity, TaintToleration, InterPodAffinity, PodTopologySpread) already score its candidates,
# and adding ours to its sum would count each preference twice.
KUBE_SCHEDULER_SCORES = frozenset({"balanced-allocation", "image-locality", "node-affinity", "taint-toleration",
                                   "inter-pod-affinity", "pod-topology-spread", "dynamic-resources"})

assert MILLI == GPU_MILLI  # requests and devices share one unit
