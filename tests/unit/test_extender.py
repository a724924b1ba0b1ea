"""The kube-scheduler extender over a model filled directly: extender/v1 JSON in and out.

The API is a small fake here (what bind writes, with the apiserver's conflict rules); the
real apiserver and kube-scheduler are in tests/e2e/test_extender.py.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from gpu_scheduler import watching
from gpu_scheduler.runtime import extender, wire
from scheduler_core import pods, profile
from tests.unit.builders import node, pod
from webhook import config

SHIPPED = Path(__file__).parents[2] / "manifests" / "components" / "extender" / "kube-scheduler-extender-config.yaml"
INFRA = [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
DEVICES = "gpu-scheduler.io/gpu-devices"


def gpu_pod(name: str, *, host_port: int | None = None, **kwargs: Any) -> dict[str, Any]:
    obj = pod(name, **kwargs)
    obj["metadata"]["uid"] = f"uid-{name}"
    obj["spec"]["schedulerName"] = "default-scheduler"
    if host_port:
        obj["spec"]["containers"][0]["ports"] = [{"containerPort": host_port, "hostPort": host_port}]
    return obj


class Reply:
    """A raw reply (urllib3's HTTPResponse, as `_preload_content=False` and the raw binder see it)."""

    def __init__(self, body: Any, status: int = 200, reason: str = "OK"):
        self.data = json.dumps(body).encode()
        self.status, self.reason = status, reason

    def release_conn(self) -> None:
        pass


STATUS = r"https://apiserver/api/v1/namespaces/([^/]+)/pods/([^/]+)/status"
EVENTS = r"https://apiserver/api/v1/namespaces/([^/]+)/events"


class FakeCore:
    """The API calls /bind makes, recorded, with the apiserver's rules: a Binding must name the pod's UID,
    finds the pod unbound (409 otherwise), and copies its annotations onto the pod; the device record after
    it must name the UID too. Bindings, records and events arrive as raw HTTP through the client's
    connection pool (gpu_scheduler.runtime.binding), so that is faked too."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.binding_error: Reply | None = None
        self.while_binding: Any = None  # called once, as a Binding arrives: what happens meanwhile
        self.lose_answers = False  # the Binding is stored, then the connection breaks before the answer
        self.unreadable = False  # reading a pod fails as when the apiserver is down
        self.records: list[tuple[str, dict[str, Any]]] = []  # device records, written after the answer
        self.recorded = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.api_client = SimpleNamespace(configuration=SimpleNamespace(host="https://apiserver", auth_settings=dict),
                                          rest_client=SimpleNamespace(pool_manager=self))

    def add(self, obj: dict[str, Any]) -> None:
        self.pods[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = copy.deepcopy(obj)

    def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> Reply:
        with self.lock:
            self.calls.append(("read", f"{namespace}/{name}", None))
            if self.unreadable:
                raise OSError("connection refused")
            if (namespace, name) not in self.pods:
                raise ApiException(status=404, reason="Not Found")
            return Reply(self.pods[(namespace, name)])

    def request(self, method: str, url: str, *, body: bytes, **_: Any) -> Reply:
        """A Binding, a device record (a status patch) or an event; anything else fails the test."""
        if method == "PATCH" and (found := re.fullmatch(STATUS, url)):
            return self._record(*found.groups(), json.loads(body))
        if method == "POST" and (found := re.fullmatch(EVENTS, url)):
            with self.lock:
                self.events.append(json.loads(body))
            return Reply({}, 201, "Created")
        found = re.fullmatch(r"https://apiserver/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding", url)
        assert method == "POST" and found, (method, url)
        namespace, name = found.groups()
        binding = json.loads(body)
        meanwhile, self.while_binding = self.while_binding, None
        if meanwhile is not None:
            meanwhile()
        with self.lock:
            self.calls.append(("bind", f"{namespace}/{name}", binding))
            if self.binding_error is not None:
                return self.binding_error
            current = self.pods.get((namespace, name))
            if current is None:
                return Reply({"kind": "Status", "message": f'pods "{name}" not found'}, 404, "Not Found")
            if current["spec"].get("nodeName") or binding["metadata"]["uid"] != current["metadata"]["uid"]:
                return Reply({"kind": "Status", "message": "already assigned"}, 409, "Conflict")
            current["spec"]["nodeName"] = binding["target"]["name"]
            current["metadata"].setdefault("annotations", {}).update(binding["metadata"]["annotations"])
            if self.lose_answers:
                raise OSError("connection reset by peer")
            return Reply({"kind": "Status", "status": "Success"}, 201, "Created")

    def _record(self, namespace: str, name: str, patch: dict[str, Any]) -> Reply:
        """The devices condition, merged by type as a strategic merge patch does; 422 for another UID."""
        with self.lock:
            current = self.pods.get((namespace, name))
            if current is None:
                return Reply({"kind": "Status", "message": f'pods "{name}" not found'}, 404, "Not Found")
            if patch["metadata"]["uid"] != current["metadata"]["uid"]:
                return Reply({"kind": "Status", "message": "metadata.uid: field is immutable"}, 422, "Invalid")
            conditions = current.setdefault("status", {}).setdefault("conditions", [])
            for condition in patch["status"]["conditions"]:
                conditions[:] = [c for c in conditions if c["type"] != condition["type"]] + [condition]
            self.records.append((f"{namespace}/{name}", patch))
            self.recorded.set()
            return Reply(current, 200, "OK")


NODES = [
    node("a100-1", gpus=4),
    node("a100-2", gpus=4),
    node("l4-1", gpus=2, model="NVIDIA-L4", memory_mib=24576),
]


def make(*node_objects: dict[str, Any], settings: config.Config | None = None,
         bound: tuple[dict[str, Any], ...] = ()) -> tuple[extender.Extender, FakeCore, Any]:
    core = FakeCore()
    ext = extender.Extender(settings or config.Config(), core=core)
    ext.replace_nodes(list(node_objects or NODES))
    ext.replace_pods(list(bound))
    return ext, core, extender.build_app(lambda: ext).test_client()


def post(client: Any, verb: str, body: Any) -> Any:
    response = client.post(f"/{verb}", data=body if isinstance(body, bytes) else json.dumps(body),
                           content_type="application/json")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def filter_names(client: Any, pod_obj: dict[str, Any], names: list[str]) -> Any:
    return post(client, "filter", {"Pod": pod_obj, "Nodes": None, "NodeNames": names})


def binding(pod_obj: dict[str, Any], node_name: str) -> dict[str, str]:
    metadata = pod_obj["metadata"]
    return {"PodName": metadata["name"], "PodNamespace": metadata["namespace"], "PodUID": metadata["uid"],
            "Node": node_name}


def bind(client: Any, core: FakeCore, pod_obj: dict[str, Any], node_name: str) -> str:
    core.add(pod_obj)
    return str(post(client, "bind", binding(pod_obj, node_name))["Error"])


def wait_until(condition: Any, what: str, timeout: float = 5.0) -> None:
    """For what the extender writes from its reporter pool, after its answer."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def devices_of(core: FakeCore, pod_obj: dict[str, Any]) -> list[dict[str, int]]:
    return json.loads(core.pods[("ns", pod_obj["metadata"]["name"])]["metadata"]["annotations"][DEVICES])


# --- filter -----------------------------------------------------------------------------------------


def test_filter_with_node_names_answers_names_from_the_input_and_why_the_others_failed():
    _, _, client = make()
    result = filter_names(client, gpu_pod("p", gpus=1, model="A100"), ["a100-1", "l4-1", "ghost", "a100-2"])
    assert result == {
        "Nodes": None,
        "NodeNames": ["a100-1", "a100-2"],
        "FailedNodes": {"l4-1": "GPU model mismatch (want A100)", "ghost": "node not in the extender's cache yet"},
        "FailedAndUnresolvableNodes": {"l4-1": "GPU model mismatch (want A100)",
                                       "ghost": "node not in the extender's cache yet"},
        "Error": "",
    }


def test_filter_with_full_nodes_answers_the_passing_node_objects_themselves():
    _, _, client = make()
    node_list = {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "7"}, "items": NODES}
    result = post(client, "filter", {"Pod": gpu_pod("p", gpus=2, model="L4"), "Nodes": node_list})
    assert result["NodeNames"] is None
    assert result["Nodes"] == {**node_list, "items": [NODES[2]]}
    assert result["FailedNodes"] == {"a100-1": "GPU model mismatch (want L4)", "a100-2": "GPU model mismatch (want L4)"}


