"""kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1) on the wire: its JSON shapes, typed, and
the parsing of each verb's arguments, where a malformed request is the caller's fault (RequestError names the field,
answered with HTTP 400). Go field names are the keys: the types have no JSON tags. Pure; the extender
(gpu_scheduler.runtime.extender) serves it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

MAX_PRIORITY = 10  # extender/v1 MaxExtenderPriority; kube-scheduler adds score * weight * 10


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
