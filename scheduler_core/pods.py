"""Pods as the scheduler sees them: effective requests, GPU demand and placement constraints.

Parsed once per pod. Annotation values a user can get wrong (a share of 1500, memory as
"40Gi") do not raise: they become `problems`, and the pod is reported unschedulable with
that message instead of being placed on a guess. Nor does anything else the apiserver
accepts (a 250 KiB annotation, a request of 100P): the facts keep only bounded values, and
messages quote only the start of a long one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeGuard

from scheduler_core import fields, podaffinity, podgroups, predicates, quantity, requests, spread, volumes
from scheduler_core.dra import claims as dra_claims
from scheduler_core.dra import extended as dra_extended
from scheduler_core.nodes import GPU_MILLI, MAX_GPUS, MAX_IMAGE_NAME, MILLI, scheduled_milli

MODEL_ANNOTATION = "gpu.nvidia.com/model"
MEMORY_ANNOTATION = "gpu.nvidia.com/memory"
MILLI_ANNOTATION = "gpu-scheduler.io/gpu-milli"
DEVICES_ANNOTATION = "gpu-scheduler.io/gpu-devices"
# The pod status condition in which the binder records the devices it bound a pod with. Unlike the
# annotation, which anyone who may patch the pod can rewrite, it takes pods/status to write, and
# a create starts with an empty status: a tenant cannot forge it.
DEVICES_CONDITION = "gpu-scheduler.io/GPUDevices"
SPOT_ANNOTATION = "gpu-scheduler.io/spot"
SPOT_POLICIES = ("prefer", "avoid", "require", "forbid")
TERMINAL_PHASES = ("Succeeded", "Failed")  # such a pod holds no resources any more
MAX_MODEL = 256  # characters of gpu.nvidia.com/model: a few dozen model names
MAX_DEVICES_TEXT = 8192  # characters of the devices record: MAX_GPUS entries and MAX_DRA_DEVICES fit
MAX_DRA_DEVICES = 64  # DRA devices a record lists (two claims' worth of AllocationResultsMaxSize)
DRA_KEYS = ("driver", "pool", "device")  # a DRA device's entry in the devices record
MAX_PORT = 65535
PROTOCOLS = ("TCP", "UDP", "SCTP")
MAX_HOST_IP = 45  # characters of the longest IPv6 address
ANY_IP = "0.0.0.0"  # a host port on every address: what an empty hostIP means


@dataclass(frozen=True)
class Device:
    """A GPU of a node given (a share of) to a pod."""

    index: int
    milli: int  # 1000: the whole GPU


class HostPort(NamedTuple):
    """A port a pod holds on its node's network, as kube-scheduler's HostPortInfo keys it."""

    ip: str  # ANY_IP when the pod gives none
    protocol: str  # TCP when the pod gives none
    port: int  # 1..65535


@dataclass(frozen=True)
class PodFacts:
    key: str  # namespace/name
    uid: str
    scheduler_name: str
    node_name: str | None
    priority: int
    # what NodeResourcesFit counts, in milli-units (scheduled_milli), in its order of reasons: "pods": 1000 (the pod
    # itself), cpu, memory, ephemeral-storage, then the other resources by name; a request of 0 is left out
    requests: Mapping[str, int]
    gpus: int  # whole GPUs
    gpu_milli: int  # a share of one GPU in thousandths, 0 for none
    model: str | None  # as asked, for messages
    models: tuple[frozenset[str], ...]  # alternatives, each a set of tokens
    min_gpu_memory_mib: int | None
    tolerations: tuple[predicates.Toleration, ...]
    node_selector: Mapping[str, str]
    required_terms: tuple[predicates.Term, ...] | None  # None: no required node affinity
    preferred_terms: tuple[tuple[int, predicates.Term], ...]  # those that parse, with their weights
    # Why a preferred term does not parse (the API accepts an invalid label value there): kube-scheduler
    # then fails the pod's cycle at PreScore, which it reaches only with more than one feasible node.
    preferred_problem: str | None
    spot: str | None
    host_ports: tuple[HostPort, ...]  # of its containers and sidecars, in spec order
    app: str | None  # the application, for locality
    devices: tuple[Device, ...] | None  # restored from the record (or else the annotation) of an assigned pod
    devices_from: str | None  # where `devices` were read, for messages: the condition or the annotation
    devices_problem: str | None  # why the annotation could not be read, or how it differs from the record
    problems: tuple[str, ...]  # why the pod cannot be scheduled whatever the nodes
    images: tuple[tuple[str, int], ...]  # (image, how many containers or image volumes use it), for ImageLocality
    containers: int  # containers and init containers, which scale ImageLocality's score
    labels: Mapping[str, str] = field(default_factory=dict)
    pod_affinity: podaffinity.PodAffinity | None = None  # inter-pod affinity terms; None: it has none
    topology_spread: spread.TopologySpread | None = None  # topology spread constraints; None: it has none
    controller: spread.Controller | None = None  # its ReplicationController, ReplicaSet or StatefulSet, if any
    volumes: volumes.PodVolumes | None = None  # claims and disks the volume plugins read; None: none
    started: str | None = None  # status.startTime (RFC 3339), which orders preemption victims of equal priority
    never_preempts: bool = False  # spec.preemptionPolicy: Never
    nominated_node: str | None = None  # status.nominatedNodeName: where a preemption made room for it
    preempted: bool = False  # being deleted by a scheduler's preemption (DisruptionTarget, PreemptionByScheduler)
    terminating: bool = False  # metadata.deletionTimestamp is set: topology spread no longer counts it
    group: podgroups.GroupRef | None = None  # the pod group it is a member of (scheduler_core.podgroups)
    group_min_member: int | None = None  # of a group an admin's rule formed: the minMember the pod carries
    scheduling_gates: tuple[str, ...] = ()  # spec.schedulingGates' names: while any is left, the pod is not tried
    resource_claims: tuple[dra_claims.PodClaim, ...] = ()  # spec.resourceClaims, resolved through the pod's status
    # containers asking for extended resources, which a DeviceClass may serve through DRA (scheduler_core.dra.extended)
    extended_asks: tuple[dra_extended.ContainerAsk, ...] = ()

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or self.gpu_milli > 0

    @property
    def identity(self) -> str:
        """The UID, as kube-scheduler keys pods (a new pod of the same name is another pod); namespace/name
        for pods without one (simulation and trace inputs)."""
        return self.uid or self.key


def key_of(pod: Mapping[str, Any]) -> str:
    metadata = fields.mapping(pod.get("metadata"))
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or metadata.get('generateName') or ''}"


def app_of(labels: Mapping[str, str], locality_labels: tuple[str, ...]) -> str | None:
    """The application a pod belongs to, for the locality score: the first of `locality_labels` it sets."""
    return next((labels[k] for k in locality_labels if labels.get(k)), None)


def parse(
    pod: Mapping[str, Any],
    *,
    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",),
    locality_labels: tuple[str, ...] = ("app.kubernetes.io/part-of", "app"),
) -> PodFacts:
    metadata = fields.mapping(pod.get("metadata"))
    spec = fields.mapping(pod.get("spec"))
    status = fields.mapping(pod.get("status"))
    annotations = fields.mapping(metadata.get("annotations"))
    labels = fields.strings(metadata.get("labels"))
    problems: list[str] = []

    try:
        effective = requests.pod_requests(pod.get("spec") or {})  # a spec that is no object is a problem
    except quantity.QuantityError as err:
        problems.append(f"resources: {err}")
        effective = {}
    milli_requests = _scheduled(effective)
    gpus = sum(milli_requests.get(name, 0) for name in gpu_resources) // MILLI

    gpu_milli = _share(annotations.get(MILLI_ANNOTATION), problems)
    if gpus and gpu_milli:
        problems.append(f"asks for {gpus} whole GPU(s) and a share ({MILLI_ANNOTATION}); choose one")
    model, models = _models(annotations.get(MODEL_ANNOTATION), problems)
    key = key_of(pod)
    all_affinity = fields.mapping(spec.get("affinity"))
    pod_affinity, affinity_problem = podaffinity.parse(all_affinity, key.partition("/")[0])
    if affinity_problem:
        problems.append(affinity_problem)
    topology_spread, spread_problems = spread.parse(spec.get("topologySpreadConstraints"), labels)
    problems.extend(spread_problems)
    affinity = fields.mapping(all_affinity.get("nodeAffinity"))
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    preferred_terms, preferred_problem = _preferred(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
    node_name = spec.get("nodeName")
    devices, devices_from, devices_problem = _assigned_devices(pod)
    group, group_min_member, group_problem = podgroups.membership(pod)
    if group_problem:
        problems.append(group_problem)
    return PodFacts(
        key=key,
        uid=str(metadata.get("uid") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=node_name if isinstance(node_name, str) and node_name else None,
        priority=_priority(spec.get("priority"), problems),
        requests=milli_requests,
        gpus=gpus,
        gpu_milli=gpu_milli,
        model=model,
        models=models,
        min_gpu_memory_mib=_memory(annotations.get(MEMORY_ANNOTATION), problems),
        tolerations=predicates.parse_tolerations(spec.get("tolerations")),
        node_selector=_node_selector(spec.get("nodeSelector"), problems),
        # required terms that cannot be read match no node; present but empty, it matches none at all
        required_terms=(predicates.parse_terms(fields.mapping(required).get("nodeSelectorTerms"))
                        if required is not None else None),
        preferred_terms=preferred_terms,
        preferred_problem=preferred_problem,
        spot=_spot(annotations.get(SPOT_ANNOTATION), problems),
        host_ports=_host_ports(spec, problems),
        app=app_of(labels, locality_labels),
        devices=devices,
        devices_from=devices_from,
        devices_problem=devices_problem,
        problems=tuple(problems),
        images=images_of(spec),
        containers=len(fields.sequence(spec.get("containers"))) + len(fields.sequence(spec.get("initContainers"))),
        labels=labels,
        pod_affinity=pod_affinity,
        topology_spread=topology_spread,
        controller=spread.controller_of(metadata.get("ownerReferences")),
        terminating=metadata.get("deletionTimestamp") is not None,
        volumes=volumes.pod_volumes(spec, str(metadata.get("name") or "")),
        started=started_of(status),
        never_preempts=spec.get("preemptionPolicy") == "Never",
        nominated_node=str(status.get("nominatedNodeName") or "") or None,
        preempted=preempted_of(metadata, status),
        group=group,
        group_min_member=group_min_member,
        scheduling_gates=scheduling_gates_of(spec),
        resource_claims=dra_claims.pod_claims(spec, status),
        extended_asks=dra_extended.container_asks(spec) if any(map(dra_extended.is_extended_name, effective)) else (),
    )


def scheduling_gates_of(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of `spec.schedulingGates` (the apiserver requires each to be a qualified name; an entry without
    one still gates the pod, as kube-scheduler's SchedulingGates plugin counts entries, not names)."""
    return tuple(str(fields.mapping(gate).get("name") or "") for gate in fields.sequence(spec.get("schedulingGates")))