def test_filter_of_an_empty_node_list_as_go_encodes_it():
    _, _, client = make()
    result = post(client, "filter", {"Pod": gpu_pod("p", gpus=1), "Nodes": {"metadata": {}, "items": None}})
    assert result["Nodes"]["items"] == [] and result["FailedNodes"] == {} and result["Error"] == ""


@pytest.mark.parametrize(
    ("node_obj", "bound", "pod_obj", "reason", "preemption_may_help"),
    [
        (node("n", gpus=1), (), gpu_pod("p", gpus=2), "Insufficient nvidia.com/gpu", True),
        (node("n", cpu="2", memory="1Gi"), (), gpu_pod("p", gpus=1, cpu="4", mem="2Gi"),
         "Insufficient cpu, Insufficient memory", True),
        (node("n", taints=INFRA), (), gpu_pod("p", gpus=1), "node(s) had untolerated taint(s)", False),
        (node("n", taints=INFRA, unschedulable=True), (), gpu_pod("p", gpus=1), "node(s) were unschedulable", False),
        (node("n", gpus=1, model="NVIDIA-L4"), (), gpu_pod("p", gpus=2, model="A100"),
         "GPU model mismatch (want A100)", False),
        (node("n"), (), gpu_pod("p", gpus=1, memory_mib=81920),
         "GPU memory too small (want >= 81920 MiB per GPU)", False),
        (node("n", gpus=0), (), gpu_pod("p", milli=300), "node(s) had no GPUs", False),
        (node("n", gpus=1), (gpu_pod("q", milli=800, node_name="n"),), gpu_pod("p", milli=300),
         "node(s) had no GPU with 300/1000 free", True),
        (node("n"), (gpu_pod("q", host_port=9100, node_name="n"),), gpu_pod("p", gpus=1, host_port=9100),
         "node(s) didn't have free ports for the requested pod ports", True),
        (node("n"), (), gpu_pod("p", milli=2000),
         'annotation gpu-scheduler.io/gpu-milli: must be an integer from 1 to 999 (thousandths of one GPU), '
         'got "2000"', False),
    ],
    ids=["gpus", "cpu-and-memory", "taint", "first-filter-wins", "model-before-size", "gpu-memory", "no-gpus",
         "share", "host-port", "pod-problem"],
)
def test_failed_nodes_carry_the_reason_of_the_first_filter_that_rejects(node_obj, bound, pod_obj, reason,
                                                                        preemption_may_help):
    _, _, client = make(node_obj, bound=bound)
    result = filter_names(client, pod_obj, ["n"])
    assert result["NodeNames"] == []
    assert result["FailedNodes"] == {"n": reason}
    assert result["FailedAndUnresolvableNodes"] == ({} if preemption_may_help else {"n": reason})


# --- prioritize -------------------------------------------------------------------------------------


def scores(client: Any, pod_obj: dict[str, Any], names: list[str]) -> dict[str, int]:
    answer = post(client, "prioritize", {"Pod": pod_obj, "NodeNames": names})
    assert [entry["Host"] for entry in answer] == names
    assert all(isinstance(e["Score"], int) and 0 <= e["Score"] <= wire.MAX_PRIORITY for e in answer)
    return {entry["Host"]: entry["Score"] for entry in answer}


@pytest.mark.parametrize(("policy", "expected"), [
    ("binpack", {"a100-1": 0, "a100-2": 10, "l4-1": 0, "ghost": 0}),
    ("spread", {"a100-1": 10, "a100-2": 0, "l4-1": 0, "ghost": 0}),
])
def test_prioritize_scores_0_to_10_following_the_node_policy(policy, expected):
    busy = gpu_pod("busy", gpus=3, node_name="a100-2")
    settings = config.Config(scheduling=profile.Scheduling(node_policy=policy))
    _, _, client = make(settings=settings, bound=(busy,))
    assert scores(client, gpu_pod("p", gpus=1, model="A100"), ["a100-1", "a100-2", "l4-1", "ghost"]) == expected


def test_prioritize_ranks_three_candidates_in_the_cores_order():
    _, _, client = make(node("n1", gpus=8), node("n2", gpus=8), node("n3", gpus=8),
                        bound=(gpu_pod("a", gpus=2, node_name="n2"), gpu_pod("b", gpus=6, node_name="n3")))
    result = scores(client, gpu_pod("p", gpus=1), ["n1", "n2", "n3"])
    assert result["n3"] == 10 and result["n1"] == 0 and 0 < result["n2"] < 10


def test_prioritize_gives_equal_candidates_the_same_score():
    _, _, client = make()
    assert scores(client, gpu_pod("p", gpus=1, model="A100"), ["a100-1", "a100-2"]) == {"a100-1": 10, "a100-2": 10}


