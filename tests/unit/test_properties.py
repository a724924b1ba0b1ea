"""Random clusters and pod sequences: never an overcommitted resource or GPU, and the same answer twice."""

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core import profile
from tests.unit.builders import node, pod, simulate
from webhook import config

MODELS = ["NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4", None]


@st.composite
def clusters(draw):
    count = draw(st.integers(1, 8))
    nodes = []
    for i in range(count):
        nodes.append(node(
            f"n{i}",
            gpus=draw(st.sampled_from([0, 1, 2, 4, 8])),
            model=draw(st.sampled_from(MODELS)),
            cpu=str(draw(st.integers(1, 16))),
            memory=f"{draw(st.integers(1, 64))}Gi",
            max_pods=draw(st.integers(1, 10)),
            zone=draw(st.sampled_from(["a", "b"])),
            labels={"karpenter.sh/capacity-type": draw(st.sampled_from(["spot", "on-demand"]))},
            taints=draw(st.sampled_from([[], [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]])),
        ))
    return nodes


@st.composite
def workloads(draw):
    pods = []
    for i in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["whole", "share", "cpu"]))
        pods.append(pod(
            f"p{i}",
            gpus=draw(st.integers(1, 4)) if kind == "whole" else 0,
            milli=draw(st.integers(1, 999)) if kind == "share" else None,
            cpu=f"{draw(st.integers(100, 4000))}m",
            mem=f"{draw(st.integers(64, 8192))}Mi",
            model=draw(st.sampled_from([None, "A100", "H100|L4"])),
            spot=draw(st.sampled_from([None, "prefer", "avoid", "require", "forbid"])),
            labels={"app": draw(st.sampled_from(["x", "y", "z"]))},
            tolerations=draw(st.sampled_from([None, [{"key": "dedicated", "operator": "Exists"}]])),
        ))
    return pods


SETTINGS = [
    config.Config(),
    config.Config(scheduling=profile.Scheduling(node_policy="spread", gpu_policy="spread")),
]


@settings(max_examples=150, deadline=None)
@given(nodes=clusters(), pods=workloads(), which=st.sampled_from([0, 1]))
def test_no_resource_or_gpu_is_ever_overcommitted(nodes, pods, which):
    result = simulate(nodes, pods, SETTINGS[which])
    by_name = {n["metadata"]["name"]: n for n in nodes}
    specs = {f"ns/{p['metadata']['name']}": p for p in pods}
    cpu, memory, count = defaultdict(int), defaultdict(int), defaultdict(int)
    device_use = defaultdict(int)
    for placement in result.placements:
        if placement.node is None:
            continue
        spec = specs[placement.pod]
        resources = spec["spec"]["containers"][0]["resources"]
        cpu[placement.node] += int(resources["requests"]["cpu"][:-1])
        memory[placement.node] += int(resources["requests"]["memory"][:-2])
        count[placement.node] += 1
        gpus = int(resources["limits"].get("nvidia.com/gpu", 0))
        share = int(spec["metadata"]["annotations"].get("gpu-scheduler.io/gpu-milli", 0))
        assert len(placement.gpus) == (gpus if gpus else (1 if share else 0))
        for index in placement.gpus:
            device_use[(placement.node, index)] += share or 1000
    for name, used in cpu.items():
        allocatable = by_name[name]["status"]["allocatable"]
        assert used <= int(allocatable["cpu"]) * 1000
        assert memory[name] <= int(allocatable["memory"][:-2]) * 1024
        assert count[name] <= int(allocatable["pods"])
    for (name, index), used in device_use.items():
        assert index < int(by_name[name]["status"]["allocatable"].get("nvidia.com/gpu", 0))
        assert used <= 1000, f"GPU {index} of {name} overcommitted: {used}/1000"


@settings(max_examples=50, deadline=None)
@given(nodes=clusters(), pods=workloads())
def test_the_same_input_gives_the_same_placements(nodes, pods):
    first = simulate(nodes, pods, config.Config())
    second = simulate(list(reversed(nodes)), pods, config.Config())
    assert first.placements == second.placements
