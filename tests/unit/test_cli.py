"""The `gpu-scheduler` command as a user runs it."""

import base64
import json

import pytest
import yaml

from certs import pki
from tests.commands import ROOT, gpu_scheduler

EXAMPLES = ROOT / "examples"


def run(*args, check_code=0):
    return gpu_scheduler(*args, code=check_code)


def test_help_lists_the_commands():
    out = run("--help").stdout
    for command in ("mutate", "config", "certs", "webhook"):
        assert command in out


def test_config_check_valid(tmp_path):
    out = run("config", "check", str(EXAMPLES / "config.yaml")).stdout
    assert out.startswith(f"{EXAMPLES / 'config.yaml'}: valid: schedulerName gpu-scheduler, 4 rule(s)")


def test_config_check_configmap_manifest(tmp_path):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                        "data": {"config.yaml": (EXAMPLES / "config.yaml").read_text()}}))
    run("config", "check", str(manifest))


def test_config_check_lists_every_problem_and_exits_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schedulerName: X\nadmission: {rules: [{name: a, set: {gpuMemoryMiB: 40Gi}}]}\n")
    err = run("config", "check", str(bad), check_code=2).stderr
    assert f"{bad}: invalid, 2 problem(s):" in err
    assert 'admission.rules[0].set.gpuMemoryMiB: must be a positive integer, got "40Gi"' in err
    assert "schedulerName: must be a lowercase RFC 1123 subdomain" in err


def test_config_check_missing_file_exits_2(tmp_path):
    err = run("config", "check", str(tmp_path / "nope.yaml"), check_code=2).stderr
    assert "cannot read" in err and "No such file" in err


def test_mutate_prints_the_patched_pod():
    result = run("mutate", "--config", str(EXAMPLES / "config.yaml"), "--namespace-labels", "team=research",
                 str(EXAMPLES / "pod-training.yaml"))
    pod = yaml.safe_load(result.stdout)
    assert pod["spec"]["schedulerName"] == "gpu-scheduler"
    assert pod["metadata"]["annotations"]["gpu-scheduler.io/rule"] == "a100-training"
    assert pod["metadata"]["annotations"]["gpu.nvidia.com/model"] == "A100"
    assert "matched rule 'a100-training'" in result.stderr


def test_mutate_patch_without_namespace_labels_falls_to_a_later_rule():
    patch = json.loads(run("mutate", "--config", str(EXAMPLES / "config.yaml"), "--patch",
                           str(EXAMPLES / "pod-training.yaml")).stdout)
    assert patch[1]["value"]["gpu-scheduler.io/rule"] == "any-gpu"


def test_mutate_rejects_a_file_of_several_pods_naming_them(tmp_path):
    pods = tmp_path / "two.yaml"
    pods.write_text("kind: Pod\nmetadata: {name: a, namespace: ns}\n---\nkind: Pod\nmetadata: {name: b}\n")
    err = run("mutate", "--config", str(EXAMPLES / "config.yaml"), str(pods), check_code=2).stderr
    assert f"POD.yaml {pods}: expected exactly one Pod, found 2 (ns/a, b)" in err


def test_mutate_rejects_a_file_of_another_kind_naming_what_it_found():
    err = run("mutate", "--config", str(EXAMPLES / "config.yaml"), str(EXAMPLES / "nodes.yaml"), check_code=2).stderr
    assert "examples/nodes.yaml: expected Pod objects, found 12 Node (first unexpected: Node gpu-a100-40g-1)" in err


def test_mutate_says_why_each_rule_before_the_match_did_not_match():
    """Without namespace labels the training rule cannot match, and the output says so instead of staying silent."""
    err = run("mutate", "--config", str(EXAMPLES / "config.yaml"), str(EXAMPLES / "pod-training.yaml")).stderr
    assert err.splitlines() == [
        "# rule 'a100-training' skipped: namespaceSelector team=research: the namespace's labels are not known",
        "# rule 'inference' skipped: podSelector job-type=inference: the pod has job-type=training",
        "# rule 'notebooks' skipped: maxGPUs 1: the pod asks for 2 GPUs",
        "# matched rule 'any-gpu'",
        "# (give the namespace's labels with --namespace-labels k=v,... to evaluate namespaceSelector rules)",
    ]