def test_prioritize_after_filter_scores_the_snapshot_the_filter_saw():
    """kube-scheduler scores its own plugins against the snapshot it filtered; so does the extender, which
    also spares a second evaluation per pod. A bind in between does not reshuffle the pod's ranking."""
    ext, core, client = make(node("n1", gpus=8), node("n2", gpus=8), bound=(gpu_pod("a", gpus=2, node_name="n2"),))
    pod_obj = gpu_pod("p", gpus=1)
    assert filter_names(client, pod_obj, ["n1", "n2"])["NodeNames"] == ["n1", "n2"]
    assert bind(client, core, gpu_pod("other", gpus=6), "n1") == ""  # n1 now the fuller node
    assert scores(client, pod_obj, ["n1", "n2"]) == {"n1": 0, "n2": 10}
    assert scores(client, pod_obj, ["n1", "n2"]) == {"n1": 10, "n2": 0}  # no filter before: the model as it is


def test_prioritize_about_nodes_the_filter_was_not_asked_about_evaluates_afresh():
    _, _, client = make(node("n1", gpus=8), node("n2", gpus=8), bound=(gpu_pod("a", gpus=2, node_name="n2"),))
    pod_obj = gpu_pod("p", gpus=1)
    filter_names(client, pod_obj, ["n1"])
    assert scores(client, pod_obj, ["n1", "n2"]) == {"n1": 0, "n2": 10}


# --- bind -------------------------------------------------------------------------------------------


def test_bind_records_the_devices_then_binds_and_never_gives_a_gpu_twice():
    ext, core, client = make()
    first, second, third = (gpu_pod(name, gpus=2) for name in ("p1", "p2", "p3"))
    filter_names(client, first, ["a100-1"])  # kube-scheduler filters before it binds
    assert bind(client, core, first, "a100-1") == ""
    assert [call[0] for call in core.calls] == ["bind"]  # one call; the Pod from /filter, no read
    assert core.calls[0][2] == {
        "apiVersion": "v1", "kind": "Binding", "target": {"apiVersion": "v1", "kind": "Node", "name": "a100-1"},
        "metadata": {"name": "p1", "namespace": "ns", "uid": "uid-p1",
                     "annotations": {DEVICES: '[{"index":0,"milli":1000},{"index":1,"milli":1000}]'}}}
    assert core.pods[("ns", "p1")]["spec"]["nodeName"] == "a100-1"
    assert bind(client, core, second, "a100-1") == ""
    assert devices_of(core, second) == [{"index": 2, "milli": 1000}, {"index": 3, "milli": 1000}]
    calls = len(core.calls)
    error = bind(client, core, third, "a100-1")
    assert error == "node a100-1 cannot take pod ns/p3 any more: Insufficient nvidia.com/gpu"
    assert [call[0] for call in core.calls[calls:]] == ["read"]  # nothing written
    assert set(ext.model.cluster.assignments) == {"uid-p1", "uid-p2"}


def test_after_binding_the_devices_are_recorded_in_the_pods_status_with_its_uid():
    ext, core, client = make()
    first = gpu_pod("p1", gpus=2)
    assert bind(client, core, first, "a100-1") == ""
    assert core.recorded.wait(5)
    [(key, patch)] = core.records
    assert key == "ns/p1" and patch == {"metadata": {"uid": "uid-p1"}, "status": {"conditions": [{
        "type": "gpu-scheduler.io/GPUDevices", "status": "True", "reason": "Bound",
        "message": '[{"index":0,"milli":1000},{"index":1,"milli":1000}]'}]}}


def test_a_bound_pod_whose_annotation_differs_from_its_record_gets_an_event_and_keeps_its_gpu():
    edited = gpu_pod("p", gpus=1, node_name="a100-1", annotations={DEVICES: '[{"index":0,"milli":1000}]'})
    edited["status"] = {"conditions": [{"type": "gpu-scheduler.io/GPUDevices", "status": "True",
                                        "message": '[{"index":3,"milli":1000}]'}]}
    ext, core, _ = make(bound=(edited,))
    assert ext.model.cluster.assignments["uid-p"].devices == (pods.Device(3, 1000),)
    wait_until(lambda: core.events, "the GPUDevicesConflict event")
    [event] = core.events
    assert event["reason"] == "GPUDevicesConflict" and event["type"] == "Warning"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ns",
                                       "uid": "uid-p"}
    assert event["message"].endswith("keeping GPU 3") and event["source"] == {"component": "gpu-scheduler-extender"}


def test_a_retried_bind_gets_the_same_devices_and_succeeds():
    ext, core, client = make()
    first = gpu_pod("p", gpus=1)
    assert bind(client, core, gpu_pod("other", gpus=1), "a100-1") == ""
    assert bind(client, core, first, "a100-1") == ""
    assert post(client, "bind", binding(first, "a100-1")) == {"Error": ""}  # the API says 409: bound there
    assert devices_of(core, first) == [{"index": 1, "milli": 1000}]
    assert ext.model.cluster.gpu_used[ext.model.cluster.index["a100-1"]] == 2000
    assert post(client, "bind", binding(first, "a100-2"))["Error"] == "pod ns/p is already assigned to node a100-1"


def test_a_failed_binding_frees_the_devices_and_says_why():
    ext, core, client = make()
    core.binding_error = Reply({"kind": "Status", "message": "etcdserver: request timed out"}, 500,
                               "Internal Server Error")
    first = gpu_pod("p", gpus=4)
    assert bind(client, core, first, "a100-1") == "binding ns/p to a100-1: HTTP 500 etcdserver: request timed out"
    assert DEVICES not in core.pods[("ns", "p")]["metadata"]["annotations"]
    assert ext.model.cluster.assignments == {} and ext.model.cluster.gpu_used[ext.model.cluster.index["a100-1"]] == 0
    core.binding_error = None
    assert bind(client, core, first, "a100-1") == ""
    assert devices_of(core, first) == [{"index": i, "milli": 1000} for i in range(4)]


def test_a_retried_bind_that_fails_leaves_the_first_binds_devices_accounted():
    ext, core, client = make(node("n", gpus=1))
    first = gpu_pod("p", gpus=1)
    assert bind(client, core, first, "n") == ""  # bound; the watch has not shown it yet
    core.binding_error = Reply({"kind": "Status", "message": "etcdserver: request timed out"}, 500,
                               "Internal Server Error")
    assert post(client, "bind", binding(first, "n"))["Error"].endswith("HTTP 500 etcdserver: request timed out")
    assert set(ext.model.assumed) == {"uid-p"} and ext.model.cluster.gpu_used[ext.model.cluster.index["n"]] == 1000


