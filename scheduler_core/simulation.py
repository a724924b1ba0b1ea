"""The offline simulator: a cluster snapshot and pods in, placements out, with the same
webhook mutation and scheduling core the live components use.

Bound pods (spec.nodeName) are accounted first and reported as already bound, apart from
what this run places; then each pending pod, in input order, goes through admission and, if
it is ours, through the framework, whose decision is accounted before the next pod.
Admission is the caller's: `simulate` is handed `admit` (the CLI passes the webhook's), so the
core imports nothing of the webhook.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scheduler_core import cluster as cluster_model
from scheduler_core import framework, nodes, pods, profile, volumes

# admit(pod, namespaces) -> (the pod as admitted, its rule, how admission treated it, a line per step).
# `namespaces` maps each namespace given in the input to its labels.
Admit = Callable[[Mapping[str, Any], Mapping[str, Mapping[str, str]]],
                 tuple[Mapping[str, Any], str | None, tuple[str, ...]]]


class InputError(ValueError):
    """An input object the simulation cannot read (a storage object with a malformed field)."""


# What became of a pod: placed by this run, bound before it (spec.nodeName in the input),
# unschedulable here, or left to another scheduler.
Outcome = Literal["placed", "already-bound", "unschedulable", "not-ours"]


@dataclass(frozen=True)
class Placement:
    pod: str
    node: str | None
    gpus: tuple[int, ...]
    gpu_milli: int | None  # the share, for GPU-sharing pods
    rule: str | None
    reason: str | None
    outcome: Outcome
    admission: tuple[str, ...] = ()  # how the webhook treated the pod, a line per step (rules skipped, match)
    volumes: volumes.Plan | None = None  # for a placed pod: the claims bound to volumes, or provisioned, on its node

    @property
    def ours(self) -> bool:
        return self.outcome != "not-ours"

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"pod": self.pod, "node": self.node, "gpus": list(self.gpus),
                                "rule": self.rule, "reason": self.reason,
                                "already_bound": self.outcome == "already-bound"}
        if self.gpu_milli:
            data["gpu_milli"] = self.gpu_milli
        if self.volumes:
            data["volumes"] = {"bind": {name: volume for (_, name), volume in self.volumes.bindings},
                               "provision": [name for _, name in self.volumes.provisions]}
        return data

    @property
    def volume_note(self) -> str:
        """`claims: data -> pv-1; scratch provisioned here` for a placed pod with a volume plan."""
        if not self.volumes:
            return ""
        parts = [f"{name} -> {volume}" for (_, name), volume in self.volumes.bindings]
        parts += [f"{name} provisioned here" for _, name in self.volumes.provisions]
        return "claims: " + "; ".join(parts)


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
    used_milli_before: int  # by the pods already bound in the input

    @property
    def allocation_ratio(self) -> float:
        return self.used_milli / self.total_milli if self.total_milli else 0.0

    @property
    def allocation_ratio_before(self) -> float:
        return self.used_milli_before / self.total_milli if self.total_milli else 0.0

    def count(self, outcome: Outcome) -> int:
        return sum(1 for p in self.placements if p.outcome == outcome)

    def as_json(self) -> dict[str, Any]:
        return {
            "placements": [p.as_json() for p in self.placements],
            "summary": {
                "pods": len(self.placements),
                "scheduled": self.count("placed"),  # by this run
                "already_bound": self.count("already-bound"),
                "unschedulable": self.count("unschedulable"),
                "not_ours": self.count("not-ours"),
                "gpu_allocation_ratio": round(self.allocation_ratio, 6),
                "gpu_allocation_ratio_before": round(self.allocation_ratio_before, 6),
                "gpu_models": {m.model: {"nodes": m.nodes, "gpus": m.gpus,
                                         "allocated": round(m.used_milli / 1000, 3)} for m in self.models},
            },
        }


def simulate(
    node_objects: Sequence[Mapping[str, Any]],
    pod_objects: Sequence[Mapping[str, Any]],
    *,
    scheduler_name: str,
    gpu_resources: tuple[str, ...],
    scheduling: profile.Scheduling,
    admit: Admit,
    now: datetime.datetime | None = None,
    storage_objects: Sequence[Mapping[str, Any]] = (),
) -> Result:
    """Place `pod_objects` (Pods, and Namespaces for their labels) onto `node_objects`, as `scheduler_name`.
    `storage_objects` (kinds of volumes.KINDS) are all the storage there is: a claim not among them does not exist."""
    model = cluster_model.Cluster(gpu_resources=gpu_resources)
    for kind in volumes.KINDS:
        model.storage.clear(kind)
    for obj in storage_objects:
        try:
            model.storage.set(str(obj.get("kind")), obj)
        except (KeyError, TypeError, ValueError) as err:
            meta = obj.get("metadata") or {}
            name = "/".join(str(part) for part in (meta.get("namespace"), meta.get("name")) if part)
            raise InputError(f"{obj.get('kind')} {name}: cannot be read: {type(err).__name__}: {err}") from err
    for node in node_objects:
        model.set_node(nodes.parse(node, gpu_resources=gpu_resources, now=now,
                                   utilization_max_age=scheduling.utilization_max_age_seconds))
    scheduler = framework.Framework(model, scheduling)
    namespaces: dict[str, dict[str, str]] = {
        str((obj.get("metadata") or {}).get("name")): dict((obj.get("metadata") or {}).get("labels") or {})
        for obj in pod_objects
        if obj.get("kind") == "Namespace"
    }
    model.set_namespaces(namespaces)  # the input's namespaces are all there are, for pod affinity's namespaceSelector
    pod_list = [obj for obj in pod_objects if obj.get("kind", "Pod") == "Pod"]

    def facts(pod: Mapping[str, Any]) -> pods.PodFacts:
        return pods.parse(pod, gpu_resources=gpu_resources, locality_labels=scheduling.locality_labels)

    placements: dict[int, Placement] = {}
    for position, pod in enumerate(pod_list):
        if (pod.get("spec") or {}).get("nodeName"):
            bound = facts(pod)
            model.restore(bound)
            assignment = model.assignments.get(bound.identity)
            devices = assignment.devices if assignment else ()
            placements[position] = _placement(bound, bound.node_name, devices, None, _rule_of(pod),
                                              outcome="already-bound")
    used_before, _ = model.gpu_totals()
    for position, pod in enumerate(pod_list):
        if position in placements:
            continue
        admitted, rule, admission = admit(pod, namespaces)
        pending = facts(admitted)
        if pending.scheduler_name != scheduler_name:
            reason = f"left to {pending.scheduler_name} (not scheduled by {scheduler_name})"
            placements[position] = _placement(pending, None, (), reason, rule, outcome="not-ours",
                                              admission=admission)
            continue
        decision = scheduler.place(pending)
        if decision.volume_plan:  # the next pods see the volumes taken, as the PV controller would bind them
            model.storage.assume(decision.volume_plan)
        placements[position] = _placement(pending, decision.node, decision.devices, decision.reason, rule,
                                          outcome="placed" if decision.node else "unschedulable",
                                          admission=admission, volume_plan=decision.volume_plan)

    used, total = model.gpu_totals()
    return Result(tuple(placements[i] for i in range(len(pod_list))), _models(model), used, total, used_before)


def _rule_of(pod: Mapping[str, Any]) -> str | None:
    """The rule the webhook recorded on a pod bound before this run."""
    annotations = (pod.get("metadata") or {}).get("annotations")
    return annotations.get(profile.RULE_ANNOTATION) if isinstance(annotations, Mapping) else None


def _placement(pod: pods.PodFacts, node: str | None, devices: tuple[pods.Device, ...], reason: str | None,
               rule: str | None, *, outcome: Outcome, admission: tuple[str, ...] = (),
               volume_plan: volumes.Plan | None = None) -> Placement:
    return Placement(pod.key, node, tuple(d.index for d in devices), pod.gpu_milli or None, rule, reason, outcome,
                     admission, volume_plan)


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
