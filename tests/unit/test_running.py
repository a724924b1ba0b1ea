"""The standalone scheduler's event handling: orderings the e2e tests cannot force on demand.

The loop's handler is driven directly; only the Binding write and the read that follows a failed one
are replaced (by a recorder and a stand-in API), and every other call (events, device records) goes to a
closed port and fails harmlessly. The model's own rules are in test_watched.py; tests/e2e/test_scheduler*.py prove the same
loop against the real apiserver.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_scheduler import rawapi
from gpu_scheduler.runtime import running, standalone
from scheduler_core import watched
from tests.unit.builders import node, pod
from webhook import config


def settle(live) -> None:
    """Wait for the binder, then handle what it reported."""
    assert live.bound_signal.wait(5)
    live.bound_signal.clear()
    live._handle(live.events.get(timeout=5))


def pending(name: str, gpus: int = 1, uid: str | None = None) -> dict:
    obj = pod(name, gpus=gpus)
    obj["metadata"]["uid"] = uid or f"uid-{name}"
    return obj


def bound(obj: dict, node_name: str) -> dict:
    return {**obj, "spec": {**obj["spec"], "nodeName": node_name}}


def schedule_next(live) -> None:
    live._schedule(live.queue.pop(float("inf")))


def accounted(live) -> dict[str, str]:
    """pod -> node, as the model accounts them."""
    model = live.model.cluster
    return {a.pod.key: model.node(a.node).name for a in model.assignments.values()}


def test_a_stale_event_from_before_the_binding_neither_requeues_nor_frees_the_gpu(scheduler):
    scheduler._handle(("node", "ADDED", node("a", gpus=1)))
    first = pending("first")
    scheduler._handle(("pod", "ADDED", first))
    schedule_next(scheduler)
    settle(scheduler)
    scheduler._handle(("pod", "MODIFIED", first))  # the watch still shows the pod unbound: an older event
    assert "uid-first" not in scheduler.queue and accounted(scheduler) == {"ns/first": "a"}
    scheduler._handle(("pod", "ADDED", pending("second")))
    schedule_next(scheduler)
    assert scheduler.bindings == [("ns/first", "a")]  # the one GPU is still taken: no second binding
    scheduler._handle(("pod", "MODIFIED", bound(first, "a")))  # confirmation
    assert "uid-first" not in scheduler.model.assumed


def test_a_bound_pod_seen_before_its_node_is_accounted_when_the_node_arrives(scheduler):
    scheduler._handle(("pod", "ADDED", bound(pending("early", gpus=2), "late-node")))
    assert accounted(scheduler) == {}
    scheduler._handle(("node", "ADDED", node("late-node", gpus=2)))
    assert accounted(scheduler) == {"ns/early": "late-node"}
    scheduler._handle(("pod", "ADDED", pending("next")))
    schedule_next(scheduler)
    assert scheduler.bindings == [] and scheduler.queue.parked() == 1


@pytest.mark.parametrize(("status", "api_has", "retried", "where"), [
    (500, "pending", True, {}),
    (409, "bound-elsewhere", False, {"ns/p": "b"}),
    (409, "a-new-pod-of-that-name", False, {}),
    (404, None, False, {}),
    (500, "unreadable", True, {}),
], ids=["error-still-pending", "bound-by-another", "recreated", "gone", "cannot-ask"])
def test_a_failed_binding_is_checked_against_the_api_and_retried_only_while_the_pod_waits(
        scheduler, status, api_has, retried, where):
    """Not dropped on a 409 as before: the pod is read, and the model follows what the API says."""
    scheduler._handle(("node", "ADDED", node("a", gpus=1)))
    scheduler._handle(("node", "ADDED", node("b", gpus=1)))
    obj = pending("p")
    scheduler.outcome.update(
        error=ApiException(status=status, reason="refused"), unreadable=api_has == "unreadable",
        api_has={"pending": obj, "bound-elsewhere": bound(obj, "b"),
                 "a-new-pod-of-that-name": pending("p", uid="uid-new")}.get(api_has))
    scheduler._handle(("pod", "ADDED", obj))
    schedule_next(scheduler)
    settle(scheduler)
    assert accounted(scheduler) == where and scheduler.model.assumed == {}
    assert ("uid-p" in scheduler.queue) is retried and ("uid-p" in scheduler.model.pending) is retried
    if retried:
        assert scheduler.queue.pop(0.0) is None  # backing off, not tried again at once
        scheduler.outcome.update(error=None)
        schedule_next(scheduler)
        settle(scheduler)
        assert scheduler.bindings == [("ns/p", "a"), ("ns/p", "a")] and accounted(scheduler) == {"ns/p": "a"}


def test_a_refusal_for_an_old_incarnation_leaves_the_new_pod_of_that_name_alone(scheduler):
    """Deleted and re-created while its binding is in flight: the old binding's refusal must not clear the new
    pod's place (keyed by name, it did: the model then held less than the API)."""
    scheduler._handle(("node", "ADDED", node("a", gpus=2)))
    old, new = pending("p", uid="uid-old"), pending("p", uid="uid-new")
    scheduler.outcome.update(error=ApiException(status=409, reason="Conflict"), api_has=new)  # the UID precondition
    scheduler._handle(("pod", "ADDED", old))
    schedule_next(scheduler)  # bound to a: the binding is in flight
    scheduler._handle(("pod", "DELETED", old))
    scheduler._handle(("pod", "ADDED", new))
    settle(scheduler)  # the old binding's refusal arrives now
    assert "uid-new" in scheduler.model.pending and "uid-new" in scheduler.queue
    scheduler.outcome.update(error=None)
    schedule_next(scheduler)
    settle(scheduler)
    assert accounted(scheduler) == {"ns/p": "a"} and set(scheduler.model.cluster.assignments) == {"uid-new"}


