"""The offline simulator: a cluster snapshot and pods in, placements out, with the same
webhook mutation and scheduling core the live components use.

Bound pods (spec.nodeName) are accounted first and reported as already bound, apart from
what this run places; then each pending pod, in input order, goes through admission and, if
it is ours, through the framework, whose decision is accounted before the next pod.
Admission is the caller's: `simulate` is handed `admit` (the CLI passes the webhook's), so the
core imports nothing of the webhook.

A pod group (scheduler_core.podgroups) is decided as `gpu-scheduler run` decides it: when its first
pending member's turn comes, all its pending members at once (scheduler_core.gangs), placed together
or not at all; the group's PodGroup object is among the input objects, or the members wait for it.
A Workload-API group of the `basic` policy is no gang: its members go one by one.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scheduler_core import cluster as cluster_model
from scheduler_core import fields, framework, gangs, nodes, podgroups, pods, profile, volumes
from scheduler_core.dra import allocator
from scheduler_core.dra import state as dra_state

# admit(pod, namespaces) -> (the pod as admitted, its rule, how admission treated it, a line per step).
# `namespaces` maps each namespace given in the input to its labels (a Namespaces: with the input's claims too).
Admit = Callable[[Mapping[str, Any], Mapping[str, Mapping[str, str]]],
                 tuple[Mapping[str, Any], str | None, tuple[str, ...]]]


class Namespaces(dict[str, dict[str, str]]):
    """The labels of each namespace of the input, by name, as `admit` is handed them, and `claims`: the input's
    ResourceClaims and ResourceClaimTemplates by (kind, namespace, name), for admission rules on DRA demand."""

    def __init__(self, labels: Mapping[str, dict[str, str]],
                 claims: Mapping[tuple[str, str, str], Mapping[str, Any]]):
        super().__init__(labels)
        self.claims = claims


class InputError(ValueError):
    """An input object the simulation cannot read (a storage object or a PodGroup with a malformed field)."""


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
    dra_devices: tuple[str, ...] = ()  # for a placed pod: the DRA devices its claims were allocated, driver/pool/device

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
        if self.dra_devices:
            data["dra_devices"] = list(self.dra_devices)
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
class GroupOutcome:
    """What became of a pod group: where its members went together (`scope`, `nodes`), or why none did."""

    ref: podgroups.GroupRef
    group: podgroups.PodGroup | None  # None: its PodGroup object is not in the input
    members: tuple[str, ...]  # its pending members, in input order
    placed: int  # of them, by this run
    already_bound: int  # members bound in the input, which count toward minMember
    scope: str | None = None  # a gang placed: "node a-1", "zone eu-1a", "cluster"; "pod by pod" for no gang
    nodes: tuple[str, ...] = ()
    reason: str | None = None  # a gang of which none was placed: why

    @property
    def note(self) -> str:
        """One line for the table: where the group went, or why not."""
        bound = f", {self.already_bound} already bound" if self.already_bound else ""
        if self.group is not None and not self.group.gang:
            return (f"{self.ref}: basic policy, placed pod by pod: {self.placed} of {len(self.members)} pending "
                    f"member(s) placed{bound}")
        if self.reason is not None or self.group is None:
            return f"{self.ref}: none placed: {self.reason}"
        return (f"{self.ref}: {self.placed} of {len(self.members)} pending member(s) placed together (minMember "
                f"{self.group.min_member}{bound}) in {self.scope}: {', '.join(self.nodes)}")

    def as_json(self) -> dict[str, Any]:
        return {"name": self.ref.key, "api": self.ref.api,
                "minMember": self.group.min_member if self.group else None,
                "gang": self.group.gang if self.group else None,
                "members": list(self.members), "placed": self.placed, "already_bound": self.already_bound,
                "scope": self.scope, "nodes": list(self.nodes), "reason": self.reason}


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
    groups: tuple[GroupOutcome, ...] = ()  # the pod groups with pending members, by their first member's turn

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
            "groups": [g.as_json() for g in self.groups],
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
    """Place `pod_objects` (Pods, Namespaces for their labels, PodGroups of podgroups.APIS for their groups) onto
    `node_objects`, as `scheduler_name`. `storage_objects` (kinds of volumes.KINDS, and DRA's ResourceSlices,
    DeviceClasses and ResourceClaims) are all the storage and devices there are: a claim not among them does not
    exist; so are the PodGroups: a group whose PodGroup is not among them waits."""
    model = cluster_model.Cluster(gpu_resources=gpu_resources)
    for kind in volumes.KINDS:
        model.storage.clear(kind)
    for kind in dra_state.KINDS:
        model.dra.clear(kind)
    templates: dict[tuple[str, str], Mapping[str, Any]] = {}
    for obj in storage_objects:
        try:
            if obj.get("kind") == TEMPLATE_KIND:
                meta = fields.mapping(obj.get("metadata"))
                templates[(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))] = obj
                continue
            if obj.get("kind") in dra_state.KINDS:
                model.dra.set(str(obj.get("kind")), obj)
                continue
            model.storage.set(str(obj.get("kind")), obj)
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"{obj.get('kind')} {_name_of(obj)}: cannot be read: {type(err).__name__}: {err}") from err
    declared = _podgroups([obj for obj in pod_objects if obj.get("kind") == "PodGroup"])
    for node in node_objects:
        model.set_node(nodes.parse(node, gpu_resources=gpu_resources, now=now,
                                   utilization_max_age=scheduling.utilization_max_age_seconds))
    scheduler = framework.Framework(model, scheduling)
    namespaces = Namespaces({
        str((obj.get("metadata") or {}).get("name")): dict((obj.get("metadata") or {}).get("labels") or {})
        for obj in pod_objects
        if obj.get("kind") == "Namespace"
    }, claims={(str(obj.get("kind")), str(fields.mapping(obj.get("metadata")).get("namespace") or "default"),
                str(fields.mapping(obj.get("metadata")).get("name") or "")): obj
               for obj in storage_objects if obj.get("kind") in (TEMPLATE_KIND, "ResourceClaim")})
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
    bound_members = {ref: len(uids) for ref, uids in model.group_pods.items()}
    # Admission first, for every pending pod: a rule may put a pod in a group, and a group is decided whole when
    # its first member's turn comes.
    pending: dict[int, _Admitted] = {}
    for position, pod in enumerate(pod_list):
        if position not in placements:
            admitted, rule, admission = admit(pod, namespaces)
            pending[position] = _Admitted(facts(_claims_made(admitted, templates, model)), rule, admission)
    for position, entry in pending.items():  # gated pods are not tried, alone or with their group, as in `run`
        gated = pods.gated_reason(entry.facts) if entry.facts.scheduler_name == scheduler_name else None
        if gated is not None:
            placements[position] = _placement(entry.facts, None, (), gated, entry.rule, outcome="unschedulable",
                                              admission=entry.admission)
    members: dict[podgroups.GroupRef, dict[int, _Admitted]] = {}
    for position, entry in pending.items():
        if entry.facts.group is not None and entry.facts.scheduler_name == scheduler_name and position not in placements:
            members.setdefault(entry.facts.group, {})[position] = entry
    outcomes: dict[podgroups.GroupRef, GroupOutcome] = {}
    for position, entry in pending.items():
        if position in placements:
            continue  # decided with its group
        pod_facts, rule, admission = entry.facts, entry.rule, entry.admission
        if pod_facts.scheduler_name != scheduler_name:
            reason = f"left to {pod_facts.scheduler_name} (not scheduled by {scheduler_name})"
            placements[position] = _placement(pod_facts, None, (), reason, rule, outcome="not-ours",
                                              admission=admission)
            continue
        ref = pod_facts.group
        group = _group_of(ref, model, declared=declared, members=members[ref].values()) if ref else None
        if ref is not None and (group is None or group.gang):
            outcomes[ref], decided = _place_gang(scheduler, ref, group=group, members=members[ref],
                                                 already_bound=bound_members.get(ref, 0))
            placements.update(decided)
            continue
        decision = scheduler.place(pod_facts)
        if decision.volume_plan:  # the next pods see the volumes taken, as the PV controller would bind them
            model.storage.assume(decision.volume_plan)
        placements[position] = _placement(pod_facts, decision.node, decision.devices, decision.reason, rule,
                                          outcome="placed" if decision.node else "unschedulable",
                                          admission=admission, volume_plan=decision.volume_plan,
                                          dra_devices=_dra_devices(decision, pod_facts))
    for ref, group_members in members.items():
        if ref not in outcomes:  # no gang (the basic policy): its members went one by one
            placed = [placements[p] for p in group_members if placements[p].outcome == "placed"]
            outcomes[ref] = GroupOutcome(ref, declared.get(ref), tuple(e.facts.key for e in group_members.values()),
                                         len(placed), bound_members.get(ref, 0), "pod by pod",
                                         tuple(sorted({p.node for p in placed if p.node})))

    used, total = model.gpu_totals()
    groups = tuple(sorted(outcomes.values(), key=lambda outcome: min(members[outcome.ref])))
    return Result(tuple(placements[i] for i in range(len(pod_list))), _models(model), used, total, used_before,
                  groups)


@dataclass(frozen=True)
class _Admitted:
    """A pending pod as admission left it."""

    facts: pods.PodFacts
    rule: str | None
    admission: tuple[str, ...]


def _name_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return "/".join(str(part) for part in (meta.get("namespace"), meta.get("name")) if part)


def _podgroups(objs: Sequence[Mapping[str, Any]]) -> dict[podgroups.GroupRef, podgroups.PodGroup]:
    """The input's PodGroups by group, read as the scheduler reads them; one it cannot read is refused."""
    found: dict[podgroups.GroupRef, podgroups.PodGroup] = {}
    for obj in objs:
        api = obj.get("apiVersion")
        if api not in podgroups.APIS:
            raise InputError(f"PodGroup {_name_of(obj)}: apiVersion {fields.shown(api)} is not one the scheduler "
                             f"reads PodGroups of ({', '.join(podgroups.APIS)})")
        metadata = fields.mapping(obj.get("metadata"))
        ref = podgroups.GroupRef(str(api), str(metadata.get("namespace") or "default"),
                                 str(metadata.get("name") or ""))
        try:
            group = podgroups.PodGroup.of(str(api), obj)
        except ValueError as err:
            raise InputError(f"PodGroup {ref}: cannot be read: {err}") from err
        if ref in found:
            raise InputError(f"PodGroup {ref}: given twice")
        found[ref] = group
    return found


