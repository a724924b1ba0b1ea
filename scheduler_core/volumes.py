"""Volumes, as kube-scheduler's VolumeRestrictions, NodeVolumeLimits, VolumeBinding and VolumeZone plugins see them
(k8s.io/kubernetes v1.36): a pod and its claims, the claims' volumes and classes, and the nodes' CSI limits.

Pure: the storage objects come in as the API's JSON, parsed into facts; `Storage` keeps them (with what our own
decisions assumed of them) and answers, for one pod, a PreFilter verdict (a message that makes the pod wait
whatever the node) and a Filter verdict per node (upstream's reasons). `plan` is VolumeBinding's choice for the
chosen node: which available PersistentVolume each unbound WaitForFirstConsumer claim binds to, and which
claims are provisioned there; the runtime carries it out before it binds the pod (upstream's PreBind).

The messages are upstream's, word for word, so a user who knows kube-scheduler recognises them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from scheduler_core import fields, podaffinity, predicates, quantity

# The kinds a `run` scheduler lists and watches for volumes, in the order they are read.
KINDS = ("PersistentVolumeClaim", "PersistentVolume", "StorageClass", "CSINode", "CSIDriver", "CSIStorageCapacity",
         "VolumeAttachment")

BIND_COMPLETED = "pv.kubernetes.io/bind-completed"  # set by the PV controller once claim and volume are bound
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
SELECTED_NODE = "volume.kubernetes.io/selected-node"  # where a WaitForFirstConsumer claim is to be provisioned
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
ZONE_LABELS = ("failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
               "topology.kubernetes.io/zone", "topology.kubernetes.io/region")
GA_LABEL = {"failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
            "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region"}
# In-tree volume sources whose volumes CSI migration hands to a CSI driver (csi-translation-lib), with the field
# that names the disk: NodeVolumeLimits counts them against that driver's limit.
MIGRATED = {"awsElasticBlockStore": ("ebs.csi.aws.com", "volumeID"),
            "gcePersistentDisk": ("pd.csi.storage.gke.io", "pdName"),
            "azureDisk": ("disk.csi.azure.com", "diskURI"),
            "cinder": ("cinder.csi.openstack.org", "volumeID"),
            "portworxVolume": ("pxd.portworx.com", "volumeID")}
MIGRATED_PROVISIONERS = {"kubernetes.io/aws-ebs": "ebs.csi.aws.com", "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
                         "kubernetes.io/azure-disk": "disk.csi.azure.com", "kubernetes.io/cinder":
                         "cinder.csi.openstack.org", "kubernetes.io/portworx-volume": "pxd.portworx.com"}

# Filter reasons (upstream's ErrReason constants)
DISK_CONFLICT = "node(s) had no available disk"
RWOP_CONFLICT = ("node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use "
                 "by another pod")
MAX_VOLUME_COUNT = "node(s) exceed max volume count"
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ZONE_CONFLICT = "node(s) had no available volume zone"
BINDING_REASONS = (NODE_CONFLICT, BIND_CONFLICT, NOT_ENOUGH_SPACE, PV_NOT_EXIST)  # in the order upstream gives them
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


# --- facts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimUse:
    """One volume of a pod that goes through a PersistentVolumeClaim."""

    claim: str  # the claim's name: persistentVolumeClaim.claimName, or `<pod>-<volume>` for a generic ephemeral one
    ephemeral: bool
    read_only: bool = False


@dataclass(frozen=True)
class Disk:
    """An inline GCE PD, AWS EBS, iSCSI or RBD volume, which VolumeRestrictions keeps from being mounted twice."""

    kind: str
    identity: tuple[str, ...]  # pdName; volumeID; iqn; (pool, image)
    read_only: bool
    monitors: frozenset[str] = frozenset()  # RBD: two images are the same when their monitors overlap


@dataclass(frozen=True)
class PodVolumes:
    """What the volume plugins read of a pod's spec.volumes."""

    claims: tuple[ClaimUse, ...] = ()
    disks: tuple[Disk, ...] = ()
    inline_csi: tuple[tuple[str, str], ...] = ()  # (driver, unique name) of migrated in-tree inline volumes

    def __bool__(self) -> bool:
        return bool(self.claims or self.disks or self.inline_csi)


def pod_volumes(spec: Mapping[str, Any], pod_name: str) -> PodVolumes | None:
    """The pod's volumes as the plugins read them; None for a pod with none of interest (most pods)."""
    claims: list[ClaimUse] = []
    disks: list[Disk] = []
    inline: list[tuple[str, str]] = []
    for raw in fields.sequence(spec.get("volumes")):
        volume = fields.mapping(raw)
        claim, ephemeral = fields.mapping(volume.get("persistentVolumeClaim")), volume.get("ephemeral")
        if volume.get("persistentVolumeClaim") is not None:
            claims.append(ClaimUse(str(claim.get("claimName") or ""), False, claim.get("readOnly") is True))
        elif ephemeral is not None:
            claims.append(ClaimUse(f"{pod_name}-{volume.get('name')}", True))
        disk = _disk(volume)
        if disk is not None:
            disks.append(disk)
        for source, (driver, key) in MIGRATED.items():
            handle = fields.mapping(volume.get(source)).get(key)
            if volume.get(source) is not None and isinstance(handle, str):
                inline.append((driver, f"{driver}/{_migrated_handle(source, handle)}"))
    found = PodVolumes(tuple(claims), tuple(disks), tuple(inline))
    return found if found else None