@pytest.mark.parametrize("unreadable", [False, True], ids=["the API shows it bound", "the API cannot be asked"])
def test_a_binding_stored_whose_answer_was_lost_keeps_its_devices(unreadable):
    """The apiserver stored the Binding, then the connection broke: the GPUs are the pod's, not free."""
    ext, core, client = make(node("n", gpus=1))
    first, second = gpu_pod("p", gpus=1), gpu_pod("q", gpus=1)
    core.lose_answers = True
    core.while_binding = lambda: setattr(core, "unreadable", unreadable)  # the apiserver goes away meanwhile
    core.add(first)
    assert post(client, "bind", binding(first, "n"))["Error"] == "binding ns/p to n: OSError: connection reset by peer"
    core.lose_answers = core.unreadable = False
    assert ext.model.cluster.gpu_used[ext.model.cluster.index["n"]] == 1000
    assert bind(client, core, second, "n") != ""
    assert DEVICES not in core.pods[("ns", "q")]["metadata"].get("annotations", {})



def test_a_binding_whose_fate_was_unknown_is_settled_when_kube_scheduler_filters_the_pod_again():
    """The apiserver refused the Binding and could not be asked afterwards; kube-scheduler then retries the pod,
    which it does only while it sees the pod unbound: the API is asked again, and the GPUs come free."""
    ext, core, client = make(node("n", gpus=1))
    first = gpu_pod("p", gpus=1)
    core.add(first)
    core.binding_error = Reply({"kind": "Status", "message": "etcdserver: leader changed"}, 500, "Internal Server Error")
    core.while_binding = lambda: setattr(core, "unreadable", True)
    assert post(client, "bind", binding(first, "n"))["Error"].endswith("etcdserver: leader changed")
    assert ext.unsettled == {"uid-p"} and ext.model.cluster.gpu_used[ext.model.cluster.index["n"]] == 1000
    core.binding_error, core.unreadable = None, False
    assert filter_names(client, first, ["n"])["NodeNames"] == ["n"]  # asked again: not bound, its GPU is free
    assert ext.unsettled == set()
    assert bind(client, core, first, "n") == ""


@pytest.mark.parametrize(("args", "error"), [
    ({"PodUID": "uid-old"}, "pod ns/p with UID uid-old no longer exists (found ns/p with UID uid-p)"),
    ({"PodName": "missing"}, "cannot read pod ns/missing: HTTP 404 Not Found"),
    ({"Node": "ghost"}, "node ghost: node not in the extender's cache yet"),
])
def test_bind_refuses_what_it_cannot_do_without_writing(args, error):
    _, core, client = make()
    core.add(gpu_pod("p", gpus=1))
    assert post(client, "bind", {**binding(gpu_pod("p", gpus=1), "a100-1"), **args}) == {"Error": error}
    assert [call[0] for call in core.calls if call[0] != "read"] == []  # no Binding


def test_concurrent_binds_to_one_node_take_exactly_its_gpus():
    ext, core, client = make(node("n", gpus=4))
    candidates = [gpu_pod(f"p{i}", gpus=1) for i in range(12)]
    for obj in candidates:
        core.add(obj)
    with ThreadPoolExecutor(max_workers=12) as pool:
        errors = list(pool.map(lambda obj: post(client, "bind", binding(obj, "n"))["Error"], candidates))
    assert errors.count("") == 4
    given = sorted(devices_of(core, obj)[0]["index"] for obj, error in zip(candidates, errors) if not error)
    assert given == [0, 1, 2, 3]


def test_gpu_shares_pack_onto_one_gpu_and_never_overcommit():
    _, core, client = make(node("n", gpus=2))
    placed = {}
    for name, milli in (("s600", 600), ("s300", 300), ("s500", 500), ("s400", 400)):
        share = gpu_pod(name, milli=milli)
        assert filter_names(client, share, ["n"])["NodeNames"] == ["n"]
        assert bind(client, core, share, "n") == ""
        placed[name] = devices_of(core, share)
    assert placed == {"s600": [{"index": 0, "milli": 600}], "s300": [{"index": 0, "milli": 300}],
                      "s500": [{"index": 1, "milli": 500}], "s400": [{"index": 1, "milli": 400}]}
    last = gpu_pod("s200", milli=200)
    assert filter_names(client, last, ["n"])["FailedNodes"] == {"n": "node(s) had no GPU with 200/1000 free"}
    assert bind(client, core, last, "n") == "node n cannot take pod ns/s200 any more: node(s) had no GPU with 200/1000 free"


# --- preempt ----------------------------------------------------------------------------------------


def ranked(name: str, priority: int, **kwargs: Any) -> dict[str, Any]:
    obj = gpu_pod(name, **kwargs)
    obj["spec"]["priority"] = priority
    return obj


def preempt(client: Any, pod_obj: dict[str, Any], victims: dict[str, list[str]], violations: int = 0) -> Any:
    """/preempt as kube-scheduler asks it with nodeCacheCapable: true (victims by UID); the NodeNameToMetaVictims
    answered."""
    asked = {node_name: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
             for node_name, uids in victims.items()}
    return post(client, "preempt", {"Pod": pod_obj, "NodeNameToVictims": None,
                                    "NodeNameToMetaVictims": asked})["NodeNameToMetaVictims"]


def model_state(ext: extender.Extender) -> tuple[Any, ...]:
    model = ext.model.cluster
    return ({uid: (a.node, a.devices) for uid, a in model.assignments.items()}, model.gpu_free.tolist(),
            model.used.tolist())


SHARE_700 = ranked("keeper-700", 1000, milli=700, node_name="b")  # more important than the preemptor's victims
CPU_HOG = ranked("cpu-hog", 10, cpu="2", node_name="b")  # the least important pod, but it holds no GPU
SHARE_600 = ranked("share-600", 100, milli=600, cpu="2", node_name="a")
PREEMPTOR = ranked("preemptor", 10000, milli=500, cpu="1")


def two_full_nodes() -> tuple[extender.Extender, Any]:
    """Node a: a share of 600 on its one GPU and both its CPUs. Node b: a more important share of 700, and the CPUs
    held by a pod of no GPU. kube-scheduler, blind to GPU shares, would free node b (its victim has the lowest
    priority), where the GPU still has only 300 free."""
    ext, _, client = make(node("a", gpus=1, cpu="2"), node("b", gpus=1, cpu="2"),
                          bound=(SHARE_600, SHARE_700, CPU_HOG))
    return ext, client


def test_preempt_drops_a_node_whose_victims_free_no_gpu_room_and_keeps_the_one_whose_victims_do():
    ext, client = two_full_nodes()
    before = model_state(ext)
    answer = preempt(client, PREEMPTOR, {"a": ["uid-share-600"], "b": ["uid-cpu-hog"]})
    assert answer == {"a": {"Pods": [{"UID": "uid-share-600"}], "NumPDBViolations": 0}}  # b left out, not emptied
    assert model_state(ext) == before  # victims taken away only for the moment


