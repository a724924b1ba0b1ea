"""The kustomize base builds with the real kubectl and the real apiserver accepts every object.

Applied through an overlay that renames everything (namespace, name prefix), so the installation
the other e2e tests use is left alone; its admission webhook is removed again at the end.
"""

from __future__ import annotations

import shutil
import uuid

import yaml

from tests.e2e.installing import MANIFESTS, kubectl


def test_the_base_builds_and_applies_server_side(plane, tmp_path):
    suffix = uuid.uuid4().hex[:6]
    shutil.copytree(MANIFESTS, tmp_path / "manifests")  # kustomize takes relative bases only
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../manifests"], "namespace": f"apply-{suffix}", "namePrefix": f"e2e-{suffix}-"}))
    kubectl(plane, "kustomize", str(MANIFESTS))  # the base itself builds
    built = kubectl(plane, "kustomize", "--load-restrictor=LoadRestrictionsNone", str(overlay))
    documents = [d for d in yaml.safe_load_all(built) if d]
    kinds = {d["kind"] for d in documents}
    assert {"Namespace", "ConfigMap", "Deployment", "Service", "MutatingWebhookConfiguration",
            "PodDisruptionBudget", "ClusterRole", "Role", "ServiceAccount"} <= kinds
    webhook = next(d for d in documents if d["kind"] == "MutatingWebhookConfiguration")
    try:
        out = kubectl(plane, "apply", "--server-side", "--field-manager=e2e", "-f", "-", stdin=built)
        assert f"deployment.apps/e2e-{suffix}-gpu-scheduler serverside-applied" in out
        assert out.count("serverside-applied") == len(documents)
        kubectl(plane, "get", "deployments", "-n", f"apply-{suffix}")
    finally:
        kubectl(plane, "delete", "mutatingwebhookconfiguration", webhook["metadata"]["name"], "--ignore-not-found")