def _group_of(ref: podgroups.GroupRef, model: cluster_model.Cluster, *,
              declared: Mapping[podgroups.GroupRef, podgroups.PodGroup],
              members: Iterable[_Admitted]) -> podgroups.PodGroup | None:
    """The group as its PodGroup declares it (None: not in the input), or, for a group a rule formed, as its
    members, pending and bound, say (as WatchedCluster.gang reads it)."""
    if ref.api != podgroups.RULE:
        return declared.get(ref)
    said = [entry.facts.group_min_member for entry in members]
    said += [model.assignments[uid].pod.group_min_member for uid in model.group_pods.get(ref, ())]
    return podgroups.formed(ref, [count for count in said if count])


def _place_gang(scheduler: framework.Framework, ref: podgroups.GroupRef, *, group: podgroups.PodGroup | None,
                members: Mapping[int, _Admitted], already_bound: int) -> tuple[GroupOutcome, dict[int, Placement]]:
    """Decide a gang's pending `members` (by input position) together, and account those placed in the model."""
    keys = tuple(entry.facts.key for entry in members.values())
    if group is None:
        reason = f"waiting for PodGroup {ref.key} ({ref.api}) to be created"  # as `run` says it
        return GroupOutcome(ref, None, keys, 0, already_bound, reason=reason), {
            position: _placement(entry.facts, None, (), reason, entry.rule, outcome="unschedulable",
                                 admission=entry.admission) for position, entry in members.items()}
    decision = gangs.place(scheduler, group, [entry.facts for entry in members.values()], placed=already_bound)
    position_of = {entry.facts.identity: position for position, entry in members.items()}
    model = scheduler.cluster
    placements: dict[int, Placement] = {}
    for member, chosen in decision.placements:  # accounted in the order the decision accounted them
        assert chosen.node is not None
        model.assign(dataclasses.replace(member, node_name=chosen.node, devices=chosen.devices), chosen.node,
                     chosen.devices)
        if chosen.volume_plan:
            model.storage.assume(chosen.volume_plan)
        entry = members[position_of[member.identity]]
        placements[position_of[member.identity]] = _placement(
            member, chosen.node, chosen.devices, None, entry.rule, outcome="placed", admission=entry.admission,
            volume_plan=chosen.volume_plan, dra_devices=_dra_devices(chosen, member))
    for member, reason in decision.unplaced:
        entry = members[position_of[member.identity]]
        placements[position_of[member.identity]] = _placement(member, None, (), reason, entry.rule,
                                                               outcome="unschedulable", admission=entry.admission)
    for position, entry in members.items():  # a member the decision left out waits with the group
        if position not in placements:
            placements[position] = _placement(entry.facts, None, (), decision.reason or "not placed with its group",
                                              entry.rule, outcome="unschedulable", admission=entry.admission)
    nodes_used = tuple(sorted({chosen.node for _, chosen in decision.placements if chosen.node}))
    return GroupOutcome(ref, group, keys, len(decision.placements), already_bound, decision.scope, nodes_used,
                        decision.reason), placements


