"""Live GPU utilization in the core: a Prometheus answer read into readings (scheduler_core.utilization), the model
taking them (over the node annotation), the gpu-utilization score, the GPUs chosen on a node (shares, whole GPUs,
DRA devices by UUID), and `scheduling.utilization.prometheus` in the config."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np
import pytest

from scheduler_core import profile, utilization
from tests.unit.builders import facts, node, pod, scheduler
from tests.unit.test_dra import DRIVER, claim, claiming, cluster, devices_of
from webhook import config


def sample(value: Any, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1764000000.0, value]}


def dcgm(node_name: str, gpu: int, value: Any, **extra: str) -> dict[str, Any]:
    """A series as dcgm-exporter's DCGM_FI_DEV_GPU_UTIL reaches the query, with Prometheus' own labels."""
    return sample(value, gpu=str(gpu), UUID=f"GPU-{node_name}-{gpu}", device=f"nvidia{gpu}", Hostname=node_name,
                  modelName="NVIDIA A100-SXM4-40GB", instance="10.0.0.9:9400", job="dcgm-exporter", **extra)


def answer(*samples: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


# --- reading an answer ---------------------------------------------------------------------------------------------


def test_dcgm_series_give_each_gpu_and_the_node_its_mean():
    readings = utilization.read(utilization.vector_of(answer(dcgm("a", 0, "90"), dcgm("a", 1, "10"),
                                                             dcgm("b", 0, "0"))))
    assert readings.nodes == {"a": 0.5, "b": 0.0}
    assert readings.gpus == {"a": {0: 0.9, 1: 0.1}, "b": {0: 0.0}}
    assert readings.uuids == {"GPU-a-0": 0.9, "GPU-a-1": 0.1, "GPU-b-0": 0.0}
    assert readings.series == {"a": 2, "b": 1} and readings.samples == 3 and readings.ignored == {}


def test_a_gpu_in_several_series_counts_its_busiest_reading():
    """With pod mapping, dcgm-exporter labels a GPU's series with the pod on it: while pods change (or share it), a
    windowed query returns the GPU more than once."""
    readings = utilization.read([dcgm("a", 0, "20", pod="old"), dcgm("a", 0, "70", pod="new"), dcgm("a", 1, "10")])
    assert readings.gpus == {"a": {0: 0.7, 1: 0.1}} and readings.nodes == {"a": pytest.approx(0.4)}


def test_a_series_without_gpu_labels_is_the_nodes_own_reading():
    readings = utilization.read([sample("25", Hostname="a"), dcgm("a", 0, "90"), sample("0.5", Hostname="b")])
    assert readings.nodes == {"a": 0.25, "b": 0.005} and readings.gpus == {"a": {0: 0.9}}


@pytest.mark.parametrize("value", ["NaN", "-5", "1e9", "+Inf", "-Inf", "100.5", "busy", None, [1]])
def test_absurd_values_are_left_out_and_counted(value):
    readings = utilization.read([dcgm("a", 0, value), dcgm("a", 1, "40")])
    assert readings.gpus == {"a": {1: 0.4}} and readings.ignored == {utilization.INVALID_VALUE: 1}


def test_the_edges_of_the_range_are_readings():
    readings = utilization.read([dcgm("a", 0, "0"), dcgm("a", 1, "100")])
    assert readings.gpus == {"a": {0: 0.0, 1: 1.0}} and readings.ignored == {}


def test_ratio_values_are_read_as_they_are():
    readings = utilization.read([sample("0.25", Hostname="a"), sample("2", Hostname="b")], unit="ratio")
    assert readings.nodes == {"a": 0.25} and readings.ignored == {utilization.INVALID_VALUE: 1}


def test_the_node_comes_from_the_configured_label_through_the_pattern():
    mapping = utilization.NodeMapping("instance", re.compile(r"(.*?)(\.cluster\.local)?:\d+"))
    readings = utilization.read([sample("50", instance="gpu-1.cluster.local:9400"), sample("10", instance="gpu-2:9400"),
                                 sample("10", instance="no-port"), sample("10", Hostname="gpu-3")], mapping=mapping)
    assert readings.nodes == {"gpu-1": 0.5, "gpu-2": 0.1}
    assert readings.ignored == {utilization.NODE_NOT_MATCHED: 1, utilization.NO_NODE_LABEL: 1}


@pytest.mark.parametrize("body, message", [
    ([], "the answer is not a JSON object, got list"),
    ({"status": "error", "errorType": "bad_data", "error": "parse error at char 5"},
     "the query failed: bad_data: parse error at char 5"),
    ({"status": "success", "data": {"resultType": "matrix", "result": []}},
     "the query must return an instant vector, got resultType 'matrix'"),
    ({"status": "success", "data": {"resultType": "vector", "result": {}}}, "data.result: must be a list"),
])
def test_an_answer_that_is_not_an_instant_vector_says_why(body, message):
    with pytest.raises(utilization.QueryError, match=re.escape(message)):
        utilization.vector_of(body)


# --- the model and the score ---------------------------------------------------------------------------------------


def annotated(name: str, busy: str, **kwargs: Any) -> dict[str, Any]:
    obj = node(name, **kwargs)
    obj["metadata"].setdefault("annotations", {})["gpu-scheduler.io/gpu-utilization"] = busy
    return obj


def only_utilization() -> profile.Scheduling:
    return profile.Scheduling(weights=tuple((name, 1 if name == "gpu-utilization" else 0)
                                            for name in profile.SCORE_PLUGINS))


def test_the_live_reading_wins_over_the_annotation_and_the_annotation_stays_for_nodes_without_one():
    framework = scheduler(annotated("a", "0.1"), annotated("b", "0.8"), node("c"), scheduling=only_utilization())
    cluster_ = framework.cluster
    unknown = cluster_.set_live_utilization(utilization.read([dcgm("a", 0, "90"), dcgm("ghost", 0, "5")]))
    assert unknown == {"ghost"}
    rows = np.array([cluster_.index[n] for n in "abc"])
    assert cluster_.current_utilization(rows)[:2].tolist() == [0.9, 0.8] and math.isnan(
        cluster_.current_utilization(rows)[2])
    assert framework.place(facts(pod("p", gpus=1))).node == "c"  # neutral 50 beats b's 20 and a's 10
    cluster_.set_live_utilization(None)  # stale: the annotations again
    assert framework.place(facts(pod("q", gpus=1))).node == "a"


def test_a_node_added_after_the_readings_gets_its_reading():
    framework = scheduler(node("a"), scheduling=only_utilization())
    framework.cluster.set_live_utilization(utilization.read([dcgm("b", 0, "5"), dcgm("a", 0, "95")]))
    framework.cluster.set_node(dataclasses.replace(framework.cluster.node(0), name="b"))
    assert framework.place(facts(pod("p", gpus=1))).node == "b"


def test_utilization_moves_the_next_pod():
    framework = scheduler(node("a"), node("b"), scheduling=only_utilization())
    framework.cluster.set_live_utilization(utilization.read([sample("90", Hostname="a"), sample("10", Hostname="b")]))
    assert framework.place(facts(pod("p", gpus=1))).node == "b"
    framework.cluster.set_live_utilization(utilization.read([sample("10", Hostname="a"), sample("90", Hostname="b")]))
    assert framework.place(facts(pod("q", gpus=1))).node == "a"


def test_a_pod_with_a_dra_claim_goes_to_the_less_busy_node():
    framework = cluster("a", "b")
    framework.configure(only_utilization())
    framework.cluster.dra.set("ResourceClaim", claim("c", 1))
    framework.cluster.set_live_utilization(utilization.read([sample("80", Hostname="a"), sample("20", Hostname="b")]))
    assert framework.decide(facts(claiming("p", "c"))).node == "b"


# --- the GPUs on the chosen node -----------------------------------------------------------------------------------


def test_a_share_goes_to_the_less_busy_of_equally_packed_gpus():
    framework = scheduler(node("a", gpus=4))
    framework.cluster.set_live_utilization(utilization.read([dcgm("a", i, v) for i, v in enumerate(
        ["95", "90", "20", "80"])]))
    assert [d.index for d in framework.place(facts(pod("p", milli=250))).devices] == [2]


def test_a_share_blends_packing_and_idleness_as_the_seed_blends_its_node_score():
    """7 parts gpuPolicy, 3 parts idleness: a GPU three quarters full but saturated still wins over an idle one for a
    quarter share (it is then full); one a quarter full and saturated loses to an idle one."""
    framework = scheduler(node("a", gpus=2))
    framework.place(facts(pod("first", milli=750)))
    framework.cluster.set_live_utilization(utilization.read([dcgm("a", 0, "100"), dcgm("a", 1, "0")]))
    assert [d.index for d in framework.place(facts(pod("fills", milli=250))).devices] == [0]
    other = scheduler(node("a", gpus=2))
    other.place(facts(pod("first", milli=250)))
    other.cluster.set_live_utilization(utilization.read([dcgm("a", 0, "100"), dcgm("a", 1, "0")]))
    assert [d.index for d in other.place(facts(pod("second", milli=250))).devices] == [1]


def test_without_readings_the_gpu_policy_alone_chooses():
    framework = scheduler(node("a", gpus=4))
    framework.place(facts(pod("first", milli=500)))
    assert [d.index for d in framework.place(facts(pod("p", milli=250))).devices] == [0]
    assert [d.index for d in framework.place(facts(pod("whole", gpus=2))).devices] == [1, 2]


def test_whole_gpus_are_the_least_busy_idle_ones():
    framework = scheduler(node("a", gpus=4))
    framework.cluster.set_live_utilization(utilization.read([dcgm("a", 0, "90"), dcgm("a", 1, "5"),
                                                             dcgm("a", 3, "70")]))
    # GPU 2 has no reading: it counts as half busy, between GPU 1 (5%) and GPU 3 (70%)
    assert [d.index for d in framework.place(facts(pod("p", gpus=2))).devices] == [1, 2]


def test_a_dra_claim_takes_the_less_busy_gpu_among_those_our_order_ranks_equal():
    framework = cluster("a", count=4)
    busy = {f"GPU-a-{i}": v for i, v in enumerate([0.9, 0.8, 0.7, 0.1])}
    framework.cluster.dra.set("ResourceClaim", claim("c", 1))
    assert devices_of(framework.decide(facts(claiming("p", "c")))) == ["gpu-0"]  # no readings: slice order
    framework.cluster.set_live_utilization(utilization.Readings(uuids=busy))
    # all four on one PCIe root, none in use: the least busy GPU
    assert devices_of(framework.decide(facts(claiming("p", "c")))) == ["gpu-3"]


def test_the_pcie_root_order_comes_before_utilization():
    """gpu-0 is in use: binpack keeps to its root (gpu-1..3) though gpu-5, on the other root, is idle; within the root
    the least busy."""
    framework = cluster("a")
    framework.cluster.dra.set("ResourceClaim", claim("held", 1, allocation={"devices": {"results": [
        {"request": "gpus", "driver": DRIVER, "pool": "a", "device": "gpu-0"}]}}, reserved=("other",)))
    framework.cluster.dra.set("ResourceClaim", claim("c", 1))
    framework.cluster.set_live_utilization(utilization.Readings(uuids={"GPU-a-1": 0.9, "GPU-a-3": 0.1,
                                                                       "GPU-a-5": 0.0}))
    assert devices_of(framework.decide(facts(claiming("p", "c")))) == ["gpu-3"]


# --- configuration -------------------------------------------------------------------------------------------------


def parsed(prometheus: Any) -> profile.PrometheusSource | None:
    return config.parse({"scheduling": {"utilization": {"prometheus": prometheus}}}).scheduling.prometheus


def test_a_full_source_is_parsed():
    source = parsed({"url": "https://prometheus.monitoring.svc:9090/", "query": "DCGM_FI_DEV_GPU_UTIL", "unit": "percent",
                     "nodeLabel": "instance", "nodePattern": "(.*):9400", "refreshSeconds": 5, "maxAgeSeconds": 30,
                     "timeoutSeconds": 2.5, "caFile": "/etc/ca.crt", "certFile": "/c", "keyFile": "/k",
                     "bearerTokenFile": "/t"})
    assert source == profile.PrometheusSource(
        url="https://prometheus.monitoring.svc:9090", query="DCGM_FI_DEV_GPU_UTIL", node_label="instance",
        node_pattern="(.*):9400", refresh_seconds=5.0, max_age_seconds=30.0, timeout_seconds=2.5, ca_file="/etc/ca.crt",
        cert_file="/c", key_file="/k", bearer_token_file="/t")
    assert source is not None and source.mapping().node_of("gpu-1:9400") == "gpu-1"


def test_the_defaults_ask_dcgm_exporter_by_hostname():
    source = parsed({"url": "http://prometheus:9090"})
    assert source is not None and (source.promql, source.node_label, source.unit) == (
        "max by (Hostname, gpu, UUID) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[2m]))", "Hostname", "percent")
    assert parsed({"url": "http://p", "nodeLabel": "node"}).promql.startswith(  # type: ignore[union-attr]
        "max by (node, gpu, UUID) (")
    assert (source.refresh_seconds, source.max_age_seconds, source.timeout_seconds) == (15.0, 60.0, 5.0)
    assert config.parse({}).scheduling.prometheus is None


P = "scheduling.utilization.prometheus"


@pytest.mark.parametrize("prometheus, problem", [
    ({}, f"{P}.url: required: the Prometheus base URL, e.g. http://prometheus.monitoring.svc:9090"),
    ({"url": "prometheus:9090"}, f'{P}.url: must be an http:// or https:// URL without a query, e.g. '
                                 f'http://prometheus:9090, got "prometheus:9090"'),
    ({"url": "http://p/api?x=1"}, f'{P}.url: must be an http:// or https:// URL without a query'),
    ({"url": "http://p", "unit": "%"}, f'{P}.unit: must be one of percent, ratio, got "%"'),
    ({"url": "http://p", "nodeLabel": "node-name"},
     f'{P}.nodeLabel: must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*), got "node-name"'),
    ({"url": "http://p", "nodePattern": "(a"}, f"{P}.nodePattern: not a valid regular expression (missing ), "),
    ({"url": "http://p", "nodePattern": "(a)(b)"}, f"{P}.nodePattern: must have at most one group (the node name), got 2"),
    ({"url": "http://p", "refreshSeconds": 0}, f"{P}.refreshSeconds: must be a number of seconds above 0 (at most "
                                               f"86400), got 0"),
    ({"url": "http://p", "refreshSeconds": 120},
     f"{P}.maxAgeSeconds: must be more than refreshSeconds (120), or every reading goes stale before the next "
     f"refresh; got 60"),
    ({"url": "http://p", "certFile": "/c"}, f"{P}.keyFile: certFile and keyFile go together"),
    ({"url": "http://p", "insecureSkipVerify": "yes"}, f'{P}.insecureSkipVerify: must be true or false, got "yes"'),
    ({"url": "http://p", "interval": 5}, f"{P}.interval: unknown field; expected one of bearerTokenFile, caFile"),
    ("http://p", f'{P}: must be a mapping, got "http://p"'),
])
def test_a_wrong_source_is_refused_naming_the_field(prometheus, problem):
    with pytest.raises(config.ConfigError) as raised:
        parsed(prometheus)
    assert any(line.startswith(problem) for line in raised.value.problems), raised.value.problems