def _disk(volume: Mapping[str, Any]) -> Disk | None:
    for kind, keys in (("gcePersistentDisk", ("pdName",)), ("awsElasticBlockStore", ("volumeID",)),
                       ("iscsi", ("iqn",)), ("rbd", ("pool", "image"))):
        source = volume.get(kind)
        if isinstance(source, Mapping):
            identity = tuple(str(source.get(key, "rbd" if key == "pool" else "")) for key in keys)
            monitors = frozenset(str(m) for m in fields.sequence(source.get("monitors")))
            return Disk(kind, identity, source.get("readOnly") is True, monitors)
    return None


def _migrated_handle(source: str, handle: str) -> str:
    """The CSI volume handle csi-translation-lib gives an in-tree volume (EBS: the bare volume ID)."""
    if source == "awsElasticBlockStore" and handle.startswith("aws://"):
        return handle.rsplit("/", 1)[-1]
    return handle


def conflicts(disk: Disk, other: Disk) -> bool:
    """isVolumeConflict: the same disk, unless both mount it read-only (never for EBS)."""
    if disk.kind != other.kind or disk.identity != other.identity:
        return False
    if disk.kind == "awsElasticBlockStore":
        return True
    if disk.kind == "rbd" and not disk.monitors & other.monitors:
        return False
    return not (disk.read_only and other.read_only)


@dataclass(frozen=True)
class Claim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    volume_name: str
    storage_class: str  # the beta annotation first, then spec.storageClassName; "" for none
    access_modes: frozenset[str]
    request: int | None  # spec.resources.requests.storage in bytes
    selector: podaffinity.Selector | None  # None: no selector
    volume_mode: str
    attributes_class: str
    phase: str
    deleting: bool
    annotations: Mapping[str, str]
    controller_uid: str | None  # the owner that controls it (a pod, for a generic ephemeral volume's claim)

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def fully_bound(self) -> bool:
        """isPVCFullyBound: a volume named and the PV controller's bind-completed annotation set."""
        return bool(self.volume_name) and BIND_COMPLETED in self.annotations

    @property
    def selected_node(self) -> str | None:
        return self.annotations.get(SELECTED_NODE)


@dataclass(frozen=True)
class Volume:
    name: str
    resource_version: str
    storage_class: str
    capacity: int | None
    access_modes: frozenset[str]
    volume_mode: str
    attributes_class: str
    claim_ref: tuple[str, str, str] | None  # (namespace, name, uid)
    phase: str
    deleting: bool
    labels: Mapping[str, str]
    node_terms: tuple[predicates.Term, ...] | None  # spec.nodeAffinity.required; None: any node
    csi: tuple[str, str] | None  # (driver, volumeHandle)
    migrated: bool = False  # `csi` is what CSI migration gives an in-tree source, not spec.csi


    def bound_to(self, claim: Claim) -> bool:
        """IsVolumeBoundToClaim."""
        if self.claim_ref is None or self.claim_ref[:2] != claim.key:
            return False
        return not self.claim_ref[2] or self.claim_ref[2] == claim.uid

    @functools.cached_property
    def single_in(self) -> tuple[str, tuple[str, ...]] | None:
        """(key, values) when the node affinity is one `key In values` requirement (a local volume's hostname, a
        zonal volume's zone), which VolumeBinding looks up through the label's domains."""
        terms = self.node_terms
        if terms is None or len(terms) != 1 or terms[0].problem or terms[0].fields or len(terms[0].expressions) != 1:
            return None
        expression = terms[0].expressions[0]
        return (expression.key, expression.values) if expression.operator == "In" else None

    def fits(self, labels: Mapping[str, str]) -> bool:
        """CheckNodeAffinity."""
        return self.node_terms is None or any(term.matches(labels, "") for term in self.node_terms)


@dataclass(frozen=True)
class StorageClass:
    name: str
    provisioner: str
    binding_mode: str | None
    allowed_topologies: tuple[tuple[tuple[str, frozenset[str]], ...], ...]  # terms of (key, values), ORed

    @property
    def topology_terms(self) -> tuple[predicates.Term, ...] | None:
        """allowedTopologies as node selector terms (each key In its values); None: every node."""
        if not self.allowed_topologies:
            return None
        return tuple(predicates.Term(tuple(predicates.Expression(key, "In", tuple(sorted(values)))
                                           for key, values in term)) for term in self.allowed_topologies)


@dataclass(frozen=True)
class Capacity:
    """A CSIStorageCapacity: how large a volume of a class can be made where its topology selects."""

    storage_class: str
    topology: podaffinity.Selector  # None: reaches no node
    limit: int | None  # maximumVolumeSize, else capacity


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return fields.mapping(obj.get("metadata"))


def _bytes(value: object) -> int | None:
    if value is None:
        return None
    return int(quantity.parse(value))


def _modes(raw: object) -> frozenset[str]:
    return frozenset(str(mode) for mode in fields.sequence(raw))


