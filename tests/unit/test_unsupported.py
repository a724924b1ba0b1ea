"""Constraints the core cannot evaluate yet: the standalone scheduler leaves such a pod pending, naming the
field, rather than bind it where kube-scheduler would not; the extender, behind kube-scheduler, which has
evaluated them, is not held back by them."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core import pods, volumes
from tests.unit.builders import facts, node, pod, scheduler

TERM = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}


def with_spec(**spec: Any) -> dict[str, Any]:
    obj = pod("p", gpus=1)
    obj["spec"].update(spec)
    return obj


def sidecar(restart: str | None) -> dict[str, Any]:
    container = {"name": "init", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}]}
    if restart:
        container["restartPolicy"] = restart
    return with_spec(initContainers=[container])


UNSUPPORTED = [
    (with_spec(resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu"}]), ["spec.resourceClaims"]),
]
CLAIMS = with_spec(volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "data", "persistentVolumeClaim": {
    "claimName": "data"}}, {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {}}}])


@pytest.mark.parametrize(("obj", "paths"), UNSUPPORTED)
def test_the_standalone_scheduler_never_binds_a_pod_with_a_constraint_it_cannot_evaluate(obj, paths):
    decision = scheduler(node("a")).decide(facts(obj))
    assert decision.node is None
    assert decision.reason == pods.unsupported_reason(tuple(paths))
    for path in paths:
        assert path in decision.reason
    assert "manifests/overlays/extender" in decision.reason


def test_a_pod_with_claims_waits_until_the_storage_objects_are_listed_then_is_judged_by_the_volume_plugins():
    framework = scheduler(node("a"))
    assert "storage objects" in (framework.decide(facts(CLAIMS)).reason or "")
    for kind in volumes.KINDS:
        framework.cluster.storage.clear(kind)
    assert framework.decide(facts(CLAIMS)).reason == '0/1 nodes are available: persistentvolumeclaim "data" not found.'


@pytest.mark.parametrize("obj", [obj for obj, _ in UNSUPPORTED] + [CLAIMS])
def test_behind_kube_scheduler_those_constraints_were_evaluated_already(obj):
    feasible, failed, _ = scheduler(node("a")).evaluate(facts(obj), ["a"])
    assert feasible == ["a"] and failed == {}


@pytest.mark.parametrize("obj", [
    with_spec(affinity={"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": TERM}]}}),
    with_spec(topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]),
    with_spec(topologySpreadConstraints=[  # evaluated now (PodTopologySpread)
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]),
    sidecar(None),  # host ports are evaluated now (NodePorts), of sidecars too
    sidecar("Always"),
    with_spec(containers=[{"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 8080}]}]),
    with_spec(volumes=[{"name": "config", "configMap": {"name": "c"}}]),
])
def test_preferences_and_what_the_core_evaluates_do_not_hold_a_pod_back(obj):
    """kube-scheduler, too, may bind such a pod on any node its filters pass, whatever it scores."""
    assert scheduler(node("a")).decide(facts(obj)).node == "a"


def test_many_fields_are_named_up_to_five_then_counted():
    paths = tuple(f"spec.resourceClaims[{i}]" for i in range(7))
    reason = pods.unsupported_reason(paths)
    assert "spec.resourceClaims[4] and 2 more" in reason and "[5]" not in reason
