"""The chart installed, upgraded and uninstalled by the real helm on a real apiserver, in both modes, in namespaces
other than the default one.

Its own control plane: the chart's cluster-scoped objects (the webhook configuration gpu-scheduler, the ClusterRoles)
are the ones the shared plane's installation holds, and this apiserver calls a Service's webhook at the address of
its EndpointSlices (--enable-aggregator-routing; there is no kube-proxy for ClusterIPs).

No kubelet runs pods here, so the test plays the webhook's pod: it runs the chart's init container's
`gpu-scheduler certs ensure` and then `gpu-scheduler webhook` with the Deployment's ConfigMap, both as the chart's
service account, on this machine's non-loopback address, and gives the chart's Service an EndpointSlice pointing
there, as the EndpointSlice controller would for the pod. The apiserver then reaches it through the installed
webhook configuration, checking the certificate against the Service's DNS name and the caBundle certs ensure wrote.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests import servers
from tests.e2e import chart, conftest, helm
from tests.e2e import controlplane as cp
from tests.e2e.installing import kubectl, wait_for

NAMESPACE = "gpu-platform"  # not the chart's default gpu-scheduler-system
INSTALL = ("webhook.failurePolicy=Fail",)  # so a webhook configuration left behind would refuse every pod
UPGRADE = {"webhook": {"failurePolicy": "Fail", "replicas": 3},
           "config": {"admission": {"rules": [{"name": "upgraded-h100", "set": {"gpuModel": "H100"}}]}}}
SLICE = "gpu-scheduler-webhook-e2e"


def host_address() -> str:
    """An IPv4 address of this machine other than loopback, which an EndpointSlice may hold (the API refuses
    127.0.0.0/8): the address of the interface with the default route, else one the hostname resolves to."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = probe.getsockname()[0]
    except OSError:
        address = ""
    if address and not address.startswith("127."):
        return address
    found = [a for a in socket.gethostbyname_ex(socket.gethostname())[2] if not a.startswith("127.")]
    if not found:
        pytest.fail("no IPv4 address other than loopback on this machine: an EndpointSlice cannot point here")
    return found[0]


