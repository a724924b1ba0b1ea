"""The real `gpu-scheduler webhook`: gunicorn with gthread workers over TLS, reloads, bad input."""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import servers

CONFIG_V1 = """
schedulerName: gpu-scheduler
admission:
  rules:
    - name: team-rule
      namespaceSelector: {matchLabels: {team: research}}
      set: {gpuModel: A100}
    - name: first
      set: {gpuModel: A100, gpuMemoryMiB: 40960}
"""
CONFIG_V2 = CONFIG_V1.replace("name: first", "name: second").replace("A100, gpuMemoryMiB", "H100, gpuMemoryMiB")
CONFIG_INVALID = CONFIG_V1.replace("gpuMemoryMiB: 40960", 'gpuMemoryMiB: "40Gi"')


class ConfigVolume:
    """A directory laid out as the kubelet lays out a ConfigMap volume, updated by symlink swap."""

    def __init__(self, root: Path):
        self.root = root
        self.version = 0
        root.mkdir(parents=True, exist_ok=True)

    @property
    def file(self) -> Path:
        return self.root / "config.yaml"

    def write(self, text: str) -> None:
        self.version += 1
        data = self.root / f"..2026_11_29_{self.version}"
        data.mkdir()
        (data / "config.yaml").write_text(text)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(data.name)
        os.replace(tmp, self.root / "..data")
        if not self.file.is_symlink():
            self.file.symlink_to("..data/config.yaml")


def review(uid="u-1", gpus="1", namespace="default", **request):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "train-", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }
    body = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "userInfo": {"username": "tester"},
        "namespace": namespace,
        "object": pod,
    }
    body.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def patch_of(answer):
    response = answer["response"]
    return json.loads(base64.b64decode(response["patch"])) if "patch" in response else []


def rule_of(answer):
    return answer["response"].get("auditAnnotations", {}).get("rule")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return servers.generate_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def webhook(certs, tmp_path_factory):
    """One server for the read-only tests (no cluster credentials: namespace labels unknown)."""
    volume = ConfigVolume(tmp_path_factory.mktemp("config"))
    volume.write(CONFIG_V1)
    server = servers.start_webhook(certs, tmp_path_factory.mktemp("logs"), "--config", str(volume.file),
                                   env={"KUBECONFIG": "/nonexistent"})
    yield server
    server.stop()


def test_a_gpu_pod_is_patched_over_tls(webhook):
    answer = webhook.post_review(review(uid="abc"))
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == "abc" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert {"op": "add", "path": "/spec/schedulerName", "value": "gpu-scheduler"} in patch_of(answer)
    assert rule_of(answer) == "first"


def test_without_cluster_credentials_namespace_rules_do_not_match_and_a_warning_says_so(webhook):
    answer = webhook.post_review(review(namespace="research"))
    assert rule_of(answer) == "first"
    assert any("namespace labels unavailable" in w for w in answer["response"]["warnings"])
    assert "namespace selectors cannot match" in webhook.logs() or "namespaceSelector cannot match" in webhook.logs()


def test_non_gpu_pods_updates_and_other_resources_pass_unpatched(webhook):
    for body in (
        review(gpus="0"),
        review(operation="UPDATE"),
        review(resource={"group": "", "version": "v1", "resource": "services"}, object={"kind": "Service"}),
    ):
        response = webhook.post_review(body)["response"]
        assert response["allowed"] is True and "patch" not in response and "patchType" not in response


def test_only_tls_12_or_newer_is_spoken(webhook):
    context = ssl.create_default_context(cafile=str(webhook.certs / "ca.crt"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.maximum_version = ssl.TLSVersion.TLSv1_1
        context.minimum_version = ssl.TLSVersion.TLSv1
    context.set_ciphers("ALL:@SECLEVEL=0")
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=context, timeout=5)
    with pytest.raises(ssl.SSLError):
        conn.request("GET", "/healthz")
    conn.close()


def test_connections_are_kept_alive(webhook):
    conn = webhook.connection()
    conn.connect()
    first_socket = conn.sock
    for n in range(20):
        answer = webhook.post_review(review(uid=f"keepalive-{n}"), conn=conn)
        assert answer["response"]["uid"] == f"keepalive-{n}"
        assert conn.sock is first_socket, f"the server closed the connection after request {n}"
    conn.close()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "body: not valid JSON"),
        (b"[]", "body: expected an AdmissionReview object, got a list"),
        (json.dumps({**review(), "apiVersion": "v1"}).encode(), "apiVersion: expected 'admission.k8s.io/v1'"),
        (json.dumps(review(uid=None)).encode(), "request.uid: expected a non-empty string, got null"),
        (json.dumps(review(object="pod")).encode(), "request.object: expected a Pod object, got a string"),
        (b"[" * 100000, "body: not valid JSON"),
    ],
    ids=["not-json", "list", "api-version", "no-uid", "object-not-pod", "deep-nesting"],
)
def test_malformed_reviews_get_400_with_a_message(webhook, body, message):
    status, raw = webhook.request("POST", "/mutate", body)
    assert status == 400
    answer = json.loads(raw)
    assert answer["error"].startswith(message), answer