def parse_claim(obj: Mapping[str, Any]) -> Claim:
    meta, spec = _meta(obj), fields.mapping(obj.get("spec"))
    annotations = fields.strings(meta.get("annotations"))
    selector = spec.get("selector")
    controller = fields.controller_uid(meta)
    return Claim(
        namespace=str(meta.get("namespace") or "default"), name=str(meta["name"]), uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""), volume_name=str(spec.get("volumeName") or ""),
        storage_class=annotations.get(BETA_CLASS, str(spec.get("storageClassName") or "")),
        access_modes=_modes(spec.get("accessModes")),
        request=_bytes(fields.mapping(fields.mapping(spec.get("resources")).get("requests")).get("storage")),
        selector=podaffinity.parse_selector(selector) if selector is not None else None,
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        phase=str(fields.mapping(obj.get("status")).get("phase") or ""),
        deleting=meta.get("deletionTimestamp") is not None, annotations=annotations, controller_uid=controller)


def parse_volume(obj: Mapping[str, Any]) -> Volume:
    meta, spec = _meta(obj), fields.mapping(obj.get("spec"))
    annotations = fields.strings(meta.get("annotations"))
    ref = spec.get("claimRef")
    claim_ref = None
    if isinstance(ref, Mapping):
        claim_ref = (str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))
    required = fields.mapping(fields.mapping(spec.get("nodeAffinity")).get("required"))
    node_terms = None
    if fields.mapping(spec.get("nodeAffinity")).get("required") is not None:
        node_terms = predicates.parse_terms(required.get("nodeSelectorTerms"))
    csi = fields.mapping(spec.get("csi"))
    return Volume(
        name=str(meta["name"]), resource_version=str(meta.get("resourceVersion") or ""),
        storage_class=annotations.get(BETA_CLASS, str(spec.get("storageClassName") or "")),
        capacity=_bytes(fields.mapping(spec.get("capacity")).get("storage")),
        access_modes=_modes(spec.get("accessModes")), volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        attributes_class=str(spec.get("volumeAttributesClassName") or ""), claim_ref=claim_ref,
        phase=str(fields.mapping(obj.get("status")).get("phase") or ""),
        deleting=meta.get("deletionTimestamp") is not None, labels=fields.strings(meta.get("labels")),
        node_terms=node_terms,
        csi=(str(csi.get("driver") or ""), str(csi.get("volumeHandle") or "")) if spec.get("csi") else _in_tree(spec),
        migrated=not spec.get("csi") and _in_tree(spec) is not None)


