"""DRA claims in the standalone scheduler's loop (gpu_scheduler.runtime.plugins.dra): Reserve assumes the
allocation, PreBind writes the finalizer, then the allocation and reservation, reading the claim again after a
conflict, before the Binding; a failed write unreserves and the devices are free for the next decision. The loop is
driven directly with the API's writes recorded; tests/e2e/test_dra.py proves the same against the real apiserver."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpu_scheduler import rawapi
from scheduler_core.dra import state
from tests.unit import test_dra as build
from tests.unit.builders import node
from tests.unit.test_running import accounted, settle

CLAIM_PATH = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"


def with_dra(live: Any) -> None:
    """A node with two GPUs published in a slice, the class, and claim c asking one GPU; the pod p uses it."""
    live._handle(("node", "ADDED", node("a", gpus=0)))
    for kind in state.KINDS:
        live._handle(("resources", kind, []))
    live._handle(("resource", "DeviceClass", "ADDED", {"metadata": {"name": build.DRIVER}, "spec": {
        "selectors": [{"cel": {"expression": build.CLASS_SELECTOR}}]}}))
    live._handle(("resource", "ResourceSlice", "ADDED", build.gpu_slice("a", count=2)))
    live._handle(("resource", "ResourceClaim", "ADDED", build.claim("c", 1)))
    live._handle(("pod", "ADDED", build.claiming("p", "c")))


def recording(monkeypatch: Any, *, conflicts: int = 0, refuse: int | None = None) -> list[tuple[str, str, Any]]:
    """rawapi.request recorded; the first `conflicts` status updates answer 409, and `refuse` fails them all."""
    writes: list[tuple[str, str, Any]] = []
    left = {"conflicts": conflicts}

    def request(api: Any, method: str, path: str, body: Any, **_: Any) -> bytes:
        writes.append((method, path, json.loads(json.dumps(body))))
        if method == "PUT" and path.endswith("/status"):
            if refuse is not None:
                raise ApiException(status=refuse, reason="Forbidden")
            if left["conflicts"]:
                left["conflicts"] -= 1
                raise ApiException(status=409, reason="Conflict")
        if method == "GET":
            return json.dumps({**build.claim("c", 1), "metadata": {**build.claim("c", 1)["metadata"],
                                                                    "finalizers": [state.FINALIZER]}}).encode()
        return json.dumps(body or {}).encode()
    monkeypatch.setattr(rawapi, "request", request)
    return writes


def test_prebind_writes_the_finalizer_then_allocation_and_reservation_before_the_binding(scheduler, monkeypatch):
    writes = recording(monkeypatch)
    live = scheduler
    with_dra(live)
    live._schedule(live.queue.pop(float("inf")))
    assert ("ns", "c") in live.model.cluster.dra.assumed  # Reserve: the next decision sees the device taken
    settle(live)
    assert live.bindings == [("ns/p", "a")]
    claim_writes = [(method, path, body) for method, path, body in writes if path.startswith(CLAIM_PATH)]
    (first, _, finalizer), (second, path, status) = claim_writes
    assert (first, second, path) == ("PUT", "PUT", CLAIM_PATH + "/status")
    assert state.FINALIZER in finalizer["metadata"]["finalizers"]
    allocation = status["status"]["allocation"]
    assert [r["device"] for r in allocation["devices"]["results"]] == ["gpu-0"]
    assert allocation["allocationTimestamp"]
    assert status["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]


def test_a_conflict_reads_the_claim_again_and_retries(scheduler, monkeypatch):
    writes = recording(monkeypatch, conflicts=1)
    live = scheduler
    with_dra(live)
    live._schedule(live.queue.pop(float("inf")))
    settle(live)
    assert live.bindings == [("ns/p", "a")]
    methods = [method for method, path, _ in writes if path.startswith(CLAIM_PATH)]
    assert methods == ["PUT", "PUT", "GET", "PUT"]  # finalizer, status (409), read again, status


def test_a_refused_write_unreserves_and_frees_the_device_without_binding(scheduler, monkeypatch):
    recording(monkeypatch, refuse=403)
    live = scheduler
    live.outcome["api_has"] = build.claiming("p", "c")  # the API still has the pod pending
    with_dra(live)
    live._schedule(live.queue.pop(float("inf")))
    assert live.bound_signal.wait(5)  # the binder read the pod after the refusal
    live.bound_signal.clear()
    live._handle(live.events.get(timeout=5))
    assert live.bindings == [] and accounted(live) == {}
    assert live.model.cluster.dra.assumed == {}
    assert "uid-p" in live.model.pending


def test_a_pod_whose_template_claim_is_named_after_the_claim_arrived_is_tried_at_once(scheduler, monkeypatch):
    """The resourceclaim controller makes the claim, then names it in the pod's status; the claim's event may come
    first. The pod then waits (PreEnqueue), told why, and the update naming its claim brings it back at once,
    with no other change in the cluster (before, it stayed parked)."""
    recording(monkeypatch)
    live = scheduler
    with_dra(live)
    live._handle(("resource", "ResourceClaim", "ADDED", build.claim("t", 1, owner="uid-q")))
    unnamed = build.claiming("q", "t", template=True)
    unnamed["status"] = {}
    live._handle(("pod", "ADDED", unnamed))
    first = live.queue.pop(float("inf"))
    live._schedule(first)
    if first != "uid-q":
        live._schedule(live.queue.pop(float("inf")))
    assert live.gated.get("uid-q") == 'pod "ns/q": ResourceClaim not created yet'
    assert live.reported["uid-q"][0] == '0/1 nodes are available: pod "ns/q": ResourceClaim not created yet.'
    live._handle(("pod", "MODIFIED", build.claiming("q", "t", template=True)))
    assert "uid-q" not in live.gated
    while (uid := live.queue.pop(float("inf"))) is not None and uid != "uid-q":
        pass
    assert uid == "uid-q"