def test_a_body_over_the_limit_is_refused_before_it_is_read(webhook):
    conn = webhook.connection()
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(7 * 2**20))
    conn.endheaders()
    conn.send(b"{")
    response = conn.getresponse()
    assert response.status == 400
    assert json.loads(response.read())["error"] == "body: larger than the 6 MiB limit"
    conn.close()


def test_unknown_paths_and_methods_answer_json(webhook):
    status, raw = webhook.request("GET", "/mutate")
    assert status == 405 and "error" in json.loads(raw)
    status, raw = webhook.request("GET", "/nope")
    assert status == 404 and "error" in json.loads(raw)


def test_health_readiness_and_metrics(webhook):
    assert webhook.request("GET", "/healthz")[0] == 200
    status, raw = webhook.request("GET", "/readyz")
    assert status == 200 and json.loads(raw)["schedulerName"] == "gpu-scheduler"
    webhook.post_review(review())
    status, raw = webhook.request("GET", "/metrics")
    text = raw.decode()
    assert status == 200
    for name in (
        'gpu_scheduler_webhook_requests_total{outcome="patched"}',
        "gpu_scheduler_webhook_request_duration_seconds_bucket",
        'gpu_scheduler_webhook_rule_matches_total{rule="first"}',
        "gpu_scheduler_config_reloads_total",
        "gpu_scheduler_config_reload_failures_total",
        "gpu_scheduler_config_last_success_timestamp_seconds",
    ):
        assert name in text, name


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@st.composite
def damaged_reviews(draw):
    """A valid review with one field, at any depth of request or pod, replaced by arbitrary JSON."""
    body = review()
    paths = [("apiVersion",), ("kind",), ("request",), ("request", "uid"), ("request", "operation"),
             ("request", "resource"), ("request", "namespace"), ("request", "object"),
             ("request", "object", "metadata"), ("request", "object", "spec"),
             ("request", "object", "metadata", "annotations"), ("request", "object", "metadata", "labels"),
             ("request", "object", "spec", "containers"), ("request", "object", "spec", "schedulerName"),
             ("request", "object", "spec", "containers", 0, "resources")]
    path = draw(st.sampled_from(paths))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = draw(json_values)
    return json.dumps(body).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode()), damaged_reviews()))
def test_malformed_bodies_never_get_a_5xx(webhook, body):
    status, raw = webhook.request("POST", "/mutate", body)
    assert status in (200, 400), raw
    answer = json.loads(raw)
    if status == 400:
        assert answer["error"]
    else:
        assert answer["response"]["allowed"] is True


@pytest.fixture()
def reloading(certs, tmp_path):
    volume = ConfigVolume(tmp_path / "config")
    volume.write(CONFIG_V1)
    server = servers.start_webhook(certs, tmp_path, "--config", str(volume.file), env={"KUBECONFIG": "/nonexistent"})
    yield volume, server
    server.stop()


def rules_seen_by_fresh_connections(server, count=12):
    """Fresh connections land on any worker: the rule each one answered with."""
    return {rule_of(server.post_review(review(uid=f"r{n}"))) for n in range(count)}


def test_a_changed_config_is_in_force_in_every_worker_within_5_seconds(reloading):
    volume, server = reloading
    assert rules_seen_by_fresh_connections(server) == {"first"}
    volume.write(CONFIG_V2)
    servers.eventually(lambda: rules_seen_by_fresh_connections(server) == {"second"}, timeout=20)
    answer = server.post_review(review())
    assert {"op": "add", "path": "/metadata/annotations", "value": {
        "gpu.nvidia.com/model": "H100", "gpu.nvidia.com/memory": "40960",
        "controller.kubernetes.io/pod-deletion-cost": "-50", "gpu-scheduler.io/initial-deletion-cost": "-50",
        "gpu-scheduler.io/rule": "second"}} in patch_of(answer)


def test_an_invalid_config_is_rejected_and_the_last_good_one_stays(reloading):
    volume, server = reloading
    volume.write(CONFIG_INVALID)

    def failures_counted():
        _, raw = server.request("GET", "/metrics")
        return "gpu_scheduler_config_reload_failures_total 2.0" in raw.decode()

    servers.eventually(failures_counted, timeout=20)  # one per worker
    assert 'admission.rules[1].set.gpuMemoryMiB: must be a positive integer, got "40Gi"' in server.logs()
    assert rules_seen_by_fresh_connections(server) == {"first"}
    assert server.request("GET", "/readyz")[0] == 200
    volume.write(CONFIG_V2)
    servers.eventually(lambda: rules_seen_by_fresh_connections(server) == {"second"}, timeout=20)