def _in_tree(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """The CSI driver and handle CSI migration gives an in-tree persistent volume, for NodeVolumeLimits."""
    for source, (driver, key) in MIGRATED.items():
        handle = fields.mapping(spec.get(source)).get(key)
        if spec.get(source) is not None and isinstance(handle, str):
            return driver, _migrated_handle(source, handle)
    return None


def parse_class(obj: Mapping[str, Any]) -> StorageClass:
    terms = []
    for term in fields.sequence(obj.get("allowedTopologies")):
        terms.append(tuple((str(e.get("key")), frozenset(str(v) for v in fields.sequence(e.get("values"))))
                           for e in map(fields.mapping, fields.sequence(fields.mapping(term).get(
                               "matchLabelExpressions")))))
    mode = obj.get("volumeBindingMode")
    return StorageClass(str(_meta(obj)["name"]), str(obj.get("provisioner") or ""),
                        str(mode) if mode is not None else None, tuple(terms))


def parse_csi_node(obj: Mapping[str, Any]) -> tuple[str, dict[str, int | None]]:
    """A CSINode: its node's name and each driver's attach limit (None: no limit)."""
    drivers: dict[str, int | None] = {}
    for driver in map(fields.mapping, fields.sequence(fields.mapping(obj.get("spec")).get("drivers"))):
        count = fields.mapping(driver.get("allocatable")).get("count")
        drivers[str(driver.get("name"))] = count if isinstance(count, int) and not isinstance(count, bool) else None
    return str(_meta(obj)["name"]), drivers


def parse_csi_driver(obj: Mapping[str, Any]) -> tuple[str, bool]:
    """A CSIDriver: its name and whether it publishes storage capacity for scheduling."""
    return str(_meta(obj)["name"]), fields.mapping(obj.get("spec")).get("storageCapacity") is True


def parse_capacity(obj: Mapping[str, Any]) -> Capacity:
    topology = obj.get("nodeTopology")
    limit = obj.get("maximumVolumeSize")
    return Capacity(str(obj.get("storageClassName") or ""),
                    podaffinity.parse_selector(topology) if topology is not None else None,
                    _bytes(limit if limit is not None else obj.get("capacity")))


def parse_attachment(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """A VolumeAttachment: (node, attacher, persistent volume name), or None when it names no volume."""
    spec = fields.mapping(obj.get("spec"))
    volume = fields.mapping(spec.get("source")).get("persistentVolumeName")
    if not spec.get("attacher") or not volume:
        return None
    return str(spec.get("nodeName") or ""), str(spec["attacher"]), str(volume)


# --- what the scheduler knows of storage ----------------------------------------------------------


@dataclass
class Plan:
    """VolumeBinding's choice for one node: each unbound claim's pre-provisioned volume, and the claims to
    provision there."""

    node: str
    bindings: tuple[tuple[tuple[str, str], str], ...] = ()  # (claim key, volume name)
    provisions: tuple[tuple[str, str], ...] = ()  # claim keys

    def __bool__(self) -> bool:
        return bool(self.bindings or self.provisions)


class Storage:
    """The storage objects as the watches (or a simulation's input) show them, with what our decisions assumed.

    An assumption (a volume's claimRef, a claim's selected node) overlays the watched object until the watch
    shows a newer version of that object, or the runtime drops it (`forget`: the binding failed): the next
    decision sees it at once, as kube-scheduler's assume cache lets it.
    """

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], Claim] = {}
        self.volumes: dict[str, Volume] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, dict[str, int | None]] = {}
        self.capacity_drivers: set[str] = set()  # CSIDrivers with storageCapacity: true
        self.capacities: dict[tuple[str, str], Capacity] = {}
        self.attachments: dict[str, tuple[str, str, str]] = {}
        self.listed: set[str] = set()  # kinds listed at least once
        self.assumed_volumes: dict[str, Volume] = {}
        self.assumed_claims: dict[tuple[str, str], Claim] = {}
        self.users: defaultdict[tuple[str, str], set[str]] = defaultdict(set)  # claim key -> uids of placed pods
        self.version = 0  # bumped by every change of objects or assumptions
        self._objects_version = 0  # bumped by changes of the watched objects only, not of assumptions
        self._by_class: tuple[int, dict[str, list[Volume]]] = (-1, {})

    # --- taking objects in

    def set(self, kind: str, obj: Mapping[str, Any], *, deleted: bool = False) -> None:
        """One object of `kind` added, changed or (`deleted`) removed."""
        meta = _meta(obj)
        name, namespace = str(meta["name"]), str(meta.get("namespace") or "default")
        self.version += 1
        self._objects_version += 1
        if kind == "PersistentVolumeClaim":
            claim = None if deleted else parse_claim(obj)
            self._put(self.claims, (namespace, name), claim)
            self._outdate(self.assumed_claims, (namespace, name), claim)
        elif kind == "PersistentVolume":
            volume = None if deleted else parse_volume(obj)
            self._put(self.volumes, name, volume)
            self._outdate(self.assumed_volumes, name, volume)
        elif kind == "StorageClass":
            self._put(self.classes, name, None if deleted else parse_class(obj))
        elif kind == "CSINode":
            self._put(self.csi_nodes, name, None if deleted else parse_csi_node(obj)[1])
        elif kind == "CSIDriver":
            if deleted or not parse_csi_driver(obj)[1]:
                self.capacity_drivers.discard(name)
            else:
                self.capacity_drivers.add(name)
        elif kind == "CSIStorageCapacity":
            self._put(self.capacities, (namespace, name), None if deleted else parse_capacity(obj))
        elif kind == "VolumeAttachment":
            attachment = None if deleted else parse_attachment(obj)
            self._put(self.attachments, name, attachment)
        else:
            raise ValueError(f"not a storage kind: {kind}")

    def clear(self, kind: str) -> None:
        """Forget every object of `kind`, before a list takes them in again; from then on the kind counts as
        listed (see `ready`)."""
        self.version += 1
        self._objects_version += 1
        self.listed.add(kind)
        if kind == "PersistentVolumeClaim":
            self.claims.clear()
        elif kind == "PersistentVolume":
            self.volumes.clear()
        elif kind == "CSIDriver":
            self.capacity_drivers.clear()
        else:
            tables: dict[str, dict[Any, Any]] = {"StorageClass": self.classes, "CSINode": self.csi_nodes,
                                                 "CSIStorageCapacity": self.capacities,
                                                 "VolumeAttachment": self.attachments}
            tables[kind].clear()

    @staticmethod
    def _outdate(assumed: dict[Any, Any], key: Any, seen: Claim | Volume | None) -> None:
        """An assumption stands while the API shows the version it was made from; a newer one (ours written, or
        anyone's change) is the truth from then on."""
        mine = assumed.get(key)
        if mine is not None and (seen is None or seen.resource_version != mine.resource_version):
            del assumed[key]

    @staticmethod
    def _put(table: dict[Any, Any], key: Any, value: Any) -> None:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

    @property
    def ready(self) -> bool:
        """Every kind has been listed: before that a pod with claims cannot be judged."""
        return all(kind in self.listed for kind in KINDS)

    # --- reading, assumptions first

    def claim(self, namespace: str, name: str) -> Claim | None:
        key = (namespace, name)
        return self.assumed_claims.get(key) or self.claims.get(key)

    def volume(self, name: str) -> Volume | None:
        return self.assumed_volumes.get(name) or self.volumes.get(name)

    def volumes_of_class(self, storage_class: str) -> list[Volume]:
        """The volumes of a class, assumptions included, by name; kept until the next change (a decision asks once
        per node)."""
        if self._by_class[0] != self._objects_version:
            self._by_class = (self._objects_version, {})
        found = self._by_class[1].get(storage_class)
        if found is None:
            found = self._by_class[1][storage_class] = [
                self.volumes[name] for name in sorted(self.volumes) if self.volumes[name].storage_class == storage_class]
        if not self.assumed_volumes:
            return found
        return [self.assumed_volumes.get(volume.name, volume) for volume in found]

    # --- placed pods, for ReadWriteOncePod

    def use(self, namespace: str, uid: str, volumes: PodVolumes, *, sign: int) -> None:
        """A placed pod's claims (persistentVolumeClaim volumes; upstream's PVCRefCounts leave ephemeral ones out)."""
        for use in volumes.claims:
            if use.ephemeral:
                continue
            users = self.users[(namespace, use.claim)]
            if sign > 0:
                users.add(uid)
            else:
                users.discard(uid)
                if not users:
                    del self.users[(namespace, use.claim)]

    # --- our decisions

    def assume(self, plan: Plan) -> None:
        """Account a plan at once: its volumes taken by their claims, its claims' selected node set."""
        self.version += 1
        for key, volume_name in plan.bindings:
            volume, claim = self.volume(volume_name), self.claim(*key)
            if volume is not None and claim is not None:
                self.assumed_volumes[volume_name] = dataclasses.replace(
                    volume, claim_ref=(claim.namespace, claim.name, claim.uid))
        for key in plan.provisions:
            claim = self.claim(*key)
            if claim is not None:
                self.assumed_claims[key] = dataclasses.replace(
                    claim, annotations={**claim.annotations, SELECTED_NODE: plan.node})

    def forget(self, plan: Plan) -> None:
        """Drop what `assume` overlaid: the API's objects stand again."""
        self.version += 1
        for key, volume_name in plan.bindings:
            self.assumed_volumes.pop(volume_name, None)
        for key in plan.provisions:
            self.assumed_claims.pop(key, None)


