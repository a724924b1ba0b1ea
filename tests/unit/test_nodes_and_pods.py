"""Parsing Node and Pod objects into the facts the scheduler uses."""

import datetime

import pytest

from scheduler_core import nodes, pods
from scheduler_core.pods import Device
from tests.unit.builders import node, pod

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)


def test_gpu_node_facts():
    facts = nodes.parse(node("n1", labels={"karpenter.sh/capacity-type": "spot"}))
    assert facts.gpu_count == 8 and facts.gpu_model == "NVIDIA-A100-SXM4-40GB" and facts.gpu_memory_mib == 40960
    assert facts.allocatable["cpu"] == 64000 and facts.allocatable["pods"] == 110000
    assert facts.allocatable["memory"] == 512 * 2**30 * 1000
    assert facts.zone == "zone-a" and facts.capacity_type == "spot" and facts.ready


@pytest.mark.parametrize(
    ("labels", "capacity_type"),
    [
        ({"karpenter.sh/capacity-type": "on-demand"}, "on-demand"),
        ({"eks.amazonaws.com/capacityType": "SPOT"}, "spot"),
        ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, "on-demand"),
        ({"cloud.google.com/gke-spot": "true"}, "spot"),
        ({"kubernetes.azure.com/scalesetpriority": "spot"}, "spot"),
        ({}, None),
    ],
)
def test_capacity_type_labels(labels, capacity_type):
    assert nodes.parse(node("n", labels=labels)).capacity_type == capacity_type


def test_gpu_feature_discovery_labels_are_aliases_and_count_falls_back_to_labels():
    obj = node("n", gpus=0, model=None, memory_mib=None,
               labels={"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034",
                       "nvidia.com/gpu.count": "4"})
    facts = nodes.parse(obj)
    assert (facts.gpu_count, facts.gpu_model, facts.gpu_memory_mib) == (4, "NVIDIA-L4", 23034)


def test_gpu_memory_is_read_from_the_model_name_when_no_label_says():
    assert nodes.parse(node("n", model="NVIDIA-A100-SXM4-80GB", memory_mib=None)).gpu_memory_mib == 80 * 1024


@pytest.mark.parametrize(
    ("annotations", "utilization"),
    [
        ({"gpu-scheduler.io/gpu-utilization": "0.4"}, 0.4),
        ({"gpu-scheduler.io/gpu-utilization": "1.5"}, None),
        ({"gpu-scheduler.io/gpu-utilization": "busy"}, None),
        ({"gpu-scheduler.io/gpu-utilization": "0.4", "gpu-scheduler.io/gpu-utilization-updated": "2026-11-29T11:58:00Z"},
         0.4),
        ({"gpu-scheduler.io/gpu-utilization": "0.4", "gpu-scheduler.io/gpu-utilization-updated": "2026-11-29T10:00:00Z"},
         None),  # stale
        ({"gpu-scheduler.io/gpu-utilization": "0.4", "gpu-scheduler.io/gpu-utilization-updated": "yesterday"}, None),
    ],
)
def test_utilization_is_ignored_when_invalid_or_stale(annotations, utilization):
    assert nodes.parse(node("n", annotations=annotations), now=NOW).gpu_utilization == utilization


@pytest.mark.parametrize(("conditions", "ready"), [(True, True), (False, False), (None, True)])
def test_readiness(conditions, ready):
    assert nodes.parse(node("n", ready=conditions)).ready is ready


def test_pod_facts():
    facts = pods.parse(pod("p", gpus=2, cpu="500m", mem="1Gi", model="A100|H100", memory_mib=40960, spot="avoid",
                           labels={"app": "resnet"}))
    assert facts.key == "ns/p" and facts.gpus == 2 and facts.gpu_milli == 0
    assert facts.requests == {"nvidia.com/gpu": 2000, "cpu": 500, "memory": 2**30 * 1000, "pods": 1000}
    assert facts.models == (frozenset({"a100"}), frozenset({"h100"}))
    assert facts.min_gpu_memory_mib == 40960 and facts.spot == "avoid" and facts.app == "resnet"
    assert facts.problems == ()


def test_requests_are_what_kube_scheduler_counts_in_its_order_of_reasons():
    obj = pod("p", cpu="1500u", mem="1500m", extra={"example.com/b": "1", "example.com/a": "0", "foo": "3",
                                                    "ephemeral-storage": "1k", "hugepages-2Mi": "2Mi"})
    requests = pods.parse(obj).requests
    # cpu in millicores rounded up; every other resource in whole units rounded up (memory 1.5 bytes: 2),
    # then in thousandths; a request of 0 and a name kube-scheduler does not count are left out
    assert list(requests.items()) == [("pods", 1000), ("cpu", 2), ("memory", 2000), ("ephemeral-storage", 10**6),
                                      ("example.com/b", 1000), ("hugepages-2Mi", 2 * 2**20 * 1000)]


