"""The `gpu-scheduler` command as a user runs it."""

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from certs import pki

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"


def run(*args, check_code=0):
    result = subprocess.run([sys.executable, "-m", "gpu_scheduler", *args], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == check_code, result.stderr
    return result


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


def test_mutate_rejects_a_bad_pod_file(tmp_path):
    pod = tmp_path / "two.yaml"
    pod.write_text("kind: Pod\n---\nkind: Pod\n")
    assert "expected exactly one Pod object" in run("mutate", "--config", str(EXAMPLES / "config.yaml"),
                                                     str(pod), check_code=2).stderr


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
