"""One pod through admission as the apiserver would send it, for `gpu-scheduler simulate`.

The MutatingWebhookConfiguration sends a pod only from a namespace labelled
`gpu-scheduler.io/inject=enabled`, and never a pod labelled `gpu-scheduler.io/inject=disabled`;
a pod it sends gets `patches.decide`'s patch applied. The simulator (scheduler_core.simulation)
is handed `admit` and calls it for each pending pod, so the core needs nothing of the webhook.
The ResourceClaims and ResourceClaimTemplates of the input (`simulation.Namespaces.claims`) are
all there are: the webhook reads a pod's DRA demand from them as it reads the API's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonpatch

from scheduler_core import profile, simulation
from webhook import config, patches, rules

INJECT_LABEL = "gpu-scheduler.io/inject"


def admit(pod: Mapping[str, Any], namespaces: Mapping[str, Mapping[str, str]], *, settings: config.Config
          ) -> tuple[Mapping[str, Any], str | None, tuple[str, ...]]:
    """The pod as admitted, the rule it carries, and how admission treated it, a line per step.

    `namespaces` holds the labels of the namespaces known (a namespace missing is not opted in); a
    `simulation.Namespaces` also holds the input's claims and templates.
    """
    metadata = pod.get("metadata") or {}
    namespace = metadata.get("namespace") or "default"
    rule = rules.annotations_of(pod).get(profile.RULE_ANNOTATION)
    if namespace not in namespaces:
        return pod, rule, (f"not sent to the webhook: no Namespace {namespace} in the input, "
                           f"so it is not labelled {INJECT_LABEL}=enabled",)
    namespace_labels = namespaces[namespace]
    if namespace_labels.get(INJECT_LABEL) != "enabled":
        return pod, rule, (f"not sent to the webhook: namespace {namespace} is not labelled {INJECT_LABEL}=enabled",)
    if rules.labels_of(pod).get(INJECT_LABEL) == "disabled":
        return pod, rule, (f"not sent to the webhook: the pod is labelled {INJECT_LABEL}=disabled",)
    decision = patches.decide(pod, namespace_labels=namespace_labels, settings=settings,
                              claims=_input_claims(namespaces, namespace))
    admission = decision.explanation()
    if not decision.patch:
        return pod, decision.rule, admission
    return jsonpatch.apply_patch(pod, decision.patch), decision.rule, admission


def _input_claims(namespaces: Mapping[str, Mapping[str, str]], namespace: str) -> rules.ClaimLookup:
    """The input's claims and templates of `namespace`, as the webhook reads the API's: one not among them does
    not exist."""
    objects = namespaces.claims if isinstance(namespaces, simulation.Namespaces) else {}

    def lookup(kind: str, name: str) -> rules.DeviceRequests | str:
        found = objects.get((kind, namespace, name))
        return "not in the input" if found is None else rules.device_requests(kind, found)

    return lookup
