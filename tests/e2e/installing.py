"""Installing the webhook into the test control plane the way the manifests describe it."""

from __future__ import annotations

import copy
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from certs import pki
from tests import servers
from tests.e2e import controlplane as cp

ROOT = Path(__file__).parents[2]
MANIFESTS = ROOT / "manifests"
BASE = MANIFESTS / "base"
COMPONENTS = MANIFESTS / "components"
NAMESPACE = "gpu-scheduler-system"
CONFIG_MAP = "gpu-scheduler-config"
SERVICE_ACCOUNT = "gpu-scheduler-webhook"
EXTENDER_OVERLAY = MANIFESTS / "overlays" / "extender"
EXTENDER_ACCOUNT = "gpu-scheduler-extender"
WEBHOOK_CONFIGURATION = "gpu-scheduler"


def kubectl(plane: cp.ControlPlane, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(plane.bin_dir / "kubectl"), "--kubeconfig", str(plane.kubeconfig), *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def configmap(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
        "data": {"config.yaml": text},
    }


def webhook_configuration(url: str, ca_bundle: str, *, failure_policy: str = "Ignore") -> dict[str, Any]:
    """The shipped MutatingWebhookConfiguration with a URL client config on loopback."""
    shipped = yaml.safe_load((COMPONENTS / "webhook" / "mutatingwebhookconfiguration.yaml").read_text())
    derived = copy.deepcopy(shipped)
    hook = derived["webhooks"][0]
    hook["clientConfig"] = {"url": url, "caBundle": ca_bundle}
    hook["failurePolicy"] = failure_policy
    return derived


@dataclass
class Installation:
    plane: cp.ControlPlane
    api: Any
    server: servers.Webhook
    certs: Path
    log_dir: Path
    kubeconfig: Path

    @property
    def core(self) -> Any:
        return client.CoreV1Api(self.api)

    def start_server(self) -> None:
        """(Re)start `gpu-scheduler webhook` on the registered port."""
        self.server = _start(self.certs, self.log_dir, self.kubeconfig, port=self.server.port)

    def set_config(self, text: str) -> None:
        self.core.replace_namespaced_config_map(CONFIG_MAP, NAMESPACE, configmap(text))

    def set_failure_policy(self, policy: str) -> None:
        admission = client.AdmissionregistrationV1Api(self.api)
        admission.patch_mutating_webhook_configuration(
            WEBHOOK_CONFIGURATION, [{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": policy}]
        )

    def uninstall(self) -> None:
        self.server.stop()
        try:
            client.AdmissionregistrationV1Api(self.api).delete_mutating_webhook_configuration(WEBHOOK_CONFIGURATION)
        except ApiException:
            pass


def shipped_rbac(plane: cp.ControlPlane, account: str, kustomization: Path = MANIFESTS) -> list[dict[str, Any]]:
    """One ServiceAccount's RBAC as `kubectl apply -k` of `kustomization` installs it: the account, the
    bindings that name it and the roles they bind. Rendered, not read from one file: components/certs-ensure
    adds rules to the webhook's roles."""
    documents = [d for d in yaml.safe_load_all(kubectl(plane, "kustomize", str(kustomization))) if d]
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    bindings = [d for d in documents if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                and subject in d.get("subjects", [])]
    roles = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for b in bindings}
    return [d for d in documents if d in bindings or (d["kind"], d["metadata"]["name"]) in roles
            or (d["kind"] == "ServiceAccount" and d["metadata"]["name"] == account)]


def apply_rbac(plane: cp.ControlPlane, account: str, kustomization: Path = MANIFESTS) -> None:
    kubectl(plane, "apply", "-f", "-", stdin=yaml.safe_dump_all(shipped_rbac(plane, account, kustomization)))


def install_webhook(plane: cp.ControlPlane, api: Any, work: Path, config_text: str) -> Installation:
    kubectl(plane, "apply", "-f", str(BASE / "namespace.yaml"))
    apply_rbac(plane, SERVICE_ACCOUNT)
    kubectl(plane, "apply", "-f", "-", stdin=yaml.safe_dump(configmap(config_text)))
    # The webhook authenticates with a token of its service account (TokenRequest), as in its Pod,
    # so the test proves the shipped RBAC is enough.
    kubeconfig = plane.kubeconfig_for_service_account(NAMESPACE, SERVICE_ACCOUNT)
    certs = servers.generate_certs(work / "certs")
    server = _start(certs, work, kubeconfig)
    installation = Installation(plane, api, server, certs, work, kubeconfig)
    ca_bundle = pki.ca_bundle((certs / "ca.crt").read_bytes())
    kubectl(plane, "apply", "-f", "-",
            stdin=yaml.safe_dump(webhook_configuration(f"{server.url}/mutate", ca_bundle)))
    return installation


def _start(certs: Path, log_dir: Path, kubeconfig: Path, port: int | None = None) -> servers.Webhook:
    return servers.start_webhook(
        certs, log_dir, "--config-map", f"{NAMESPACE}/{CONFIG_MAP}",
        extra_args=("--kubeconfig", str(kubeconfig)), port=port,
    )


def wait_for(check: Any, what: str, timeout: float = 30, interval: float = 0.2) -> Any:
    """Poll until `check()` is truthy; the apiserver applies webhook configuration asynchronously."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except ApiException as err:
            last = f"HTTP {err.status}: {err.reason} {err.body}"
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