# --- the plugins ---------------------------------------------------------------------------------


def _not_found(resource: str, name: str) -> str:
    return f'{resource} "{name}" not found'


def _owned(claim: Claim, namespace: str, pod_name: str, pod_uid: str) -> str | None:
    """ephemeral.VolumeIsForPod: why a generic ephemeral volume's claim is not the pod's, else None."""
    if claim.namespace != namespace or not pod_uid or claim.controller_uid != pod_uid:
        return (f"PVC {claim.namespace}/{claim.name} was not created for pod {namespace}/{pod_name} "
                "(pod is not owner)")
    return None


@dataclass
class PodClaims:
    """A pod's claims sorted out by VolumeBinding's PreFilter: bound ones, unbound WaitForFirstConsumer ones."""

    bound: list[Claim] = field(default_factory=list)
    delayed: list[Claim] = field(default_factory=list)


def restrictions_pre_filter(storage: Storage, namespace: str, volumes: PodVolumes) -> tuple[str | None, bool]:
    """VolumeRestrictions' PreFilter: (why the pod waits whatever the node, whether a ReadWriteOncePod claim of it
    is already used by a placed pod)."""
    used = False
    for use in volumes.claims:
        if use.ephemeral:
            continue
        claim = storage.claim(namespace, use.claim)
        if claim is None:
            return _not_found("persistentvolumeclaim", use.claim), False
        if READ_WRITE_ONCE_POD in claim.access_modes and storage.users.get(claim.key):
            used = True
    return None, used


def binding_pre_filter(storage: Storage, namespace: str, pod_name: str, pod_uid: str,
                       volumes: PodVolumes) -> PodClaims | str:
    """VolumeBinding's PreFilter: the pod's claims sorted out, or why it waits whatever the node."""
    found: list[Claim] = []
    for use in volumes.claims:
        claim = storage.claim(namespace, use.claim)
        if claim is None:
            if use.ephemeral:
                return f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{use.claim}"'
            return _not_found("persistentvolumeclaim", use.claim)
        if claim.phase == "Lost":
            return f'persistentvolumeclaim "{claim.name}" bound to non-existent persistentvolume "{claim.volume_name}"'
        if claim.deleting:
            return f'persistentvolumeclaim "{claim.name}" is being deleted'
        if use.ephemeral and (problem := _owned(claim, namespace, pod_name, pod_uid)):
            return problem
        found.append(claim)
    claims, immediate = PodClaims(), False
    for claim in found:
        if claim.fully_bound:
            claims.bound.append(claim)
            continue
        delayed = False
        if claim.storage_class:
            storage_class = storage.classes.get(claim.storage_class)
            if storage_class is not None:
                if storage_class.binding_mode is None:
                    return f'VolumeBindingMode not set for StorageClass "{claim.storage_class}"'
                delayed = storage_class.binding_mode == WAIT_FOR_FIRST_CONSUMER
        if delayed and not claim.volume_name:
            claims.delayed.append(claim)
        else:
            immediate = True
    if immediate:
        return UNBOUND_IMMEDIATE
    return claims


def zone_pre_filter(storage: Storage, namespace: str, volumes: PodVolumes
                    ) -> list[tuple[str, frozenset[str]]] | str:
    """VolumeZone's PreFilter: the zone and region labels of the pod's bound volumes, or why the pod waits."""
    topologies: list[tuple[str, frozenset[str]]] = []
    for use in volumes.claims:
        if use.ephemeral:
            continue
        claim = storage.claim(namespace, use.claim)
        if claim is None:
            return _not_found("persistentvolumeclaim", use.claim)
        if not claim.volume_name:
            if not claim.storage_class:
                return "PersistentVolumeClaim had no pv name and storageClass name"
            storage_class = storage.classes.get(claim.storage_class)
            if storage_class is None:
                return _not_found("storageclass.storage.k8s.io", claim.storage_class)
            if storage_class.binding_mode is None:
                return f'VolumeBindingMode not set for StorageClass "{claim.storage_class}"'
            if storage_class.binding_mode == WAIT_FOR_FIRST_CONSUMER:
                continue
            return "PersistentVolume had no name"
        volume = storage.volume(claim.volume_name)
        if volume is None:
            return _not_found("persistentvolume", claim.volume_name)
        for key in ZONE_LABELS:
            if key in volume.labels:
                zones = _zones(volume.labels[key])
                if zones is not None:
                    topologies.append((key, zones))
    return topologies


