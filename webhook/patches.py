"""The JSON Patch for one pod: what the admin's rules add, and nothing the pod already has.

The apiserver applies our patch to the exact object it sent; a patch that does not apply
rejects the pod even under failurePolicy Ignore. So paths are escaped per RFC 6901, maps
that are missing (or null) are added whole, and `add` is the only operation used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from scheduler_core import profile
from webhook import config, rules

DEFAULT_SCHEDULER = "default-scheduler"
_NONE = Fraction(0)


@dataclass(frozen=True)
class Decision:
    """The outcome for one pod: the patch (maybe empty), the rule, and why."""

    patch: list[dict[str, Any]] = field(default_factory=list)
    rule: str | None = None
    reason: str = ""
    gpus: Fraction | None = None
    namespace_unknown: bool = False  # namespace labels could not be read
    skipped: tuple[tuple[str, str], ...] = ()  # (rule, why it did not match) for the rules before the match
    notes: tuple[str, ...] = ()  # what the matched rule left unwritten, and why
    demand: tuple[str, ...] = ()  # how the pod's DRA demand was read, where not plainly: a line each
    claims_unknown: tuple[str, ...] = ()  # the pod's ResourceClaims (or templates) that could not be read, and why

    def explanation(self) -> tuple[str, ...]:
        """How the DRA demand was read (if not plainly), a line for each rule skipped before the match and why, then
        the outcome, then the notes."""
        return (*self.demand, *(f"rule {name!r} skipped: {why}" for name, why in self.skipped), self.reason,
                *self.notes)


def decide(
    pod: Mapping[str, Any],
    *,
    namespace_labels: Mapping[str, str] | None,
    settings: config.Config,
    claims: rules.ClaimLookup | None = None,
) -> Decision:
    """Decide how to mutate a pod being created. `namespace_labels` None: unknown. `claims` reads the pod's
    ResourceClaims and ResourceClaimTemplates (None: they cannot be read, so its DRA demand is unknown)."""
    admission = settings.admission
    whole = rules.gpu_demand(pod, admission.gpu_resources)
    dra = rules.NO_DEMAND
    if admission.reads_claims and (whole is not None or admission.device_classes) and rules.asks_dra(pod):
        dra = rules.dra_demand(pod, gpu_classes=admission.device_classes, lookup=claims,
                               counted=admission.gpu_resources)
    if whole is None and not dra.gpu:
        return Decision(reason="not a GPU pod")
    gpus = whole if whole is not None and dra is rules.NO_DEMAND else (whole or _NONE) + dra.gpus
    demand = dra.notes
    if whole is None and dra.gpus == 0:
        demand += (f"taken as a GPU pod: its unknown DRA demand may ask for devices of "
                   f"{', '.join(admission.device_classes)}",)
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return Decision(reason=f"already assigned to node {spec['nodeName']}", gpus=gpus, demand=demand)
    current = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if current not in (DEFAULT_SCHEDULER, settings.scheduler_name) and not admission.override_scheduler_name:
        return Decision(reason=f"pod names scheduler {current!r}", gpus=gpus, demand=demand)

    unknown = namespace_labels is None and admission.selects_namespaces
    labels = rules.labels_of(pod)
    rule, skipped = rules.first_match(
        admission.rules,
        pod_labels=labels,
        namespace_labels=namespace_labels,
        gpus=gpus,
        dra=dra,
    )
    unmatched = Decision(reason="no rule matched", gpus=gpus, namespace_unknown=unknown, skipped=skipped,
                         demand=demand, claims_unknown=dra.unknown)
    if rule is None:
        return unmatched

    patch: list[dict[str, Any]] = []
    if spec.get("schedulerName") != settings.scheduler_name:
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": settings.scheduler_name})

    existing = rules.annotations_of(pod)
    wanted = [(k, v) for k, v in rule.actions.annotation_items if k not in existing]
    notes: tuple[str, ...] = ()
    if rule.actions.pod_group is not None:
        group, why_not = rules.pod_group_annotations(rule.actions.pod_group, pod)
        wanted += [(k, v) for k, v in group if k not in existing]
        notes = (f"set.podGroup: no group annotations: {why_not}",) if why_not else ()
    cost = admission.initial_deletion_cost if rule.actions.deletion_cost is None else rule.actions.deletion_cost
    if profile.DELETION_COST_ANNOTATION not in existing:
        wanted += ((profile.DELETION_COST_ANNOTATION, str(cost)), (profile.INITIAL_COST_ANNOTATION, str(cost)))
    if existing.get(profile.RULE_ANNOTATION) != rule.name:
        wanted.append((profile.RULE_ANNOTATION, rule.name))
    patch += _add_to_map(pod, "annotations", wanted)

    patch += _add_to_map(pod, "labels", [(k, v) for k, v in rule.actions.labels if k not in labels])
    return dataclasses.replace(unmatched, patch=patch, rule=rule.name, reason=f"matched rule {rule.name!r}",
                               notes=notes)


def escape(key: str) -> str:
    """RFC 6901: `~` becomes `~0`, then `/` becomes `~1`."""
    return key.replace("~", "~0").replace("/", "~1")


def _add_to_map(pod: Mapping[str, Any], name: str, items: list[tuple[str, str]]) -> list[dict[str, Any]]:
    if not items:
        return []
    metadata = pod.get("metadata")
    if not isinstance(metadata, Mapping):
        return [{"op": "add", "path": "/metadata", "value": {name: dict(items)}}]
    if not isinstance(metadata.get(name), Mapping):
        return [{"op": "add", "path": f"/metadata/{name}", "value": dict(items)}]
    return [{"op": "add", "path": f"/metadata/{name}/{escape(key)}", "value": value} for key, value in items]
