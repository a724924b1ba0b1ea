"""Gangs in the standalone scheduler's loop: a group's members wait for their quorum and their PodGroup, are
placed together or not at all, and go back together when one fails to bind. The loop is driven directly, as in
test_running.py; tests/e2e/test_gangs.py proves the same against the real apiserver and the real CRD."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpu_scheduler import rawapi
from gpu_scheduler.runtime import running
from scheduler_core import podgroups
from tests.unit.builders import node
from tests.unit.test_running import accounted, pending, posted


def member(name: str, group: str = "job-a", gpus: int = 8) -> dict[str, Any]:
    obj = pending(name, gpus=gpus)
    obj["metadata"]["labels"] = {podgroups.COSCHEDULING_LABEL: group}
    return obj


def podgroup(name: str = "job-a", min_member: int = 3) -> dict[str, Any]:
    return {"apiVersion": podgroups.COSCHEDULING, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ns", "uid": f"pg-{name}"}, "spec": {"minMember": min_member}}


class HeldBinder:
    """A binder pool that runs nothing until told: the order of bindings and failures is the test's."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Any, tuple[Any, ...]]] = []

    def submit(self, fn: Any, *args: Any) -> None:
        self.tasks.append((fn, args))

    def run_next(self) -> None:
        fn, args = self.tasks.pop(0)
        fn(*args)

    def shutdown(self, **_: Any) -> None:
        pass


@pytest.fixture()
def live(scheduler, monkeypatch):
    written: list[tuple[str, str, str]] = []  # (object, reason, message) of every event
    monkeypatch.setattr(running.events, "record", lambda api, **e: written.append(
        (f"{e.get('involved', ('v1', 'Pod'))[1]}/{e['name']}", e["reason"], e["message"])))
    monkeypatch.setattr(rawapi, "request", lambda *args, **kwargs: b"{}")
    scheduler.written = written
    for name in ("n0", "n1", "n2"):
        scheduler._handle(("node", "ADDED", node(name, gpus=8)))
    scheduler._handle(("groups", podgroups.COSCHEDULING, []))
    return scheduler


def schedule_all(live) -> None:
    while (uid := live.queue.pop(float("inf"))) is not None:
        live._schedule(uid)


def bind_all(live) -> None:
    for _ in range(len(live.bindings), 99):
        if not live.bound_signal.wait(0.5):
            break
        live.bound_signal.clear()
    while not live.events.empty():
        live._handle(live.events.get_nowait())


def flush_reports(live) -> None:
    live.reporter.submit(lambda: None).result(timeout=5)
    live.plugin("Gangs").group_writer.submit(lambda: None).result(timeout=5)


def test_members_wait_for_min_member_then_bind_together(live):
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", podgroup(min_member=3)))
    for name in ("w0", "w1"):
        live._handle(("pod", "ADDED", member(name)))
    schedule_all(live)
    assert live.bindings == [] and live.queue.parked() == 2
    assert live.reported["uid-w0"][0] == "gang ns/job-a: 2/3 members exist; waiting for 1 more"
    live._handle(("pod", "ADDED", member("w2")))
    schedule_all(live)
    bind_all(live)
    assert sorted(live.bindings) == [("ns/w0", "n0"), ("ns/w1", "n1"), ("ns/w2", "n2")]
    flush_reports(live)
    assert ("PodGroup/job-a", "Scheduled", "gang ns/job-a: 3 member(s) placed (0 placed before, minMember 3) in "
            "cluster: n0, n1, n2") in live.written


def test_members_wait_for_their_podgroup_to_be_created(live):
    for name in ("w0", "w1", "w2"):
        live._handle(("pod", "ADDED", member(name)))
    schedule_all(live)
    assert live.bindings == [] and live.reported["uid-w0"][0] == (
        f"waiting for PodGroup ns/job-a ({podgroups.COSCHEDULING}) to be created")
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", podgroup(min_member=3)))
    schedule_all(live)  # the PodGroup's arrival woke them
    bind_all(live)
    assert len(live.bindings) == 3


def test_a_podgroup_that_cannot_be_read_keeps_its_members_waiting_with_the_reason(live):
    bad = podgroup()
    bad["spec"]["minMember"] = 0
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", bad))
    live._handle(("pod", "ADDED", member("w0")))
    schedule_all(live)
    assert live.bindings == [] and live.reported["uid-w0"][0] == (
        f"PodGroup ns/job-a ({podgroups.COSCHEDULING}) cannot be read: spec.minMember: 0 is not a count from 1 to "
        "100000")
    assert live.model.rejected["PodGroup"] == 1