def test_preempt_accepts_full_victim_pods_as_sent_without_node_cache_and_answers_by_uid():
    _, client = two_full_nodes()
    body = {"Pod": PREEMPTOR, "NodeNameToMetaVictims": None,
            "NodeNameToVictims": {"a": {"Pods": [SHARE_600], "NumPDBViolations": 0},
                                  "b": {"Pods": [CPU_HOG], "NumPDBViolations": 0}}}
    assert post(client, "preempt", body) == {
        "NodeNameToMetaVictims": {"a": {"Pods": [{"UID": "uid-share-600"}], "NumPDBViolations": 0}}}


def test_preempt_drops_a_node_whose_whole_gpus_stay_taken():
    whole = ranked("whole", 1000, gpus=1, node_name="n")
    _, _, client = make(node("n", gpus=1, cpu="2"), bound=(whole, ranked("cpu-hog", 10, cpu="2", node_name="n")))
    assert preempt(client, ranked("p", 10000, gpus=1, cpu="1"), {"n": ["uid-cpu-hog"]}) == {}


def test_preempt_drops_a_node_where_the_victims_free_enough_thousandths_only_across_gpus():
    """Each victim frees 200 of a GPU whose other 600 stay taken: 800 free on the node, 400 on any one GPU."""
    bound = tuple(ranked(name, priority, milli=milli, node_name="n",
                         annotations={DEVICES: json.dumps([{"index": index, "milli": milli}])})
                  for name, priority, milli, index in (("keep-0", 1000, 600, 0), ("small-0", 20, 200, 0),
                                                       ("keep-1", 1000, 600, 1), ("small-1", 10, 200, 1)))
    ext, _, client = make(node("n", gpus=2), bound=bound)
    assert ext.model.cluster.gpu_free[ext.model.cluster.index["n"], :2].tolist() == [200, 200]
    assert preempt(client, PREEMPTOR, {"n": ["uid-small-0", "uid-small-1"]}) == {}
    assert preempt(client, ranked("p", 10000, milli=400), {"n": ["uid-small-0", "uid-small-1"]}) == {
        "n": {"Pods": [{"UID": "uid-small-1"}], "NumPDBViolations": 0}}  # one frees 400: the more important spared


def test_preempt_spares_a_victim_not_needed_and_keeps_one_the_model_does_not_hold():
    idle = ranked("idle", 5, cpu="1", node_name="n")
    ext, _, client = make(node("n", gpus=1, cpu="8"), bound=(ranked("share", 100, milli=600, node_name="n"), idle))
    before = model_state(ext)
    answer = preempt(client, PREEMPTOR, {"n": ["uid-share", "uid-idle", "uid-not-in-the-model"]}, violations=1)
    assert answer == {"n": {"Pods": [{"UID": "uid-share"}, {"UID": "uid-not-in-the-model"}], "NumPDBViolations": 1}}
    assert model_state(ext) == before


def test_preempt_never_answers_a_node_with_no_victims():
    """Our filters would spare every victim (kube-scheduler sees a need we do not): the victims as given."""
    _, _, client = make(node("n", gpus=1, cpu="8"), bound=(ranked("idle", 5, cpu="1", node_name="n"),))
    assert preempt(client, PREEMPTOR, {"n": ["uid-idle"]}, violations=1) == {
        "n": {"Pods": [{"UID": "uid-idle"}], "NumPDBViolations": 1}}
    assert preempt(client, PREEMPTOR, {"n": [], "ghost": ["uid-idle"]}) == {}  # nothing to evict; a node not cached


def test_preempt_never_spares_a_victim_kube_schedulers_own_filters_need_gone():
    """Our filters leave pod anti-affinity to kube-scheduler; sparing the pod it repels would make the node fail
    there, so only the idle victim is spared."""
    repelled = ranked("repelled", 100, cpu="1", node_name="n", labels={"app": "noisy"})
    _, _, client = make(node("n", gpus=1), bound=(repelled, ranked("idle", 5, cpu="1", node_name="n")))
    pod_obj = copy.deepcopy(PREEMPTOR)
    pod_obj["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    assert preempt(client, pod_obj, {"n": ["uid-repelled", "uid-idle"]}) == {
        "n": {"Pods": [{"UID": "uid-repelled"}], "NumPDBViolations": 0}}


def test_preempt_recounts_budget_violations_of_the_victims_left_when_it_watches_budgets():
    share = ranked("share", 100, milli=600, node_name="n", labels={"app": "train"})
    idle = ranked("idle", 5, cpu="1", node_name="n", labels={"app": "web"})
    ext, _, client = make(node("n", gpus=1), bound=(share, idle))
    asked = {"n": ["uid-share", "uid-idle"]}
    assert preempt(client, PREEMPTOR, asked, violations=1)["n"]["NumPDBViolations"] == 1  # no budgets: at most 1
    ext.replace_budgets([{"metadata": {"name": "web", "namespace": "ns", "uid": "pdb-web"},
                          "spec": {"selector": {"matchLabels": {"app": "web"}}}, "status": {"disruptionsAllowed": 0}}])
    assert preempt(client, PREEMPTOR, asked, violations=1) == {
        "n": {"Pods": [{"UID": "uid-share"}], "NumPDBViolations": 0}}  # recounted: the budget's pod is spared


def test_preempt_spares_the_victims_a_budget_protects_first_as_upstream_does():
    """Either share going makes room; the less important one is protected by a budget, so the other goes."""
    free_to_go = ranked("free-to-go", 50, milli=500, node_name="n")
    protected = ranked("protected", 20, milli=500, node_name="n", labels={"app": "db"})
    ext, _, client = make(node("n", gpus=1), bound=(free_to_go, protected))
    ext.budget_event("ADDED", {"metadata": {"name": "db", "namespace": "ns", "uid": "pdb-db"},
                               "spec": {"selector": {"matchLabels": {"app": "db"}}}, "status": {"disruptionsAllowed": 0}})
    assert preempt(client, PREEMPTOR, {"n": ["uid-free-to-go", "uid-protected"]}, violations=1) == {
        "n": {"Pods": [{"UID": "uid-free-to-go"}], "NumPDBViolations": 0}}


# --- the model, from watch events -------------------------------------------------------------------


def test_bound_pods_keep_their_recorded_devices_and_pods_seen_before_their_node_count():
    early = gpu_pod("early", gpus=1, node_name="late-node", annotations={DEVICES: '[{"index":1,"milli":1000}]'})
    ext, core, client = make(node("n", gpus=2), bound=(
        gpu_pod("q", gpus=1, node_name="n", annotations={DEVICES: '[{"index":0,"milli":1000}]'}), early))
    first = gpu_pod("p", gpus=1)
    assert bind(client, core, first, "n") == ""
    assert devices_of(core, first) == [{"index": 1, "milli": 1000}]
    ext.node_event("ADDED", node("late-node", gpus=2))
    assert ext.model.cluster.assignments["uid-early"].devices == (pods.Device(1, 1000),)