@pytest.fixture(scope="module")
def plane() -> Iterator[cp.ControlPlane]:
    conftest.require_binaries()
    helm.require_binaries()
    with cp.ControlPlane(extra_apiserver_args=("--enable-aggregator-routing=true",)) as control_plane:
        def logs() -> tuple[str, str]:
            return "helm control plane", control_plane.logs_tail(30)

        conftest.LOG_SOURCES.append(logs)
        crds = control_plane.bin_dir.parent / "crds"
        kubectl(control_plane, "apply", "--server-side", "-f", str(crds / "cert-manager"),
                "-f", str(crds / "prometheus-operator"))
        kubectl(control_plane, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        yield control_plane
        conftest.LOG_SOURCES.remove(logs)


def run_helm(plane: cp.ControlPlane, *args: str | Path, stdin: str | None = None
             ) -> subprocess.CompletedProcess[str]:
    return helm.helm(*args, kubeconfig=plane.kubeconfig, stdin=stdin)


def installed_objects(plane: cp.ControlPlane, release: str, namespace: str) -> list[dict[str, Any]]:
    manifest = run_helm(plane, "get", "manifest", release, "--namespace", namespace).stdout
    return [d for d in yaml.safe_load_all(manifest) if d]


def existing(plane: cp.ControlPlane, documents: list[dict[str, Any]]) -> list[str]:
    """Which of `documents` the apiserver holds, as kind/name."""
    return kubectl(plane, "get", "--ignore-not-found", "-o", "name", "-f", "-",
                   stdin=yaml.safe_dump_all(documents)).split()


class PlayedPod:
    """The webhook's pod as the kubelet would run it, here: certs ensure, then the webhook, and its EndpointSlice."""

    def __init__(self, plane: cp.ControlPlane, namespace: str, work: Path) -> None:
        self.plane, self.namespace, self.work = plane, namespace, work
        self.api = plane.api_client()
        deployment = client.AppsV1Api(self.api).read_namespaced_deployment("gpu-scheduler-webhook", namespace)
        self.pod = deployment.spec.template.spec
        account = self.pod.service_account_name
        self.kubeconfig = plane.kubeconfig_for_service_account(namespace, account)
        self.server: servers.Webhook | None = None
        self.ensured = ""

    def ensure_certificate(self) -> None:
        """The init container's command, with its arguments from the installed Deployment."""
        [init] = self.pod.init_containers
        result = subprocess.run([sys.executable, "-m", "gpu_scheduler", *init.args, "--kubeconfig",
                                 str(self.kubeconfig)], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        self.ensured = result.stdout

    def serve(self, address: str) -> servers.Webhook:
        secret = client.CoreV1Api(self.api).read_namespaced_secret("gpu-scheduler-webhook-tls", self.namespace)
        certs = self.work / "tls"
        certs.mkdir(exist_ok=True)
        for key in ("ca.crt", "tls.crt", "tls.key"):
            (certs / key).write_bytes(base64.b64decode(secret.data[key]))
        [config_map] = [a for a in self.pod.containers[0].args if a.startswith("--config-map=")]
        self.server = servers.start_webhook(certs, self.work, config_map, host="0.0.0.0", check_hostname=False,
                                            extra_args=("--kubeconfig", str(self.kubeconfig)))
        client.DiscoveryV1Api(self.api).create_namespaced_endpoint_slice(self.namespace, {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": SLICE, "labels": {"kubernetes.io/service-name": "gpu-scheduler-webhook",
                                                   "endpointslice.kubernetes.io/managed-by": "e2e.gpu-scheduler.io"}},
            "addressType": "IPv4",
            "ports": [{"name": "https", "port": self.server.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        })
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        try:
            client.DiscoveryV1Api(self.api).delete_namespaced_endpoint_slice(SLICE, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise


def gpu_pod(name: str, gpus: int = 2, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def rule_of(pod: Any) -> str | None:
    return (pod.metadata.annotations or {}).get("gpu-scheduler.io/rule")


@pytest.fixture(scope="module")
def release(plane: cp.ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PlayedPod]:
    """The chart installed (standalone mode, self-managed certificates) into NAMESPACE, its webhook's pod played."""
    settings = [a for s in INSTALL for a in ("--set", s)]
    # created beforehand, as docs/install.md suggests, to enforce the restricted Pod Security Standard
    client.CoreV1Api(plane.api_client()).create_namespace({"metadata": {"name": NAMESPACE, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    run_helm(plane, "install", chart.RELEASE, chart.CHART, "--namespace", NAMESPACE, *settings)
    played = PlayedPod(plane, NAMESPACE, tmp_path_factory.mktemp("helm-webhook"))
    try:
        played.ensure_certificate()
        played.serve(host_address())
        yield played
    finally:
        played.stop()


@pytest.fixture(scope="module")
def research(plane: cp.ControlPlane) -> str:
    """An opted-in namespace, as NOTES.txt tells the admin to make one; team=research picks the training rule."""
    core: Any = client.CoreV1Api(plane.api_client())
    core.create_namespace({"metadata": {"name": "research", "labels": {
        "gpu-scheduler.io/inject": "enabled", "team": "research"}}})
    return "research"


def test_install_creates_every_object_and_certs_ensure_works_with_the_charts_permissions(plane, release):
    objects = installed_objects(plane, chart.RELEASE, NAMESPACE)
    assert {d["kind"] for d in objects} >= {"ConfigMap", "Deployment", "Service", "MutatingWebhookConfiguration",
                                           "PodDisruptionBudget", "ClusterRole", "Role", "ServiceAccount"}
    assert len(existing(plane, objects)) == len(objects)
    assert {d["metadata"].get("namespace", NAMESPACE) for d in objects} == {NAMESPACE}
    # the Deployments' pods meet the restricted Pod Security Standard: admission lets the ReplicaSets create them
    core: Any = client.CoreV1Api(plane.api_client())
    for deployment in (d for d in objects if d["kind"] == "Deployment"):
        name, replicas = deployment["metadata"]["name"], deployment["spec"]["replicas"]
        wait_for(lambda: len(core.list_namespaced_pod(NAMESPACE, label_selector=f"app.kubernetes.io/name={name}")
                             .items) == replicas, f"{replicas} pods of {name}")
    assert release.ensured.startswith(f"{NAMESPACE}/gpu-scheduler-webhook-tls: create")
    assert "caBundle updated in 1 webhook(s)" in release.ensured


def test_admission_works_through_the_installed_webhook_configuration(plane, release, research):
    core: Any = client.CoreV1Api(plane.api_client())
    labels = {"job-type": "training"}
    pod = wait_for(lambda: core.create_namespaced_pod(research, gpu_pod(f"train-{uuid.uuid4().hex[:6]}", 2, labels)),
                   "the apiserver to call the webhook through the chart's Service")
    assert pod.spec.scheduler_name == "gpu-scheduler"
    assert rule_of(pod) == "a100-training"  # the chart's default rules
    assert pod.metadata.annotations["gpu.nvidia.com/model"] == "A100"


def test_the_smoke_check_notes_txt_gives_passes(plane, release, research):
    notes = run_helm(plane, "status", chart.RELEASE, "--namespace", NAMESPACE).stdout
    [command] = [line.strip() for line in notes.splitlines() if "--dry-run=server" in line]
    assert command.startswith("kubectl -n research run gpu-smoke")
    kubectl_cmd = f"{plane.bin_dir / 'kubectl'} --kubeconfig {plane.kubeconfig}"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command.replace("kubectl", kubectl_cmd, 1)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "schedulerName: gpu-scheduler" in result.stdout and "gpu-scheduler.io/rule: any-gpu" in result.stdout


def test_upgrade_changes_rules_and_replicas_without_a_failed_admission(plane, release, research):
    core: Any = client.CoreV1Api(plane.api_client())
    created: list[Any] = []
    failures: list[str] = []
    stop = threading.Event()

    def create_pods() -> None:
        while not stop.is_set():
            try:
                created.append(core.create_namespaced_pod(research, gpu_pod(f"during-{uuid.uuid4().hex[:8]}", 1)))
            except ApiException as err:
                failures.append(f"HTTP {err.status}: {err.body}")
            time.sleep(0.05)

    creator = threading.Thread(target=create_pods, daemon=True)
    creator.start()
    try:
        time.sleep(1)
        run_helm(plane, "upgrade", chart.RELEASE, chart.CHART, "--namespace", NAMESPACE, "--values", "-",
                 stdin=yaml.safe_dump(UPGRADE))
        wait_for(lambda: created and rule_of(created[-1]) == "upgraded-h100",
                 "the webhook to apply the upgraded rules", timeout=30)
        time.sleep(0.5)
    finally:
        stop.set()
        creator.join(10)
    assert failures == []
    assert len(created) > 10
    assert all(p.spec.scheduler_name == "gpu-scheduler" for p in created)
    assert {rule_of(p) for p in created} == {"any-gpu", "upgraded-h100"}
    assert created[-1].metadata.annotations["gpu.nvidia.com/model"] == "H100"
    apps: Any = client.AppsV1Api(plane.api_client())
    assert apps.read_namespaced_deployment("gpu-scheduler-webhook", NAMESPACE).spec.replicas == 3
    # the upgrade (server-side apply) left the caBundle that certs ensure owns alone
    hook = client.AdmissionregistrationV1Api(plane.api_client()).read_mutating_webhook_configuration("gpu-scheduler")
    assert hook.webhooks[0].client_config.ca_bundle and hook.webhooks[0].failure_policy == "Fail"


def test_uninstall_leaves_no_webhook_configuration_and_nothing_else_behind(plane, release, research):
    objects = installed_objects(plane, chart.RELEASE, NAMESPACE)
    run_helm(plane, "uninstall", chart.RELEASE, "--namespace", NAMESPACE, "--wait")
    release.stop()  # its pods are gone
    core: Any = client.CoreV1Api(plane.api_client())
    pod = core.create_namespaced_pod(research, gpu_pod(f"after-{uuid.uuid4().hex[:6]}", 1))  # Fail, yet created
    assert pod.spec.scheduler_name != "gpu-scheduler"
    assert existing(plane, objects) == []
    # the Secret certs ensure wrote is owned by the webhook configuration: the garbage collector removes it
    wait_for(lambda: not core.list_namespaced_secret(NAMESPACE).items, "the certificate Secret to be collected")
    _nothing_left(plane, NAMESPACE)


@pytest.mark.parametrize(("namespace", "settings"), [
    ("gpu-extender", ("mode=extender",)),
    ("gpu-cert-manager", ("certificates.source=cert-manager", "monitoring.serviceMonitors.enabled=true",
                          "monitoring.rules.enabled=true", "monitoring.dashboard.enabled=true")),
])
def test_the_other_modes_install_and_uninstall_cleanly(plane, namespace, settings):
    """The apiserver accepts every object of extender mode, cert-manager's and the monitoring objects (through
    their CRDs), and takes them all away again."""
    args = [a for s in settings for a in ("--set", s)]
    run_helm(plane, "install", chart.RELEASE, chart.CHART, "--namespace", namespace, "--create-namespace", *args)
    objects = installed_objects(plane, chart.RELEASE, namespace)
    assert objects == chart.render(*settings, namespace=namespace)
    assert len(existing(plane, objects)) == len(objects)
    run_helm(plane, "uninstall", chart.RELEASE, "--namespace", namespace, "--wait")
    assert existing(plane, objects) == []
    _nothing_left(plane, namespace)


KINDS = "all,configmaps,secrets,serviceaccounts,roles,rolebindings,poddisruptionbudgets,endpointslices"
CLUSTER_KINDS = "clusterroles,clusterrolebindings,mutatingwebhookconfigurations"
DEFAULTS = {"configmap/kube-root-ca.crt", "serviceaccount/default"}


def _nothing_left(plane: cp.ControlPlane, namespace: str) -> None:
    """Nothing labelled part-of gpu-scheduler anywhere, and nothing in its namespace but what Kubernetes puts in
    every namespace, once the garbage collector has taken the Deployments' ReplicaSets and Pods."""
    def left() -> list[str]:
        labelled = kubectl(plane, "get", f"{KINDS},{CLUSTER_KINDS}", "-A", "-o", "name",
                           "-l", "app.kubernetes.io/part-of=gpu-scheduler").split()
        in_namespace = kubectl(plane, "get", KINDS, "-n", namespace, "-o", "name").split()
        return labelled + [name for name in in_namespace if name not in DEFAULTS]

    deadline = time.monotonic() + 30
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left() == []