def _zones(value: str) -> frozenset[str] | None:
    """LabelZonesToSet: `a__b` is zones a and b; None when an entry is empty (upstream ignores the label)."""
    parts = [part.strip() for part in value.split("__")]
    return None if any(not part for part in parts) else frozenset(parts)


def zone_fits(topologies: list[tuple[str, frozenset[str]]], labels: Mapping[str, str]) -> bool:
    """VolumeZone's Filter for one node: a node with none of the zone labels takes any volume."""
    if not any(key in labels for key in ZONE_LABELS):
        return True
    for key, zones in topologies:
        value = labels.get(key, labels.get(GA_LABEL.get(key, key)))
        if value is None or value not in zones:
            return False
    return True


class Nodes(Protocol):
    """The candidate nodes as VolumeBinding reads them, one row each (rows without a node are never admitted)."""

    @property
    def names(self) -> Sequence[str | None]:
        """Each row's node name (None: no node)."""

    def admits(self, terms: tuple[predicates.Term, ...] | None) -> np.ndarray:
        """Rows whose labels match some term (CheckNodeAffinity, MatchTopologySelectorTerms); None: every node."""

    def selects(self, selector: podaffinity.Selector) -> np.ndarray:
        """Rows whose labels a label selector selects (a CSIStorageCapacity's nodeTopology)."""

    def domains(self, key: str) -> podaffinity.Domains:
        """Each row's value of the label `key`, as domains."""

    def labels(self, row: int) -> Mapping[str, str]:
        """One row's labels."""


@dataclass
class Binding:
    """VolumeBinding's Filter over every node at once (FindPodVolumes, vectorised: the same per-node logic, so
    a pod with claims costs a few array operations per candidate volume, not a loop over nodes and volumes).
    `reasons` maps each reason (upstream's, or an error's message) to the rows it rejects; `plan(row)` is what
    to bind and provision on a node that passes."""

    nodes: Nodes
    reasons: dict[str, np.ndarray] = field(default_factory=dict)
    matched: list[tuple[Claim, list[Volume], np.ndarray]] = field(default_factory=list)  # per-row candidate index
    selected: list[Claim] = field(default_factory=list)  # claims a node was selected for already
    unmatched: list[tuple[Claim, np.ndarray]] = field(default_factory=list)  # rows where a claim found no volume

    def plan(self, row: int) -> Plan:
        node = str(self.nodes.names[row])
        bindings = tuple((claim.key, found[index[row]].name) for claim, found, index in self.matched
                         if index[row] >= 0)
        provisions = tuple(claim.key for claim in self.selected) + tuple(
            claim.key for claim, rows in self.unmatched if rows[row])
        return Plan(node, bindings, provisions)


def bind(storage: Storage, claims: PodClaims, nodes: Nodes, size: int) -> Binding:
    """FindPodVolumes on every row: bound claims' volumes must admit the node; unbound WaitForFirstConsumer claims
    need an available volume there, or else a class that provisions there."""
    found = Binding(nodes)
    present = np.array([name is not None for name in nodes.names], dtype=bool)

    def reject(reason: str, rows: np.ndarray) -> None:
        if rows.any():
            found.reasons[reason] = found.reasons.get(reason, np.zeros(size, dtype=bool)) | rows

    decided = ~present
    for claim in claims.bound:  # checkBoundClaims: the first claim that fails a node decides why
        volume = storage.volume(claim.volume_name)
        if volume is None:
            reject(PV_NOT_EXIST, ~decided)
            decided = np.ones(size, dtype=bool)
            break
        mismatch = ~nodes.admits(volume.node_terms) & ~decided
        reject(NODE_CONFLICT, mismatch)
        decided = decided | mismatch
    if claims.delayed:
        _bind_delayed(storage, claims.delayed, nodes, present, found, reject)
    return found


def _bind_delayed(storage: Storage, delayed: list[Claim], nodes: Nodes, present: np.ndarray, found: Binding,
                  reject: Callable[[str, np.ndarray], None]) -> None:
    size = present.size
    open_rows = present.copy()  # rows still satisfiable
    names = np.array([name or "" for name in nodes.names], dtype=object)
    to_match = []
    for claim in delayed:
        if claim.selected_node is not None:  # the fast path: any other node is a bind conflict
            other = names != claim.selected_node
            reject(BIND_CONFLICT, other & open_rows)
            open_rows &= ~other
            found.selected.append(claim)
        else:
            to_match.append(claim)
    earlier: list[np.ndarray] = []  # the names of the volumes earlier claims of the pod took, per row
    for claim in sorted(to_match, key=lambda c: c.request or 0):  # smallest claims choose first
        candidates, prebound = _candidates(storage, claim)
        if prebound is not None:  # a volume pre-bound to the claim decides alone
            index = np.where(nodes.admits(prebound.node_terms), candidates.index(prebound), -1)
        else:
            index = _smallest(candidates, nodes, size)
        index[~open_rows] = -1
        if earlier:  # excludedVolumes: on a row, a volume an earlier claim took is not this claim's
            names = _names(candidates, index)
            for row in np.flatnonzero(np.logical_or.reduce([names == taken for taken in earlier]) & (index >= 0)):
                index[row] = _smallest_at(candidates, nodes.labels(int(row)), {str(t[row]) for t in earlier})
        earlier.append(_names(candidates, index))
        found.matched.append((claim, candidates, index))
        found.unmatched.append((claim, (index < 0) & open_rows))
    # checkVolumeProvisions over the rows where some claim is to be provisioned: the first claim that fails decides
    provisioning = [(claim, open_rows.copy()) for claim in found.selected]
    provisioning += [(claim, rows.copy()) for claim, rows in found.unmatched]
    failed = np.zeros(size, dtype=bool)
    for claim, rows in provisioning:
        rows &= ~failed
        if not rows.any():
            continue
        if not claim.storage_class:
            reject(f'no class for claim "{claim.namespace}/{claim.name}"', rows)
            failed |= rows
            continue
        storage_class = storage.classes.get(claim.storage_class)
        if storage_class is None:
            reject(f'failed to find storage class "{claim.storage_class}"', rows)
            failed |= rows
            continue
        if not storage_class.provisioner or storage_class.provisioner == NO_PROVISIONER:
            reject(BIND_CONFLICT, rows)
            failed |= rows
            continue
        outside = rows & ~nodes.admits(storage_class.topology_terms)
        reject(BIND_CONFLICT, outside)
        failed |= outside
        short = rows & ~outside & ~_capacity_rows(storage, storage_class, claim, nodes)
        reject(NOT_ENOUGH_SPACE, short)
        failed |= short
    for claim, rows in found.unmatched:
        rows &= ~failed


