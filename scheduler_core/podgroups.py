"""Pod groups as training operators declare them: which group a pod belongs to, and what the group asks.

Three APIs name a group, and each is read as its own scheduler reads it:

- scheduler-plugins coscheduling: the pod label `scheduling.x-k8s.io/pod-group` names a `PodGroup` of
  `scheduling.x-k8s.io/v1alpha1` (`spec.minMember`, `spec.minResources`, `spec.scheduleTimeoutSeconds`);
- Kubernetes' alpha Workload API (v1.36): `spec.schedulingGroup.podGroupName` names a `PodGroup` of
  `scheduling.k8s.io/v1alpha2`, a gang when `spec.schedulingPolicy.gang.minCount` is set (the `basic` policy
  groups pods without all-or-nothing);
- Volcano: the pod annotation `scheduling.k8s.io/group-name` names a `PodGroup` of `scheduling.volcano.sh/v1beta1`
  (`spec.minMember`, `spec.minResources`);
- an admin's rule (`set.podGroup`, for jobs whose operator emits none of these): the webhook writes the annotations
  `gpu-scheduler.io/pod-group` (the group's name, from a label of the pod) and `gpu-scheduler.io/pod-group-min-member`
  on each member, and no PodGroup object exists: the members carry the whole group (`formed`).

A pod naming more than one is read by the first of that list whose field it sets (the upstream field is validated
by the apiserver; a label outlives an annotation through most operators). Pure: objects in, values out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler_core import fields, names, quantity
from scheduler_core.nodes import scheduled_milli

COSCHEDULING = "scheduling.x-k8s.io/v1alpha1"
WORKLOAD = "scheduling.k8s.io/v1alpha2"
VOLCANO = "scheduling.volcano.sh/v1beta1"
RULE = "gpu-scheduler.io"  # a group an admin's rule formed: no PodGroup object, its members say it all
APIS = (WORKLOAD, COSCHEDULING, VOLCANO)  # the APIs of PodGroup objects, in the order a pod naming several is read
GROUP_ANNOTATION = "gpu-scheduler.io/pod-group"
MIN_MEMBER_ANNOTATION = "gpu-scheduler.io/pod-group-min-member"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
# How long a gang waits at Permit for the rest of its quorum: coscheduling's default permitWaitingTimeSeconds (60),
# and kube-scheduler's GangScheduling plugin (5 minutes) for the Workload API.
DEFAULT_TIMEOUT_SECONDS = {COSCHEDULING: 60, WORKLOAD: 300, VOLCANO: 60, RULE: 60}
MAX_MIN_MEMBER = 100_000  # no gang is larger; a bigger number is a typo, not a job
PODGROUP_SCHEDULED = "PodGroupScheduled"  # the Workload API's condition on its PodGroup


@dataclass(frozen=True, order=True)
class GroupRef:
    """A pod group: the API that declares it, its namespace and name."""

    api: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return f"{self.key} ({self.api})"


@dataclass(frozen=True)
class PodGroup:
    """What a group asks of the scheduler."""

    ref: GroupRef
    min_member: int  # members that must be placed together (1: no gang)
    gang: bool  # all-or-nothing; False for the Workload API's `basic` policy
    timeout_seconds: int  # how long placed members wait for the rest of the quorum
    min_resources: Mapping[str, int]  # milli-units, as PodFacts.requests: the group's whole need, checked up front
    topology_keys: tuple[str, ...] = ()  # Workload API: every member in one domain of each key
    uid: str = ""
    generation: int = 0
    scheduled: bool = False  # Workload API: its PodGroupScheduled condition is True
    phase: str | None = None  # coscheduling and Volcano: status.phase

    @classmethod
    def of(cls, api: str, obj: Mapping[str, Any]) -> PodGroup:
        """The group in a PodGroup object of `api`; raises ValueError naming the field, the value and what was
        expected when it cannot be read."""
        metadata = fields.mapping(obj.get("metadata"))
        spec = fields.mapping(obj.get("spec"))
        ref = GroupRef(api, str(metadata.get("namespace") or "default"), str(metadata.get("name") or ""))
        uid, generation = str(metadata.get("uid") or ""), _integer(metadata.get("generation"), 0)
        status = fields.mapping(obj.get("status"))
        if api == WORKLOAD:
            policy = fields.mapping(spec.get("schedulingPolicy"))
            gang = policy.get("gang")
            min_member = _count(fields.mapping(gang).get("minCount"), "spec.schedulingPolicy.gang.minCount") \
                if gang is not None else 1
            constraints = fields.mapping(spec.get("schedulingConstraints"))
            keys = tuple(str(fields.mapping(term).get("key") or "")
                         for term in fields.sequence(constraints.get("topology")))
            scheduled = any(fields.mapping(c).get("type") == PODGROUP_SCHEDULED and fields.mapping(c).get("status")
                            == "True" for c in fields.sequence(status.get("conditions")))
            return cls(ref, min_member, gang is not None, DEFAULT_TIMEOUT_SECONDS[api], {}, keys, uid, generation,
                       scheduled=scheduled)
        min_member = _count(spec.get("minMember", 1), "spec.minMember")
        phase = status.get("phase")
        return cls(ref, min_member, True, _timeout(api, spec.get("scheduleTimeoutSeconds")),
                   _resources(spec.get("minResources")), (), uid, generation,
                   phase=phase if isinstance(phase, str) and phase else None)


def formed(ref: GroupRef, min_members: Iterable[int]) -> PodGroup:
    """The group an admin's rule formed, from what its members say: the largest minMember any of them carries."""
    return PodGroup(ref, max(min_members, default=1), True, DEFAULT_TIMEOUT_SECONDS[RULE], {})


