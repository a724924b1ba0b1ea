"""`gpu-scheduler simulate`: the bundled example, input formats, and the JSON contract of ARCHITECTURE.md."""

import json

import pytest
import yaml

from scheduler_core import objects, podgroups, simulation
from tests.commands import gpu_scheduler
from tests.unit.builders import node, pod, simulate
from webhook import config


def simulate_cli(*args, code=0):
    return gpu_scheduler("simulate", *args, code=code)


@pytest.fixture(scope="module")
def bundled():
    return json.loads(simulate_cli("--json").stdout)


def test_json_output_follows_the_contract(bundled):
    assert set(bundled) == {"placements", "summary", "groups"}  # `groups` an extra key: the example has none
    assert bundled["groups"] == []
    for placement in bundled["placements"]:
        assert {"pod", "node", "gpus", "rule", "reason"} <= set(placement)
        assert isinstance(placement["pod"], str) and "/" in placement["pod"]
        assert placement["node"] is None or isinstance(placement["node"], str)
        assert isinstance(placement["gpus"], list) and all(isinstance(g, int) for g in placement["gpus"])
        assert placement["rule"] is None or isinstance(placement["rule"], str)
        assert (placement["reason"] is None) == (placement["node"] is not None)
    summary = bundled["summary"]
    assert {"pods", "scheduled", "unschedulable", "gpu_allocation_ratio"} <= set(summary)
    assert summary["pods"] == len(bundled["placements"])
    assert summary["scheduled"] == sum(1 for p in bundled["placements"] if p["node"] and not p["already_bound"])
    assert 0.0 <= summary["gpu_allocation_ratio"] <= 1.0


def test_the_bundled_example_shows_every_rule_and_both_outcomes(bundled):
    placements = {p["pod"]: p for p in bundled["placements"]}
    rules = {p["rule"] for p in bundled["placements"]}
    assert {"a100-training", "inference", "notebooks", "any-gpu"} <= rules
    assert bundled["summary"]["unschedulable"] >= 1 and bundled["summary"]["scheduled"] >= 10
    giant = placements["research/giant-train-16gpu"]
    assert giant["node"] is None and giant["reason"].startswith("0/12 nodes are available: ")
    assert "GPU model mismatch (want A100)" in giant["reason"]
    assert placements["ml-serving/dcgm-diag-infra"]["node"] == "gpu-t4-infra-1"
    assert placements["legacy/old-trainer"]["reason"].startswith("left to default-scheduler")
    assert placements["research/volcano-worker-0"]["reason"].startswith("left to volcano")


def test_pods_bound_in_the_input_are_counted_apart_from_what_this_run_placed(bundled):
    summary = bundled["summary"]
    assert (summary["pods"], summary["scheduled"], summary["already_bound"]) == (25, 14, 5)
    assert summary["pods"] == sum(summary[k] for k in ("scheduled", "already_bound", "unschedulable", "not_ours"))
    placements = {p["pod"]: p for p in bundled["placements"]}
    # a CPU pod of default-scheduler, bound before: not something this run placed
    assert placements["research/mlflow-tracking"]["already_bound"] is True
    assert placements["research/resnet-train-2gpu"]["already_bound"] is False
    assert 0 < summary["gpu_allocation_ratio_before"] < summary["gpu_allocation_ratio"]


def test_the_bundled_example_table_is_readable():
    out = simulate_cli().stdout
    lines = out.splitlines()
    assert lines[0].split() == ["POD", "RULE", "NODE", "GPUS", "NOTE"]
    mlflow = next(line for line in lines if line.startswith("research/mlflow-tracking"))
    assert mlflow.split()[2:] == ["cpu-m6i-1", "-", "already", "bound", "(spec.nodeName", "in", "the", "input)"]
    assert ("25 pods: 14 placed by this run, 5 already bound, 2 unschedulable, 4 left to other schedulers; "
            "GPU allocation 62.5% of 50 GPUs (9.0% before this run)") in lines
    assert "NVIDIA-H100-80GB-HBM3" in out


