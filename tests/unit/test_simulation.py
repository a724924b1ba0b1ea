"""`gpu-scheduler simulate`: the bundled example, input formats, and the JSON contract of DESIGN.md."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scheduler_core import objects, simulation
from tests.unit.builders import node, pod
from webhook import config

ROOT = Path(__file__).parents[2]


def simulate_cli(*args, code=0):
    result = subprocess.run([sys.executable, "-m", "gpu_scheduler", "simulate", *args], capture_output=True,
                            text=True, cwd=ROOT)
    assert result.returncode == code, result.stderr
    return result


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
    assert summary["scheduled"] == sum(1 for p in bundled["placements"] if p["node"])
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


def test_the_bundled_example_table_is_readable():
    out = simulate_cli().stdout
    assert out.splitlines()[0].split() == ["POD", "RULE", "NODE", "GPUS", "WHY", "NOT"]
    assert "GPU allocation" in out and "NVIDIA-H100-80GB-HBM3" in out


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
    loaded = objects.load(path)
    assert [o["metadata"]["name"] for o in loaded] == (["a"] if form == "single" else ["a", "b"])


@pytest.mark.parametrize(
    ("text", "message"),
    [("a: [", "not valid YAML or JSON"), ("- 1\n- 2\n", "document 1 is not an object"),
     ("kind: List\nitems: [1]\n", "every object needs metadata")],
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
    result = simulation.simulate([node("a100"), node("h100", model="NVIDIA-H100-80GB-HBM3")],
                                 [*namespaces, mine, theirs], settings)
    placed = {p.pod: p for p in result.placements}
    assert (placed["in/mine"].node, placed["in/mine"].rule) == ("h100", "all")
    assert placed["out/theirs"].node is None and not placed["out/theirs"].ours


def test_bound_pods_are_placed_first_whatever_their_position():
    pending = pod("pending", gpus=2)
    bound = pod("bound", gpus=1, node_name="a")
    result = simulation.simulate([node("a", gpus=2)], [pending, bound], config.Config())
    placed = {p.pod: p for p in result.placements}
    assert placed["ns/bound"].node == "a" and placed["ns/pending"].node is None
    assert result.allocation_ratio == 0.5