def gated_reason(pod: PodFacts) -> str | None:
    """Why a pod with scheduling gates is not tried, in the words of kube-scheduler's SchedulingGates PreEnqueue
    (`waiting for scheduling gates: [a b]`); None for a pod without."""
    gates = pod.scheduling_gates
    return f"waiting for scheduling gates: [{' '.join(gates)}]" if gates else None


PREEMPTED = "PreemptionByScheduler"  # the reason of the DisruptionTarget condition a preempting scheduler sets


def started_of(status: Mapping[str, Any]) -> str | None:
    """status.startTime (RFC 3339), or None."""
    value = status.get("startTime")
    return value if isinstance(value, str) and value else None


def preempted_of(metadata: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether a scheduler's preemption is deleting the pod: being deleted, with the DisruptionTarget condition
    of reason PreemptionByScheduler."""
    return metadata.get("deletionTimestamp") is not None and any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" and c.get("reason") == PREEMPTED
        for c in map(fields.mapping, fields.sequence(status.get("conditions"))))


def _scheduled(effective: requests.Requests) -> dict[str, int]:
    """The requests NodeResourcesFit counts, as PodFacts.requests holds them."""
    counted = {name: scheduled_milli(name, amount) for name, amount in effective.items()
               if amount > 0 and requests.counted(name)}
    ordered = {"pods": MILLI}
    ordered.update((name, counted[name]) for name in requests.BASE_COUNTED if name in counted)
    ordered.update((name, counted[name]) for name in sorted(counted) if name not in ordered)
    return ordered


def normalized_image(name: str) -> str:
    """The name a container runtime reports an image under: `:latest` when no tag is given (ImageLocality)."""
    return name if name.rfind(":") > name.rfind("/") else name + ":latest"


def images_of(spec: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The images of the init containers, containers and image volumes, each with how often the pod uses it;
    a name no node can list (see nodes.MAX_IMAGE_NAME) is left out."""
    found: dict[str, int] = {}
    references = [fields.mapping(c).get("image") for group in ("initContainers", "containers")
                  for c in fields.sequence(spec.get(group))]
    references += [fields.mapping(fields.mapping(v).get("image")).get("reference")
                   for v in fields.sequence(spec.get("volumes"))]
    for name in (normalized_image(r) for r in references if isinstance(r, str) and len(r) <= MAX_IMAGE_NAME):
        if len(name) <= MAX_IMAGE_NAME:
            found[name] = found.get(name, 0) + 1
    return tuple((sys.intern(name), uses) for name, uses in found.items())  # shared by the many pods of one image


def parse_devices(text: object) -> tuple[Device, ...] | None:
    """`[{"index": 0, "milli": 1000}, ...]`; None when absent or not of that shape. Entries of DRA devices
    (`{"driver", "pool", "device"}`, which the record lists too) are passed over: their claims hold them.

    At most MAX_GPUS entries with indices below it (and MAX_DRA_DEVICES more), in at most MAX_DEVICES_TEXT
    characters: nothing larger names GPUs of one node, and reading it stays cheap.
    """
    if not isinstance(text, str) or len(text) > MAX_DEVICES_TEXT:
        return None
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, list) or len(raw) > MAX_GPUS + MAX_DRA_DEVICES:
        return None
    devices = []
    others = 0
    for item in raw:
        if not isinstance(item, Mapping):
            return None
        if all(isinstance(item.get(key), str) for key in DRA_KEYS):
            others += 1  # a DRA device: its claim's allocation is the truth of it, not this record
            continue
        index, milli = item.get("index"), item.get("milli", GPU_MILLI)
        if not _integer(index) or not _integer(milli) or not 0 <= index < MAX_GPUS or not 0 < milli <= GPU_MILLI:
            return None
        devices.append(Device(index, milli))
    return tuple(devices) if len(devices) <= MAX_GPUS and others <= MAX_DRA_DEVICES else None