def test_verbose_tells_how_admission_treated_each_pending_pod():
    err = simulate_cli("-v").stderr.splitlines()
    assert err[:3] == [
        "# research/resnet-train-2gpu: matched rule 'a100-training'",
        "# research/llm-finetune-4gpu: matched rule 'a100-training'",
        "# research/giant-train-16gpu: matched rule 'a100-training'",
    ]
    assert "# ml-serving/recsys-ranker-1: rule 'a100-training' skipped: minGPUs 2: the pod asks for 1 GPU" in err
    assert "# notebooks/jupyter-bob: rule 'a100-training' skipped: minGPUs 2: the pod asks for 0.25 GPUs" in err
    assert ("# legacy/old-trainer: not sent to the webhook: namespace legacy is not labelled "
            "gpu-scheduler.io/inject=enabled") in err
    assert "# research/debug-shell: not sent to the webhook: the pod is labelled gpu-scheduler.io/inject=disabled" in err
    assert not any(line.startswith("# research/bert-pretrain-0") for line in err)  # already bound: no admission
    assert simulate_cli().stderr == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pods", "examples/nodes.yaml"],
         "--pods examples/nodes.yaml: expected Pod or Namespace objects, found 12 Node "
         "(first unexpected: Node gpu-a100-40g-1)"),
        (["--nodes", "examples/pods.yaml"],
         "--nodes examples/pods.yaml: expected Node objects, found 25 Pod, 4 Namespace "
         "(first unexpected: Namespace research)"),
        (["--nodes", "examples/config.yaml"],
         "--nodes examples/config.yaml: document 1 is not a Kubernetes object (every object has kind and "
         "metadata); expected Node objects"),
    ],
)
def test_swapped_or_wrong_input_files_are_refused_naming_what_they_hold(args, message):
    assert f"gpu-scheduler: {message}\n" == simulate_cli(*args, code=2).stderr


def test_an_empty_file_is_refused(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    assert f"--nodes {empty}: holds no objects; expected Node objects" in simulate_cli("--nodes", str(empty),
                                                                                    code=2).stderr


def test_the_apis_own_list_leaves_kinds_out_of_its_items(tmp_path):
    nodes = [node("a", gpus=2), node("b", gpus=2)]
    for item in nodes:
        del item["kind"]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": nodes}))
    assert [o["kind"] for o in objects.parse(path.read_text(), origin=str(path), kinds=("Node",))] == ["Node", "Node"]


@pytest.mark.parametrize("form", ["list", "stream", "single", "json"])
def test_input_forms(tmp_path, form):
    nodes = [node("a", gpus=2), node("b", gpus=2)]
    path = tmp_path / "nodes"
    if form == "list":
        path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    elif form == "stream":
        path.write_text(yaml.safe_dump_all(nodes))
    elif form == "single":
        path.write_text(yaml.safe_dump(nodes[0]))
    else:
        path.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": nodes}))
    loaded = objects.parse(path.read_text(), origin=str(path))
    assert [o["metadata"]["name"] for o in loaded] == (["a"] if form == "single" else ["a", "b"])


@pytest.mark.parametrize(
    ("text", "message"),
    [("a: [", "not valid YAML or JSON"), ("- 1\n- 2\n", "document 1 is not an object"),
     ("kind: List\nitems: [1]\n", "document 1 is not a Kubernetes object (every object has kind and metadata)")],
)
def test_bad_input_files_say_what_is_wrong(tmp_path, text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    err = simulate_cli("--nodes", str(bad), code=2).stderr
    assert message in err and str(bad) in err


def test_missing_file(tmp_path):
    assert "no such file" in simulate_cli("--pods", str(tmp_path / "none.yaml"), code=2).stderr


def test_pods_in_opted_in_namespaces_are_mutated_then_scheduled():
    settings = config.parse({"admission": {"rules": [{"name": "all", "set": {"gpuModel": "H100"}}]}})
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "in", "labels": {
            "gpu-scheduler.io/inject": "enabled"}}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "out"}},
    ]
    mine = pod("mine", gpus=1, namespace="in")
    theirs = pod("theirs", gpus=1, namespace="out")
    for p in (mine, theirs):
        del p["spec"]["schedulerName"]
    result = simulate([node("a100"), node("h100", model="NVIDIA-H100-80GB-HBM3")],
                                 [*namespaces, mine, theirs], settings)
    placed = {p.pod: p for p in result.placements}
    assert (placed["in/mine"].node, placed["in/mine"].rule) == ("h100", "all")
    assert placed["out/theirs"].node is None and not placed["out/theirs"].ours