def test_node_amounts_round_as_kube_scheduler_counts_them():
    parsed = nodes.parse(node("n", gpus=0, cpu="1500u", memory="1500m", max_pods=0, extra={"pods": "1500m"}))
    assert parsed.allocatable == {"cpu": 2, "memory": 2000, "pods": 2000}


def test_node_images_are_every_name_with_its_size_bounded():
    images = [{"names": ["r/a:1", "r/a:latest"], "sizeBytes": 100}, {"names": ["r/b:1"], "sizeBytes": "big"},
              {"names": ["r/a:1", 5, "x" * 2000], "sizeBytes": 300}, {"sizeBytes": 4}, "junk"]
    obj = node("n")
    obj["status"]["images"] = images
    assert nodes.parse(obj).images == {"r/a:1": 300, "r/a:latest": 100, "r/b:1": 0}
    obj["status"]["images"] = [{"names": [f"r/{i}:{j}" for j in range(10)], "sizeBytes": i} for i in range(1000)]
    many = nodes.parse(obj).images
    assert len(many) == nodes.MAX_IMAGE_NAMES and many["r/0:0"] == 0
    other = node("m")
    other["status"]["images"] = [{"names": [f"r/{0}:{0}"]}]
    assert next(iter(nodes.parse(other).images)) is next(iter(many))  # one string for every node that lists it


def test_pod_images_are_those_of_containers_init_containers_and_image_volumes():
    obj = pod("p")
    obj["spec"]["initContainers"] = [{"name": "i", "image": "r/init"}]
    obj["spec"]["containers"] += [{"name": "b", "image": "x:latest"}, {"name": "c", "image": "x" * 2000}, {"name": "d"}]
    obj["spec"]["volumes"] = [{"name": "v", "image": {"reference": "r/model:v2"}}, {"name": "e", "emptyDir": {}}]
    facts = pods.parse(obj)
    assert facts.images == (("r/init:latest", 1), ("x:latest", 2), ("r/model:v2", 1))
    assert facts.containers == 5


def test_locality_prefers_part_of_over_app():
    assert pods.parse(pod("p", labels={"app": "x", "app.kubernetes.io/part-of": "y"})).app == "y"


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"milli": 1500}, 'annotation gpu-scheduler.io/gpu-milli: must be an integer from 1 to 999 (thousandths of '
                          'one GPU), got "1500"'),
        ({"milli": 0}, 'annotation gpu-scheduler.io/gpu-milli: must be an integer from 1 to 999 (thousandths of '
                       'one GPU), got "0"'),
        ({"annotations": {"gpu.nvidia.com/memory": "40Gi"}},
         'annotation gpu.nvidia.com/memory: must be a positive integer (MiB per GPU), got "40Gi"'),
        ({"model": "A100||H100"},
         "annotation gpu.nvidia.com/model: must be model names separated by '|', like A100|H100, got \"A100||H100\""),
        ({"annotations": {"gpu-scheduler.io/spot": "maybe"}},
         'annotation gpu-scheduler.io/spot: must be one of prefer, avoid, require, forbid, got "maybe"'),
        ({"gpus": 1, "milli": 500},
         "asks for 1 whole GPU(s) and a share (gpu-scheduler.io/gpu-milli); choose one"),
        ({"extra": {"cpu": "lots"}}, "resources: 'lots' is not a quantity (like 2, 500m, 40Gi)"),
    ],
)
def test_odd_annotation_values_become_problems(kwargs, problem):
    assert pods.parse(pod("p", **kwargs)).problems == (problem,)


@pytest.mark.parametrize(
    ("text", "devices"),
    [
        ('[{"index": 0, "milli": 1000}, {"index": 3, "milli": 1000}]', (Device(0, 1000), Device(3, 1000))),
        ('[{"index": 2, "milli": 250}]', (Device(2, 250),)),
        ('[{"index": 2}]', (Device(2, 1000),)),
        ('[{"index": -1}]', None),
        ('[{"index": 0, "milli": 1500}]', None),
        ('{"index": 0}', None),
        ("not json", None),
        (None, None),
    ],
)
def test_device_annotation(text, devices):
    assert pods.parse_devices(text) == devices
    if devices:
        assert pods.parse_devices(pods.format_devices(devices)) == devices