def _names(candidates: list[Volume], index: np.ndarray) -> np.ndarray:
    """The name of the volume chosen on each row ("" for none)."""
    table = np.array([volume.name for volume in candidates] + [""], dtype=object)
    return table[np.where(index >= 0, index, len(candidates))]


def _smallest(candidates: list[Volume], nodes: Nodes, size: int) -> np.ndarray:
    """Per row, the position of the first (smallest) candidate whose node affinity admits the node, -1 for none.
    A volume whose affinity is one `key In values` requirement (a local volume's hostname, a zonal volume's zone)
    is looked up through the label's domains, so thousands of local volumes cost a few array operations."""
    none = len(candidates)
    best = np.full(size, none, dtype=np.int64)
    simple: dict[str, dict[str, int]] = {}
    for position, volume in enumerate(candidates):
        requirement = volume.single_in
        if requirement is None:
            best[nodes.admits(volume.node_terms) & (best == none)] = position
            continue
        key, values = requirement
        by_value = simple.setdefault(key, {})
        for value in values:
            by_value.setdefault(value, position)
    for key, by_value in simple.items():
        domains = nodes.domains(key)
        per_domain = np.full(domains.absent + 1, none, dtype=np.int64)
        for value, position in by_value.items():
            if value in domains.index:
                per_domain[domains.index[value]] = position
        np.minimum(best, per_domain[domains.ids], out=best)
    best[~nodes.admits(None)] = none
    return np.where(best < none, best, -1)


def _smallest_at(candidates: list[Volume], labels: Mapping[str, str], excluded: set[str]) -> int:
    """One row's smallest candidate that admits it and is not excluded; -1 for none."""
    return next((position for position, volume in enumerate(candidates)
                 if volume.name not in excluded and volume.fits(labels)), -1)


def _candidates(storage: Storage, claim: Claim) -> tuple[list[Volume], Volume | None]:
    """FindMatchingVolume's checks that do not depend on the node: the volumes the claim could take, smallest
    first, and a volume pre-bound to the claim (which alone decides, where it is found)."""
    candidates, prebound = [], None
    for volume in storage.volumes_of_class(claim.storage_class):
        if volume.claim_ref is not None and not volume.bound_to(claim):
            continue
        if (volume.capacity or 0) < (claim.request or 0):
            continue
        if volume.volume_mode != claim.volume_mode or volume.attributes_class != claim.attributes_class:
            continue
        if volume.deleting:
            continue
        if volume.bound_to(claim):
            prebound = prebound or volume
            candidates.append(volume)
            continue
        if volume.phase != "Available":
            continue
        if claim.selector is not None and not podaffinity.selects(claim.selector, volume.labels):
            continue
        if not claim.access_modes <= volume.access_modes:
            continue
        candidates.append(volume)
    candidates.sort(key=lambda volume: volume.capacity or 0)  # stable: among equals, by name
    return candidates, prebound


def _capacity_rows(storage: Storage, storage_class: StorageClass, claim: Claim, nodes: Nodes) -> np.ndarray:
    """hasEnoughCapacity: only for a CSI driver that publishes capacity, and a claim that asks for a size."""
    size = len(nodes.names)
    if claim.request is None or storage_class.provisioner not in storage.capacity_drivers:
        return np.ones(size, dtype=bool)
    rows = np.zeros(size, dtype=bool)
    for capacity in storage.capacities.values():
        if capacity.storage_class == storage_class.name and capacity.limit is not None \
                and capacity.limit >= claim.request and capacity.topology is not None:
            rows |= nodes.selects(capacity.topology)
    return rows


# --- NodeVolumeLimits

def attachable(storage: Storage, namespace: str, pod_name: str, pod_uid: str, volumes: PodVolumes, *,
               has_csi_node: bool, new: bool) -> dict[str, str] | str:
    """filterAttachableVolumes: unique volume name -> CSI driver for a pod's volumes, or (for the pod being
    scheduled) why one cannot be looked up. Migrated in-tree volumes count only where a CSINode exists."""
    found: dict[str, str] = {}
    if has_csi_node:
        found.update((unique, driver) for driver, unique in volumes.inline_csi)
    for use in volumes.claims:
        claim = storage.claim(namespace, use.claim)
        if claim is None:
            if new:
                return f'looking up PVC {namespace}/{use.claim}: persistentvolumeclaim "{use.claim}" not found'
            continue
        if use.ephemeral and (problem := _owned(claim, namespace, pod_name, pod_uid)):
            return problem if new else found
        driver, handle = _driver_of(storage, claim, has_csi_node)
        if driver and handle:
            found[f"{driver}/{handle}"] = driver
    return found