def _rule_of(pod: Mapping[str, Any]) -> str | None:
    """The rule the webhook recorded on a pod bound before this run."""
    annotations = (pod.get("metadata") or {}).get("annotations")
    return annotations.get(profile.RULE_ANNOTATION) if isinstance(annotations, Mapping) else None


def _placement(pod: pods.PodFacts, node: str | None, devices: tuple[pods.Device, ...], reason: str | None,
               rule: str | None, *, outcome: Outcome, admission: tuple[str, ...] = (),
               volume_plan: volumes.Plan | None = None, dra_devices: tuple[str, ...] = ()) -> Placement:
    return Placement(pod.key, node, tuple(d.index for d in devices), pod.gpu_milli or None, rule, reason, outcome,
                     admission, volume_plan, dra_devices)


def _dra_devices(decision: framework.Decision, pod: pods.PodFacts) -> tuple[str, ...]:
    return tuple(allocator.device_text(device_id) for device_id in decision.dra_devices(pod))


TEMPLATE_KIND = "ResourceClaimTemplate"


def _claims_made(pod: Mapping[str, Any], templates: Mapping[tuple[str, str], Mapping[str, Any]],
                 model: cluster_model.Cluster) -> Mapping[str, Any]:
    """The pod once kube-controller-manager's resourceclaim controller has made a claim from each template it
    names (owned by the pod, named `<pod>-<entry>`; the controller adds a random suffix) and recorded it in the
    pod's status. A template not in the input makes no claim: the pod waits for it, as in a cluster."""
    spec, status = fields.mapping(pod.get("spec")), fields.mapping(pod.get("status"))
    meta = fields.mapping(pod.get("metadata"))
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    known = {str(fields.mapping(s).get("name")) for s in fields.sequence(status.get("resourceClaimStatuses"))}
    uid = str(meta.get("uid") or f"simulated-{namespace}-{name}")
    made = []
    for entry in map(fields.mapping, fields.sequence(spec.get("resourceClaims"))):
        template = templates.get((namespace, str(entry.get("resourceClaimTemplateName"))))
        if template is None or str(entry.get("name")) in known:
            continue
        claim_name = f"{name}-{entry.get('name')}"
        model.dra.set("ResourceClaim", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": namespace, "name": claim_name, "uid": f"simulated-{namespace}-{claim_name}",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid,
                                              "controller": True}]},
            "spec": fields.mapping(fields.mapping(template.get("spec")).get("spec"))})
        made.append({"name": entry.get("name"), "resourceClaimName": claim_name})
    if not made:
        return pod
    return {**pod, "metadata": {**meta, "uid": uid},
            "status": {**status, "resourceClaimStatuses": [*fields.sequence(status.get("resourceClaimStatuses")),
                                                            *made]}}


def _models(model: cluster_model.Cluster) -> tuple[ModelUsage, ...]:
    """GPU use by model: the device plugin's GPUs by the node's model label, NVIDIA's DRA GPUs by product name."""
    usage: dict[str, list[int]] = {}
    for name, row in model.index.items():
        facts = model.node(row)
        if facts.gpu_count:
            entry = usage.setdefault(facts.gpu_model or "unknown", [0, 0, 0])
            entry[0] += 1
            entry[1] += facts.gpu_count
            entry[2] += int(model.gpu_used[row])
    for _, _, products in model.dra_gpus():
        for product, (gpus, in_use) in products.items():
            entry = usage.setdefault(product, [0, 0, 0])
            entry[0] += 1
            entry[1] += gpus
            entry[2] += in_use * nodes.GPU_MILLI
    return tuple(ModelUsage(name, *values) for name, values in sorted(usage.items()))
