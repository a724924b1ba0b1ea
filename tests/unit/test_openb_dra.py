"""`bench openb --dra`: the trace's GPUs as DRA devices (NVIDIA's driver's ResourceSlices, a DeviceClass serving
nvidia.com/gpu), whole-GPU pods placed through the claims the scheduler makes for their extended resource, and ours
against upstream's first-fit device order. Tiny traces written here; the real trace stays outside the repository."""

import dataclasses
import json

import numpy as np
import pytest

from scheduler_core import framework, openb, pods, profile, simulation
from scheduler_core.dra import allocator, extended, slices
from tests.unit.test_openb import bench_cli, node_row, pod_row, write_tiny_trace

NODES = [node_row("g2", gpus=8, cpu=96000, model="G2"), node_row("t4", gpus=2, cpu=104000, model="T4"),
         node_row("cpu", gpus=0, cpu=64000, model="")]
PODS = [pod_row("one"), pod_row("share", milli=500), pod_row("two", gpus=2), pod_row("cpu-only", gpus=0, milli=0),
        pod_row("t4-only", spec="T4"), pod_row("four", gpus=4, cpu=8000)]


def dra_trace(node_rows=NODES, pod_rows=PODS):
    return openb.load(node_rows, pod_rows, dra=True)


def core_for(trace, policy=openb.OURS):
    return framework.Framework(openb._model(trace, policy), profile.Scheduling(), rng=np.random.default_rng(1))


def results(allocation):
    return [(r["driver"], r["pool"], r["device"]) for r in allocation["devices"]["results"]]


# --- the objects --------------------------------------------------------------------------------------


def test_the_nodes_lose_nvidia_gpu_and_publish_their_gpus_in_a_slice_each():
    trace = dra_trace()
    assert trace.dra is not None
    by_name = {facts.name: facts for facts in trace.dra.node_facts}
    device_plugin = {facts.name: facts for facts in trace.node_facts}
    for name, facts in by_name.items():
        assert "nvidia.com/gpu" not in facts.allocatable and facts.gpu_count == 0
        assert facts.allocatable["cpu"] == device_plugin[name].allocatable["cpu"]
        assert facts.gpu_model == device_plugin[name].gpu_model  # the node keeps its model label
    kinds = [kind for kind, _ in trace.dra.objects]
    assert kinds == ["DeviceClass", "ResourceSlice", "ResourceSlice"]  # none for the node without GPUs
    g2, t4 = (slices.parse(obj) for kind, obj in trace.dra.objects if kind == "ResourceSlice")
    for parsed, node, count in ((g2, "g2", 8), (t4, "t4", 2)):
        assert parsed.problem is None
        assert (parsed.driver, parsed.pool, parsed.reach.node_name) == (openb.DRA_DRIVER, node, node)
        assert [d.name for d in parsed.devices] == [f"gpu-{i}" for i in range(count)]
    roots = [d.attributes["resource.kubernetes.io/pcieRoot"]["string"] for d in g2.devices]
    assert roots == ["pci0"] * 4 + ["pci1"] * 4
    assert {d.attributes["gpu.nvidia.com/productName"]["string"] for d in g2.devices} == {"G2"}
    assert g2.devices[0].memory == 0 and t4.devices[0].memory == 16 * 2**30  # memory only where the model's is known
    selector = allocator.compiled(openb.DRA_CLASS_SELECTOR)
    assert not isinstance(selector, Exception) and all(selector.matches(d) for d in g2.devices + t4.devices)
    assert trace.dra.devices == 10 and trace.capacity_milli == 10_000  # the same GPUs as the device plugin's


def test_the_class_serves_nvidia_gpu_and_shares_are_left_out():
    trace = dra_trace()
    model = openb._model(trace, openb.OURS)
    assert model.dra.ready and model.dra.serving("nvidia.com/gpu") == openb.DRA_CLASS
    assert trace.dra.shares_left_out == 1
    assert [pod.key for pod in trace.pod_facts] == ["openb/one", "openb/two", "openb/cpu-only", "openb/t4-only",
                                                    "openb/four"]
    assert openb.load(NODES, PODS).dra is None and len(openb.load(NODES, PODS).pod_facts) == len(PODS)


def test_the_simulator_takes_the_objects_as_kubectl_would_show_them():
    """The DRA trace's Node, Pod, ResourceSlice and DeviceClass objects, through `simulate`'s reading of inputs."""
    rows = [row for row in PODS if row["gpu_milli"] in ("1000", "0")]
    storage = [openb.device_class(), *(found for row in NODES if (found := openb.resource_slice(row)) is not None)]
    result = simulation.simulate([openb.node_object(row, dra=True) for row in NODES],
                                 [openb.pod_object(row) for row in rows], scheduler_name="gpu-scheduler",
                                 gpu_resources=("nvidia.com/gpu",), scheduling=profile.Scheduling(),
                                 admit=lambda pod, _: (pod, None, ()), storage_objects=storage)
    placed = {p.pod: p.node for p in result.placements}
    assert set(placed) == {"openb/one", "openb/two", "openb/cpu-only", "openb/t4-only", "openb/four"}
    assert placed["openb/t4-only"] == "t4" and placed["openb/four"] == "g2"  # model annotation; 4 GPUs
    assert None not in placed.values() and placed["openb/one"] != "cpu"