def test_a_webhook_started_with_an_invalid_config_is_alive_but_not_ready(certs, tmp_path):
    volume = ConfigVolume(tmp_path / "config")
    volume.write(CONFIG_INVALID)
    server = servers.start_webhook(certs, tmp_path, "--config", str(volume.file), ready=False,
                                   env={"KUBECONFIG": "/nonexistent"})
    try:
        status, raw = server.request("GET", "/readyz")
        assert status == 503 and json.loads(raw)["error"] == "no valid configuration loaded yet"
        response = server.post_review(review())["response"]
        assert "patch" not in response and response["warnings"]
        volume.write(CONFIG_V1)
        servers.eventually(lambda: server.request("GET", "/readyz")[0] == 200, timeout=20)
    finally:
        server.stop()


def test_idle_tls_connections_do_not_stall_requests(webhook):
    """Go's transport dials spare connections that finish the handshake and then idle (see webhook.workers)."""
    import socket

    idle = []
    try:
        for _ in range(20):  # more than workers x threads
            raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=5)
            idle.append(webhook.context.wrap_socket(raw, server_hostname="127.0.0.1"))
        conn = webhook.connection(timeout=5)
        answer = webhook.post_review(review(uid="after-idle"), conn=conn)
        assert answer["response"]["uid"] == "after-idle"
        conn.close()
        # the idle connections still work when they finally send a request
        idle[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert idle[0].recv(100).startswith(b"HTTP/1.1 200")
    finally:
        for sock in idle:
            sock.close()


def test_a_renewed_serving_certificate_is_used_without_a_restart(tmp_path):
    """gunicorn builds the TLS context per connection: new connections get the renewed certificate,
    connections already open keep working (what `certs ensure` renewing a mounted Secret relies on)."""
    import shutil

    from cryptography import x509

    from certs import files, pki

    certs_dir = servers.generate_certs(tmp_path / "certs")
    volume = ConfigVolume(tmp_path / "config")
    volume.write(CONFIG_V1)
    server = servers.start_webhook(certs_dir, tmp_path, "--config", str(volume.file), env={"KUBECONFIG": "/nonexistent"})
    try:
        old_conn = server.connection()
        server.post_review(review(uid="before"), conn=old_conn)
        old_serial = x509.load_der_x509_certificate(old_conn.sock.getpeercert(binary_form=True)).serial_number

        new_ca = pki.new_ca("renewed")  # the client below trusts only this one
        renewed = pki.issue(new_ca, "wh", dns_names=["wh"], ip_addresses=["127.0.0.1"])
        staging = tmp_path / "staging"
        files.write_serving_bundle(staging, new_ca, renewed)
        for name in ("tls.key", "tls.crt"):  # as a Secret volume update would: whole files swapped in
            shutil.copy(staging / name, certs_dir / f".{name}.tmp")
            os.replace(certs_dir / f".{name}.tmp", certs_dir / name)

        server.post_review(review(uid="still-open"), conn=old_conn)  # the open connection keeps working
        context = ssl.create_default_context(cafile=str(staging / "ca.crt"))
        fresh = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
        fresh.request("GET", "/healthz")
        assert fresh.getresponse().status == 200
        new_serial = x509.load_der_x509_certificate(fresh.sock.getpeercert(binary_form=True)).serial_number
        assert new_serial == renewed.certificate.serial_number != old_serial
        fresh.close()
        old_conn.close()
    finally:
        server.stop()


def test_a_certificate_and_key_that_do_not_match_keep_the_previous_certificate_serving(tmp_path):
    """A reader can catch tls.crt of one Secret version with tls.key of the next: new connections then
    keep the previous certificate (and say why in the log) until the pair loads."""
    import shutil

    from cryptography import x509

    from certs import files, pki

    certs_dir = servers.generate_certs(tmp_path / "certs")
    volume = ConfigVolume(tmp_path / "config")
    volume.write(CONFIG_V1)
    server = servers.start_webhook(certs_dir, tmp_path, "--config", str(volume.file), env={"KUBECONFIG": "/nonexistent"})

    def served_serial() -> int:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        fresh = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
        fresh.request("GET", "/healthz")
        assert fresh.getresponse().status == 200
        serial = x509.load_der_x509_certificate(fresh.sock.getpeercert(binary_form=True)).serial_number
        fresh.close()
        return serial

    try:
        before = served_serial()
        ca = pki.new_ca("next")
        next_pair = pki.issue(ca, "wh", dns_names=["wh"], ip_addresses=["127.0.0.1"])
        staging = tmp_path / "staging"
        files.write_serving_bundle(staging, ca, next_pair)
        shutil.copy(staging / "tls.crt", certs_dir / ".tls.crt.tmp")  # the new certificate, the old key
        os.replace(certs_dir / ".tls.crt.tmp", certs_dir / "tls.crt")
        assert [served_serial() for _ in range(3)] == [before] * 3
        servers.eventually(lambda: "does not load" in server.logs(), timeout=20)

        shutil.copy(staging / "tls.key", certs_dir / ".tls.key.tmp")  # the pair complete
        os.replace(certs_dir / ".tls.key.tmp", certs_dir / "tls.key")
        assert served_serial() == next_pair.certificate.serial_number
    finally:
        server.stop()