def test_bound_pods_are_placed_first_whatever_their_position():
    pending = pod("pending", gpus=2)
    bound = pod("bound", gpus=1, node_name="a")
    result = simulate([node("a", gpus=2)], [pending, bound], config.Config())
    placed = {p.pod: p for p in result.placements}
    assert placed["ns/bound"].node == "a" and placed["ns/pending"].node is None
    assert result.allocation_ratio == 0.5


def test_a_gated_pod_is_not_placed_and_says_which_gates_hold_it_alone_or_in_a_group():
    """As `gpu-scheduler run` (and kube-scheduler's SchedulingGates): the room stays for the pods after it; a gated
    member does not count toward its group's quorum."""
    held = pod("held", gpus=1)
    held["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    gated_member = member("a-2", gpus=1)
    gated_member["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    pods = [held, pod("after", gpus=1), podgroup(spec={"minMember": 3}), member("a-0", gpus=1),
            member("a-1", gpus=1), gated_member]
    result = simulate([node("a", gpus=8)], pods, config.Config())
    placed = outcomes(result)
    assert placed["ns/held"] == (None, "waiting for scheduling gates: [kueue.x-k8s.io/admission]")
    assert placed["ns/after"][0] == "a"
    assert placed["ns/a-2"] == (None, "waiting for scheduling gates: [example.com/quota]")
    assert placed["ns/a-0"] == (None, "gang ns/job-a: 2/3 members exist; waiting for 1 more")


# --- pod groups -------------------------------------------------------------------------------------


def podgroup(name="job-a", *, api=podgroups.COSCHEDULING, spec=None):
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": "ns"},
            "spec": {"minMember": 3} if spec is None else spec}


def member(name, *, group="job-a", gpus=8, api=podgroups.COSCHEDULING, **kwargs):
    obj = pod(name, gpus=gpus, **kwargs)
    if api == podgroups.WORKLOAD:
        obj["spec"]["schedulingGroup"] = {"podGroupName": group}
    else:
        obj["metadata"]["labels"][podgroups.COSCHEDULING_LABEL] = group
    return obj


def outcomes(result):
    return {p.pod: (p.node, p.reason) for p in result.placements}


