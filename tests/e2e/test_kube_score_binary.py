"""The kube-score that hack/kube-score.sh builds is the release it names and scores objects from stdin as JSON; no
control plane needed."""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e import kubescore

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: demo
  namespace: team-a
spec:
  replicas: 1
  selector:
    matchLabels: {app: demo}
  template:
    metadata:
      labels: {app: demo}
    spec:
      containers:
        - name: app
          image: registry.example/demo:1.0
"""
# what kube-score v1.20.0 finds CRITICAL in DEPLOYMENT: no NetworkPolicy, resources or security context, IfNotPresent
CRITICAL = {"pod-networkpolicy", "container-resources", "container-ephemeral-storage-request-and-limit",
            "container-security-context-user-group-id", "container-security-context-readonlyrootfilesystem",
            "container-image-pull-policy"}


def _score(*flags: str) -> tuple[int, dict]:
    result = kubescore.kube_score("score", "-o", "json", *flags, "-", stdin=DEPLOYMENT,
                                  exit_codes=(0, kubescore.EXIT_CRITICAL))
    [scored] = json.loads(result.stdout)
    return result.returncode, scored


def test_the_built_kube_score_is_the_named_release():
    kubescore.require_binaries()
    release = kubescore.KUBE_SCORE_VERSION.removeprefix("v")
    assert re.fullmatch(rf"kube-score version: {re.escape(release)}, commit: \S+, built: \S+\n",
                        kubescore.kube_score("version").stdout)


def test_it_scores_a_deployment_from_stdin_as_json_and_ignores_the_tests_it_is_told_to():
    kubescore.require_binaries()

    status, scored = _score()
    assert status == kubescore.EXIT_CRITICAL
    assert scored["object_name"] == "Deployment/apps/v1/team-a/demo"  # kind/apiVersion/namespace/name
    assert scored["type_meta"] == {"kind": "Deployment", "apiVersion": "apps/v1"}
    assert (scored["object_meta"]["name"], scored["file_name"], scored["file_row"]) == ("demo", "STDIN", 1)
    checks = {check["check"]["id"]: check for check in scored["checks"]}
    assert {name for name, check in checks.items() if check["grade"] == kubescore.CRITICAL and not check["skipped"]} \
        == CRITICAL
    assert [c["summary"] for c in checks["container-resources"]["comments"]] == [
        "CPU limit is not set", "Memory limit is not set", "CPU request is not set", "Memory request is not set"]

    # --ignore-test takes a list or is repeated; an ignored check is left out of the output
    status, scored = _score("--ignore-test", ",".join(sorted(CRITICAL)[:3]),
                            *(f for check in sorted(CRITICAL)[3:] for f in ("--ignore-test", check)))
    assert status == 0
    assert not CRITICAL & {check["check"]["id"] for check in scored["checks"]}


def test_an_unexpected_exit_code_or_a_failure_raises():
    kubescore.require_binaries()
    with pytest.raises(kubescore.KubeScoreError, match="exit code 1"):
        kubescore.kube_score("score", "-o", "json", "-", stdin=DEPLOYMENT)  # CRITICAL, not accepted
    with pytest.raises(kubescore.KubeScoreError, match="Failed to score files"):  # also exit code 1
        kubescore.kube_score("score", "-o", "json", "-", stdin="kind: [", exit_codes=(0, kubescore.EXIT_CRITICAL))
    with pytest.raises(kubescore.KubeScoreError, match="unknown flag: --no-such-flag"):
        kubescore.kube_score("score", "--no-such-flag", "-", stdin=DEPLOYMENT)
