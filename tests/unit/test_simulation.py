"""`gpu-scheduler simulate`: the bundled example, input formats, and the JSON contract of ARCHITECTURE.md."""

import json

import pytest
import yaml

from scheduler_core import objects
from tests.commands import gpu_scheduler
from tests.unit.builders import node, pod, simulate
from webhook import config


def simulate_cli(*args, code=0):
    return gpu_scheduler("simulate", *args, code=code)


@pytest.fixture(scope="module")
def bundled():
    return json.loads(simulate_cli("--json").stdout)


def test_json_output_follows_the_contract(bundled):
    assert set(bundled) == {"placements", "summary"}
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
