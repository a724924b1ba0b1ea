"""What the core evaluates, and what it leaves to kube-scheduler behind the extender: volumes and DRA claims wait
until their objects are listed, then are judged by their plugins; behind kube-scheduler, which has evaluated them,
they hold no pod back; preferences never make a pod wait."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler_core import volumes
from scheduler_core.dra import state as dra_state
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


RESOURCE_CLAIMS = with_spec(resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu"}])
CLAIMS = with_spec(volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "data", "persistentVolumeClaim": {
    "claimName": "data"}}, {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {}}}])


def test_a_pod_with_resource_claims_waits_until_the_dra_objects_are_listed_then_for_its_claim():
    framework = scheduler(node("a"))
    assert "DRA objects" in (framework.decide(facts(RESOURCE_CLAIMS)).reason or "")
    for kind in dra_state.KINDS:
        framework.cluster.dra.clear(kind)
    assert framework.decide(facts(RESOURCE_CLAIMS)).reason == (
        '0/1 nodes are available: resourceclaim.resource.k8s.io "gpu" not found.')


def test_a_pod_with_claims_waits_until_the_storage_objects_are_listed_then_is_judged_by_the_volume_plugins():
    framework = scheduler(node("a"))
    assert "storage objects" in (framework.decide(facts(CLAIMS)).reason or "")
    for kind in volumes.KINDS:
        framework.cluster.storage.clear(kind)
    assert framework.decide(facts(CLAIMS)).reason == '0/1 nodes are available: persistentvolumeclaim "data" not found.'


@pytest.mark.parametrize("obj", [RESOURCE_CLAIMS, CLAIMS])
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