def test_a_gang_that_does_not_fit_binds_no_member_and_says_so_once_on_its_podgroup(live):
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", podgroup(min_member=4)))
    for name in ("w0", "w1", "w2", "w3"):
        live._handle(("pod", "ADDED", member(name)))
    schedule_all(live)
    flush_reports(live)
    reason = ("gang ns/job-a: 3/4 members fit; 1 x 8 GPUs short (0/3 nodes are available: 3 Insufficient "
              "nvidia.com/gpu); preemption: room for 3/4 members; ns/w3: 0/3 nodes are available: 3 No preemption "
              "victims found for incoming pod.")
    assert live.bindings == [] and accounted(live) == {} and live.queue.parked() == 4
    assert [w for w in live.written if w[1] == "FailedScheduling"] == [("PodGroup/job-a", "FailedScheduling", reason)]
    assert all(live.reported[f"uid-w{i}"][0] == reason for i in range(4))
    live._handle(("node", "ADDED", node("n3", gpus=8)))  # room for all: they bind together
    schedule_all(live)
    bind_all(live)
    assert len(live.bindings) == 4


def test_two_gangs_that_fit_only_one_at_a_time_never_split(live):
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", podgroup("job-a", min_member=2)))
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", podgroup("job-b", min_member=2)))
    for name, group in (("a0", "job-a"), ("b0", "job-b"), ("a1", "job-a"), ("b1", "job-b")):
        live._handle(("pod", "ADDED", member(name, group)))
    schedule_all(live)
    bind_all(live)
    assert sorted(pod for pod, _ in live.bindings) == ["ns/a0", "ns/a1"]
    assert {"ns/b0", "ns/b1"}.isdisjoint(accounted(live))


def test_a_member_that_fails_to_bind_sends_the_unbound_rest_back_and_bound_ones_count_next_time(live):
    held = live.binder = HeldBinder()
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", podgroup(min_member=3)))
    for name in ("w0", "w1", "w2"):
        live._handle(("pod", "ADDED", member(name)))
    schedule_all(live)
    assert len(held.tasks) == 3 and len(accounted(live)) == 3
    held.run_next()  # w0 binds
    live._handle(live.events.get(timeout=5))
    live.outcome.update(error=ApiException(status=500, reason="boom"), api_has=member("w1"))
    held.run_next()  # w1 fails: the API still shows it pending
    live._handle(live.events.get(timeout=5))
    held.run_next()  # w2 is not bound: its gang failed
    live._handle(live.events.get(timeout=5))
    assert [pod for pod, _ in live.bindings] == ["ns/w0", "ns/w1"]
    assert accounted(live) == {"ns/w0": "n0"} and {"uid-w1", "uid-w2"} <= set(live.model.pending)
    live.outcome.update(error=None)
    live._handle(("pod", "MODIFIED", {**member("w0"), "spec": {**member("w0")["spec"], "nodeName": "n0"}}))
    live.queue.cluster_changed()
    for uid in ("uid-w1", "uid-w2"):
        live.queue.failed(uid, 0.0, unschedulable=False)  # their backoff over
    schedule_all(live)
    while held.tasks:
        held.run_next()
    assert sorted(pod for pod, _ in live.bindings) == ["ns/w0", "ns/w1", "ns/w1", "ns/w2"]
    assert sorted(accounted(live).values()) == ["n0", "n1", "n2"]  # w0 placed once, where it was bound