def recorded_devices(pod: Mapping[str, Any]) -> tuple[Device, ...] | None:
    """The devices the binder recorded in the pod's DEVICES_CONDITION; None when there is no such record."""
    for condition in fields.sequence(fields.mapping(pod.get("status")).get("conditions")):
        condition = fields.mapping(condition)
        if condition.get("type") == DEVICES_CONDITION and condition.get("status") == "True":
            return parse_devices(condition.get("message"))
    return None


def devices_condition(devices: tuple[Device, ...], dra: tuple[tuple[str, str, str], ...] = ()) -> dict[str, str]:
    """The status condition that records a binding's devices (see DEVICES_CONDITION): the device plugin's GPUs,
    then the DRA devices its claims were allocated, by driver, pool and device, so one record shows both kinds."""
    return {"type": DEVICES_CONDITION, "status": "True", "reason": "Bound",
            "message": format_devices(devices, dra)}


def _assigned_devices(pod: Mapping[str, Any]) -> tuple[tuple[Device, ...] | None, str | None, str | None]:
    """(devices, where they were read, a problem with the annotation): the binder's record wins; the
    annotation counts only for a pod without one (bound before records, or not by a scheduler of ours)."""
    value = fields.mapping(fields.mapping(pod.get("metadata")).get("annotations")).get(DEVICES_ANNOTATION)
    annotated = parse_devices(value)
    unreadable = None if annotated is not None or value is None else (
        f"annotation {DEVICES_ANNOTATION}: must be a JSON list of at most {MAX_GPUS} GPUs "
        f"like [{{\"index\": 0, \"milli\": 1000}}], got {fields.shown(value)}")
    recorded = recorded_devices(pod)
    if recorded is None:
        return annotated, (f"annotation {DEVICES_ANNOTATION}" if annotated is not None else None), unreadable
    edited = None if value is None or annotated == recorded else (
        f"annotation {DEVICES_ANNOTATION} {fields.shown(value)} differs from the devices recorded at binding "
        f"(condition {DEVICES_CONDITION})")
    return recorded, f"condition {DEVICES_CONDITION}", edited