def _driver_of(storage: Storage, claim: Claim, has_csi_node: bool) -> tuple[str, str]:
    """getCSIDriverInfo: the claim's volume's driver and handle, or for an unbound claim its class's provisioner
    and a name of the claim's own."""
    volume = storage.volume(claim.volume_name) if claim.volume_name else None
    if volume is not None:
        if volume.csi is None:
            return "", ""
        return volume.csi if has_csi_node or not volume.migrated else ("", "")
    storage_class = storage.classes.get(claim.storage_class) if claim.storage_class else None
    if storage_class is None:
        return "", ""
    handle = f"unbound-{claim.namespace}/{claim.name}"
    provisioner = storage_class.provisioner
    if provisioner in MIGRATED_PROVISIONERS:
        return (MIGRATED_PROVISIONERS[provisioner], handle) if has_csi_node else ("", "")
    return provisioner, handle



# --- after the writes of a plan (upstream's PreBind)


def _older(seen: str, written: str | None) -> bool:
    """Whether the watched object predates our write (resource versions compare as numbers, as upstream's
    APIObjectVersioner compares them)."""
    if not written:
        return False
    try:
        return int(seen or 0) < int(written)
    except ValueError:
        return seen != written


def settled(storage: Storage, plan: Plan, written: Mapping[str, str], labels: Mapping[str, str]) -> bool | str:
    """checkBindings: whether every claim of the carried-out `plan` is bound now (True), not yet (False), or why it
    never will be on this node (the pod must be scheduled again). `written` holds the resource version our write
    gave each object (`pv/<name>`, `pvc/<namespace>/<name>`); the watched objects are read, not the assumptions."""
    for (namespace, name), volume_name in plan.bindings:
        volume, claim = storage.volumes.get(volume_name), storage.claims.get((namespace, name))
        if volume is None or claim is None:
            return f"failed to check binding: {'persistentvolume' if volume is None else 'persistentvolumeclaim'} " \
                   f'"{volume_name if volume is None else name}" not found'
        if _older(volume.resource_version, written.get(f"pv/{volume_name}")):
            return False
        if not volume.fits(labels):
            return f'pv "{volume_name}" node affinity doesn\'t match node "{plan.node}": no matching NodeSelectorTerms'
        if volume.claim_ref is None or not volume.claim_ref[2]:
            return f'ClaimRef got reset for pv "{volume_name}"'
        if not claim.fully_bound:
            return False
    for namespace, name in plan.provisions:
        claim = storage.claims.get((namespace, name))
        if claim is None:
            return f'failed to check provisioning pvc: persistentvolumeclaim "{name}" not found'
        if _older(claim.resource_version, written.get(f"pvc/{namespace}/{name}")):
            return False
        if claim.selected_node != plan.node:
            return f'provisioning failed for PVC "{name}"'
        if claim.volume_name:
            volume = storage.volumes.get(claim.volume_name)
            if volume is None:
                return False
            if not volume.fits(labels):
                return (f'pv "{claim.volume_name}" node affinity doesn\'t match node "{plan.node}": '
                        "no matching NodeSelectorTerms")
        if not claim.fully_bound:
            return False
    return True


def claim_ref(claim: Claim) -> dict[str, Any]:
    """The claimRef that binds a volume to `claim` (GetBindVolumeToClaim)."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": claim.namespace, "name": claim.name,
            "uid": claim.uid, "resourceVersion": claim.resource_version}


@dataclass(frozen=True)
class Write:
    """One object PreBind changes: the path and merge patch for the API, and the key of `settled`'s `written`."""

    key: str
    path: str
    patch: Mapping[str, Any]


def writes(storage: Storage, plan: Plan) -> list[Write]:
    """What carrying out `plan` writes (bindAPIUpdate): each chosen volume's claimRef, then each claim to provision
    its selected node. Each patch names the resource version it was decided on, so the apiserver refuses it (409)
    if the object changed since. Objects gone meanwhile are left out: `settled` then reports them."""
    found = []
    for (namespace, name), volume_name in plan.bindings:
        volume, claim = storage.volumes.get(volume_name), storage.claims.get((namespace, name))
        if volume is None or claim is None or (volume.claim_ref is not None and volume.bound_to(claim)
                                                and volume.claim_ref[2]):
            continue
        annotations = {} if volume.bound_to(claim) else {BOUND_BY_CONTROLLER: "yes"}
        found.append(Write(f"pv/{volume_name}", f"/api/v1/persistentvolumes/{volume_name}",
                           {"metadata": {"resourceVersion": volume.resource_version, "annotations": annotations},
                            "spec": {"claimRef": claim_ref(claim)}}))
    for namespace, name in plan.provisions:
        claim = storage.claims.get((namespace, name))
        if claim is None or claim.selected_node == plan.node:
            continue
        found.append(Write(f"pvc/{namespace}/{name}",
                           f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}",
                           {"metadata": {"resourceVersion": claim.resource_version,
                                         "annotations": {SELECTED_NODE: plan.node}}}))
    return found