# --- placing through DRA ------------------------------------------------------------------------------


def test_whole_gpu_pods_are_placed_through_the_claim_for_their_extended_resource():
    trace = dra_trace()
    core = core_for(trace)
    one, two, _, t4_only, four = trace.pod_facts
    placed = core.place(t4_only)  # the pod's model annotation limits the DRA devices to the T4s
    assert placed.node == "t4" and placed.devices == () and placed.extended_claim is not None
    node_claim, allocation = placed.extended_claim
    assert node_claim.requests[0]["exactly"] == {"deviceClassName": openb.DRA_CLASS, "allocationMode": "ExactCount",
                                                 "count": 1}
    assert results(allocation)[0][:2] == (openb.DRA_DRIVER, "t4")
    assert core.cluster.dra.assumed[extended.pending_key("openb", t4_only.identity)] == allocation  # held
    taken = list(results(allocation))
    for pod, gpus in ((four, 4), (one, 1), (two, 2)):
        decision = core.place(pod)
        assert decision.node is not None and decision.extended_claim is not None, pod.key
        found = results(decision.extended_claim[1])
        assert len(found) == gpus and {pool for _, pool, _ in found} == {decision.node}
        taken += found
    assert len(set(taken)) == len(taken) == 8
    assert core.decide(dataclass_copy(four, "again")).node is None  # 2 of the 10 GPUs left


def dataclass_copy(pod: pods.PodFacts, suffix: str) -> pods.PodFacts:
    return dataclasses.replace(pod, key=f"{pod.key}-{suffix}")


def test_first_fit_takes_devices_in_slice_order_where_ours_keeps_pcie_roots_whole():
    """GPU 5 in use: ours takes GPU 4 (on the busier root), upstream's first fit GPU 0. Whole-GPU pods asking for
    nvidia.com/gpu have no constraint, so on the trace this changes no later pod's fit."""
    trace = dra_trace(NODES[:1], [pod_row("a")])
    core = core_for(trace)
    resources = core.cluster.dra
    resources.assume(("openb", "held"), {"devices": {"results": [
        {"request": "r", "driver": openb.DRA_DRIVER, "pool": "g2", "device": "gpu-5"}]}})
    pod = trace.pod_facts[0]
    ours = core.decide(pod)
    assert ours.extended_claim is not None and results(ours.extended_claim[1]) == [(openb.DRA_DRIVER, "g2", "gpu-4")]
    node = core.cluster.node(core.cluster.index["g2"])
    ((key, first_fit),) = openb.first_fit_claims(resources, pod, node)
    assert key == extended.pending_key("openb", pod.identity)
    assert results(first_fit) == [(openb.DRA_DRIVER, "g2", "gpu-0")]


def test_kube_like_draws_a_node_that_fits_and_takes_first_fit_devices():
    trace = dra_trace([node_row(f"n{i}", gpus=4, cpu=64000) for i in range(4)], [pod_row("p")])
    chosen = set()
    for seed in range(12):
        core = framework.Framework(openb._model(trace, openb.KUBE_LIKE), profile.Scheduling(),
                                   rng=np.random.default_rng(seed))
        assert openb._kube_like(core, trace.pod_facts[0])
        ((_, allocation),) = core.cluster.dra.assumed.items()
        ((_, pool, device),) = results(allocation)
        assert device == "gpu-0"  # first fit on an idle node
        assert core.cluster.assignments["openb/p"].node == core.cluster.index[pool]  # cpu accounted there too
        chosen.add(pool)
    assert len(chosen) > 1  # not always the first node by name: drawn


def test_no_device_is_given_twice_and_the_model_fills_exactly():
    """16 one-GPU pods and an 8-GPU pod on two 8-GPU nodes: every policy places 16 GPUs, each once."""
    trace = dra_trace([node_row(f"n{i}", gpus=8, cpu=96000) for i in range(2)],
                      [pod_row(f"p{i}") for i in range(16)] + [pod_row("big", gpus=8)])
    for policy in (openb.OURS, openb.OURS_FIRST_FIT, openb.KUBE_LIKE):
        core = core_for(trace, policy)
        place = openb._placer(core, policy)
        placed = [pod.key for pod in trace.pod_facts if place(pod)]
        taken = [device for allocation in core.cluster.dra.assumed.values() for device in results(allocation)]
        assert len(taken) == len(set(taken)) == 16, policy
        assert sum(trace.pod_facts[[p.key for p in trace.pod_facts].index(k)].gpus for k in placed) == 16


