"""Extended resources served by DRA (DRAExtendedResource, beta and on in v1.36), as kube-scheduler v1.36.3 has them
(pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go).

A DeviceClass may name an extended resource (`spec.extendedResourceName: nvidia.com/gpu`); every class also names
`deviceclass.resource.kubernetes.io/<class>` implicitly. A pod asking for such a resource is served by the device
plugin on a node whose allocatable has it, and by DRA on a node whose allocatable has none: the scheduler then
makes one claim for the pod (owned by it, annotated, named `<pod>-extended-resources-<random>`) with one request per
container and resource, allocates it with the pod's other claims, and records in the pod's status which request
serves which container, which the kubelet reads.

This module holds the pure parts: which class serves a resource name, the requests and mappings for a pod, and how
the scheduler's claim is recognised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core import fields, quantity, requests

ANNOTATION = "resource.kubernetes.io/extended-resource-claim"  # "true" on the claim the scheduler makes for a pod
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"  # + a class's name: the resource every class serves
IN_MEMORY_NAME = "<extended-resources>"  # the claim before it is written (no valid name, so it meets no real one)


def is_extended_name(resource: str) -> bool:
    """Whether a resource name may be served by a DeviceClass (IsDRAExtendedResourceName): an extended resource
    or an implicit class name."""
    return resource.startswith(IMPLICIT_PREFIX) or (
        "/" in resource and "kubernetes.io/" not in resource and requests.counted(resource))


@dataclass(frozen=True)
class ClassName:
    """What resolving needs of a DeviceClass: its name, creation time and explicit extended resource name."""

    name: str
    created: str  # metadata.creationTimestamp as written ("" when absent: oldest)
    extended_resource_name: str | None


def read_class(obj: Mapping[str, Any]) -> ClassName:
    meta, spec = fields.mapping(obj.get("metadata")), fields.mapping(obj.get("spec"))
    explicit = spec.get("extendedResourceName")
    created = meta.get("creationTimestamp")
    return ClassName(str(meta.get("name") or ""), created if isinstance(created, str) else "",
                     explicit if isinstance(explicit, str) and explicit else None)


def resolve(classes: Iterable[ClassName]) -> dict[str, str]:
    """Resource name -> the DeviceClass serving it. Of classes naming the same resource the newest wins, then the
    lower name (upstream's choice while migrating from one class to another); the implicit names are unique."""
    found: dict[str, ClassName] = {}
    mapping: dict[str, str] = {}
    for cls in classes:
        mapping[IMPLICIT_PREFIX + cls.name] = cls.name
        if cls.extended_resource_name is None:
            continue
        held = found.get(cls.extended_resource_name)
        if held is None or _newer(cls, held):
            found[cls.extended_resource_name] = cls
    mapping.update((resource, cls.name) for resource, cls in found.items())
    return mapping


def _newer(cls: ClassName, than: ClassName) -> bool:
    stamp, other = (fields.instant(c.created) if c.created else (0, 0) for c in (cls, than))
    return stamp > other or (stamp == other and cls.name < than.name)


@dataclass(frozen=True)
class ContainerAsk:
    """One container's asks for extended resources, as the requests and mappings are made from them."""

    index: int  # in initContainers + containers
    name: str
    short_lived: bool  # an init container that is no sidecar: it runs alone, before the others
    asks: Mapping[str, tuple[int, int]]  # resource -> (count, index of the name among the container's sorted requests)


def container_asks(spec: Mapping[str, Any]) -> tuple[ContainerAsk, ...]:
    """The containers of a pod spec that ask for extended resources (whole numbers only; others ask nothing)."""
    inits = fields.sequence(spec.get("initContainers"))
    found = []
    for index, container in enumerate(map(fields.mapping, [*inits, *fields.sequence(spec.get("containers"))])):
        try:
            wanted = requests.container_requests(container)
        except quantity.QuantityError:
            continue
        names = sorted(wanted)
        asks = {name: (int(amount), names.index(name)) for name, amount in wanted.items()
                if is_extended_name(name) and amount.denominator == 1 and amount > 0}
        if asks:
            short = index < len(inits) and container.get("restartPolicy") != "Always"
            found.append(ContainerAsk(index, str(container.get("name") or ""), short, asks))
    return tuple(found)


def requests_and_mappings(containers: Iterable[ContainerAsk], resources: Iterable[str],
                          class_of: Callable[[str], str | None]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The device requests of the pod's claim for the extended `resources` DRA serves on a node, and which request
    serves each container's ask (createRequestsAndMappings).

    A long-lived container (regular or sidecar) gets its own request, `container-<index>-request-<index of the
    resource among its sorted requests>`. A short-lived init container runs before them: it first reuses the
    requests of long-lived containers at or after its position, and asks for the rest; of all the init
    containers' own requests only the largest is kept, and every init container is mapped to it."""
    containers = tuple(containers)
    made: list[dict[str, Any]] = []
    mappings: list[dict[str, str]] = []
    for resource in sorted(resources):
        class_name = class_of(resource)
        if class_name is None:
            continue
        long_requests: dict[int, dict[str, Any]] = {}
        long_mappings: list[dict[str, str]] = []
        for container in containers:
            if not container.short_lived and resource in container.asks:
                request = _request(container, resource, class_name, container.asks[resource][0])
                long_requests[container.index] = request
                long_mappings.append(_mapping(container, resource, request["name"]))
        largest: dict[str, Any] | None = None
        short_names: set[str] = set()
        short_mappings: list[dict[str, str]] = []
        for container in containers:
            if not container.short_lived or resource not in container.asks:
                continue
            wanted, reused = container.asks[resource][0], 0
            for index in sorted(i for i in long_requests if i >= container.index):
                reused += long_requests[index]["exactly"]["count"]
                short_mappings.append(_mapping(container, resource, long_requests[index]["name"]))
                if reused >= wanted:
                    break
            if reused >= wanted:
                continue
            request = _request(container, resource, class_name, wanted - reused)
            short_mappings.append(_mapping(container, resource, request["name"]))
            short_names.add(request["name"])
            if largest is None or largest["exactly"]["count"] < request["exactly"]["count"]:
                largest = request
        if largest is not None:
            if len(short_names) > 1:
                for entry in short_mappings:
                    if entry["requestName"] in short_names:
                        entry["requestName"] = largest["name"]
            made.append(largest)
        made.extend(long_requests[index] for index in sorted(long_requests))
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)
    made.sort(key=lambda request: request["name"])
    return made, mappings


def _request(container: ContainerAsk, resource: str, class_name: str, count: int) -> dict[str, Any]:
    return {"name": f"container-{container.index}-request-{container.asks[resource][1]}",
            "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}}


def _mapping(container: ContainerAsk, resource: str, request_name: str) -> dict[str, str]:
    return {"containerName": container.name, "resourceName": resource, "requestName": request_name}


def owned_by(claim: Mapping[str, Any]) -> tuple[str, str] | None:
    """For the claim the scheduler made for a pod (annotated, the pod its controller): the pod's (name, uid)."""
    meta = fields.mapping(claim.get("metadata"))
    if fields.mapping(meta.get("annotations")).get(ANNOTATION) != "true":
        return None
    for owner in map(fields.mapping, fields.sequence(meta.get("ownerReferences"))):
        if owner.get("controller") is True:
            return str(owner.get("name") or ""), str(owner.get("uid") or "")
    return None


def pending_key(namespace: str, pod_uid: str) -> tuple[str, str]:
    """The key our allocation of a pod's claim is assumed under until the claim is written and watched (a name no
    claim can have)."""
    return namespace, f"{IN_MEMORY_NAME}{pod_uid}"


def claim_for(namespace: str, pod_name: str, pod_uid: str, requests_: list[dict[str, Any]]) -> dict[str, Any]:
    """The claim to create for a pod (the apiserver completes the name)."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {
            "namespace": namespace, "generateName": f"{pod_name}-extended-resources-",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid,
                                 "controller": True}],
            "annotations": {ANNOTATION: "true"},
        },
        "spec": {"devices": {"requests": requests_}},
    }