def test_a_stale_pending_event_after_bind_keeps_the_gpus_and_deletion_frees_them():
    ext, core, client = make(node("n", gpus=1))
    first = gpu_pod("p", gpus=1)
    assert bind(client, core, first, "n") == ""
    ext.pod_event("MODIFIED", first)  # from before the binding
    assert "uid-p" in ext.model.cluster.assignments
    assert {uid: assumption.node for uid, assumption in ext.model.assumed.items()} == {"uid-p": "n"}
    ext.pod_event("MODIFIED", core.pods[("ns", "p")])  # the binding, as the watch shows it
    assert ext.model.assumed == {} and ext.model.cluster.assignments["uid-p"].devices == (pods.Device(0, 1000),)
    second = gpu_pod("q", gpus=1)
    assert bind(client, core, second, "n").endswith("Insufficient nvidia.com/gpu")
    ext.pod_event("DELETED", core.pods[("ns", "p")])
    assert bind(client, core, second, "n") == ""


def test_a_relist_forgets_pods_that_are_gone():
    ext, _, _ = make(node("n", gpus=2), bound=(gpu_pod("q", gpus=2, node_name="n"),))
    assert ext.model.cluster.gpu_used[ext.model.cluster.index["n"]] == 2000
    ext.replace_pods([])
    assert ext.model.cluster.assignments == {} and ext.model.cluster.gpu_used[ext.model.cluster.index["n"]] == 0


def test_a_failed_bind_of_an_old_incarnation_leaves_the_new_pod_of_that_name_bound():
    """The pod is deleted and created again, and the new one bound, while the old one's Binding is in flight;
    the old one's refusal (the UID precondition) must not free the new pod's GPU. Keyed by name, it did."""
    ext, core, client = make(node("n", gpus=2))
    old = gpu_pod("p", gpus=1)
    new = {**gpu_pod("p", gpus=1), "metadata": {**gpu_pod("p", gpus=1)["metadata"], "uid": "uid-new"}}

    def recreated_and_bound() -> None:
        del core.pods[("ns", "p")]
        ext.pod_event("DELETED", old)
        assert bind(client, core, new, "n") == ""

    core.while_binding = recreated_and_bound
    assert bind(client, core, old, "n").startswith("binding ns/p to n: HTTP 409")
    assert set(ext.model.cluster.assignments) == {"uid-new"} and set(ext.model.assumed) == {"uid-new"}
    assert ext.model.cluster.gpu_used[ext.model.cluster.index["n"]] == 1000
    assert devices_of(core, new) == [{"index": 0, "milli": 1000}]  # freed by the old pod's deletion
    assert ext.model.cluster.assignments["uid-new"].devices == (pods.Device(0, 1000),)


def test_a_node_deleted_and_registered_again_keeps_its_pods_gpus():
    ext, core, client = make(node("n", gpus=1), bound=(gpu_pod("q", gpus=1, node_name="n"),))
    ext.node_event("DELETED", node("n", gpus=1))
    ext.node_event("ADDED", node("n", gpus=1))
    assert bind(client, core, gpu_pod("p", gpus=1), "n") == "node n cannot take pod ns/p any more: " \
                                                            "Insufficient nvidia.com/gpu"


def test_an_object_that_breaks_the_model_is_counted_and_the_watch_goes_on(monkeypatch):
    ext, _, _ = make(node("n", gpus=1))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(ext.model, "pod_event", broken)
    ext.pod_event("ADDED", gpu_pod("q", gpus=1, node_name="n"))  # returns: the Reflector's thread lives on
    assert ext.model.rejected["Pod"] == 1 and not ext.lock.locked()


# --- malformed requests, not ready, bugs ----------------------------------------------------------


GOOD_POD = gpu_pod("p", gpus=1)


@pytest.mark.parametrize(("body", "where"), [(b"{not json", "line 1 column 2 (char 1)"),
                                             (b"\xff", "line 1 column 1 (char 0)")])
def test_a_body_that_is_not_json_is_a_400_that_says_where(body, where):
    """The parser's own words (orjson's, which vary by version) and the position."""
    _, core, client = make()
    response = client.post("/filter", data=body, content_type="application/json")
    error = response.get_json()["error"]
    assert response.status_code == 400 and error.startswith("body: not valid JSON (") and where in error
    assert core.calls == []