# --- the replay ---------------------------------------------------------------------------------------


def test_every_dra_policy_replays_and_ours_matches_the_device_plugin():
    trace = dra_trace([*NODES, node_row("g2b", gpus=8, cpu=32000, model="G2")],
                      [pod_row(f"p{i}", gpus=g, cpu=c) for i, (g, c) in
                       enumerate([(1, 8000), (2, 24000), (1, 2000), (4, 8000), (0, 30000), (1, 16000)])])
    found = {policy: openb.replay(trace, policy, 7) for policy in openb.DRA_DEFAULT}
    for policy, result in found.items():
        assert list(result.alloc_ratio) == list(openb.CHECKPOINTS), policy
        assert all(0.0 < value <= 100.0 for value in result.alloc_ratio.values()), policy
        assert result.pods == len(openb.arrival_order(trace, 7)) and 0 < result.placed <= result.pods
    # whole GPUs without constraints: our device order and first fit leave the same room, and DRA decides as the
    # device plugin does
    ours = found[openb.OURS]
    for policy in (openb.OURS_FIRST_FIT, openb.OURS_DEVICE_PLUGIN):
        assert (found[policy].alloc_ratio, found[policy].placed) == (ours.alloc_ratio, ours.placed), policy


def test_gangs_on_dra_hold_their_devices():
    trace = dra_trace([node_row(f"n{i}", gpus=8, cpu=16000) for i in range(2)], [pod_row(f"m{i}", gpus=2)
                                                                                  for i in range(12)])
    on_dra, on_device_plugin = (openb.replay(trace, policy, 2, jobs="gang")
                                for policy in (openb.OURS, openb.OURS_DEVICE_PLUGIN))
    assert on_dra.alloc_ratio == on_device_plugin.alloc_ratio
    assert on_dra.partial_job_gpus == 0 and on_dra.alloc_ratio[130] <= 100.0


@pytest.mark.parametrize(("trace_dra", "policy", "jobs", "message"), [
    (False, openb.KUBE_LIKE, None, "load it with dra=True"),
    (False, openb.OURS_FIRST_FIT, None, "load it with dra=True"),
    (True, openb.KUBE_LIKE, "gang", "places pods one by one"),
    (True, "tetris", None, "expected one of random, dotproduct, gpupacking, bestfit, fgd, ours, ours-first-fit"),
])
def test_policies_that_need_dra_or_no_jobs_say_so(trace_dra, policy, jobs, message):
    trace = openb.load(NODES, PODS, dra=trace_dra)
    with pytest.raises(ValueError, match=message):
        openb.replay(trace, policy, 1, jobs=jobs)


# --- the command --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory):
    return write_tiny_trace(tmp_path_factory.mktemp("openb-dra"))


def test_dra_json_has_the_contract_and_ours_against_first_fit(tiny_trace):
    args = ("--nodes", str(tiny_trace / "nodes.csv"), "--pods", str(tiny_trace / "pods.csv"), "--seeds", "42-43",
            "--dra", "--jobs", "2")
    result = bench_cli(*args, "--json")
    document = json.loads(result.stdout)
    assert list(document["policies"]) == list(openb.DRA_DEFAULT)
    for entry in document["policies"].values():
        assert list(entry["alloc_ratio"]) == ["100", "110", "120", "130"] and entry["seeds"] == [42, 43]
    dra = document["dra"]
    assert (dra["devices"], dra["shares_left_out"], dra["pods"]) == (20, 2, 5)
    assert set(dra["ours_against"]) == {openb.OURS_FIRST_FIT, openb.KUBE_LIKE, openb.OURS_DEVICE_PLUGIN}
    ours, kube_like = document["policies"]["ours"], document["policies"]["kube-like"]
    assert dra["ours_against"]["kube-like"]["100"] == round(ours["alloc_ratio"]["100"]
                                                            / kube_like["alloc_ratio"]["100"], 4)
    assert dra["unallocated_gpus"]["ours"]["100"] == round(20 * (100 - ours["alloc_ratio"]["100"]) / 100, 1)
    assert "kube-like" in result.stderr  # a progress bar per policy
    table = bench_cli(*args, "--policy", "ours", "--policy", "kube-like").stdout
    assert "2 GPU-share pods of the list's 7 are left out" in table
    assert "\nkube-like " in table and "\nours vs" in table


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "kube-like"], "--policy 'kube-like': only with --dra"),
    (["--dra", "--gangs"], "--gangs: not with --dra"),
    (["--dra", "--policy", "x"], "--policy 'x': expected one of random, dotproduct, gpupacking, bestfit, fgd, ours, "
                                 "ours-first-fit, kube-like, ours-device-plugin"),
])
def test_dra_arguments_say_what_is_wrong(tiny_trace, args, message):
    result = bench_cli("--nodes", str(tiny_trace / "nodes.csv"), "--pods", str(tiny_trace / "pods.csv"), *args, code=2)
    assert message in result.stderr
