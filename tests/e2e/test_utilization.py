"""Live GPU utilization through a real Prometheus, and the shipped monitoring proven against it.

A real Prometheus (hack/prometheus.sh) scrapes a dcgm-exporter stand-in (tests/e2e/dcgm.py: dcgm-exporter's text
format; the only fake, there are no GPUs here) and our own components, each as the shipped ServiceMonitor describes
its endpoint: `gpu-scheduler run` and `gpu-scheduler extender`, both reading utilization from that Prometheus, and
the installed webhook. Utilization steers where the next pod goes and which GPUs it gets (device plugin and DRA);
Prometheus goes down and comes back; series for nodes that do not exist and absurd values are left out with a count.
Last, every PromQL expression of the shipped dashboard and alerts is evaluated against that Prometheus, and the
alerts pass `promtool check rules` and `promtool test rules`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from scheduler_core import utilization
from tests.e2e import controlplane as cp
from tests.e2e import prometheus as prom
from tests.e2e import standins
from tests.e2e.dcgm import DcgmExporter
from tests.e2e.installing import wait_for
from tests.e2e.scheduling import SchedulerProcess, bound_node, request, start_extender, start_scheduler

MONITORING = Path(__file__).parents[2] / "manifests" / "monitoring"
RULES_TEST = Path(__file__).parents[1] / "data" / "monitoring" / "rules_test.yaml"
SUFFIX = uuid.uuid4().hex[:5]
POOL = f"util-{SUFFIX}"
SCHEDULER = f"util-{SUFFIX}"
A, B, C, D = (f"util-{SUFFIX}-{name}" for name in "abcd")  # a, b: where the next pod goes; c: GPUs; d: DRA
CLASS = f"gpu-util-{SUFFIX}"
DRIVER = standins.DRA_DRIVER


# --- the pieces ------------------------------------------------------------------------------------------------------


def monitored_jobs() -> list[prom.Job]:
    """A scrape job per shipped ServiceMonitor, named as the Prometheus Operator names it (the Service it selects),
    with its endpoint's scheme, path and TLS setting; and dcgm-exporter's."""
    services = {}
    for path in (MONITORING.parent).rglob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "Service":
                services[document["metadata"]["name"]] = document["metadata"].get("labels", {})
    jobs = [prom.Job("dcgm-exporter")]
    for monitor in yaml.safe_load_all((MONITORING / "servicemonitors.yaml").read_text()):
        wanted = monitor["spec"]["selector"]["matchLabels"]
        service = next(name for name, labels in services.items() if wanted.items() <= labels.items())
        endpoint = monitor["spec"]["endpoints"][0]
        jobs.append(prom.Job(service, scheme=endpoint.get("scheme", "http"), metrics_path=endpoint["path"],
                             insecure_skip_verify=endpoint.get("tlsConfig", {}).get("insecureSkipVerify", False)))
    return jobs


def rule_file(work: Path) -> Path:
    """The PrometheusRule's spec as a plain rule file, as the Prometheus Operator hands it to Prometheus."""
    rules = yaml.safe_load((MONITORING / "rules.yaml").read_text())
    path = work / "rules.yaml"
    path.write_text(yaml.safe_dump(rules["spec"], sort_keys=False))
    return path


def metric(server: SchedulerProcess, name: str, **labels: str) -> float:
    """A sample of the component's own /metrics (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return 0.0


def health(server: SchedulerProcess) -> str:
    """`/healthz?verbose` ("" until it serves)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz?verbose", timeout=10) as response:
            return response.read().decode()
    except OSError:
        return ""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("utilization")


@pytest.fixture(scope="module")
def dcgm() -> Iterator[DcgmExporter]:
    with DcgmExporter() as exporter:
        for node in (A, B):
            for index in range(2):
                exporter.set_gpu(node, index, util=50)
        for index in range(4):
            exporter.set_gpu(C, index, util=50)
            exporter.set_gpu(D, index, util=50, uuid=f"GPU-{D}-{index}")  # as the DRA driver's slice names them
        yield exporter