def test_a_gang_preempts_as_a_unit_waits_for_its_victims_then_binds_whole(live, monkeypatch):
    calls: list[tuple[str, str, Any]] = []
    monkeypatch.setattr(rawapi, "request",
                        lambda api, method, path, body, **_: calls.append((method, path, body)) or b"{}")
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", podgroup(min_member=2)))
    victims = []
    for name in ("n0", "n1", "n2"):
        low = {**pending(f"low-{name}", gpus=8), "spec": {**pending(f"low-{name}", gpus=8)["spec"], "nodeName": name,
                                                         "priority": 1}}
        victims.append(low)
        live._handle(("pod", "ADDED", low))
    for name in ("w0", "w1"):
        obj = member(name)
        obj["spec"]["priority"] = 100
        live._handle(("pod", "ADDED", obj))
    schedule_all(live)
    event = live.events.get(timeout=5)
    assert posted(event)[0] == "_carried_out" and len(posted(event)[2]) == 2
    live._handle(event)
    deleted = sorted(path.rsplit("/", 1)[-1] for method, path, _ in calls if method == "DELETE")
    nominated = [body["status"]["nominatedNodeName"] for method, path, body in calls
                 if method == "PATCH" and "nominatedNodeName" in body.get("status", {})]
    assert len(deleted) == 2 and sorted(nominated) == sorted(f"n{name[-1]}" for name in deleted)
    live.queue.cluster_changed()
    before = len(calls)
    schedule_all(live)  # the victims are not seen going yet: no second preemption, no binding
    assert not [c for c in calls[before:] if c[0] == "DELETE"] and live.bindings == []
    for low in victims:
        if low["metadata"]["name"] in deleted:
            live._handle(("pod", "DELETED", low))
    live.queue.cluster_changed()
    for uid in ("uid-w0", "uid-w1"):
        live.queue.failed(uid, 0.0, unschedulable=False)
    schedule_all(live)
    bind_all(live)
    assert sorted(node for _, node in live.bindings) == sorted(nominated)


def test_a_gang_partly_placed_past_its_timeout_is_told_once_with_who_holds_room(live):
    group = podgroup(min_member=3)
    group["spec"]["scheduleTimeoutSeconds"] = 5
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", group))
    first = member("w0")
    live._handle(("pod", "ADDED", {**first, "spec": {**first["spec"], "nodeName": "n0"}}))  # bound before
    for name in ("w1", "w2"):
        live._handle(("pod", "ADDED", member(name, gpus=16)))  # fit no node
    schedule_all(live)
    ref = podgroups.GroupRef(podgroups.COSCHEDULING, "ns", "job-a")
    gangs = live.plugin("Gangs")
    assert ref in gangs.partial_since and ref not in gangs.timed_out
    gangs.partial_since[ref] -= 6
    for _ in range(2):
        live.queue.cluster_changed()
        for uid in ("uid-w1", "uid-w2"):
            live.queue.failed(uid, 0.0, unschedulable=False)
        schedule_all(live)
    flush_reports(live)
    told = [w for w in live.written if w[1] == "GangTimeout"]
    assert told == [("PodGroup/job-a", "GangTimeout", "gang ns/job-a: 1/3 members placed for more than 5 s "
                     "(scheduleTimeoutSeconds) while the rest cannot be; ns/w0 hold their room meanwhile")]


def test_the_gang_timeout_is_told_at_its_deadline_without_a_member_being_tried_again(live, monkeypatch):
    """The waiting stage has a deadline of its own: the GangTimeout comes from the loop's tick, not from the next
    attempt of a parked member (which may be minutes away), and the phase stays Unknown until the gang is whole."""
    patches: list[dict[str, Any]] = []
    monkeypatch.setattr(rawapi, "request", lambda api, method, path, body, **_: (
        "/podgroups/" in path and patches.append(body["status"])) or b"{}")
    group = podgroup(min_member=3)
    group["spec"]["scheduleTimeoutSeconds"] = 8
    live._handle(("group", podgroups.COSCHEDULING, "ADDED", group))
    first = member("w0")
    live._handle(("pod", "ADDED", {**first, "spec": {**first["spec"], "nodeName": "n0"}}))
    for name in ("w1", "w2"):
        live._handle(("pod", "ADDED", member(name, gpus=16)))
    schedule_all(live)
    gangs = live.plugin("Gangs")
    ref = podgroups.GroupRef(podgroups.COSCHEDULING, "ns", "job-a")
    since = gangs.partial_since[ref]
    live._housekeeping(since + 7.5)
    flush_reports(live)
    assert not [w for w in live.written if w[1] == "GangTimeout"]
    live._housekeeping(since + 8.0)
    live._housekeeping(since + 9.0)
    flush_reports(live)
    assert [w[1] for w in live.written if w[1] == "GangTimeout"] == ["GangTimeout"]
    assert patches[-1] == {"phase": "Unknown"}
    live._handle(("node", "ADDED", node("n3", gpus=8)))  # a new decision, still short: the phase is kept
    schedule_all(live)
    flush_reports(live)
    assert live.written[-1][1] == "FailedScheduling" and patches[-1] == {"phase": "Unknown"}
    live._handle(("node", "ADDED", node("big", gpus=32)))  # room for the rest: whole again
    schedule_all(live)
    flush_reports(live)
    assert patches[-1]["phase"] == "Scheduling" and ref not in gangs.timed_out
