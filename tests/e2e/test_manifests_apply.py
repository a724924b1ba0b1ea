"""Every kustomization under manifests/ builds the same with the real kubectl and with the kustomize of
kubectl v1.32; the default install and each overlay pass strict validation, and the real apiserver accepts
every object (cert-manager's kinds through its own CRDs).

Each is applied through a wrapper that renames everything (namespace, name prefix), so the installation
the other e2e tests use is left alone; admission webhooks are removed again at the end.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.e2e import controlplane as cp
from tests.e2e.installing import MANIFESTS, kubectl

K8S_VERSION = "1.36.0"
CUSTOM_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")


def entry_points() -> list[Path]:
    """Every kustomization a user applies: kind Kustomization (components are built through them)."""
    return sorted(path.parent for path in MANIFESTS.rglob("kustomization.yaml")
                  if yaml.safe_load(path.read_text())["kind"] == "Kustomization")


def objects(rendered: str) -> dict[tuple[str, str, str, str], dict]:
    """The rendered objects by apiVersion, kind, namespace and name: the order kustomize prints them in aside."""
    return {(d["apiVersion"], d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
            for d in yaml.safe_load_all(rendered) if d}


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    """Only the binaries: building needs no running control plane."""
    found = cp.find_binaries()
    if found is None:
        pytest.skip("control-plane binaries not built: run hack/control-plane.sh build")
    return found


@pytest.mark.parametrize("kustomization", entry_points(), ids=lambda path: str(path.relative_to(MANIFESTS)))
def test_every_kustomization_renders_the_same_with_kubectl_and_with_kubectl_1_32s_kustomize(bin_dir, kustomization):
    renders = {}
    for name, command in (("kubectl v1.36", [str(bin_dir / "kubectl"), "kustomize", str(kustomization)]),
                          ("kustomize of kubectl v1.32", [str(bin_dir / cp.KUSTOMIZE), "build", str(kustomization)])):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{name} cannot build {kustomization}:\n{result.stderr[-3000:]}"
        renders[name] = objects(result.stdout)
    assert renders["kubectl v1.36"]
    assert renders["kustomize of kubectl v1.32"] == renders["kubectl v1.36"]


def cert_manager_crds() -> Path:
    binaries = cp.find_binaries()
    assert binaries is not None
    crds = binaries.parent / "crds" / "cert-manager"
    if not (crds / ".version").is_file():
        pytest.fail(f"cert-manager CRDs missing in {crds}: run hack/control-plane.sh build")
    return crds


@pytest.fixture(scope="module")
def cert_manager(plane):
    kubectl(plane, "apply", "--server-side", "-f", str(cert_manager_crds()))
    kubectl(plane, "wait", "--for=condition=Established", "--timeout=60s", "crd/certificates.cert-manager.io",
            "crd/issuers.cert-manager.io")


def build(plane, tmp_path: Path, kustomization: str) -> tuple[str, list[dict], str]:
    """The kustomization as it installs (`kubectl kustomize`), and wrapped with a unique namespace and prefix."""
    suffix = uuid.uuid4().hex[:6]
    shutil.copytree(MANIFESTS, tmp_path / "manifests")  # kustomize takes relative bases only
    wrapper = tmp_path / "wrapper"
    wrapper.mkdir()
    (wrapper / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [f"../manifests/{kustomization}"], "namespace": f"apply-{suffix}",
        "namePrefix": f"e2e-{suffix}-"}))
    as_shipped = kubectl(plane, "kustomize", str(MANIFESTS / kustomization))
    wrapped = kubectl(plane, "kustomize", "--load-restrictor=LoadRestrictionsNone", str(wrapper))
    return as_shipped, [d for d in yaml.safe_load_all(as_shipped) if d], wrapped


def apply(plane, wrapped: str) -> str:
    documents = [d for d in yaml.safe_load_all(wrapped) if d]
    hooks = [d["metadata"]["name"] for d in documents if d["kind"] == "MutatingWebhookConfiguration"]
    try:
        out = kubectl(plane, "apply", "--server-side", "--field-manager=e2e", "-f", "-", stdin=wrapped)
        assert out.count("serverside-applied") == len(documents), out
        return out
    finally:
        for name in hooks:
            kubectl(plane, "delete", "mutatingwebhookconfiguration", name, "--ignore-not-found")


def strictly_valid(documents: list[dict]) -> None:
    for document in documents:
        if not str(document["apiVersion"]).startswith(CUSTOM_GROUPS):
            kubernetes_validate.validate(document, K8S_VERSION, strict=True)


def by_kind(documents: list[dict]) -> dict[str, set[str]]:
    kinds: dict[str, set[str]] = {}
    for document in documents:
        kinds.setdefault(document["kind"], set()).add(document["metadata"]["name"])
    return kinds


def test_the_default_install_builds_validates_and_applies_server_side(plane, tmp_path):
    _, documents, wrapped = build(plane, tmp_path, ".")
    strictly_valid(documents)
    kinds = by_kind(documents)
    assert {"Namespace", "ConfigMap", "Deployment", "Service", "MutatingWebhookConfiguration",
            "PodDisruptionBudget", "ClusterRole", "Role", "ServiceAccount"} <= kinds.keys()
    assert kinds["Deployment"] == {"gpu-scheduler", "gpu-scheduler-webhook"}
    out = apply(plane, wrapped)
    assert "-gpu-scheduler serverside-applied" in out


def test_the_extender_overlay_installs_kube_scheduler_and_the_extender_instead_of_run(plane, tmp_path):
    _, documents, wrapped = build(plane, tmp_path, "overlays/extender")
    strictly_valid(documents)
    kinds = by_kind(documents)
    assert kinds["Deployment"] == {"gpu-scheduler-webhook", "gpu-scheduler-extender", "gpu-kube-scheduler"}
    assert "gpu-scheduler" not in kinds["ServiceAccount"] | kinds["ClusterRole"]  # `run`'s account is gone
    binding = next(d for d in documents if d["kind"] == "RoleBinding" and d["roleRef"]["name"] ==
                   "extension-apiserver-authentication-reader")
    assert binding["metadata"]["namespace"] == "kube-system"
    configmap = next(d for d in documents if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith(
        "gpu-kube-scheduler-config-"))
    scheduler_config = yaml.safe_load(configmap["data"]["config.yaml"])
    assert [p["schedulerName"] for p in scheduler_config["profiles"]] == ["gpu-scheduler"]
    apply(plane, wrapped)


def test_the_cert_manager_overlay_hands_certificates_to_cert_manager(plane, tmp_path, cert_manager):
    _, documents, wrapped = build(plane, tmp_path, "overlays/cert-manager")
    strictly_valid(documents)
    kinds = by_kind(documents)
    assert kinds["Certificate"] == {"gpu-scheduler-ca", "gpu-scheduler-webhook"}
    webhook = next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] ==
                   "gpu-scheduler-webhook")["spec"]["template"]["spec"]
    assert not webhook.get("initContainers") and [c["name"] for c in webhook["containers"]] == ["webhook"]
    hook = next(d for d in documents if d["kind"] == "MutatingWebhookConfiguration")
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        "gpu-scheduler-system/gpu-scheduler-webhook"
    certificate = next(d for d in documents if d["kind"] == "Certificate" and
                       d["metadata"]["name"] == "gpu-scheduler-webhook")
    assert certificate["spec"]["secretName"] == "gpu-scheduler-webhook-tls"  # the Secret the Deployment mounts
    webhook_rules = [r for d in documents if d["kind"] in ("ClusterRole", "Role")
                     and d["metadata"]["name"].startswith("gpu-scheduler-webhook") for r in d["rules"]]
    assert not any({"secrets", "mutatingwebhookconfigurations"} & set(r["resources"]) for r in webhook_rules)
    out = apply(plane, wrapped)
    assert out.count("certificate.cert-manager.io/e2e-") == 2 and out.count("issuer.cert-manager.io/e2e-") == 2
