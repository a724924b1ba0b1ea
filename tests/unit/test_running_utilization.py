"""The live utilization plugin against a local HTTP(S) server that answers as Prometheus' `/api/v1/query` does: the
client options (CA, bearer token file), the states (fresh, failing within maxAgeSeconds, stale), what each does to the
model, the metrics and the health line. The real Prometheus is in tests/e2e/test_utilization.py."""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from prometheus_client import REGISTRY

from certs import pki
from gpu_scheduler import prometheus
from gpu_scheduler.runtime.plugins import utilization as plugin
from scheduler_core import profile, utilization, watched
from tests.unit.builders import node
from tests.unit.test_utilization import answer, dcgm
from webhook import config


class FakePrometheus:
    """Answers `/api/v1/query` with `self.body` (JSON) and `self.status`, and remembers what it was asked."""

    def __init__(self, tls: pki.KeyPair | None = None):
        self.body: Any = answer()
        self.status = 200
        self.asked: list[tuple[str, str | None]] = []  # (query, Authorization header)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                owner.asked.append((parse_qs(url.query).get("query", [""])[0], self.headers.get("Authorization")))
                data = json.dumps(owner.body).encode() if not isinstance(owner.body, bytes) else owner.body
                self.send_response(owner.status if url.path == "/api/v1/query" else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[FakePrometheus]:
    fake = FakePrometheus()
    yield fake
    fake.close()


class Handle:
    """What the plugin uses of a runner: the model, the settings, `post` (run at once, as the extender does)."""

    def __init__(self, settings: config.Config):
        self.settings = settings
        self.model = watched.WatchedCluster(gpu_resources=("nvidia.com/gpu",), scheduling=settings.scheduling)
        for name in ("a", "b"):
            self.model.node_event("ADDED", node(name, gpus=2), now=None)  # type: ignore[arg-type]

    def post(self, call: Any, *args: Any) -> None:
        call(*args)

    def busy(self, name: str) -> float:
        cluster = self.model.cluster
        return float(cluster.current_utilization(np.array([cluster.index[name]]))[0])


def settings_for(url: str, **fields: Any) -> config.Config:
    return config.parse({"scheduling": {"utilization": {"prometheus": {"url": url, "refreshSeconds": 3600,
                                                                         "maxAgeSeconds": 7200, **fields}}}})


def sample_value(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_fresh_failing_stale_and_fresh_again(server, caplog):
    caplog.set_level(logging.INFO, logger=plugin.__name__)
    handle = Handle(settings_for(server.url))
    poller = plugin.Poller(handle.settings.scheduling.prometheus, lambda readings: None)  # type: ignore[arg-type]
    live = plugin.LiveUtilization.__new__(plugin.LiveUtilization)
    live.handle, live.poller = handle, poller  # type: ignore[assignment]
    poller.publish = lambda readings: handle.post(live._apply, readings)

    server.body = answer(dcgm("a", 0, "80"), dcgm("a", 1, "60"), dcgm("ghost", 0, "1"), dcgm("b", 0, "NaN"))
    ignored_before = {r: sample_value("gpu_scheduler_utilization_ignored_samples_total", reason=r)
                      for r in utilization.IGNORED_REASONS}
    poller.refresh()
    assert poller.status.state == plugin.FRESH and handle.busy("a") == pytest.approx(0.7)
    assert np.isnan(handle.busy("b"))
    assert server.asked[-1] == ("max by (Hostname, gpu, UUID) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[2m]))", None)
    assert sample_value("gpu_scheduler_utilization_source_up") == 1
    assert sample_value("gpu_scheduler_utilization_nodes") == 1
    grew = {r: sample_value("gpu_scheduler_utilization_ignored_samples_total", reason=r) - ignored_before[r]
            for r in utilization.IGNORED_REASONS}
    assert grew == {utilization.INVALID_VALUE: 1, utilization.NO_NODE_LABEL: 0, utilization.NODE_NOT_MATCHED: 0,
                    utilization.UNKNOWN_NODE: 1}
    assert "fresh since" in live.health() and "1 left out" in live.health()

    server.status, server.body = 503, b"overloaded"
    poller.refresh()  # within maxAgeSeconds: the readings stay
    assert poller.status.state == plugin.FAILING and handle.busy("a") == pytest.approx(0.7)
    assert "HTTP 503: overloaded" in live.health() and "stay in force" in live.health()
    assert sample_value("gpu_scheduler_utilization_source_up") == 0

    poller.last_success = time.monotonic() - 7201  # older than maxAgeSeconds
    poller.refresh()
    assert poller.status.state == plugin.STALE and np.isnan(handle.busy("a"))
    assert "nodes score neutral" in live.health()
    assert sample_value("gpu_scheduler_utilization_stale") == 1

    server.status, server.body = 200, answer(dcgm("a", 0, "10"))
    poller.refresh()
    assert poller.status.state == plugin.FRESH and handle.busy("a") == pytest.approx(0.1)
    changes = [r.getMessage() for r in caplog.records if "live GPU utilization" in r.getMessage()]
    assert [m.split(": ")[2].split(" since")[0] for m in changes] == ["fresh", "failing", "stale", "fresh"]


def test_nothing_listening_is_a_failure_that_names_the_url():
    handle = Handle(settings_for("http://127.0.0.1:9"))
    poller = plugin.Poller(handle.settings.scheduling.prometheus, lambda readings: None)  # type: ignore[arg-type]
    poller.refresh()
    assert poller.status.state == plugin.STARTING
    assert "GET http://127.0.0.1:9/api/v1/query:" in poller.status.detail and "refused" in poller.status.detail


def test_a_query_prometheus_refuses_shows_its_error(server):
    server.status, server.body = 400, {"status": "error", "errorType": "bad_data", "error": "parse error"}
    client = prometheus.Client(profile.PrometheusSource(url=server.url))
    with pytest.raises(prometheus.QueryFailed, match="HTTP 400: bad_data: parse error"):
        client.query("sum(")


def test_https_with_the_ca_and_a_bearer_token_read_at_each_query(tmp_path: Path):
    ca = pki.new_ca()
    pair = pki.issue(ca, "prometheus", ip_addresses=["127.0.0.1"])
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    token = tmp_path / "token"
    token.write_text("first\n")
    fake = FakePrometheus(tls=(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")))  # type: ignore[arg-type]
    try:
        source = profile.PrometheusSource(url=fake.url, ca_file=str(tmp_path / "ca.crt"), bearer_token_file=str(token))
        client = prometheus.Client(source)
        assert client.query("up")["status"] == "success"
        token.write_text("rotated")
        client.query("up")
        assert [auth for _, auth in fake.asked] == ["Bearer first", "Bearer rotated"]
        untrusted = prometheus.Client(profile.PrometheusSource(url=fake.url))
        with pytest.raises(prometheus.QueryFailed, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.query("up")
        token.unlink()
        with pytest.raises(prometheus.QueryFailed, match=f"bearerTokenFile {token}: cannot read it"):
            client.query("up")
    finally:
        fake.close()


def test_a_config_change_restarts_the_poller_and_dropping_the_source_drops_the_readings(server):
    server.body = answer(dcgm("a", 0, "80"))
    handle = Handle(settings_for(server.url, refreshSeconds=0.05, maxAgeSeconds=60))
    live = plugin.LiveUtilization(handle)  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + 10
        while np.isnan(handle.busy("a")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert handle.busy("a") == pytest.approx(0.8)
        first = live.poller
        live.configure(handle.settings)  # the same source: the same poller
        assert live.poller is first
        live.configure(config.parse({}))
        assert live.poller is None and first is not None and first.stopped.is_set() and np.isnan(handle.busy("a"))
        assert live.health() == "no live source (scheduling.utilization.prometheus): node annotations only"
    finally:
        live.stop()


def test_the_verbose_health_check_lists_each_check_and_the_source_without_failing_on_it():
    from types import SimpleNamespace

    from gpu_scheduler.runtime import standalone

    class Source:
        name = "utilization"

        def health(self) -> str:
            return "prometheus http://p:9090: stale since 12:00:00Z: connection refused; nodes score neutral"

    alive = SimpleNamespace(is_alive=lambda: True)
    scheduler = SimpleNamespace(_loop=alive, watches=SimpleNamespace(down=lambda: []), plugins=[Source()])
    assert standalone._health_detail(scheduler, standalone._health_problems(scheduler)) == (  # type: ignore[arg-type]
        "[+]scheduling-loop ok\n[+]watches ok\n[+]utilization ok: prometheus http://p:9090: stale since 12:00:00Z: "
        "connection refused; nodes score neutral\nhealthz check passed\n")
    scheduler.watches = SimpleNamespace(down=lambda: ["nodes watch down for 75s"])
    detail = standalone._health_detail(scheduler, standalone._health_problems(scheduler))  # type: ignore[arg-type]
    assert detail.startswith("[-]nodes watch down for 75s\n[+]utilization ok") and detail.endswith("check failed\n")
    assert standalone._health_detail(None, []).endswith("healthz check passed\n")
