"""Certificate renewal and CA rotation while the apiserver keeps calling the webhook.

The webhook serves from a directory laid out as the kubelet projects a Secret volume (`..data` swapped
atomically); `certs ensure` runs as it does in the webhook Pod, against the real apiserver, with
shortened validity; pods are created through the apiserver the whole time under `failurePolicy: Fail`,
so a certificate the apiserver did not trust would reject a pod. None may fail, every one is mutated.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from cryptography import x509
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests import servers
from tests.e2e.installing import kubectl, wait_for

# A schedulerName nobody serves: the pods created here stay out of the other tests' schedulers.
CONFIG = "schedulerName: rotation-test\nadmission: {rules: [{name: rotation, set: {gpuModel: A100}}]}\n"


def gpu_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{
        "name": "main", "image": "registry.invalid/cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


class ProjectedSecret:
    """A Secret volume as the kubelet writes it: files behind `..data`, which is replaced atomically."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir()
        self.versions = 0

    def sync(self, core: Any, namespace: str, name: str) -> None:
        data = core.read_namespaced_secret(name, namespace).data
        self.versions += 1
        version = self.directory / f"..v{self.versions}"
        version.mkdir()
        for key in ("tls.crt", "tls.key", "ca.crt"):
            (version / key).write_bytes(base64.b64decode(data[key]))
        staged = self.directory / "..data_tmp"
        staged.symlink_to(version.name)
        os.replace(staged, self.directory / "..data")
        for key in ("tls.crt", "tls.key", "ca.crt"):
            if not (self.directory / key).is_symlink():
                (self.directory / key).symlink_to(f"..data/{key}")


class Traffic(threading.Thread):
    """Creates GPU pods one after another until stopped; keeps every failure."""

    def __init__(self, core: Any, namespace: str):
        super().__init__(daemon=True)
        self.core, self.namespace = core, namespace
        self.created: list[str] = []
        self.failures: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            name = f"p-{len(self.created) + len(self.failures)}"
            try:
                pod = self.core.create_namespaced_pod(self.namespace, gpu_pod(name))
            except ApiException as err:
                self.failures.append(f"{name}: HTTP {err.status} {err.body}")
                continue
            if (pod.metadata.annotations or {}).get("gpu-scheduler.io/rule") != "rotation":
                self.failures.append(f"{name}: not mutated ({pod.metadata.annotations})")
            self.created.append(name)

    def more(self, count: int) -> None:
        """Wait until `count` more pods have been created (or failed)."""
        target = len(self.created) + len(self.failures) + count
        wait_for(lambda: len(self.created) + len(self.failures) >= target, f"{count} more pod creations", timeout=60)


def ensure(plane: Any, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "gpu_scheduler", "certs", "ensure", "--kubeconfig",
                             str(plane.kubeconfig), *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def served_serial(port: int) -> int:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10)) as sock:
        return x509.load_der_x509_certificate(sock.getpeercert(binary_form=True)).serial_number


def test_a_ca_rotation_under_traffic_fails_no_admission(plane, api, tmp_path):
    core: Any = client.CoreV1Api(api)
    admission: Any = client.AdmissionregistrationV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    namespace, hook_name = f"rotation-{suffix}", f"rotation-{suffix}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": namespace, "labels": {"rotation": suffix}}})
    certs_args = ("--secret", f"{namespace}/wh-tls", "--service", "wh", "--ip", "127.0.0.1",
                  "--webhook-config", hook_name)
    short = ("--days", "30", "--ca-days", "62")  # shortened validity: the CA outlives a certificate by a month

    volume = ProjectedSecret(tmp_path / "tls")
    port = servers.free_port()
    kubectl(plane, "apply", "-f", "-", stdin=f"""
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {{name: {hook_name}}}
webhooks:
  - name: pods.{suffix}.rotation.gpu-scheduler.io
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 10
    clientConfig: {{url: "https://127.0.0.1:{port}/mutate"}}
    namespaceSelector: {{matchLabels: {{rotation: "{suffix}"}}}}
    rules: [{{operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods]}}]
""")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(CONFIG)
    server = None
    traffic = Traffic(core, namespace)
    try:
        assert ensure(plane, *certs_args, *short, "--margin-days", "1").startswith(f"{namespace}/wh-tls: create")
        volume.sync(core, namespace, "wh-tls")
        server = servers.start_webhook(volume.directory, tmp_path, "--config", str(config_file), port=port,
                                       env={"KUBECONFIG": str(plane.kubeconfig)})
        first = served_serial(port)

        def bundle() -> list[x509.Certificate]:
            value = admission.read_mutating_webhook_configuration(hook_name).webhooks[0].client_config.ca_bundle
            pem = base64.b64decode(value) if isinstance(value, str) else value
            return x509.load_pem_x509_certificates(pem)

        old_ca = bundle()
        assert len(old_ca) == 1
        wait_for(lambda: _admits(core, namespace), "the apiserver to call the webhook with the new caBundle")
        traffic.start()
        traffic.more(10)

        # The CA is inside the rotation window (62 days left < 40 margin + 30 validity): a new CA is trusted
        # next to the old one, and a serving certificate signed by it is written to the Secret.
        assert "rotate-ca" in ensure(plane, *certs_args, *short[:2], "--ca-days", "100", "--margin-days", "40")
        assert {c.subject for c in bundle()} >= {old_ca[0].subject} and len(bundle()) == 2
        traffic.more(10)
        volume.sync(core, namespace, "wh-tls")  # the kubelet projects the new Secret; new connections use it
        servers.eventually(lambda: served_serial(port) != first, timeout=10)
        traffic.more(10)

        # After the grace period the old CA is dropped: only the new one is trusted, and it is the one in use.
        assert "finish-rotation" in ensure(plane, *certs_args, *short[:2], "--ca-days", "100", "--margin-days", "1",
                                           "--grace-minutes", "0")
        assert len(bundle()) == 1 and bundle()[0] != old_ca[0]
        volume.sync(core, namespace, "wh-tls")
        traffic.more(10)
        assert "reuse" in ensure(plane, *certs_args, *short[:2], "--ca-days", "100", "--margin-days", "1")
        traffic.more(5)
    finally:
        traffic.halt.set()
        if traffic.is_alive():
            traffic.join(30)
        if server is not None:
            server.stop()
        admission.delete_mutating_webhook_configuration(hook_name)
        core.delete_collection_namespaced_pod(namespace)  # no namespace controller runs here to empty it
    assert traffic.failures == []
    assert len(traffic.created) >= 45


def _admits(core: Any, namespace: str) -> bool:
    """A dry-run creation comes back mutated: the webhook configuration is in force in the apiserver."""
    pod = core.create_namespaced_pod(namespace, gpu_pod("probe"), dry_run="All")
    return (pod.metadata.annotations or {}).get("gpu-scheduler.io/rule") == "rotation"


def test_certs_ensure_every_keeps_running_as_the_sidecar_and_stops_on_sigterm(plane, api, tmp_path):
    core: Any = client.CoreV1Api(api)
    namespace = f"renewer-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    log = tmp_path / "renewer.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "gpu_scheduler", "certs", "ensure", "--kubeconfig", str(plane.kubeconfig),
         "--secret", f"{namespace}/wh-tls", "--service", "wh", "--every", "1s"],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: log.read_text().count("reuse") >= 2, "two periodic checks after the creation")
        assert "wh-tls: create" in log.read_text()
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert process.wait(10) == 0 and time.monotonic() - started < 5, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
