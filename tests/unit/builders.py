"""Small builders for Node and Pod objects in scheduler tests."""

from __future__ import annotations

import copy
import functools
from typing import Any

from scheduler_core import cluster, framework, nodes, pods, profile, simulation
from webhook import admission, config


def node(name: str, *, gpus: int = 8, model: str | None = "NVIDIA-A100-SXM4-40GB", memory_mib: int | None = 40960,
         cpu: str = "64", memory: str = "512Gi", max_pods: int = 110, zone: str | None = "zone-a",
         labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
         taints: list[dict[str, str]] | None = None, unschedulable: bool = False, ready: bool | None = True,
         extra: dict[str, str] | None = None) -> dict[str, Any]:
    all_labels = {"kubernetes.io/hostname": name}
    if model:
        all_labels["gpu.nvidia.com/model"] = model
    if memory_mib:
        all_labels["gpu.nvidia.com/memory"] = str(memory_mib)
    if zone:
        all_labels["topology.kubernetes.io/zone"] = zone
    all_labels.update(labels or {})
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(max_pods), **(extra or {})}
    if gpus:
        allocatable["nvidia.com/gpu"] = str(gpus)
    status: dict[str, Any] = {"allocatable": allocatable, "capacity": allocatable}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": status,
    }


def pod(name: str, *, gpus: int = 0, milli: int | None = None, model: str | None = None,
        memory_mib: int | None = None, cpu: str | None = None, mem: str | None = None, namespace: str = "ns",
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
        node_name: str | None = None, tolerations: list[dict[str, str]] | None = None,
        node_selector: dict[str, str] | None = None, affinity: dict[str, Any] | None = None,
        spot: str | None = None, extra: dict[str, str] | None = None) -> dict[str, Any]:
    limits: dict[str, str] = dict(extra or {})
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if mem:
        requests["memory"] = mem
    all_annotations = dict(annotations or {})
    if milli is not None:
        all_annotations["gpu-scheduler.io/gpu-milli"] = str(milli)
    if model:
        all_annotations["gpu.nvidia.com/model"] = model
    if memory_mib:
        all_annotations["gpu.nvidia.com/memory"] = str(memory_mib)
    if spot:
        all_annotations["gpu-scheduler.io/spot"] = spot
    spec: dict[str, Any] = {
        "schedulerName": "gpu-scheduler",
        "containers": [{"name": "main", "image": "x", "resources": {"limits": limits, "requests": requests}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if tolerations:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = affinity
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": all_annotations},
        "spec": spec,
    }


def scheduler(*node_objects: dict[str, Any], scheduling: profile.Scheduling | None = None) -> framework.Framework:
    model = cluster.Cluster()
    for obj in node_objects:
        model.set_node(nodes.parse(obj))
    return framework.Framework(model, scheduling or profile.Scheduling())


def facts(obj: dict[str, Any]) -> pods.PodFacts:
    return pods.parse(obj)


def simulate(node_objects: list[dict[str, Any]], pod_objects: list[dict[str, Any]],
             settings: config.Config) -> simulation.Result:
    """The simulator with the webhook's admission, as `gpu-scheduler simulate` wires it."""
    return simulation.simulate(node_objects, pod_objects, scheduler_name=settings.scheduler_name,
                               gpu_resources=settings.admission.gpu_resources, scheduling=settings.scheduling,
                               admit=functools.partial(admission.admit, settings=settings))


def planted(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of `obj` with `value` at `path`, replacing whatever stood in the way."""
    result = copy.deepcopy(obj)
    here = result
    for part in path[:-1]:
        if not isinstance(here.get(part), dict):
            here[part] = {}
        here = here[part]
    here[path[-1]] = value
    return result