def format_devices(devices: tuple[Device, ...], dra: tuple[tuple[str, str, str], ...] = ()) -> str:
    entries: list[dict[str, Any]] = [{"index": d.index, "milli": d.milli} for d in devices]
    entries += [dict(zip(DRA_KEYS, device_id)) for device_id in dra[:MAX_DRA_DEVICES]]
    return json.dumps(entries, separators=(",", ":"))


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is no number


def _share(value: object, problems: list[str]) -> int:
    if value is None:
        return 0
    milli = fields.natural(value)
    if milli is not None and 0 < milli < GPU_MILLI:
        return milli
    problems.append(f"annotation {MILLI_ANNOTATION}: must be an integer from 1 to 999 "
                    f"(thousandths of one GPU), got {fields.shown(value)}")
    return 0


def _memory(value: object, problems: list[str]) -> int | None:
    if value is None:
        return None
    mib = fields.natural(value)
    if mib:
        return mib
    problems.append(f"annotation {MEMORY_ANNOTATION}: must be a positive integer (MiB per GPU), "
                    f"got {fields.shown(value)}")
    return None


def _models(value: object, problems: list[str]) -> tuple[str | None, tuple[frozenset[str], ...]]:
    """The model as asked (for messages) and its alternatives; None and () when absent or unreadable."""
    if value in (None, ""):
        return None, ()
    if isinstance(value, str) and len(value) > MAX_MODEL:
        problems.append(f"annotation {MODEL_ANNOTATION}: must be at most {MAX_MODEL} characters, "
                        f"got {fields.shown(value)}")
        return None, ()
    alternatives = tuple(predicates.model_tokens(part) for part in value.split("|")) if isinstance(value, str) else ()
    if not alternatives or not all(alternatives):
        problems.append(f"annotation {MODEL_ANNOTATION}: must be model names separated by '|', "
                        f"like A100|H100, got {fields.shown(value)}")
        return None, ()
    return str(value), alternatives