def test_a_deleted_pod_frees_its_gpu_and_wakes_parked_pods(scheduler):
    scheduler._handle(("node", "ADDED", node("a", gpus=1)))
    holder = bound(pending("holder"), "a")
    scheduler._handle(("pod", "ADDED", holder))
    scheduler._handle(("pod", "ADDED", pending("waiting")))
    schedule_next(scheduler)
    assert scheduler.queue.parked() == 1
    scheduler._handle(("pod", "DELETED", holder))
    assert scheduler.queue.parked() == 0 and accounted(scheduler) == {}


def test_a_node_that_returns_brings_its_pods_back_and_nothing_is_given_twice(scheduler):
    a = node("a", gpus=1)
    scheduler._handle(("node", "ADDED", a))
    scheduler._handle(("pod", "ADDED", bound(pending("holder"), "a")))
    scheduler._handle(("node", "DELETED", a))
    scheduler._handle(("node", "ADDED", a))
    scheduler._handle(("pod", "ADDED", pending("next")))
    schedule_next(scheduler)
    assert scheduler.bindings == [] and accounted(scheduler) == {"ns/holder": "a"}


def test_pods_of_other_schedulers_are_ignored(scheduler):
    other = pending("theirs")
    other["spec"]["schedulerName"] = "volcano"
    scheduler._handle(("pod", "ADDED", other))
    assert len(scheduler.queue) == 0 and scheduler.model.pending == {}