@pytest.fixture(scope="module")
def prometheus(dcgm: DcgmExporter, work: Path) -> Iterator[prom.Prometheus]:
    from tests.e2e.conftest import LOG_SOURCES

    prom.require_binaries()
    with prom.Prometheus(jobs=monitored_jobs(), rule_files=[rule_file(work)]) as server:
        LOG_SOURCES.append(lambda: ("prometheus", server.logs_tail(40)))
        server.set_targets("dcgm-exporter", [dcgm.address])
        yield server


@pytest.fixture(scope="module")
def cluster(api: Any) -> Iterator[str]:
    """Nodes a and b (2 GPUs), c (4 GPUs), d (DRA only: a ResourceSlice of 4 GPUs on one PCIe root), a DeviceClass,
    and a namespace."""
    core = client.CoreV1Api(api)
    for name, gpus in ((A, 2), (B, 2), (C, 4), (D, 0)):
        cp.create_gpu_node(api, name, gpus=gpus, labels={"e2e-pool": POOL})
    resource = client.ResourceV1Api(api)
    resource.create_device_class({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": CLASS}, "spec": {"selectors": [{"cel": {"expression": (
                                      f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'")}}]}})
    resource.create_resource_slice(standins.gpu_slice(D, count=4))
    namespace = f"util-{SUFFIX}"
    core.create_namespace({"metadata": {"name": namespace}})
    yield namespace
    core.delete_namespace(namespace)
    resource.delete_resource_slice(f"{D}-{DRIVER}")
    resource.delete_device_class(CLASS)
    for name in (A, B, C, D):
        core.delete_node(name)


def config_text(prometheus: prom.Prometheus) -> str:
    """Only the gpu-utilization score weighs, so where a pod goes is utilization's doing; refreshed every second,
    stale after three. The query reads dcgm-exporter's gauge as it is now (the default smooths it over 2 min)."""
    weights = {"gpu-utilization": 1, "gpu-fragmentation": 0, "gpu-placement": 0, "node-resources": 0,
               "balanced-allocation": 0, "image-locality": 0, "locality": 0, "spot": 0, "dra-devices": 0,
               "dra-demand": 0}
    return yaml.safe_dump({"schedulerName": SCHEDULER, "scheduling": {
        "weights": weights,
        "utilization": {"prometheus": {"url": prometheus.url, "query": "DCGM_FI_DEV_GPU_UTIL", "refreshSeconds": 1,
                                       "maxAgeSeconds": 3, "timeoutSeconds": 1}}}})


@pytest.fixture(scope="module")
def scheduler(prometheus: prom.Prometheus, cluster: str, scheduler_kubeconfig: Path,
              work: Path) -> Iterator[SchedulerProcess]:
    from tests.e2e.conftest import LOG_SOURCES

    config = work / "config.yaml"
    config.write_text(config_text(prometheus))
    server = start_scheduler(scheduler_kubeconfig, work, "--config", str(config), name="utilization-run")
    LOG_SOURCES.append(lambda: ("gpu-scheduler run (utilization)", server.logs()[-8000:]))
    prometheus.set_targets("gpu-scheduler-metrics", [f"127.0.0.1:{server.port}"])
    wait_for(lambda: "fresh" in health(server), "the scheduler to read utilization from Prometheus", timeout=60)
    yield server
    server.stop()


def gpu_pod(core: Any, namespace: str, name: str, *, node: str | None = None, gpus: int = 1, milli: int = 0,
            claim: str | None = None) -> None:
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/cuda:12"}
    if gpus and not claim:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "nodeSelector": {"e2e-pool": POOL}, "containers": [container]}
    if node:
        spec["nodeSelector"]["kubernetes.io/hostname"] = node
    metadata: dict[str, Any] = {"name": name}
    if milli:
        metadata["annotations"] = {"gpu-scheduler.io/gpu-milli": str(milli)}
    if claim:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimName": claim}]
        container["resources"] = {"claims": [{"name": "gpus"}]}
    core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec})