@pytest.mark.parametrize(("verb", "body", "message"), [
    ("filter", [], "body: must be a JSON object (ExtenderArgs), got []"),
    ("filter", {"NodeNames": ["a"]}, "Pod: missing"),
    ("filter", {"Pod": "p", "NodeNames": []}, 'Pod: must be an object (a v1 Pod), got "p"'),
    ("filter", {"Pod": {"spec": {}}, "NodeNames": []}, "Pod.metadata: must be an object, got null"),
    ("filter", {"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNames": []},
     "Pod.metadata.uid: must be a non-empty string, got null"),
    ("filter", {"Pod": {"metadata": {"name": "p", "uid": "u"}, "spec": []}, "NodeNames": []},
     "Pod.spec: must be an object, got []"),
    ("filter", {"Pod": GOOD_POD}, "NodeNames, Nodes: one must be given (NodeNames when nodeCacheCapable is true)"),
    ("filter", {"Pod": GOOD_POD, "NodeNames": [], "Nodes": {"items": []}}, "NodeNames, Nodes: only one may be given"),
    ("filter", {"Pod": GOOD_POD, "NodeNames": "a100-1"}, 'NodeNames: must be a list of node names, got "a100-1"'),
    ("filter", {"Pod": GOOD_POD, "NodeNames": ["a100-1", 3]}, "NodeNames[1]: must be a non-empty string, got 3"),
    ("filter", {"Pod": GOOD_POD, "Nodes": ["a100-1"]}, 'Nodes: must be an object (a v1 NodeList), got ["a100-1"]'),
    ("filter", {"Pod": GOOD_POD, "Nodes": {"items": {}}}, "Nodes.items: must be a list, got {}"),
    ("filter", {"Pod": GOOD_POD, "Nodes": {"items": [{"metadata": {}}]}},
     "Nodes.items[0].metadata.name: must be a non-empty string, got null"),
    ("prioritize", {"NodeNames": []}, "Pod: missing"),
    ("prioritize", {"Pod": GOOD_POD, "NodeNames": [None]}, "NodeNames[0]: must be a non-empty string, got null"),
    ("bind", [], "body: must be a JSON object (ExtenderBindingArgs), got []"),
    ("bind", {"PodName": "p", "PodNamespace": "ns", "PodUID": "u"}, "Node: must be a non-empty string, got nothing"),
    ("bind", {"PodName": "p", "PodNamespace": "ns", "PodUID": 5, "Node": "n"},
     "PodUID: must be a non-empty string, got 5"),
    ("preempt", [], "body: must be a JSON object (ExtenderPreemptionArgs), got []"),
    ("preempt", {"NodeNameToMetaVictims": {}}, "Pod: missing"),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToVictims": None, "NodeNameToMetaVictims": None},
     "NodeNameToMetaVictims, NodeNameToVictims: one must be given (NodeNameToMetaVictims when nodeCacheCapable is true)"),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToVictims": {}, "NodeNameToMetaVictims": {}},
     "NodeNameToMetaVictims, NodeNameToVictims: only one may be given"),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToMetaVictims": ["n"]},
     'NodeNameToMetaVictims: must be an object of node names to victims, got ["n"]'),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToMetaVictims": {"": {"Pods": []}}},
     'NodeNameToMetaVictims[""]: must be keyed by a node name'),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n": ["u"]}},
     'NodeNameToMetaVictims["n"]: must be an object (Victims), got ["u"]'),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n": {"Pods": {"UID": "u"}}}},
     'NodeNameToMetaVictims["n"].Pods: must be a list, got {"UID": "u"}'),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n": {"Pods": ["u"]}}},
     'NodeNameToMetaVictims["n"].Pods[0]: must be an object (MetaPod), got "u"'),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "u"}, {"uid": "v"}]}}},
     'NodeNameToMetaVictims["n"].Pods[1].UID: must be a non-empty string, got null'),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToMetaVictims": {"n": {"Pods": [{"UID": "u"}], "NumPDBViolations": "1"}}},
     'NodeNameToMetaVictims["n"].NumPDBViolations: must be a non-negative integer, got "1"'),
    ("preempt", {"Pod": GOOD_POD, "NodeNameToVictims": {"n": {"Pods": [{"metadata": {"name": "v"}}]}}},
     'NodeNameToVictims["n"].Pods[0].metadata.uid: must be a non-empty string, got null'),
])
def test_a_malformed_request_is_a_400_that_names_the_field(verb, body, message):
    _, core, client = make()
    response = client.post(f"/{verb}", data=body if isinstance(body, bytes) else json.dumps(body),
                           content_type="application/json")
    assert (response.status_code, response.get_json()) == (400, {"error": message, "status": 400})
    assert core.calls == []


def test_a_bug_is_a_500_with_a_message_never_an_empty_answer(monkeypatch):
    ext, _, client = make()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(ext.framework, "evaluate", broken)
    response = client.post("/filter", json={"Pod": GOOD_POD, "NodeNames": ["a100-1"]})
    assert (response.status_code, response.get_json()) == (
        500, {"error": "internal error in /filter: RuntimeError: boom", "status": 500})


class Unsynced:
    synced = threading.Event()


def test_until_the_watches_have_listed_every_verb_answers_with_an_error_and_readyz_is_503():
    ext, _, client = make()
    ext.watches = watching.ClusterWatches([Unsynced()])
    message = "gpu-scheduler extender: nodes and pods not listed from the API yet"
    assert post(client, "filter", {"Pod": GOOD_POD, "NodeNames": ["a100-1"]})["Error"] == message
    assert post(client, "bind", binding(GOOD_POD, "a100-1")) == {"Error": message}
    assert client.post("/prioritize", json={"Pod": GOOD_POD, "NodeNames": ["a100-1"]}).status_code == 503
    preempting = client.post("/preempt", json={"Pod": GOOD_POD, "NodeNameToMetaVictims": {"a100-1": {"Pods": []}}})
    assert (preempting.status_code, preempting.get_json()["error"]) == (503, message)  # no result: nobody evicted
    assert client.get("/readyz").status_code == 503
    unconfigured = extender.build_app(lambda: None).test_client()
    assert unconfigured.get("/readyz").get_json()["error"] == "no valid configuration loaded yet"


def sample(client: Any, series: str) -> float:
    """One series' value on /metrics (counters are the process's: other tests count too), 0 when absent."""
    lines = client.get("/metrics").get_data(as_text=True).splitlines()
    return next((float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(series + " ")), 0.0)


def test_health_readiness_and_metrics():
    _, _, client = make(bound=(gpu_pod("q", gpus=1, node_name="a100-1"),))
    assert client.get("/healthz").get_json() == {
        "status": "ok", "utilization": "no live source (scheduling.utilization.prometheus): node annotations only"}
    assert client.get("/readyz").get_json() == {"status": "ready", "nodes": 3, "pods": 1}
    filter_names(client, GOOD_POD, ["a100-1"])
    client.post("/filter", data=b"[")
    preempted = ('gpu_scheduler_extender_requests_total{outcome="no_candidates",verb="preempt"}',
                 'gpu_scheduler_extender_preemption_nodes_total{result="dropped"}')
    before = [sample(client, series) for series in preempted]
    assert preempt(client, GOOD_POD, {"ghost": ["uid-q"]}) == {}
    assert [sample(client, series) for series in preempted] == [count + 1 for count in before]
    text = client.get("/metrics").get_data(as_text=True)
    assert 'gpu_scheduler_extender_requests_total{outcome="ok",verb="filter"}' in text
    assert 'gpu_scheduler_extender_requests_total{outcome="invalid",verb="filter"}' in text
    assert 'gpu_scheduler_extender_request_duration_seconds_count{verb="filter"}' in text
    assert 'gpu_scheduler_allocated_gpus{model="NVIDIA-A100-SXM4-40GB",node="a100-1"} 1.0' in text
    assert 'gpu_scheduler_allocated_gpus{model="NVIDIA-L4",node="l4-1"} 0.0' in text
    assert client.get("/nope").status_code == 404 and client.get("/filter").status_code == 405


# --- the shipped KubeSchedulerConfiguration --------------------------------------------------------


def test_the_shipped_kube_scheduler_configuration_uses_every_verb_we_serve():
    shipped = yaml.safe_load(SHIPPED.read_text())
    assert (shipped["apiVersion"], shipped["kind"]) == ("kubescheduler.config.k8s.io/v1", "KubeSchedulerConfiguration")
    assert [p["schedulerName"] for p in shipped["profiles"]] == ["default-scheduler"]
    [ext] = shipped["extenders"]  # only one extender may bind
    assert ext["urlPrefix"] == "http://gpu-scheduler-extender.gpu-scheduler-system.svc:8888"
    assert ext["weight"] > 0  # a prioritize verb needs weight > 0
    assert ext["nodeCacheCapable"] is True and ext["ignorable"] is False and ext["enableHTTPS"] is False
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    routes = {rule.rule for rule in extender.build_app(lambda: None).url_map.iter_rules()}
    assert {f"/{ext[verb]}" for verb in VERBS} <= routes


