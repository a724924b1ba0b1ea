"""The offline simulator: a cluster snapshot and pods in, placements out, with the same
webhook mutation and scheduling core the live components use.

Bound pods (spec.nodeName) are accounted first; then each pending pod, in input order,
goes through admission (when its namespace is opted in) and, if it is ours, through the
framework, whose decision is accounted before the next pod.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonpatch

from scheduler_core import cluster as cluster_model
from scheduler_core import framework, nodes, pods
from webhook import config, patches, rules

INJECT_LABEL = "gpu-scheduler.io/inject"


@dataclass(frozen=True)
class Placement:
    pod: str
    node: str | None
    gpus: tuple[int, ...]
    gpu_milli: int | None  # the share, for GPU-sharing pods
    rule: str | None
    reason: str | None
    ours: bool

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pod": self.pod, "node": self.node, "gpus": list(self.gpus),
                                "rule": self.rule, "reason": self.reason}
        if self.gpu_milli:
            data["gpu_milli"] = self.gpu_milli
        return data


@dataclass(frozen=True)
class ModelUsage:
    model: str
    nodes: int
    gpus: int
    used_milli: int


@dataclass(frozen=True)
class Result:
    placements: tuple[Placement, ...]
    models: tuple[ModelUsage, ...]
    used_milli: int
    total_milli: int

    @property
    def allocation_ratio(self) -> float:
        return self.used_milli / self.total_milli if self.total_milli else 0.0

    def as_json(self) -> dict[str, Any]:
        ours = [p for p in self.placements if p.ours]
        return {
            "placements": [p.as_json() for p in self.placements],
            "summary": {
                "pods": len(self.placements),
                "scheduled": sum(1 for p in self.placements if p.node is not None),
                "unschedulable": sum(1 for p in ours if p.node is None),
                "not_ours": sum(1 for p in self.placements if not p.ours),
                "gpu_allocation_ratio": round(self.allocation_ratio, 6),
                "gpu_models": {m.model: {"nodes": m.nodes, "gpus": m.gpus,
                                         "allocated": round(m.used_milli / 1000, 3)} for m in self.models},
            },
        }


def simulate(
    node_objects: Sequence[Mapping[str, Any]],
    pod_objects: Sequence[Mapping[str, Any]],
    settings: config.Config,
    *,
    now: datetime.datetime | None = None,
) -> Result:
    """Place `pod_objects` (Pods, and Namespaces for their labels) onto `node_objects`."""
    gpu_resources = settings.admission.gpu_resources
    model = cluster_model.Cluster(gpu_resources=gpu_resources)
    for node in node_objects:
        model.set_node(nodes.parse(node, gpu_resources=gpu_resources, now=now,
                                   utilization_max_age=settings.scheduling.utilization_max_age_seconds))
    scheduler = framework.Framework(model, settings.scheduling)
    namespaces: dict[str, dict[str, str]] = {
        str((obj.get("metadata") or {}).get("name")): dict((obj.get("metadata") or {}).get("labels") or {})
        for obj in pod_objects
        if obj.get("kind") == "Namespace"
    }
    pod_list = [obj for obj in pod_objects if obj.get("kind", "Pod") == "Pod"]

    def facts(pod: Mapping[str, Any]) -> pods.PodFacts:
        return pods.parse(pod, gpu_resources=gpu_resources, locality_labels=settings.scheduling.locality_labels)

    placements: dict[int, Placement] = {}
    for position, pod in enumerate(pod_list):
        if (pod.get("spec") or {}).get("nodeName"):
            bound = facts(pod)
            model.restore(bound)
            assignment = model.assignments.get(bound.key)
            devices = assignment.devices if assignment else ()
            placements[position] = _placement(bound, bound.node_name, devices, None,
                                              rules.annotations_of(pod).get(config.RULE_ANNOTATION), ours=True)
    for position, pod in enumerate(pod_list):
        if position in placements:
            continue
        admitted, rule = _admit(pod, namespaces, settings)
        pending = facts(admitted)
        if pending.scheduler_name != settings.scheduler_name:
            reason = f"left to {pending.scheduler_name} (not scheduled by {settings.scheduler_name})"
            placements[position] = _placement(pending, None, (), reason, rule, ours=False)
            continue
        decision = scheduler.place(pending)
        placements[position] = _placement(pending, decision.node, decision.devices, decision.reason, rule, ours=True)

    used, total = model.gpu_totals()
    return Result(tuple(placements[i] for i in range(len(pod_list))), _models(model), used, total)


def _admit(pod: Mapping[str, Any], namespaces: Mapping[str, Mapping[str, str]], settings: config.Config
           ) -> tuple[Mapping[str, Any], str | None]:
    """What the webhook would make of the pod, as the MutatingWebhookConfiguration selects it."""
    metadata = pod.get("metadata") or {}
    namespace_labels = namespaces.get(metadata.get("namespace") or "default", {})
    if namespace_labels.get(INJECT_LABEL) != "enabled" or rules.labels_of(pod).get(INJECT_LABEL) == "disabled":
        return pod, rules.annotations_of(pod).get(config.RULE_ANNOTATION)
    decision = patches.decide(pod, namespace_labels=namespace_labels, settings=settings)
    if not decision.patch:
        return pod, decision.rule
    return jsonpatch.apply_patch(pod, decision.patch), decision.rule


def _placement(pod: pods.PodFacts, node: str | None, devices: tuple[pods.Device, ...], reason: str | None,
               rule: str | None, *, ours: bool) -> Placement:
    return Placement(pod.key, node, tuple(d.index for d in devices), pod.gpu_milli or None, rule, reason, ours)


def _models(model: cluster_model.Cluster) -> tuple[ModelUsage, ...]:
    usage: dict[str, list[int]] = {}
    for name, row in model.index.items():
        facts = model.node(row)
        if facts.gpu_count:
            entry = usage.setdefault(facts.gpu_model or "unknown", [0, 0, 0])
            entry[0] += 1
            entry[1] += facts.gpu_count
            entry[2] += int(model.gpu_used[row])
    return tuple(ModelUsage(name, *values) for name, values in sorted(usage.items()))