def settle(prometheus: prom.Prometheus, scheduler: SchedulerProcess, node: str, index: int, util: float) -> None:
    """Wait until Prometheus has scraped the exporter's new value and the scheduler has asked Prometheus twice since,
    so the next decision reads it."""
    prometheus.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{node}",gpu="{index}"}}',
                        lambda samples: bool(samples) and samples[0][1] == util)
    asked = metric(scheduler, "gpu_scheduler_utilization_queries_total", result="ok")
    wait_for(lambda: metric(scheduler, "gpu_scheduler_utilization_queries_total", result="ok") >= asked + 2,
             "the scheduler to ask Prometheus again", timeout=15)


def dra_state_of(resource: Any, scheduler: SchedulerProcess, namespace: str, claim: str) -> str:
    """What the API and the scheduler's model hold for node d's GPUs and the claim, for a failure report (a pod once
    stranded here with "cannot allocate all claims" and a model that said nothing more)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{scheduler.port}/metrics", timeout=10) as response:
        counted = [line for line in response.read().decode().splitlines() if f'node="{D}"' in line]
    held = resource.read_namespaced_resource_claim(claim, namespace).status
    slices = [(s.metadata.name, s.spec.pool.name, s.spec.pool.generation, len(s.spec.devices or ()))
              for s in resource.list_resource_slice().items if s.spec.node_name == D]
    return f"the model's metrics for {D}: {counted}; claim status: {held}; slices of {D} in the API: {slices}"


def devices(core: Any, namespace: str, name: str) -> list[int]:
    annotation = core.read_namespaced_pod(name, namespace).metadata.annotations["gpu-scheduler.io/gpu-devices"]
    return sorted(entry["index"] if isinstance(entry, dict) else int(entry) for entry in json.loads(annotation))


# --- utilization steers placement ------------------------------------------------------------------------------------


def test_the_default_query_reads_every_gpu_with_dcgm_exporters_labels(prometheus, dcgm):
    """The stand-in's series as the real Prometheus stores them, and the shipped default query read as the scheduler
    reads it: every GPU of the four nodes, by index and UUID."""
    prometheus.wait_for(f'count(DCGM_FI_DEV_GPU_UTIL{{Hostname="{D}"}}) == 4')
    (labels, value), = prometheus.query(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{C}",gpu="0"}}')
    assert {"gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id", "DCGM_FI_DRIVER_VERSION"} <= labels.keys()
    assert (labels["device"], labels["job"], labels["instance"]) == ("nvidia0", "dcgm-exporter", dcgm.address)
    readings = utilization.read(utilization.vector_of(prometheus.query_raw(utilization.default_query())))
    assert {node: len(readings.gpus[node]) for node in (A, B, C, D)} == {A: 2, B: 2, C: 4, D: 4}
    assert {f"GPU-{D}-{index}" for index in range(4)} <= readings.uuids.keys()



def test_utilization_changes_where_the_next_pod_goes(api, prometheus, dcgm, scheduler, cluster):
    core = client.CoreV1Api(api)
    for index in range(2):
        dcgm.set_gpu(A, index, util=90)
        dcgm.set_gpu(B, index, util=10)
    settle(prometheus, scheduler, B, 1, 10)
    gpu_pod(core, cluster, "first", node=None)
    assert bound_node(core, cluster, "first", who="ours") == B
    for index in range(2):
        dcgm.set_gpu(A, index, util=10)
        dcgm.set_gpu(B, index, util=90)
    settle(prometheus, scheduler, B, 1, 90)
    gpu_pod(core, cluster, "second")
    assert bound_node(core, cluster, "second", who="ours") == A


def test_whole_gpus_and_a_share_go_to_the_least_busy_gpus_of_the_node(api, prometheus, dcgm, scheduler, cluster):
    core = client.CoreV1Api(api)
    for index, util in enumerate((90, 10, 80, 20)):
        dcgm.set_gpu(C, index, util=util)
    settle(prometheus, scheduler, C, 3, 20)
    gpu_pod(core, cluster, "two-whole", node=C, gpus=2)
    bound_node(core, cluster, "two-whole", who="ours")
    assert devices(core, cluster, "two-whole") == [1, 3]
    gpu_pod(core, cluster, "share", node=C, gpus=0, milli=250)
    bound_node(core, cluster, "share", who="ours")
    assert devices(core, cluster, "share") == [2]  # 80% busy beats 90%; both are idle by allocation


def test_a_dra_claim_gets_the_least_busy_gpu(api, prometheus, dcgm, scheduler, cluster):
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    for index, util in enumerate((90, 80, 5, 70)):
        dcgm.set_gpu(D, index, util=util, uuid=f"GPU-{D}-{index}")
    settle(prometheus, scheduler, D, 3, 70)
    resource.create_namespaced_resource_claim(cluster, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "one-gpu"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 1}}]}}})
    gpu_pod(core, cluster, "dra", node=D, claim="one-gpu")
    try:
        assert bound_node(core, cluster, "dra", who="ours") == D
    except AssertionError as err:
        raise AssertionError(f"{err}\n{dra_state_of(resource, scheduler, cluster, 'one-gpu')}") from None
    allocation = resource.read_namespaced_resource_claim("one-gpu", cluster).status.allocation
    assert [result.device for result in allocation.devices.results] == ["gpu-2"]


def test_nodes_that_do_not_exist_and_absurd_values_are_left_out_with_a_count(prometheus, dcgm, scheduler):
    before = {reason: metric(scheduler, "gpu_scheduler_utilization_ignored_samples_total", reason=reason)
              for reason in (utilization.UNKNOWN_NODE, utilization.INVALID_VALUE)}
    ghost = f"util-{SUFFIX}-ghost"
    dcgm.set_gpu(ghost, 0, util=5)
    for index, value in enumerate(("NaN", -5, 1e9)):
        dcgm.set_gpu(f"util-{SUFFIX}-odd", index, util=value)
    prometheus.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{Hostname="util-{SUFFIX}-odd",gpu="2"}}')
    wait_for(lambda: all(metric(scheduler, "gpu_scheduler_utilization_ignored_samples_total", reason=reason)
                         >= before[reason] + (1 if reason == utilization.UNKNOWN_NODE else 3) for reason in before),
             "the ghost node's series and the three absurd values to be counted", timeout=15)
    assert "fresh" in health(scheduler)
    dcgm.remove_node(ghost)
    dcgm.remove_node(f"util-{SUFFIX}-odd")


def test_prometheus_down_degrades_to_neutral_scores_and_back(api, prometheus, dcgm, scheduler, cluster):
    core = client.CoreV1Api(api)
    prometheus.stop()
    try:
        wait_for(lambda: "failing since" in health(scheduler), "the scheduler to notice Prometheus is down")
        wait_for(lambda: "stale since" in health(scheduler), "the readings to go stale after maxAgeSeconds")
        assert metric(scheduler, "gpu_scheduler_utilization_source_up") == 0
        assert metric(scheduler, "gpu_scheduler_utilization_stale") == 1
        assert "nodes score neutral" in health(scheduler) and "[+]utilization ok" in health(scheduler)
        gpu_pod(core, cluster, "while-down")  # scheduling goes on, scoring every node alike
        bound_node(core, cluster, "while-down", who="ours", timeout=30)
    finally:
        prometheus.start()
    wait_for(lambda: "fresh since" in health(scheduler), "the scheduler to read Prometheus again", timeout=30)
    assert metric(scheduler, "gpu_scheduler_utilization_stale") == 0
    log = scheduler.logs()
    assert log.count("live GPU utilization: prometheus") >= 3  # failing, stale, fresh: once each


def test_the_extender_reads_the_same_source_and_every_shipped_expression_returns_data(plane, prometheus, cluster,
                                                                                      installed_webhook, work):
    from tests.e2e.conftest import LOG_SOURCES

    config = work / "extender.yaml"
    config.write_text(config_text(prometheus))
    extender = start_extender(plane.kubeconfig, config, work)
    LOG_SOURCES.append(lambda: ("gpu-scheduler extender (utilization)", extender.logs()[-6000:]))
    try:
        prometheus.set_targets("gpu-scheduler-extender", [f"127.0.0.1:{extender.port}"])
        wait_for(lambda: "fresh" in request(extender, "GET", "/healthz")[1].get("utilization", ""),
                 "the extender to read utilization", timeout=30)
        pod = {"metadata": {"name": "probe", "namespace": cluster, "uid": str(uuid.uuid4())},
               "spec": {"schedulerName": SCHEDULER, "containers": [
                   {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
        status, answer = request(extender, "POST", "/prioritize",
                                 json.dumps({"Pod": pod, "NodeNames": [A, B]}).encode())
        assert status == 200 and {entry["Host"] for entry in answer} == {A, B}
        prometheus.wait_for('gpu_scheduler_extender_requests_total{verb="prioritize"}')
        _admit_one_gpu_pod(installed_webhook.core, prometheus, f"{cluster}-injected")
        prometheus.set_targets("gpu-scheduler-webhook", [f"127.0.0.1:{installed_webhook.server.port}"])
        _every_expression_returns_data(prometheus)
    finally:
        extender.stop()


# --- the shipped monitoring ------------------------------------------------------------------------------------------


def _admit_one_gpu_pod(core: Any, prometheus: prom.Prometheus, namespace: str) -> None:
    """A GPU pod through the installed webhook (a rule matches it), so its request and rule series have data."""
    core.create_namespace({"metadata": {"name": namespace, "labels": {"gpu-scheduler.io/inject": "enabled"}}})
    core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "admitted"},
                                           "spec": {"containers": [{"name": "main", "image": "registry.invalid/x",
                                                                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    core.delete_namespace(namespace)


def _every_expression_returns_data(prometheus: prom.Prometheus) -> None:
    """While every component is scraped: each dashboard expression returns data, each alert's expression evaluates
    and each series it selects exists (an alert's whole expression is empty while all is well)."""
    from tests.unit.test_manifests import monitoring_expressions

    for job in ("gpu-scheduler-metrics", "gpu-scheduler-webhook", "gpu-scheduler-extender", "dcgm-exporter"):
        prometheus.wait_for(f'up{{job="{job}"}} == 1', timeout=30)
    time.sleep(2)  # two scrapes of everyone, so every rate() has its two samples
    rules = yaml.safe_load((MONITORING / "rules.yaml").read_text())["spec"]["groups"]
    alerts = {rule["expr"] for group in rules for rule in group["rules"]}
    empty = []
    for expr in monitoring_expressions():
        if expr in alerts:
            prometheus.query(expr)  # evaluates
            for selector in _selectors(prometheus, expr):
                if not prometheus.query(selector):
                    empty.append(f"{selector} (in the alert {expr})")
        elif not prometheus.query(expr):
            empty.append(expr)
    assert not empty, "no data for:\n" + "\n".join(empty)


def _selectors(prometheus: prom.Prometheus, expr: str) -> list[str]:
    """The vector selectors of `expr` as PromQL, from Prometheus' own parser (GET /api/v1/parse_query)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("vectorSelector", "matrixSelector"):
                selector = node if node.get("type") == "vectorSelector" else node.get("vectorSelector", node)
                matchers = ",".join(f'{m["name"]}{m["type"]}{json.dumps(m["value"])}'
                                    for m in selector.get("matchers", []))
                found.append(f"{{{matchers}}}")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(prometheus._get("/api/v1/parse_query", {"query": expr})["data"])
    return found



def test_the_alerts_pass_promtool(prometheus, work):
    rules = rule_file(work)
    status, output = prom.promtool_check_rules(rules)
    assert status == 0, output
    shutil.copy(RULES_TEST, work / "rules_test.yaml")
    tested = subprocess.run([str(prometheus.bin_dir / "promtool"), "test", "rules", "rules_test.yaml"], cwd=work,
                            capture_output=True, text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