VERBS = ("filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb")


def test_the_second_kube_schedulers_configuration_sends_every_pod_of_its_profile_through_every_verb():
    """The extender overlay's own kube-scheduler: no managedResources, so GPU shares reach the extender too."""
    shipped = yaml.safe_load((SHIPPED.parent / "kube-scheduler-config.yaml").read_text())
    assert [p["schedulerName"] for p in shipped["profiles"]] == ["gpu-scheduler"]
    [ext] = shipped["extenders"]
    assert "managedResources" not in ext and ext["nodeCacheCapable"] is True and ext["ignorable"] is False
    routes = {rule.rule for rule in extender.build_app(lambda: None).url_map.iter_rules()}
    assert {f"/{ext[verb]}" for verb in VERBS} <= routes


def test_a_watch_down_longer_than_a_minute_fails_readiness_and_health():
    ext, _, client = make()
    assert client.get("/healthz").status_code == 200
    nodes = watching.Reflector(lambda **_: None, name="Nodes", on_replace=print, on_event=print)
    ext.watches = watching.ClusterWatches([nodes])
    nodes.synced.set()
    nodes._down_since = time.monotonic() - 90
    for path in ("/readyz", "/healthz"):
        response = client.get(path)
        assert response.status_code in (500, 503) and response.get_json()["error"] == "Nodes: watch down for 90 s"
    nodes._down_since = None
    assert client.get("/readyz").status_code == 200 and client.get("/healthz").status_code == 200


def test_prioritize_leaves_out_the_preferences_kube_scheduler_scores_itself():
    """kube-scheduler's NodeAffinity plugin already scores a preferred node affinity; the extender adding its own
    node-affinity score would count that preference twice."""
    _, _, client = make()
    pod_obj = gpu_pod("p", gpus=1, model="A100")
    pod_obj["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": {"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["a100-1"]}]}}]}}
    assert scores(client, pod_obj, ["a100-1", "a100-2"]) == {"a100-1": 10, "a100-2": 10}


def test_the_replica_holding_the_lease_raises_a_warmed_up_pods_deletion_cost_once(monkeypatch):
    """Warm-up runs in extender mode too (plugins.EXTENDER), on the replica that holds the extender's Lease."""
    from gpu_scheduler import rawapi

    patches: list[tuple[str, Any]] = []
    monkeypatch.setattr(rawapi, "request", lambda api, method, path, body, **_: patches.append((path, body)) or b"{}")
    ready = pod("warm", gpus=1, node_name="a100-1", annotations={
        "controller.kubernetes.io/pod-deletion-cost": "-50", "gpu-scheduler.io/initial-deletion-cost": "-50"})
    ready["metadata"]["uid"] = "uid-warm"
    ready["status"] = {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    ext, _, _ = make(bound=(ready,))
    ext.tick(1000.0)
    ext.reporter.submit(lambda: None).result(timeout=5)
    assert patches == []  # not the Lease holder: another replica may be warming up
    ext.leading.set()
    ext.tick(1001.0)
    ext.tick(1002.0)  # within the retry interval: not patched twice while the first patch is in flight
    ext.reporter.submit(lambda: None).result(timeout=5)
    assert [(path, [op["op"] for op in body]) for path, body in patches] == [
        ("/api/v1/namespaces/ns/pods/warm", ["test", "replace", "add"])]


# --- DRA: kube-scheduler allocates; the extender scores, counts and binds without device annotations -------------


def dra_extender() -> tuple[extender.Extender, FakeCore, Any]:
    from tests.unit.test_dra import gpu_slice
    from tests.unit.test_dra_extended import gpu_class

    ext, core, client = make(node("dra-1", gpus=0), node("dra-2", gpus=0), node("a100-1"))
    ext.replace_resources("DeviceClass", [gpu_class()])
    ext.replace_resources("ResourceSlice", [gpu_slice("dra-1", count=4), gpu_slice("dra-2", count=8)])
    ext.replace_resources("ResourceClaim", [])
    return ext, core, client


def test_a_pod_whose_gpus_dra_serves_is_not_refused_on_dra_nodes_and_is_scored_by_our_device_policy():
    ext, _, client = dra_extender()
    result = filter_names(client, gpu_pod("p", gpus=2), ["dra-1", "dra-2", "a100-1"])
    assert result["NodeNames"] == ["dra-1", "dra-2", "a100-1"] and not result["FailedNodes"]
    scores = {p["Host"]: p["Score"] for p in post(client, "prioritize", {
        "Pod": gpu_pod("p", gpus=2), "Nodes": None, "NodeNames": ["dra-1", "dra-2", "a100-1"]})}
    assert scores["dra-1"] > scores["dra-2"]  # binpack: the node whose devices it fills more


def test_the_devices_of_claims_kube_scheduler_allocated_are_counted_and_bind_writes_no_devices_annotation():
    ext, core, client = dra_extender()
    allocation = {"devices": {"results": [
        {"request": "container-0-request-0", "driver": "gpu.nvidia.com", "pool": "dra-1", "device": f"gpu-{i}"}
        for i in range(4)]}}
    ext.resource_event("ResourceClaim", "ADDED", {
        "metadata": {"namespace": "ns", "name": "other-extended-resources-x", "uid": "c1"},
        "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": 4}}]}},
        "status": {"allocation": allocation}})
    assert ext.model.cluster.dra.devices_on(ext.model.cluster.node(ext.model.cluster.index["dra-1"])) == (4, 4)
    pod_obj = gpu_pod("p", gpus=2)
    filter_names(client, pod_obj, ["dra-2"])
    assert bind(client, core, pod_obj, "dra-2") == ""
    assert DEVICES not in core.pods[("ns", "p")]["metadata"].get("annotations", {})


def test_the_extenders_metrics_count_dra_gpus_and_the_gpus_there_are():
    ext, _, client = dra_extender()
    text = client.get("/metrics").get_data(as_text=True)
    assert 'gpu_scheduler_allocated_gpus{model="NVIDIA A100-SXM4-40GB",node="dra-2"} 0.0' in text
    assert 'gpu_scheduler_gpus{model="NVIDIA A100-SXM4-40GB",node="dra-2"} 8.0' in text
    assert 'gpu_scheduler_gpus{model="NVIDIA-A100-SXM4-40GB",node="a100-1"}' in text