def test_a_group_that_fits_lands_whole_at_its_first_members_turn():
    """A pod between two members does not take the room the second needs: the group went first, whole."""
    pods = [podgroup(spec={"minMember": 2}), member("a-0"), pod("single", gpus=8), member("a-1")]
    result = simulate([node("n0"), node("n1")], pods, config.Config())
    placed = outcomes(result)
    assert {placed["ns/a-0"][0], placed["ns/a-1"][0]} == {"n0", "n1"}
    assert placed["ns/single"] == (None, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    [group] = result.groups
    assert (group.ref.key, group.placed, group.scope, group.nodes, group.reason) == (
        "ns/job-a", 2, "cluster", ("n0", "n1"), None)
    assert group.note == ("ns/job-a (scheduling.x-k8s.io/v1alpha1): 2 of 2 pending member(s) placed together "
                          "(minMember 2) in cluster: n0, n1")


def test_a_group_that_does_not_fit_places_none_and_every_member_says_why():
    pods = [podgroup(spec={"minMember": 3}), *(member(f"a-{i}") for i in range(3)), pod("after", gpus=8)]
    result = simulate([node("n0"), node("n1")], pods, config.Config())
    reason = ("gang ns/job-a: 2/3 members fit; 1 x 8 GPUs short "
              "(0/2 nodes are available: 2 Insufficient nvidia.com/gpu)")
    placed = outcomes(result)
    assert [placed[f"ns/a-{i}"] for i in range(3)] == [(None, reason)] * 3
    assert placed["ns/after"][0] == "n0"  # the gang held nothing
    assert result.count("unschedulable") == 3 and result.count("placed") == 1
    assert result.as_json()["groups"] == [{
        "name": "ns/job-a", "api": podgroups.COSCHEDULING, "minMember": 3, "gang": True,
        "members": ["ns/a-0", "ns/a-1", "ns/a-2"], "placed": 0, "already_bound": 0, "scope": None, "nodes": [],
        "reason": reason}]


@pytest.mark.parametrize(
    ("pods", "reason"),
    [
        ([member("a-0"), member("a-1")],
         "waiting for PodGroup ns/job-a (scheduling.x-k8s.io/v1alpha1) to be created"),
        ([podgroup(spec={"minMember": 4}), member("a-0"), member("a-1")],
         "gang ns/job-a: 2/4 members exist; waiting for 2 more"),
        ([pod("r-0", gpus=8, annotations={podgroups.GROUP_ANNOTATION: "job-r", podgroups.MIN_MEMBER_ANNOTATION: "3"})],
         "gang ns/job-r: 1/3 members exist; waiting for 2 more"),
    ],
    ids=["no-podgroup", "fewer-than-min-member", "rule-formed-group"],
)
def test_a_group_that_cannot_be_decided_yet_leaves_its_members_waiting(pods, reason):
    result = simulate([node("n0"), node("n1"), node("n2")], pods, config.Config())
    assert {reason_ for _, reason_ in outcomes(result).values()} == {reason}
    assert [(g.placed, g.reason) for g in result.groups] == [(0, reason)]


def test_a_group_a_rule_formed_is_placed_whole_when_its_members_are_there():
    annotations = {podgroups.GROUP_ANNOTATION: "job-r", podgroups.MIN_MEMBER_ANNOTATION: "2"}
    pods = [pod(f"r-{i}", gpus=4, annotations=dict(annotations)) for i in range(2)]
    result = simulate([node("n0")], pods, config.Config())
    assert {n for n, _ in outcomes(result).values()} == {"n0"}
    assert (result.groups[0].ref.api, result.groups[0].scope) == (podgroups.RULE, "node n0")


def test_members_bound_in_the_input_count_toward_min_member():
    pods = [podgroup(spec={"minMember": 3}), member("a-0", node_name="n0"), member("a-1"), member("a-2")]
    result = simulate([node("n0"), node("n1"), node("n2")], pods, config.Config())
    assert sorted(n for n, _ in outcomes(result).values()) == ["n0", "n1", "n2"]
    [group] = result.groups
    assert (group.members, group.placed, group.already_bound) == (("ns/a-1", "ns/a-2"), 2, 1)
    assert group.note.endswith("placed together (minMember 3, 1 already bound) in cluster: n1, n2")


def test_a_workload_api_group_of_the_basic_policy_is_placed_pod_by_pod():
    basic = podgroup(api=podgroups.WORKLOAD, spec={"schedulingPolicy": {"basic": {}}})
    pods = [basic, *(member(f"w-{i}", api=podgroups.WORKLOAD) for i in range(3))]
    result = simulate([node("n0"), node("n1")], pods, config.Config())
    placed = outcomes(result)
    assert [placed[f"ns/w-{i}"][0] for i in range(3)] == ["n0", "n1", None]
    assert placed["ns/w-2"][1] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    [group] = result.groups
    assert (group.placed, group.scope, group.reason) == (2, "pod by pod", None)
    assert group.note == ("ns/job-a (scheduling.k8s.io/v1alpha2): basic policy, placed pod by pod: 2 of 3 pending "
                          "member(s) placed")


def test_a_workload_api_gang_is_placed_whole():
    gang = podgroup(api=podgroups.WORKLOAD, spec={"schedulingPolicy": {"gang": {"minCount": 3}}})
    pods = [gang, *(member(f"w-{i}", api=podgroups.WORKLOAD) for i in range(3))]
    result = simulate([node("n0"), node("n1")], pods, config.Config())
    assert {n for n, _ in outcomes(result).values()} == {None}
    assert result.groups[0].reason.startswith("gang ns/job-a: 2/3 members fit; 1 x 8 GPUs short")


@pytest.mark.parametrize(
    ("podgroup_object", "message"),
    [
        (podgroup(spec={"minMember": 0}),
         "PodGroup ns/job-a (scheduling.x-k8s.io/v1alpha1): cannot be read: spec.minMember: 0 is not a count from "
         "1 to 100000"),
        (podgroup(api=podgroups.WORKLOAD, spec={"schedulingPolicy": {"gang": {}}}),
         "PodGroup ns/job-a (scheduling.k8s.io/v1alpha2): cannot be read: spec.schedulingPolicy.gang.minCount: is "
         "required (a count from 1 to 100000)"),
        (podgroup(api="scheduling.sigs.k8s.io/v1alpha1"),
         'PodGroup ns/job-a: apiVersion "scheduling.sigs.k8s.io/v1alpha1" is not one the scheduler reads PodGroups '
         "of (scheduling.k8s.io/v1alpha2, scheduling.x-k8s.io/v1alpha1, scheduling.volcano.sh/v1beta1)"),
    ],
)
def test_a_podgroup_that_cannot_be_read_is_refused_naming_it(tmp_path, podgroup_object, message):
    nodes, pods = tmp_path / "nodes.yaml", tmp_path / "pods.yaml"
    nodes.write_text(yaml.safe_dump(node("n0")))
    pods.write_text(yaml.safe_dump_all([podgroup_object, member("a-0")]))
    err = simulate_cli("--nodes", str(nodes), "--pods", str(pods), code=2).stderr
    assert err == f"gpu-scheduler: {nodes}, {pods}: {message}\n"


def test_a_podgroup_given_twice_is_refused():
    with pytest.raises(simulation.InputError, match=r"^PodGroup ns/job-a \(scheduling.x-k8s.io/v1alpha1\): given "
                                                    r"twice$"):
        simulate([node("n0")], [podgroup(), podgroup(), member("a-0")], config.Config())


def test_the_table_says_where_each_group_went_or_why_not(tmp_path):
    nodes, pods = tmp_path / "nodes.yaml", tmp_path / "pods.yaml"
    nodes.write_text(yaml.safe_dump_all([node("n0"), node("n1")]))
    pods.write_text(yaml.safe_dump_all([podgroup(spec={"minMember": 2}), member("a-0"), member("a-1"),
                                        podgroup("job-b", spec={"minMember": 2}), member("b-0", group="job-b"),
                                        member("b-1", group="job-b")]))
    out = simulate_cli("--nodes", str(nodes), "--pods", str(pods)).stdout.splitlines()
    reason = ("gang ns/job-b: 0/2 members fit; 2 x 8 GPUs short "
              "(0/2 nodes are available: 2 Insufficient nvidia.com/gpu)")
    assert out[-3:] == [
        "2 pod group(s):",
        "  ns/job-a (scheduling.x-k8s.io/v1alpha1): 2 of 2 pending member(s) placed together (minMember 2) in "
        "cluster: n0, n1",
        f"  ns/job-b (scheduling.x-k8s.io/v1alpha1): none placed: {reason}",
    ]
    assert next(line for line in out if line.startswith("ns/b-1")).endswith(reason)


def test_simulate_places_dra_pods_from_templates_and_extended_resources_and_counts_dra_gpus():
    """Offline, as in a cluster: a claim made from each template a pod names, nvidia.com/gpu served by a
    DeviceClass on a DRA-only node, the devices in the placement, and DRA GPUs in the allocation figures."""
    from tests.unit.test_dra import gpu_slice
    from tests.unit.test_dra_extended import gpu_class

    dra_node = node("dra", gpus=0)
    slices = [{"kind": "ResourceSlice", **gpu_slice("dra", count=4)}, {"kind": "DeviceClass", **gpu_class()}]
    template = {"kind": "ResourceClaimTemplate", "metadata": {"namespace": "ns", "name": "two"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "count": 2}}]}}}}
    with_template = pod("claims")
    with_template["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two"}]
    plain = pod("plain", gpus=1)
    missing = pod("missing")
    missing["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "absent"}]
    settings = config.Config()
    for obj in (with_template, plain, missing):
        obj["spec"]["schedulerName"] = settings.scheduler_name
    result = simulation.simulate([dra_node], [with_template, plain, missing], scheduler_name=settings.scheduler_name,
                                 gpu_resources=("nvidia.com/gpu",), scheduling=settings.scheduling,
                                 admit=lambda p, _: (p, None, ()), storage_objects=[*slices, template])
    placed = {p.pod: p for p in result.placements}
    assert placed["ns/claims"].node == "dra" and placed["ns/claims"].dra_devices == (
        "gpu.nvidia.com/dra/gpu-0", "gpu.nvidia.com/dra/gpu-1")
    assert placed["ns/plain"].node == "dra" and placed["ns/plain"].dra_devices == ("gpu.nvidia.com/dra/gpu-2",)
    assert placed["ns/missing"].node is None and "ResourceClaim not created yet" in (placed["ns/missing"].reason or "")
    assert (result.used_milli, result.total_milli) == (3000, 4000)
    assert [(m.model, m.gpus, m.used_milli) for m in result.models] == [("NVIDIA A100-SXM4-40GB", 4, 3000)]
    assert placed["ns/plain"].as_json()["dra_devices"] == ["gpu.nvidia.com/dra/gpu-2"]
