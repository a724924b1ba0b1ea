"""The cluster as arrays: one row per node, so a decision over thousands of nodes is a few
vector operations instead of a Python loop per node.

Assigning or removing a pod updates its node's row and its GPU devices in place; nothing
rescans all pods. GPU devices are tracked individually as free thousandths (1000 = an
idle GPU), so whole-GPU pods take idle devices and shares pack onto one device.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from scheduler_core import fields, podaffinity, spread, utilization, volumes
from scheduler_core.dra import state as dra_state
from scheduler_core.nodes import GPU_MILLI, MAX_MILLI, NodeFacts
from scheduler_core.podgroups import GroupRef
from scheduler_core.pods import ANY_IP, Device, HostPort, PodFacts, format_devices

BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")


class OvercommitError(ValueError):
    """An assignment that would give a GPU share or a resource that is not free."""


# A rule a placed pod sets for the later pods of its group: ("port", protocol, port), ("anti", term) or
# ("affinity", term); and where such pods may go at all, the pod's (nodeSelector items, required node affinity).
Rule = tuple[Any, ...]
Reach = tuple[tuple[tuple[str, str], ...], Any]


def constrained_groups(pod: PodFacts) -> list[tuple[Rule, Reach]]:
    """The groups a GPU pod belongs to whose later pods its placement constrains: a host port keeps them off its node,
    required pod anti-affinity off its domain, required pod affinity in the domains holding what it selects; each
    with the pod's reach, as the group's later pods are taken to be like it (GPU pods too: a group of pods without
    GPUs has no use for the GPU room placement.group_room keeps)."""
    if not pod.wants_gpu:
        return []
    rules: list[Rule] = [("port", protocol, port) for _, protocol, port in pod.host_ports]
    if pod.pod_affinity is not None:
        rules += [("anti", term) for term in pod.pod_affinity.anti_required]
        rules += [("affinity", term) for term in pod.pod_affinity.required]
    if not rules:
        return []
    reach: Reach = (tuple(sorted(pod.node_selector.items())), pod.required_terms)
    return [(rule, reach) for rule in dict.fromkeys(rules)]


@dataclass(frozen=True)
class Assignment:
    pod: PodFacts
    node: int
    devices: tuple[Device, ...]


class RowMemo:
    """Per-row results of a function of each node's facts and usage, kept between decisions: only the rows
    whose `Cluster.row_version` moved since are computed again, so a decision after one binding recomputes
    one row instead of every candidate. Keyed by the caller on what else the function reads (the pod's
    shape, the labels version, the cluster's size)."""

    def __init__(self, size: int, *dtypes: Any):
        self.seen = np.full(size, -1, dtype=np.int64)
        self.columns = tuple(np.zeros(size, dtype=dtype) for dtype in dtypes)

    def read(self, cluster: Cluster, rows: np.ndarray,
             compute: Callable[[np.ndarray], tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        """The columns at `rows`; `compute(stale rows)` gives one array per column."""
        versions = cluster.row_version[: self.seen.size]
        stale = rows[(self.seen != versions)[rows]]  # one contiguous compare, one gather
        if stale.size:
            for column, fresh in zip(self.columns, compute(stale)):
                column[stale] = fresh
            self.seen[stale] = versions[stale]
        return tuple(column[rows] for column in self.columns)


class Cluster:
    def __init__(self, *, gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)):
        self.gpu_resources = gpu_resources
        self.resources: dict[str, int] = {name: i for i, name in enumerate(BASE_RESOURCES)}
        self.index: dict[str, int] = {}
        self.facts: list[NodeFacts | None] = []
        self.assignments: dict[str, Assignment] = {}  # by PodFacts.identity: the UID, else namespace/name
        self._cells: dict[str, tuple[Mapping[str, int], list[int], list[int]]] = {}  # see _request_cells
        self.node_pods: defaultdict[int, set[str]] = defaultdict(set)
        self.group_pods: defaultdict[GroupRef, set[str]] = defaultdict(set)  # placed members of each pod group
        self.app_on_node: defaultdict[str, Counter[int]] = defaultdict(Counter)
        self.app_in_zone: defaultdict[str, Counter[int]] = defaultdict(Counter)
        self.zones: dict[str, int] = {}
        self.images: dict[str, dict[int, int]] = {}  # image name -> {row: its size there}, for ImageLocality
        self._image_arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # image_holders, until it changes
        # host ports held on nodes, for NodePorts: (protocol, port) -> row -> host IP -> pods holding it.
        # Only pods with host ports touch it, and a query reads only the nodes where that port is held.
        self.port_holders: dict[tuple[str, int], dict[int, Counter[str]]] = {}
        # the groups placed pods constrain, for placement.group_room: (rule, reach) -> pods placed; see constrained_groups
        self.constrained: Counter[tuple[Rule, Reach]] = Counter()
        self.constrained_version = 0  # bumped when those groups, or the pods holding their node-wide rules, change
        self.labels_version = 0  # bumped when labels or taints change: label-derived caches key on it
        self.pod_index = podaffinity.PodIndex()  # the pods on nodes as pod affinity and topology spread look at them
        # namespace -> labels, for namespaceSelectors; None until the namespaces have been listed
        self.namespace_labels: dict[str, Mapping[str, str]] | None = None
        self.namespaces_version = 0  # bumped when namespaces or their labels change
        self.default_selectors = spread.DefaultSelectors()  # for the system default spread constraints
        self.storage = volumes.Storage()  # claims, volumes, classes and CSI limits, for the volume plugins
        self.dra = dra_state.Resources()  # ResourceSlices, DeviceClasses and ResourceClaims, for DynamicResources
        self._free_slots: list[int] = []
        self._beyond_max: dict[tuple[int, int], int] = {}  # (column, row) -> exact use, where past MAX_MILLI
        self._ranked = True
        self.live: utilization.Readings | None = None  # the live source's last readings, for nodes added later
        self._allocate(capacity=16, max_gpus=8)

    # --- storage ----------------------------------------------------------------------------

    def _allocate(self, capacity: int, max_gpus: int) -> None:
        resources = len(self.resources)
        # resource-major, so one resource over all nodes is a contiguous vector
        self.alloc = np.zeros((resources, capacity), dtype=np.int64)
        self.used = np.zeros((resources, capacity), dtype=np.int64)
        self.present = np.zeros(capacity, dtype=bool)
        self.ready = np.zeros(capacity, dtype=bool)
        self.unschedulable = np.zeros(capacity, dtype=bool)
        self.gpu_count = np.zeros(capacity, dtype=np.int64)
        self.gpu_free = np.zeros((capacity, max_gpus), dtype=np.int64)
        self.whole_free = np.zeros(capacity, dtype=np.int64)
        self.gpu_used = np.zeros(capacity, dtype=np.int64)  # thousandths in use on the node
        self.gpu_memory = np.zeros(capacity, dtype=np.int64)  # MiB per GPU, 0 unknown
        self.utilization = np.full(capacity, np.nan)  # the node annotation's reading, 0..1, NaN none or stale
        self.live_utilization = np.full(capacity, np.nan)  # the live source's (Prometheus) reading, NaN none
        self.gpu_busy = np.full((capacity, max_gpus), np.nan)  # the live source's reading per GPU index, NaN none
        self.spot = np.zeros(capacity, dtype=bool)
        self.zone = np.full(capacity, -1, dtype=np.int64)
        self.rank = np.zeros(capacity, dtype=np.int64)  # position in name order, for stable ties
        # bumped whenever a row's facts or usage change: per-row caches recompute only what changed
        self.row_version = np.zeros(capacity, dtype=np.int64)
        # bumped whenever the node or its pods really change (not by set_aside and put_back, which undo
        # themselves), and when a pod there starts or begins to be deleted: what preemption's dry run reads
        self.row_state = np.zeros(capacity, dtype=np.int64)

    def _grow(self, capacity: int | None = None, max_gpus: int | None = None) -> None:
        old = {name: getattr(self, name) for name in (
            "alloc", "used", "present", "ready", "unschedulable", "gpu_count", "gpu_free", "whole_free",
            "gpu_used", "gpu_memory", "utilization", "live_utilization", "gpu_busy", "spot", "zone", "rank", "row_version",
            "row_state")}
        rows = old["present"].shape[0]
        self._allocate(capacity or rows, max_gpus or old["gpu_free"].shape[1])
        for name, array in old.items():
            target = getattr(self, name)
            if name in ("alloc", "used"):
                target[: array.shape[0], :rows] = array
            elif array.ndim == 1:
                target[:rows] = array
            else:
                target[:rows, : array.shape[1]] = array

    @property
    def size(self) -> int:
        """Rows in use (present or free slots): vector operations run over this prefix."""
        return len(self.facts)

    @property
    def node_count(self) -> int:
        return len(self.index)

    def column(self, resource: str) -> int | None:
        return self.resources.get(resource)

    def served_by_dra(self, resource: str, rows: Sequence[int] | None = None) -> np.ndarray | None:
        """Of `rows` (default: every row), those where DRA serves `resource` (a DeviceClass names it, once the DRA
        objects are listed, and the node's allocatable has none of it); None when no class names it."""
        if self.dra.serving(resource) is None:
            return None
        selected = slice(0, self.size) if rows is None else list(rows)
        column = self.resources.get(resource)
        if column is None:
            return np.ones(self.size if rows is None else len(rows), dtype=bool)
        return self.alloc[column, selected] == 0

    def gpus_by_dra(self, pod: PodFacts, rows: Sequence[int] | None = None) -> np.ndarray | None:
        """Of `rows` (default: every row), those where DRA, not the device plugin, serves the pod's whole GPUs (every
        GPU resource it asks for); None when it serves them nowhere."""
        if not pod.gpus:
            return None
        found = None
        for resource in self.gpu_resources:
            if pod.requests.get(resource):
                served = self.served_by_dra(resource, rows)
                if served is None:
                    return None
                found = served if found is None else found & served
        return found

    def dra_serves_gpus(self, row: int, pod: PodFacts) -> bool:
        """Whether DRA, not the device plugin, serves the pod's whole GPUs on this row."""
        served = self.gpus_by_dra(pod, (row,))
        return served is not None and bool(served[0])

    def device_free(self, rows: np.ndarray) -> np.ndarray:
        """Each row's GPUs as thousandths free, one column per GPU: the device plugin's, or for a node without
        any, its DRA devices (whole: free or in use), so placement quality sees one kind of GPU."""
        free = self.gpu_free[rows]
        if not self.dra.slices or not self.dra.ready:
            return free
        dra_rows = np.flatnonzero(self.gpu_count[rows] == 0)
        if not dra_rows.size:
            return free
        counts = []
        for position in dra_rows.tolist():
            facts = self.facts[int(rows[position])]
            counts.append(self.dra.devices_on(facts) if facts is not None else (0, 0))
        widest = max(total for total, _ in counts)
        if not widest:
            return free
        if widest > free.shape[1]:
            free = np.pad(free, ((0, 0), (0, widest - free.shape[1])))
        else:
            free = free.copy()
        for position, (total, in_use) in zip(dra_rows.tolist(), counts):
            free[position, : max(total - in_use, 0)] = GPU_MILLI
        return free

    def _device_plugin_gpus(self, row: int, pod: PodFacts) -> int:
        """The whole GPUs the device plugin gives the pod on this row (none where DRA serves them)."""
        return 0 if self.dra_serves_gpus(row, pod) else pod.gpus

    # --- nodes ------------------------------------------------------------------------------

    def set_node(self, facts: NodeFacts) -> int:
        """Add or update a node; pods already on it stay assigned."""
        for resource in facts.allocatable:
            if resource not in self.resources:
                self._add_resource(resource)
        if facts.gpu_count > self.gpu_free.shape[1]:
            self._grow(max_gpus=facts.gpu_count)
        row = self.index.get(facts.name)
        new = row is None
        if row is None:
            if self._free_slots:
                row = self._free_slots.pop()
                self.facts[row] = facts
            else:
                row = len(self.facts)
                if row >= self.present.shape[0]:
                    self._grow(capacity=2 * self.present.shape[0])
                self.facts.append(facts)
            self.index[facts.name] = row
            self._ranked = False
        else:
            previous = self.facts[row]
            assert previous is not None
            if previous.labels != facts.labels or previous.taints != facts.taints:
                self.labels_version += 1
            if previous.images != facts.images:
                self._index_images(row, previous.images, sign=-1)
                self._index_images(row, facts.images, sign=1)
            self.facts[row] = facts
        if new:
            self.labels_version += 1
            self._index_images(row, facts.images, sign=1)
        self.alloc[:, row] = 0
        for resource, amount in facts.allocatable.items():
            self.alloc[self.resources[resource], row] = amount
        self.present[row] = True
        self.ready[row] = facts.ready
        self.unschedulable[row] = facts.unschedulable
        self.gpu_memory[row] = facts.gpu_memory_mib or 0
        self.utilization[row] = np.nan if facts.gpu_utilization is None else facts.gpu_utilization
        if new:
            self._set_live_row(row, facts.name)
        self.spot[row] = facts.capacity_type == "spot"
        self.zone[row] = self._zone_id(facts.zone)
        if new or self.gpu_count[row] != facts.gpu_count:
            self.gpu_count[row] = facts.gpu_count
            self._rebuild_devices(row)
        self.row_version[row] += 1
        self.row_state[row] += 1
        return row

    def set_live_utilization(self, readings: utilization.Readings | None) -> set[str]:
        """Take the live source's readings (None: it has none fresh, every node unknown again); returns the node
        names they gave that the model does not hold. Scores only: no row's version moves."""
        self.live = readings
        self.live_utilization[:] = np.nan
        self.gpu_busy[:] = np.nan
        self.dra.set_busy(readings.uuids if readings is not None else {})
        if readings is None:
            return set()
        # whole columns at once, built without a tuple per GPU (40,000 of them would wake the garbage collector)
        index, width = self.index, self.gpu_busy.shape[1]
        unknown = {name for name in readings.nodes if name not in index}
        known = [name for name in readings.nodes if name not in unknown]
        self.live_utilization[np.fromiter((index[n] for n in known), np.int64, len(known))] = np.fromiter(
            (readings.nodes[n] for n in known), float, len(known))
        per_node = [(index[name], gpus) for name, gpus in readings.gpus.items() if name in index]
        count = sum(len(gpus) for _, gpus in per_node)
        rows = np.fromiter((row for row, gpus in per_node for _ in gpus), np.int64, count)
        columns = np.fromiter((gpu for _, gpus in per_node for gpu in gpus), np.int64, count)
        values = np.fromiter((busy for _, gpus in per_node for busy in gpus.values()), float, count)
        inside = columns < width
        self.gpu_busy[rows[inside], columns[inside]] = values[inside]
        return unknown

    def _set_live_row(self, row: int, name: str) -> None:
        readings = self.live
        self.live_utilization[row] = np.nan
        self.gpu_busy[row] = np.nan
        if readings is None:
            return
        self.live_utilization[row] = readings.nodes.get(name, np.nan)
        width = self.gpu_busy.shape[1]
        for index, busy in readings.gpus.get(name, {}).items():
            if index < width:
                self.gpu_busy[row, index] = busy

    def utilization_known(self) -> bool:
        """Whether any node has a utilization reading, live or annotated."""
        size = self.size
        return not (np.isnan(self.live_utilization[:size]).all() and np.isnan(self.utilization[:size]).all())

    def current_utilization(self, rows: np.ndarray) -> np.ndarray:
        """Each row's GPU utilization 0..1: the live source's reading where it has one, else the node annotation's,
        else NaN (unknown)."""
        live = self.live_utilization[rows]
        return np.where(np.isnan(live), self.utilization[rows], live)

    def _add_resource(self, resource: str) -> None:
        """A column for a resource no node had; pods already accounted that request it count
        on it from now on, so taking them away later never leaves a negative use behind."""
        column = self.resources[resource] = len(self.resources)
        self._cells.clear()
        self._grow()
        for assignment in self.assignments.values():
            self._add_use(column, assignment.node, assignment.pod.requests.get(resource, 0))

    def remove_node(self, name: str) -> None:
        """Forget a node and the accounting of pods on it."""
        row = self.index.pop(name, None)
        if row is None:
            return
        for key in list(self.node_pods.get(row, ())):
            self.unassign(key)
        self.node_pods.pop(row, None)
        self._index_images(row, self.node(row).images, sign=-1)
        self.facts[row] = None
        self.present[row] = False
        self.used[:, row] = 0
        self.alloc[:, row] = 0
        self.gpu_count[row] = 0
        self.gpu_free[row] = 0
        self.whole_free[row] = 0
        self.gpu_used[row] = 0
        self.row_version[row] += 1
        self.row_state[row] += 1
        self._free_slots.append(row)
        self._ranked = False
        self.labels_version += 1

    def node(self, row: int) -> NodeFacts:
        facts = self.facts[row]
        assert facts is not None
        return facts

    def _zone_id(self, zone: str | None) -> int:
        if zone is None:
            return -1
        return self.zones.setdefault(zone, len(self.zones))

    def _index_images(self, row: int, images: Mapping[str, int], sign: int) -> None:
        for name, size in images.items():
            self._image_arrays.pop(name, None)
            if sign > 0:
                self.images.setdefault(name, {})[row] = size
                continue
            holders = self.images.get(name, {})
            holders.pop(row, None)
            if not holders:
                self.images.pop(name, None)

    def image_holders(self, name: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows whose node lists image `name` and its size on each, or None when no node does."""
        found = self._image_arrays.get(name)
        if found is None:
            holders = self.images.get(name)
            if not holders:
                return None
            found = self._image_arrays[name] = (np.fromiter(holders, np.int64, len(holders)),
                                                np.fromiter(holders.values(), np.int64, len(holders)))
        return found

    def ranks(self) -> np.ndarray:
        """Each row's position in node-name order: ties between equal scores go to the first name."""
        if not self._ranked:
            for position, name in enumerate(sorted(self.index)):
                self.rank[self.index[name]] = position
            self._ranked = True
        return self.rank

    def _rebuild_devices(self, row: int) -> None:
        count = int(self.gpu_count[row])
        self.gpu_free[row] = 0
        self.gpu_free[row, :count] = GPU_MILLI
        self.whole_free[row] = count
        self.gpu_used[row] = 0
        keys = sorted(self.node_pods.get(row, ()))
        for key in keys:
            assignment = self.assignments[key]
            devices = assignment.devices
            if self._conflict(row, assignment.pod, devices) is not None:
                devices = self.first_fit(row, assignment.pod)
            self.assignments[key] = Assignment(assignment.pod, row, devices)
            self._take_devices(row, devices, sign=1)

    # --- pods -------------------------------------------------------------------------------

    def assign(self, pod: PodFacts, node: str, devices: tuple[Device, ...]) -> None:
        """Account a scheduling decision; raises OvercommitError rather than overcommit."""
        row = self.index[node]
        conflict = self._conflict(row, pod, devices)
        if conflict is not None:
            raise OvercommitError(f"{pod.key}: devices {conflict}")
        self._account(pod, row, devices)

    def restore(self, pod: PodFacts) -> str | None:
        """Account a pod the API shows bound, on its recorded devices or else the first that fit.

        The API is the truth here, so a pod is accounted even when the node looks full. Its
        recorded devices (the binder's status condition; for a pod without one, the gpu-devices
        annotation, which anyone who may patch the pod can write) are believed only when they
        match its own request exactly (N whole GPUs, or one GPU with its gpu-milli share) and
        are free on the node. Returns, for the caller to report on the pod, why devices were not
        believed and what was used instead (`annotation gpu-scheduler.io/gpu-devices [...]
        disagrees with the pod's request (2 whole GPUs); using GPUs 0,1`), or how the annotation
        differs from the record that was kept; otherwise None.
        """
        row = self.index.get(pod.node_name or "")
        if row is None or pod.identity in self.assignments:
            return None
        conflict = pod.devices_problem
        if pod.devices is not None:
            misfit = self._conflict(row, pod, pod.devices)
            if misfit is None:
                self._account(pod, row, pod.devices)
                return f"{conflict}; keeping {_gpus(pod.devices)}" if conflict else None
            conflict = f"{pod.devices_from} {misfit}"
        devices = self.first_fit(row, pod)
        self._account(pod, row, devices)
        return f"{conflict}; using {_gpus(devices)}" if conflict else None

    def unassign(self, key: str) -> Assignment | None:
        assignment = self.assignments.pop(key, None)
        if assignment is None:
            return None
        self._cells.pop(key, None)
        row, pod = assignment.node, assignment.pod
        self._add_requests(row, pod, sign=-1)
        self._take_devices(row, assignment.devices, sign=-1)
        self.node_pods[row].discard(key)
        if pod.group is not None:
            members = self.group_pods[pod.group]
            members.discard(key)
            if not members:
                del self.group_pods[pod.group]
        if pod.host_ports:
            self._hold_ports(row, pod.host_ports, sign=-1)
        self._count_constraints(pod, sign=-1)
        if pod.volumes:
            self.storage.use(pod.namespace, key, pod.volumes, sign=-1)
        self._count_labels(row, pod, sign=-1)
        return assignment

    def set_aside(self, assignments: Sequence[Assignment]) -> None:
        """Take placed pods' requests and devices off their nodes, and nothing else (their labels, ports and
        volumes stay counted): a cheap hypothetical removal, all at once, exact only for a pod whose fit depends on
        nothing else (preemption's dry run). `put_back` undoes it; nothing else may change the model in between."""
        self._shift(assignments, sign=-1)

    def put_back(self, assignments: Sequence[Assignment]) -> None:
        self._shift(assignments, sign=1)

    def _shift(self, assignments: Sequence[Assignment], sign: int) -> None:
        columns: list[int] = []
        rows: list[int] = []
        amounts: list[int] = []
        slot_rows: list[int] = []
        indices: list[int] = []
        milli: list[int] = []
        for assignment in assignments:
            row = assignment.node
            pod_columns, pod_amounts = self._request_cells(assignment.pod)
            columns += pod_columns
            rows += [row] * len(pod_columns)
            amounts += pod_amounts
            for device in assignment.devices:
                slot_rows.append(row)
                indices.append(device.index)
                milli.append(device.milli)
        if self._beyond_max and any(cell in self._beyond_max for cell in zip(columns, rows)):
            for assignment in assignments:  # exact use kept aside: one at a time, the slow way
                self._add_requests(assignment.node, assignment.pod, sign)
                self._take_devices(assignment.node, assignment.devices, sign)
            return
        if columns:
            np.add.at(self.used, (columns, rows), sign * np.asarray(amounts, dtype=np.int64))
            self.row_version[rows] += 1
        if slot_rows:
            taken = sign * np.asarray(milli, dtype=np.int64)
            np.subtract.at(self.gpu_free, (slot_rows, indices), taken)
            np.add.at(self.gpu_used, slot_rows, taken)
            self.whole_free[slot_rows] = (self.gpu_free[slot_rows] == GPU_MILLI).sum(axis=1)

    def _request_cells(self, pod: PodFacts) -> tuple[list[int], list[int]]:
        """The columns a pod's requests count on, and the amounts, kept per pod (the columns change only when a
        resource no node had appears, which forgets them all)."""
        cells = self._cells.get(pod.identity)
        if cells is None or cells[0] is not pod.requests:
            columns = [self.resources[name] for name in pod.requests if name in self.resources]
            cells = self._cells[pod.identity] = (pod.requests, columns,
                                                 [pod.requests[name] for name in pod.requests if name in self.resources])
        return cells[1], cells[2]

    def relabel(self, key: str, *, labels: Mapping[str, str], app: str | None, terminating: bool,
                started: str | None, preempted: bool) -> bool:
        """A placed pod's labels changed (the apiserver adds its node's topology labels at binding), its deletion
        began, or it started: count it anew for the plugins that select pods by label, and note what preemption
        reads. Its requests and devices stay as they are, and so do the rows' versions the score caches key on.
        Whether it is placed."""
        assignment = self.assignments.get(key)
        if assignment is None:
            return False
        row = assignment.node
        self._count_labels(row, assignment.pod, sign=-1)
        changed = replace(assignment.pod, labels=labels, app=app, terminating=terminating, started=started,
                          preempted=preempted)
        if (labels, terminating, started, preempted) != (assignment.pod.labels, assignment.pod.terminating,
                                                         assignment.pod.started, assignment.pod.preempted):
            self.row_state[row] += 1  # which budgets select it, its deletion, its start: read by preemption
        self.assignments[key] = Assignment(changed, row, assignment.devices)
        self._count_labels(row, changed, sign=1)
        return True

    def _count_labels(self, row: int, pod: PodFacts, *, sign: int) -> None:
        """What the pod-selecting plugins (affinity, spread, locality) count of a placed pod."""
        if sign > 0:
            self.pod_index.add(pod.namespace, pod.labels, pod.pod_affinity, row, terminating=pod.terminating)
        else:
            self.pod_index.remove(pod.namespace, pod.labels, pod.pod_affinity, row, terminating=pod.terminating)
        if pod.app:
            self.app_on_node[pod.app][row] += sign
            if self.zone[row] >= 0:
                self.app_in_zone[pod.app][int(self.zone[row])] += sign

    def _account(self, pod: PodFacts, row: int, devices: tuple[Device, ...]) -> None:
        self.unassign(pod.identity)
        self._add_requests(row, pod, sign=1)
        self._take_devices(row, devices, sign=1)
        self.assignments[pod.identity] = Assignment(pod, row, devices)
        self.node_pods[row].add(pod.identity)
        if pod.group is not None:
            self.group_pods[pod.group].add(pod.identity)
        if pod.host_ports:
            self._hold_ports(row, pod.host_ports, sign=1)
        self._count_constraints(pod, sign=1)
        if pod.volumes:
            self.storage.use(pod.namespace, pod.identity, pod.volumes, sign=1)
        self._count_labels(row, pod, sign=1)

    def _add_requests(self, row: int, pod: PodFacts, sign: int) -> None:
        self.row_version[row] += 1
        self.row_state[row] += 1
        for resource, amount in pod.requests.items():
            column = self.resources.get(resource)
            if column is not None:
                self._add_use(column, row, sign * amount)

    def _add_use(self, column: int, row: int, amount: int) -> None:
        """One request is at most MAX_MILLI, but any number of pods may be bound to a node: a use
        past MAX_MILLI is kept exact aside while the array holds MAX_MILLI, so the node looks
        full, int64 never wraps around, and taking the pods away restores the exact use."""
        cell = (column, row)
        use = self._beyond_max.pop(cell, int(self.used[cell])) + amount
        if use > MAX_MILLI:
            self._beyond_max[cell] = use
        self.used[cell] = min(use, MAX_MILLI)

    def _hold_ports(self, row: int, ports: Iterable[HostPort], sign: int) -> None:
        """Count the pod's host ports in (sign 1) or out (-1). Counted, not a set as upstream's HostPortInfo:
        when two pods hold one port (one bound by another scheduler), the port stays taken until both leave."""
        for ip, protocol, port in ports:
            by_row = self.port_holders.setdefault((protocol, port), {})
            ips = by_row.setdefault(row, Counter())
            ips[ip] += sign
            if ips[ip] <= 0:
                del ips[ip]
            if not ips:
                del by_row[row]
            if not by_row:
                del self.port_holders[(protocol, port)]

    def _count_constraints(self, pod: PodFacts, sign: int) -> None:
        groups = constrained_groups(pod)
        if groups or pod.host_ports or (pod.pod_affinity is not None and pod.pod_affinity.anti_required):
            self.constrained_version += 1  # a group's pod, or a holder of a node-wide rule of any pod, came or went
        for group in groups:
            self.constrained[group] += sign
            if self.constrained[group] <= 0:
                del self.constrained[group]

    def rows_holding(self, ports: Iterable[HostPort]) -> set[int]:
        """The rows where one of `ports` conflicts with a port held (HostPortInfo.CheckConflict): the same
        protocol and port, on the same host IP, or where either side binds every address (0.0.0.0)."""
        rows = set()
        for ip, protocol, port in ports:
            for row, ips in self.port_holders.get((protocol, port), {}).items():
                if ip == ANY_IP or ip in ips or ANY_IP in ips:
                    rows.add(row)
        return rows

    def _take_devices(self, row: int, devices: Iterable[Device], sign: int) -> None:
        for device in devices:
            if device.index >= self.gpu_count[row]:
                continue
            before = self.gpu_free[row, device.index]
            after = before - sign * device.milli
            self.gpu_free[row, device.index] = after
            self.gpu_used[row] += sign * device.milli
            self.whole_free[row] += int(after == GPU_MILLI) - int(before == GPU_MILLI)

    def _conflict(self, row: int, pod: PodFacts, devices: tuple[Device, ...]) -> str | None:
        """Why `devices` cannot be the pod's on this row (exactly its request, and free), or None when they can."""
        gpus = self._device_plugin_gpus(row, pod)
        wanted = (GPU_MILLI,) * gpus if gpus else ((pod.gpu_milli,) if pod.gpu_milli else ())
        reason: str | None
        if tuple(d.milli for d in devices) != wanted or len({d.index for d in devices}) != len(devices):
            reason = f"disagrees with the pod's request ({_request(pod)})"
        else:
            reason = next(filter(None, (self._misfit(row, d) for d in devices)), None)
        if reason is None:
            return None
        return f"{fields.cut(format_devices(devices))} {reason}"

    def _misfit(self, row: int, device: Device) -> str | None:
        name = self.node(row).name
        if device.index >= self.gpu_count[row]:
            return f"does not fit node {name} (it has no GPU {device.index})"
        free = int(self.gpu_free[row, device.index])
        return f"does not fit node {name} (GPU {device.index} has {free}/1000 free)" if free < device.milli else None

    def first_fit(self, row: int, pod: PodFacts) -> tuple[Device, ...]:
        """Devices for a pod whose placement does not say: the lowest-numbered that fit."""
        free = self.gpu_free[row, : self.gpu_count[row]]
        if pod.gpus:
            idle = np.flatnonzero(free == GPU_MILLI)[: self._device_plugin_gpus(row, pod)]
            return tuple(Device(int(i), GPU_MILLI) for i in idle)
        if pod.gpu_milli:
            fits = np.flatnonzero(free >= pod.gpu_milli)
            return (Device(int(fits[0]), pod.gpu_milli),) if fits.size else ()
        return ()

    # --- namespaces ---------------------------------------------------------------------------

    def set_namespaces(self, labels: Mapping[str, Mapping[str, str]]) -> bool:
        """Every namespace with its labels, as a list shows them; whether anything changed."""
        if self.namespace_labels == labels:
            return False
        self.namespace_labels = dict(labels)
        self.namespaces_version += 1
        return True

    def set_namespace(self, name: str, labels: Mapping[str, str] | None) -> bool:
        """One namespace added or changed (None: deleted); whether its labels changed. Before the first
        list nothing is known, and one namespace does not make it known."""
        if self.namespace_labels is None or self.namespace_labels.get(name) == labels:
            return False
        if labels is None:
            del self.namespace_labels[name]
        else:
            self.namespace_labels[name] = labels
        self.namespaces_version += 1
        return True

    # --- summaries ----------------------------------------------------------------------------

    def gpu_totals(self) -> tuple[int, int]:
        """(thousandths in use, thousandths in all) over present nodes: the device plugin's GPUs, and NVIDIA's DRA
        GPUs (whole: a device in use counts whole)."""
        present = self.present[: self.size]
        used = int(self.gpu_used[: self.size][present].sum())
        total = int(self.gpu_count[: self.size][present].sum()) * GPU_MILLI
        for _, _, products in self.dra_gpus():
            for gpus, in_use in products.values():
                used, total = used + in_use * GPU_MILLI, total + gpus * GPU_MILLI
        return used, total

    def gpu_capacity(self) -> np.ndarray:
        """Per row, the GPUs of a present node: the device plugin's, or for a node without any, its NVIDIA DRA GPUs."""
        capacity = self.gpu_count[: self.size] * self.present[: self.size]
        dra = [(row, sum(gpus for gpus, _ in products.values())) for row, _, products in self.dra_gpus()]
        if dra:
            capacity = capacity.copy()
            for row, gpus in dra:
                if not capacity[row]:
                    capacity[row] = gpus
        return capacity

    def dra_gpus(self) -> Iterable[tuple[int, NodeFacts, dict[str, tuple[int, int]]]]:
        """For each present node with NVIDIA DRA GPUs: its row, its facts, and by product name how many GPUs it has
        and how many are in use (Resources.gpus_on)."""
        if not self.dra.slices or not self.dra.ready:
            return
        for row in np.flatnonzero(self.present[: self.size]).tolist():
            facts = self.facts[row]
            if facts is not None and (products := self.dra.gpus_on(facts)):
                yield row, facts, products


def _request(pod: PodFacts) -> str:
    if pod.gpus:
        return f"{pod.gpus} whole GPU{'s' if pod.gpus > 1 else ''}"
    return f"{pod.gpu_milli}/1000 of one GPU" if pod.gpu_milli else "no GPU"


def _gpus(devices: tuple[Device, ...]) -> str:
    if not devices:
        return "no GPU"
    return f"GPU{'s' if len(devices) > 1 else ''} {','.join(str(d.index) for d in devices)}"