def _priority(value: object, problems: list[str]) -> int:
    if value is None:
        return 0
    if _integer(value) and -(2**31) <= value < 2**31:
        return value
    problems.append(f"spec.priority: must be a 32-bit integer, got {fields.shown(value)}")
    return 0


def _node_selector(value: object, problems: list[str]) -> dict[str, str]:
    selector = fields.strings(value)
    if value is not None and selector != value:
        problems.append(f"spec.nodeSelector: must map label names to values, got {fields.shown(value)}")
    return selector


def _preferred(value: object) -> tuple[tuple[tuple[int, predicates.Term], ...], str | None]:
    """The preferred terms that parse, with their weights, and why the first that does not parse fails
    (see PodFacts.preferred_problem). An entry of the wrong shape, which no apiserver stores, is left out."""
    terms, problem = [], None
    for index, entry in enumerate(fields.sequence(value)):
        entry = fields.mapping(entry)
        weight, preference = entry.get("weight"), entry.get("preference")
        if not _integer(weight) or not 0 < weight <= 100 or not isinstance(preference, Mapping):
            continue
        term = predicates.parse_term(preference)
        if term.problem is None:
            terms.append((weight, term))
        elif problem is None:
            problem = (f"spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{index}]"
                       f".preference.{term.problem}")
    return tuple(terms), problem


def _host_ports(spec: Mapping[str, Any], problems: list[str]) -> tuple[HostPort, ...]:
    """As util.GetHostPorts: the ports with a hostPort of the containers and of the restartable init containers
    (sidecars; any other init container has ended before the pod runs)."""
    found = []
    for group in ("initContainers", "containers"):
        for index, container in enumerate(fields.sequence(spec.get(group))):
            container = fields.mapping(container)
            if group == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            for port_index, port in enumerate(fields.sequence(container.get("ports"))):
                held = _host_port(fields.mapping(port), f"spec.{group}[{index}].ports[{port_index}]", problems)
                if held is not None:
                    found.append(held)
    return tuple(found)


def _host_port(port: Mapping[str, Any], path: str, problems: list[str]) -> HostPort | None:
    """The host port `port` holds; None for none (hostPort absent or 0) or one that cannot be read."""
    number, protocol, ip = port.get("hostPort"), port.get("protocol") or "TCP", port.get("hostIP") or ANY_IP
    if number is None:
        return None
    if not _integer(number) or not 0 <= number <= MAX_PORT:
        problems.append(f"{path}.hostPort: must be an integer from 0 to {MAX_PORT}, got {fields.shown(number)}")
        return None
    if number == 0:
        return None
    if protocol not in PROTOCOLS:
        problems.append(f"{path}.protocol: must be one of {', '.join(PROTOCOLS)}, got {fields.shown(protocol)}")
        return None
    if not isinstance(ip, str) or len(ip) > MAX_HOST_IP:
        problems.append(f"{path}.hostIP: must be an IP address, got {fields.shown(ip)}")
        return None
    return HostPort(ip, protocol, number)


def _spot(value: object, problems: list[str]) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value in SPOT_POLICIES:
        return value
    problems.append(f"annotation {SPOT_ANNOTATION}: must be one of {', '.join(SPOT_POLICIES)}, "
                    f"got {fields.shown(value)}")
    return None