def test_an_event_that_breaks_the_handler_is_counted_and_the_loop_goes_on(scheduler, monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(scheduler.model, "pod_event", broken)
    scheduler._handle(("pod", "ADDED", pending("p")))
    assert scheduler.model.rejected["Pod"] == 1
    scheduler._handle(("node", "ADDED", node("a", gpus=1)))
    assert "a" in scheduler.model.cluster.index


def test_the_model_is_exposed_as_allocated_gpus(scheduler):
    from prometheus_client import CollectorRegistry, generate_latest

    from gpu_scheduler.runtime import model_metrics

    scheduler._handle(("node", "ADDED", node("a", gpus=2)))
    scheduler._handle(("pod", "ADDED", bound(pending("p"), "a")))
    registry = CollectorRegistry()
    model_metrics.register(lambda: model_metrics.ModelView.of(scheduler.model), registry)
    text = generate_latest(registry).decode()
    assert 'gpu_scheduler_allocated_gpus{model="NVIDIA-A100-SXM4-40GB",node="a"} 1.0' in text


def test_healthz_fails_when_a_watch_has_been_down_longer_than_a_minute(scheduler):
    """A frozen model must not look healthy: the kubelet restarts the process, and a restart relists."""
    scheduler._loop.start()  # the loop alone: the watches stay unstarted, so they count as down since creation
    assert standalone._health_problems(None) == []  # standing by for the lease
    for reflector in scheduler.watches.reflectors:
        reflector._down_since = time.monotonic() - 30
    assert standalone._health_problems(scheduler) == []
    scheduler.watches.reflectors[1]._down_since = time.monotonic() - 75
    assert standalone._health_problems(scheduler) == ["Pods: watch down for 75 s"]
    scheduler.watches.reflectors[1]._down_since = None  # established again
    assert standalone._health_problems(scheduler) == []


def test_an_unschedulable_reason_that_could_not_be_written_is_written_again_at_the_next_attempt(scheduler, monkeypatch):
    """While the apiserver is away the PodScheduled=False write fails; the pod must not then wait a minute
    without a reason."""
    writes: list[str] = []

    def fake_request(api, method, path, body, **_):
        writes.append(path)
        raise OSError("connection refused")

    monkeypatch.setattr(rawapi, "request", fake_request)
    waiting = watched.PendingPod("ns", "big", "uid-big", None)  # type: ignore[arg-type]
    scheduler.report_unschedulable(waiting, "0/0 nodes are available")
    scheduler.reporter.shutdown(wait=True)  # the write (and its event) has been tried
    assert "/api/v1/namespaces/ns/pods/big/status" in writes
    scheduler._handle(scheduler.events.get(timeout=5))
    assert "uid-big" not in scheduler.reported  # so the next attempt writes it again


def test_a_pod_waiting_for_namespace_labels_is_tried_again_once_the_namespaces_are_listed(scheduler):
    scheduler._handle(("node", "ADDED", node("a", gpus=1)))
    waiting = pending("waiting")
    waiting["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "namespaceSelector": {"matchLabels": {"team": "a"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    scheduler._handle(("pod", "ADDED", waiting))
    schedule_next(scheduler)
    assert scheduler.queue.parked() == 1 and scheduler.bindings == []
    scheduler._handle(("namespaces", [{"metadata": {"name": "ns", "labels": {"team": "a"}}}]))
    assert scheduler.queue.parked() == 0
    schedule_next(scheduler)
    settle(scheduler)
    assert scheduler.bindings == [("ns/waiting", "a")]
    scheduler._handle(("namespace", "MODIFIED", {"metadata": {"name": "ns", "labels": {"team": "b"}}}))
    assert scheduler.model.cluster.namespace_labels == {"ns": {"team": "b"}}


def test_the_selectors_of_services_and_controllers_reach_the_model_and_a_bad_one_is_counted_by_its_kind(scheduler):
    scheduler._handle(("selectors", "Service", [{"metadata": {"name": "web", "namespace": "ns"},
                                                 "spec": {"selector": {"app": "web"}}}]))
    scheduler._handle(("selector", "ReplicaSet", "ADDED", {"metadata": {"name": "web-7d9", "namespace": "ns"},
                                                           "spec": {"selector": {"matchLabels": {"v": "1"}}}}))
    known = scheduler.model.cluster.default_selectors
    assert known.listed == {"Service"} and set(known.selectors["ReplicaSet"]["ns"]) == {"web-7d9"}
    scheduler._handle(("selectors", "StatefulSet", None))  # not a list: the handler survives it
    assert scheduler.model.rejected["StatefulSet"] == 1


def test_a_bound_pods_devices_record_and_event_wait_while_other_bindings_are_in_flight(monkeypatch):
    """During a burst the apiserver's time goes to bindings first; the records follow once they pause."""
    release = threading.Event()
    written: list[tuple[str, str]] = []

    def bind(api, *, namespace, name, uid, node, devices=()):
        if name == "slow":
            assert release.wait(5)

    monkeypatch.setattr(running.binding, "bind", bind)
    ours = ("slow", "quick")  # a recorder thread of an earlier test's scheduler may still be writing its own
    monkeypatch.setattr(running.binding, "record_devices",
                        lambda api, **kw: kw["name"] in ours and written.append(("devices", kw["name"])))
    monkeypatch.setattr(running.events, "record",
                        lambda api, **kw: kw["name"] in ours and written.append((kw["reason"], kw["name"])))
    live = running.LiveScheduler(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")), config.Config(),
                                 binder_threads=2)
    try:
        live._handle(("node", "ADDED", node("a", gpus=2)))
        for name in ("slow", "quick"):
            live._handle(("pod", "ADDED", pending(name)))
            schedule_next(live)
        call, cycle = posted(live.events.get(timeout=5))
        assert (call, cycle.pending.name, cycle.node) == ("_on_bound", "quick", "a")
        time.sleep(0.3)
        assert written == []  # "quick" is bound, but "slow" is still binding
        release.set()
        deadline = time.monotonic() + 5
        while len(written) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(written) == [("Scheduled", "quick"), ("Scheduled", "slow"), ("devices", "quick"),
                                   ("devices", "slow")]
    finally:
        live.stop()


WFFC = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "zonal"},
        "provisioner": "ebs.csi.aws.com", "volumeBindingMode": "WaitForFirstConsumer"}


