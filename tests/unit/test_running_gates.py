"""PreEnqueue in the standalone scheduler's loop: a pod with scheduling gates is never tried, assumed or reported,
and is tried at once when its last gate goes (kube-scheduler's SchedulingGates plugin); the loop is driven directly,
as in test_running.py, and tests/e2e/test_gates.py proves the same against the real apiserver."""

from __future__ import annotations

import pytest

from gpu_scheduler import rawapi
from gpu_scheduler.runtime.plugins import gates
from scheduler_core import pods, watched
from tests.unit.builders import node
from tests.unit.test_running import accounted, pending, settle


def gated(name: str, *names: str) -> dict:
    obj = pending(name)
    obj["spec"]["schedulingGates"] = [{"name": gate} for gate in names]
    return obj


@pytest.mark.parametrize(("spec", "message"), [
    ({}, None),
    ({"schedulingGates": []}, None),
    ({"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}, "waiting for scheduling gates: [kueue.x-k8s.io/admission]"),
    ({"schedulingGates": [{"name": "a.io/one"}, {"name": "b.io/two"}]}, "waiting for scheduling gates: [a.io/one b.io/two]"),
    ({"schedulingGates": [{}]}, "waiting for scheduling gates: []"),  # an entry gates, named or not
    ({"schedulingGates": "nonsense"}, None),  # not a list: the apiserver never stores it; nothing to wait for
])
def test_the_gates_plugin_says_what_the_pod_waits_for_as_upstream_does(spec, message):
    obj = pending("p")
    obj["spec"].update(spec)
    facts = pods.parse(obj, gpu_resources=("nvidia.com/gpu",))
    assert gates.SchedulingGates(None).pre_enqueue(watched.PendingPod("ns", "p", "uid-p", facts)) == message  # type: ignore[arg-type]


def test_a_gated_pod_is_neither_tried_nor_reported_and_binds_once_its_last_gate_goes(scheduler, monkeypatch):
    writes: list[str] = []
    monkeypatch.setattr(rawapi, "request", lambda api, method, path, body, **_: writes.append(str(body)) or b"{}")
    live = scheduler
    live._handle(("node", "ADDED", node("a", gpus=1)))
    live._handle(("pod", "ADDED", gated("held", "a.io/one", "b.io/two")))
    live._schedule(live.queue.pop(float("inf")))
    assert accounted(live) == {} and live.bindings == [] and "uid-held" not in live.reported
    assert live.gated == {"uid-held": "waiting for scheduling gates: [a.io/one b.io/two]"}
    assert live.queue.pop(float("inf")) is None  # parked: a cluster change wakes it only to be held again
    live.queue.cluster_changed()
    live._schedule(live.queue.pop(float("inf")))
    assert accounted(live) == {} and "uid-held" in live.gated
    live._handle(("pod", "MODIFIED", gated("held", "b.io/two")))  # one gate lifted: still held
    assert live.queue.pop(float("inf")) is None
    live._handle(("pod", "MODIFIED", gated("held")))  # the last one: tried at once, no cluster change needed
    assert live.gated == {}
    live._schedule(live.queue.pop(0.0))
    settle(live)
    assert live.bindings == [("ns/held", "a")]
    live.reporter.submit(lambda: None).result(timeout=5)
    assert not [body for body in writes if "Unschedulable" in body]  # never told it was unschedulable