def membership(obj: Mapping[str, Any]) -> tuple[GroupRef | None, int | None, str | None]:
    """The group a pod names; for a group a rule formed, the minMember the pod carries; and why the pod's group
    cannot be read (then no group, and the pod waits with that reason)."""
    metadata = fields.mapping(obj.get("metadata"))
    spec = fields.mapping(obj.get("spec"))
    annotations = fields.strings(metadata.get("annotations"))
    namespace = str(metadata.get("namespace") or "default")
    found = (
        (WORKLOAD, fields.mapping(spec.get("schedulingGroup")).get("podGroupName"), "spec.schedulingGroup.podGroupName"),
        (COSCHEDULING, fields.strings(metadata.get("labels")).get(COSCHEDULING_LABEL),
         f"label {COSCHEDULING_LABEL}"),
        (VOLCANO, annotations.get(VOLCANO_ANNOTATION), f"annotation {VOLCANO_ANNOTATION}"),
        (RULE, annotations.get(GROUP_ANNOTATION), f"annotation {GROUP_ANNOTATION}"),
    )
    for api, name, where in found:
        if name is None or name == "":
            continue
        problem = names.dns_subdomain_problem(name) if isinstance(name, str) else "must be a string"
        if problem:
            return None, None, f"{where}: {fields.shown(name)} is not a PodGroup name: {problem}"
        if api != RULE:
            return GroupRef(api, namespace, name), None, None
        text = annotations.get(MIN_MEMBER_ANNOTATION)
        count = int(text) if text is not None and text.isascii() and text.isdigit() and len(text) <= 6 else None
        if count is None or not 1 <= count <= MAX_MIN_MEMBER:
            return None, None, (f"annotation {MIN_MEMBER_ANNOTATION}: {fields.shown(text)} is not a count from 1 to "
                                f"{MAX_MIN_MEMBER} (the minMember of the group {name} a rule formed)")
        return GroupRef(api, namespace, name), count, None
    return None, None, None


def _count(value: Any, where: str) -> int:
    if value is None:
        raise ValueError(f"{where}: is required (a count from 1 to {MAX_MIN_MEMBER})")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MIN_MEMBER:
        shown = fields.shown(value) if isinstance(value, str) else fields.cut(json.dumps(value, default=str))
        raise ValueError(f"{where}: {shown} is not a count from 1 to {MAX_MIN_MEMBER}")
    return value


def _timeout(api: str, value: Any) -> int:
    """Coscheduling's scheduleTimeoutSeconds: a value above 0 is taken, else its default (GetWaitTimeDuration)."""
    if api != COSCHEDULING or value is None:
        return DEFAULT_TIMEOUT_SECONDS[api]
    if isinstance(value, bool) or not isinstance(value, int):
        shown = fields.shown(value) if isinstance(value, str) else fields.cut(json.dumps(value, default=str))
        raise ValueError(f"spec.scheduleTimeoutSeconds: {shown} is not a whole number of seconds")
    return value if value > 0 else DEFAULT_TIMEOUT_SECONDS[api]


def _integer(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _resources(value: Any) -> dict[str, int]:
    resources = {}
    for name, amount in fields.mapping(value).items():
        try:
            resources[str(name)] = scheduled_milli(str(name), quantity.parse(amount))
        except quantity.QuantityError as err:
            raise ValueError(f"spec.minResources.{name}: {err}") from err
    return resources