def wffc_claim(version: str, **annotations: str) -> dict:
    claim = {"metadata": {"name": "data", "namespace": "ns", "uid": "uid-data", "resourceVersion": version,
                          "annotations": annotations},
             "spec": {"storageClassName": "zonal", "accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "10Gi"}}}}
    if "pv.kubernetes.io/bind-completed" in annotations:
        claim["spec"]["volumeName"] = "pv-1"
    return claim


@pytest.fixture()
def with_claim(scheduler, monkeypatch):
    """A node, the storage objects listed (one WaitForFirstConsumer claim), a pod using the claim, and the volume
    writes recorded: each returns the version 2."""
    writes: list[list[str]] = []

    def fake_write(api, changes):
        writes.append([change.key for change in changes])
        scheduler.bound_signal.set()
        return {change.key: "2" for change in changes}

    monkeypatch.setattr(running.binding, "write_volumes", fake_write)
    scheduler._handle(("node", "ADDED", node("a", gpus=1)))
    for kind in ("PersistentVolume", "CSINode", "CSIDriver", "CSIStorageCapacity", "VolumeAttachment"):
        scheduler._handle(("storages", kind, []))
    scheduler._handle(("storages", "StorageClass", [WFFC]))
    scheduler._handle(("storages", "PersistentVolumeClaim", [wffc_claim("1")]))
    obj = pending("train")
    obj["spec"]["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]
    scheduler._handle(("pod", "ADDED", obj))
    schedule_next(scheduler)
    settle(scheduler)  # the claim's selected node written
    scheduler.writes = writes
    return scheduler


def test_a_pod_is_bound_only_once_the_claim_it_had_provisioned_on_its_node_is_bound(with_claim):
    live = with_claim
    assert live.writes == [["pvc/ns/data"]] and live.bindings == [] and "uid-train" in live.waits
    live._handle(("storage", "PersistentVolumeClaim", "MODIFIED", wffc_claim(
        "2", **{"volume.kubernetes.io/selected-node": "a"})))  # our write, seen: not bound yet
    assert live.bindings == []
    live._handle(("storage", "PersistentVolume", "ADDED", {"metadata": {"name": "pv-1", "resourceVersion": "3"},
                                                           "spec": {"capacity": {"storage": "10Gi"}}}))
    live._handle(("storage", "PersistentVolumeClaim", "MODIFIED", wffc_claim(
        "4", **{"volume.kubernetes.io/selected-node": "a", "pv.kubernetes.io/bind-completed": "yes"})))
    settle(live)
    assert live.bindings == [("ns/train", "a")] and live.waits == {}


def test_a_failed_provisioning_forgets_the_pod_and_schedules_it_again_with_the_reason(with_claim, monkeypatch):
    live = with_claim
    reports: list[str] = []
    monkeypatch.setattr(live, "report_unschedulable", lambda pending, message: reports.append(message))
    live._handle(("storage", "PersistentVolumeClaim", "MODIFIED", wffc_claim("3")))  # the provisioner gave up
    assert live.waits == {} and live.model.assumed == {} and "uid-train" in live.model.pending
    assert reports == ['running PreBind plugin "VolumeBinding": binding volumes: provisioning failed for PVC "data"']
    assert live.model.cluster.storage.assumed_claims == {} and "uid-train" in live.queue


def test_claims_that_do_not_bind_in_time_send_the_pod_back(with_claim, monkeypatch):
    live = with_claim
    monkeypatch.setattr(live, "report_unschedulable", lambda pending, message: None)
    live.waits["uid-train"][1].deadline = 0.0
    live._check_waits()
    assert live.waits == {} and "uid-train" in live.model.pending


def posted(event: tuple[Any, ...]) -> tuple[Any, ...]:
    """A call a binder or a plugin posted to the loop, as (the function's name, its arguments)."""
    assert event[0] == "call", event
    return (event[1].__name__, *event[2:])


def prioritized(obj: dict, priority: int) -> dict:
    obj["spec"]["priority"] = priority
    return obj


def test_a_preemption_nominates_marks_and_deletes_its_victims_once_and_keeps_the_room(scheduler, monkeypatch):
    """The order kube-scheduler follows (nomination first, then each victim marked and deleted, with an event); no
    second preemption while the victims go; the room kept from a lower-priority pod until the preemptor takes it."""
    calls: list[tuple[str, str, Any]] = []
    monkeypatch.setattr(rawapi, "request",
                        lambda api, method, path, body, **_: calls.append((method, path, body)) or b"{}")
    live = scheduler
    for name in ("a", "b"):
        live._handle(("node", "ADDED", node(name, gpus=2)))
    low = prioritized(bound(pending("low", gpus=2), "a"), 10)
    live._handle(("pod", "ADDED", low))
    live._handle(("pod", "ADDED", prioritized(bound(pending("mid", gpus=2), "b"), 50)))
    live._handle(("pod", "ADDED", prioritized(pending("urgent", gpus=2), 100)))

    live._schedule("uid-urgent")
    event = live.events.get(timeout=5)
    assert posted(event)[:2] == ("_carried_out", "uid-urgent")
    live._handle(event)
    writes = [(method, path.rsplit("/pods/", 1)[-1]) for method, path, _ in calls if "/events" not in path]
    assert writes == [("PATCH", "urgent/status"), ("PATCH", "low/status"), ("DELETE", "low")]
    nomination, disruption = [body for method, path, body in calls if method == "PATCH" and "/events" not in path]
    assert nomination["status"]["nominatedNodeName"] == "a"
    condition = disruption["status"]["conditions"][0]
    assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "PreemptionByScheduler")
    delete = next(body for method, _, body in calls if method == "DELETE")
    assert delete["preconditions"] == {"uid": "uid-low"}
    preempted = [body for _, path, body in calls if "/events" in path and body["reason"] == "Preempted"]
    assert [e["involvedObject"]["name"] for e in preempted] == ["low"]

    calls.clear()
    live._schedule("uid-urgent")  # the victim is not seen going yet: wait, evict nothing more
    live._handle(("pod", "MODIFIED", {**low, "metadata": {**low["metadata"], "deletionTimestamp": "2026-12-02T00:00:00Z"},
                                      "status": {"conditions": [condition]}}))
    live._schedule("uid-urgent")  # being deleted by the preemption: still wait for it (PodEligibleToPreemptOthers)
    live.reporter.submit(lambda: None).result(timeout=5)
    assert not [c for c in calls if c[0] == "DELETE"] and "uid-mid" in live.model.cluster.assignments

    live._handle(("pod", "DELETED", low))
    live._handle(("pod", "ADDED", prioritized(pending("other", gpus=1), 10)))
    live._schedule("uid-other")
    assert "ns/other" not in accounted(live)  # the room is the preemptor's
    live._schedule("uid-urgent")
    assert accounted(live)["ns/urgent"] == "a"


def test_a_preemption_the_api_refuses_midway_is_tried_again_not_left_parked(scheduler, monkeypatch):
    def refuse_deletes(api, method, path, body, **_):
        if method == "DELETE":
            raise ApiException(status=500, reason="Internal Server Error")
        return b"{}"

    monkeypatch.setattr(rawapi, "request", refuse_deletes)
    live = scheduler
    live._handle(("node", "ADDED", node("a", gpus=1)))
    live._handle(("pod", "ADDED", prioritized(bound(pending("low", gpus=1), "a"), 10)))
    live._handle(("pod", "ADDED", prioritized(pending("urgent", gpus=1), 100)))
    live._schedule(live.queue.pop(float("inf")))
    event = live.events.get(timeout=5)
    assert posted(event) == ("_carried_out", "uid-urgent", None)
    live._handle(event)
    assert "uid-urgent" not in live.plugin("DefaultPreemption").under_way and live.queue.parked() == 0
    assert live.queue.pop(float("inf")) == "uid-urgent"


def test_a_preemptor_placed_elsewhere_releases_the_room_it_was_nominated(scheduler, monkeypatch):
    monkeypatch.setattr(rawapi, "request", lambda *args, **kwargs: b"{}")
    live = scheduler
    live._handle(("node", "ADDED", node("a", gpus=1)))
    low = prioritized(bound(pending("low", gpus=1), "a"), 10)
    live._handle(("pod", "ADDED", low))
    live._handle(("pod", "ADDED", prioritized(pending("urgent", gpus=1), 100)))
    live._schedule("uid-urgent")
    live._handle(live.events.get(timeout=5))
    assert live.model.nominated == {"uid-urgent": "a"}
    live._handle(("pod", "MODIFIED", {**low, "metadata": {**low["metadata"],
                                                          "deletionTimestamp": "2026-12-02T00:00:00Z"}}))
    live._handle(("node", "ADDED", node("b", gpus=1)))  # room elsewhere before the victim is gone
    live._schedule("uid-urgent")
    assert accounted(live)["ns/urgent"] == "b"
    live._handle(("pod", "DELETED", low))
    live._handle(("pod", "ADDED", prioritized(pending("other", gpus=1), 10)))
    live._schedule("uid-other")
    assert accounted(live)["ns/other"] == "a" and not live.model.nominees()


def test_a_pod_no_node_was_looked_at_for_is_told_why_without_a_word_of_preemption(scheduler, monkeypatch):
    writes: list[Any] = []
    monkeypatch.setattr(rawapi, "request", lambda api, method, path, body, **_: writes.append(body) or b"{}")
    live = scheduler
    live._handle(("node", "ADDED", node("a", gpus=1)))
    held = prioritized(pending("held", gpus=1), 100)
    held["metadata"].setdefault("annotations", {})["gpu-scheduler.io/gpu-milli"] = "half"
    live._handle(("pod", "ADDED", held))
    before = running.metrics.PREEMPTION_ATTEMPTS._value.get()
    live._schedule("uid-held")
    live.reporter.submit(lambda: None).result(timeout=5)
    # only the PodScheduled condition: a devices record a previous test's scheduler writes as it stops may land here
    message = next(body["status"]["conditions"][0]["message"] for body in writes
                   if "status" in body and body["status"]["conditions"][0]["type"] == "PodScheduled")
    assert message == "; ".join(live.model.pending["uid-held"].facts.problems) and "gpu-milli" in message
    assert running.metrics.PREEMPTION_ATTEMPTS._value.get() == before
