"""The standalone scheduler's event handling: orderings the e2e tests cannot force on demand.

The loop's handlers are driven directly; only the Binding write is replaced (by a recorder),
and every other call goes to a closed port and fails harmlessly. tests/e2e/test_scheduler*.py
prove the same loop against the real apiserver.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_scheduler.runtime import running
from tests.unit.builders import node, pod
from webhook import config


@pytest.fixture()
def scheduler(monkeypatch):
    bindings: list[tuple[str, str]] = []
    outcome: dict[str, Any] = {"error": None}
    done = threading.Event()

    def fake_bind(api, *, namespace, name, uid, node, annotations=None):
        bindings.append((f"{namespace}/{name}", node))
        done.set()
        if outcome["error"] is not None:
            raise outcome["error"]

    monkeypatch.setattr(running.binding, "bind", fake_bind)
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    live = running.LiveScheduler(api, config.Config(), binder_threads=1)
    live.bindings, live.outcome, live.bound_signal = bindings, outcome, done
    yield live
    live.stop()


def settle(live) -> None:
    """Wait for the binder, then handle what it reported."""
    assert live.bound_signal.wait(5)
    live.bound_signal.clear()
    event = live.events.get(timeout=5)
    live._handle(event)


def pending(name: str, gpus: int = 1) -> dict:
    obj = pod(name, gpus=gpus)
    obj["metadata"]["uid"] = f"uid-{name}"
    return obj


def bound(obj: dict, node_name: str) -> dict:
    copy = {**obj, "spec": {**obj["spec"], "nodeName": node_name}}
    return copy


def test_a_stale_event_from_before_the_binding_neither_requeues_nor_frees_the_gpu(scheduler):
    scheduler._on_node("ADDED", node("a", gpus=1))
    first = pending("first")
    scheduler._on_pod("ADDED", first)
    scheduler._schedule(scheduler.queue.pop(0))
    settle(scheduler)
    scheduler._on_pod("MODIFIED", first)  # the watch still shows the pod unbound: an older event
    assert "ns/first" not in scheduler.queue and "ns/first" in scheduler.model.assignments
    scheduler._on_pod("ADDED", pending("second"))
    scheduler._schedule(scheduler.queue.pop(0))
    assert scheduler.bindings == [("ns/first", "a")]  # the one GPU is still taken: no second binding
    scheduler._on_pod("MODIFIED", bound(first, "a"))  # confirmation
    assert "ns/first" not in scheduler.assumed


def test_a_bound_pod_seen_before_its_node_is_accounted_when_the_node_arrives(scheduler):
    scheduler._on_pod("ADDED", bound(pending("early", gpus=2), "late-node"))
    assert "ns/early" not in scheduler.model.assignments
    scheduler._on_node("ADDED", node("late-node", gpus=2))
    assert "ns/early" in scheduler.model.assignments
    scheduler._on_pod("ADDED", pending("next"))
    scheduler._schedule(scheduler.queue.pop(0))
    assert scheduler.bindings == [] and scheduler.queue.parked() == 1


@pytest.mark.parametrize(("status", "retried"), [(500, True), (409, False), (404, False)])
def test_a_refused_binding_is_unassumed_and_retried_only_when_it_can_succeed(scheduler, status, retried):
    scheduler._on_node("ADDED", node("a", gpus=1))
    scheduler.outcome["error"] = ApiException(status=status, reason="refused")
    scheduler._on_pod("ADDED", pending("p"))
    scheduler._schedule(scheduler.queue.pop(0))
    settle(scheduler)
    assert "ns/p" not in scheduler.model.assignments and "ns/p" not in scheduler.assumed
    assert ("ns/p" in scheduler.queue) is retried


def test_a_deleted_pod_frees_its_gpu_and_wakes_parked_pods(scheduler):
    scheduler._on_node("ADDED", node("a", gpus=1))
    holder = bound(pending("holder"), "a")
    scheduler._on_pod("ADDED", holder)
    scheduler._on_pod("ADDED", pending("waiting"))
    scheduler._schedule(scheduler.queue.pop(0))
    assert scheduler.queue.parked() == 1
    scheduler._on_pod("DELETED", holder)
    assert scheduler.queue.parked() == 0 and "ns/holder" not in scheduler.model.assignments


def test_pods_of_other_schedulers_are_ignored(scheduler):
    other = pending("theirs")
    other["spec"]["schedulerName"] = "volcano"
    scheduler._on_pod("ADDED", other)
    assert len(scheduler.queue) == 0 and scheduler.pending == {}