def test_mutate_with_other_namespace_labels_names_what_the_namespace_has():
    err = run("mutate", "--config", str(EXAMPLES / "config.yaml"), "--namespace-labels", "team=ml,env=prod",
              str(EXAMPLES / "pod-training.yaml")).stderr
    assert "# rule 'a100-training' skipped: namespaceSelector team=research: the namespace has team=ml" in err
    assert "--namespace-labels k=v" not in err


def test_version():
    assert run("--version").stdout.strip() == "gpu-scheduler 0.1.0"


@pytest.mark.parametrize(("group", "command"), [("config", "check"), ("certs", "ensure"), ("bench", "openb")])
def test_a_group_without_its_command_shows_the_group_usage(group, command):
    err = run(group, check_code=2).stderr
    assert err.startswith(f"usage: gpu-scheduler {group} ")
    assert command in err and "simulate" not in err


def test_help_shows_percent_signs_once():
    out = run("bench", "openb", "--help").stdout
    assert "130%," in " ".join(out.split()) and "%%" not in out


def test_config_check_names_a_manifest_of_another_kind(tmp_path):
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n")
    err = run("config", "check", str(deployment), check_code=2).stderr
    assert err.splitlines() == [
        f"{deployment}: invalid, 1 problem(s):",
        "  this is a Deployment (apps/v1), not a gpu-scheduler config: expected config.yaml (schedulerName, "
        "admission, scheduling) or a ConfigMap holding it under data.config.yaml",
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("schedulerName: a\nadmission:\n  rules: [\n  - name: x\n",
         "not valid YAML: line 4, column 3: expected the node content, but found '-'"),
        ("schedulerName: a\nadmission:\n  deletionCost: {initial: -50}: x\n",
         "not valid YAML: line 3, column 31: mapping values are not allowed here"),
        ("schedulerName: a\n---\nkind: ConfigMap\n",
         "holds 2 YAML documents (ConfigMap); expected one: config.yaml, or a ConfigMap holding it under "
         "data.config.yaml"),
    ],
)
def test_config_check_says_where_the_yaml_breaks(tmp_path, text, problem):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    err = run("config", "check", str(bad), check_code=2).stderr
    assert err.startswith(f"{bad}: invalid, 1 problem(s):\n  {problem}")
    assert "<unicode string>" not in err


def test_certs_generate(tmp_path):
    out = tmp_path / "certs"
    result = run("certs", "generate", "--service", "wh", "--namespace", "ns", "--out", str(out), "--ip", "127.0.0.1")
    assert base64.b64decode(result.stdout.strip()) == (out / "ca.crt").read_bytes()
    serving = pki.KeyPair((out / "tls.crt").read_bytes(), (out / "tls.key").read_bytes()).certificate
    assert "wh.ns.svc" in str(serving.extensions)
    assert oct((out / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_certs_generate_bad_ip(tmp_path):
    assert "--ip" in run("certs", "generate", "--service", "wh", "--namespace", "ns", "--out", str(tmp_path),
                         "--ip", "localhost", check_code=2).stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "examples/config.yaml", "--cert", "/nope.crt", "--key", "/nope.key"], "/nope.crt: no such file"),
        (["--config-map", "just-a-name", "--cert", "examples/config.yaml", "--key", "examples/config.yaml"],
         "--config-map: expected NAMESPACE/NAME"),
    ],
)
def test_webhook_argument_errors(args, message):
    assert message in run("webhook", *args, check_code=2).stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--every", "12 hours"], "--every: expected a duration such as 90s, 30m, 12h or 1d, got '12 hours'"),
        (["--every", "0h"], "--every: expected a duration"),
        (["--margin-days", "0"], "--margin-days: must be at least 1, got 0"),
        (["--grace-minutes", "-1"], "--grace-minutes: must be at least 0, got -1"),
        (["--ca-days", "300"], "--ca-days: must exceed --days plus --margin-days (395), got 300"),
        (["--days", "30", "--ca-days", "60", "--margin-days", "31"], "must exceed --days plus --margin-days (61)"),
        (["--secret", "no-namespace"], "--secret: expected NAMESPACE/NAME, got 'no-namespace'"),
    ],
)
def test_certs_ensure_argument_errors_name_the_flag(args, message):
    base = {"--secret": "ns/wh-tls", "--service": "wh"}
    flags = [item for flag, value in base.items() if flag not in args for item in (flag, value)]
    assert message in run("certs", "ensure", *flags, *args, check_code=2).stderr
