"""The reflector against a scripted list function: each shape of watch failure, one at a time.

The fake stands in for a `CoreV1Api.list_*` method called with `_preload_content=False`: a list
call answers a body, a watch call a response whose lines are the watch events. Every step the
script does not cover blocks until the test ends, so the reflector idles where the test left it.
tests/e2e/test_watch_failures.py proves the same against a real apiserver and etcd.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from gpu_scheduler import watching
from tests.servers import eventually

Step = Callable[[dict[str, Any]], Any]


class Body:
    """A list response."""

    def __init__(self, data: bytes):
        self.data = data

    def release_conn(self) -> None:
        pass


class Stream:
    """A watch response: its lines (an exception among them is raised there), then the end, or
    with `hold` a wait until `shutdown()` or `release` is set."""

    def __init__(self, lines: list[Any], *, hold: bool = False, release: threading.Event | None = None):
        self.lines = lines
        self.hold = hold
        self.gone = release or threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        for line in self.lines:
            if isinstance(line, BaseException):
                raise line
            yield line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n"
        if self.hold:
            self.gone.wait()
            raise ProtocolError("Connection broken: the test cut it")

    def shutdown(self) -> None:
        self.gone.set()

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class FakeAPI:
    def __init__(self, *steps: Step):
        self.steps = list(steps)
        self.calls: list[dict[str, Any]] = []
        self.finished = threading.Event()

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if self.steps:
            return self.steps.pop(0)(kwargs)
        self.finished.wait()
        raise OSError("the test is over")

    def lists(self) -> int:
        return sum(1 for call in self.calls if not call.get("watch"))

    def watches(self) -> list[dict[str, Any]]:
        return [call for call in self.calls if call.get("watch")]


def listing(names: list[str], resource_version: str) -> Step:
    def step(kwargs: dict[str, Any]) -> Body:
        assert not kwargs.get("watch")
        items = [obj(name, resource_version) for name in names]
        return Body(json.dumps({"metadata": {"resourceVersion": resource_version}, "items": items}).encode())
    return step


def watch(*lines: Any, hold: bool = False, release: threading.Event | None = None) -> Step:
    def step(kwargs: dict[str, Any]) -> Stream:
        assert kwargs.get("watch")
        return Stream(list(lines), hold=hold, release=release)
    return step


def fail(error: BaseException, *, after: threading.Event | None = None) -> Step:
    def step(kwargs: dict[str, Any]) -> Any:
        if after is not None:
            after.wait()
        raise error
    return step


def after(gate: threading.Event, then: Step) -> Step:
    def step(kwargs: dict[str, Any]) -> Any:
        gate.wait()
        return then(kwargs)
    return step


def obj(name: str, resource_version: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"namespace": "ns", "name": name, "resourceVersion": resource_version}}


def event(kind: str, name: str, resource_version: str) -> dict[str, Any]:
    return {"type": kind, "object": obj(name, resource_version)}


def error_event(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                        "code": code, "reason": reason, "message": message}}


class Consumer:
    """A cache of names, as the webhook's and the scheduler's caches are of objects."""

    def __init__(self, *, fail_replace: int = 0, fail_on: frozenset[str] = frozenset()) -> None:
        self.names: set[str] = set()
        self.replaces = 0
        self.events: list[tuple[str, str]] = []
        self.fail_replace = fail_replace  # how many lists to refuse
        self.fail_on = fail_on  # names whose events to refuse

    def on_replace(self, items: list[dict[str, Any]]) -> None:
        if self.fail_replace:
            self.fail_replace -= 1
            raise RuntimeError("the consumer cannot take this list")
        self.names = {item["metadata"]["name"] for item in items}
        self.replaces += 1

    def on_event(self, kind: str, item: dict[str, Any]) -> None:
        name = item["metadata"]["name"]
        if name in self.fail_on:
            raise KeyError("spec")
        self.events.append((kind, name))
        if kind == "DELETED":
            self.names.discard(name)
        else:
            self.names.add(name)


@pytest.fixture()
def run(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., tuple[watching.Reflector, Consumer]]]:
    """`run(fake, backoff=..., **consumer)` starts a reflector over `fake`; the test's end stops it
    and checks the thread is gone."""
    started: list[tuple[watching.Reflector, FakeAPI]] = []

    def start(fake: FakeAPI, *, backoff: float = 0.01, **failures: Any) -> tuple[watching.Reflector, Consumer]:
        monkeypatch.setattr(watching, "INITIAL_BACKOFF", backoff)
        consumer = Consumer(**failures)
        reflector = watching.Reflector(fake, name="Pods", on_replace=consumer.on_replace,
                                       on_event=consumer.on_event, max_backoff=backoff)
        started.append((reflector.start(), fake))
        return reflector, consumer

    yield start
    for reflector, fake in started:
        reflector.stop()
        fake.finished.set()
        reflector._thread.join(5)
        assert not reflector._thread.is_alive()


# A backoff the tests would time out on: these failures must relist without waiting.
@pytest.mark.parametrize("failure", [
    watch(error_event(410, "Expired", "too old resource version: 5 (12)")),
    watch(error_event(410, "Gone", "")),
    watch({"type": "ERROR", "object": {"kind": "Status", "reason": "Expired"}}),
    fail(ApiException(status=410, reason="Gone")),
], ids=["error-event-410-expired", "error-event-410-gone", "error-event-expired-without-code", "http-410"])
def test_an_expired_watch_lists_again_at_once(run, failure: Step, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    fake = FakeAPI(listing(["a"], "10"), failure, listing(["a", "b"], "20"))
    reflector, consumer = run(fake, backoff=60.0)
    eventually(lambda: consumer.replaces == 2)
    assert consumer.names == {"a", "b"}
    eventually(lambda: len(fake.watches()) == 2)
    assert fake.watches()[-1]["resource_version"] == "20"
    assert "watch expired" in caplog.text


@pytest.mark.parametrize("failure", [
    watch(error_event(500, "InternalError", "etcd is on fire")),
    watch(error_event(403, "Forbidden", "nodes is forbidden")),
    watch(b"<html>not an event</html>\n"),
    watch(b'{"type": "ADDED"}\n'),
    watch(b'["ADDED"]\n'),
    watch(KeyError("raw_object")),
    watch(ProtocolError("Connection broken: IncompleteRead")),
    watch(TypeError("Received invalid segment type")),
    fail(ApiException(status=500, reason="Internal Server Error")),
    fail(ConnectionRefusedError(111, "Connection refused")),
    fail(RuntimeError("a client bug")),
], ids=["error-event-500", "error-event-403", "not-json", "no-object", "not-an-object", "key-error",
        "broken-stream", "type-error", "http-500", "refused", "anything"])
def test_a_failed_watch_lists_again_after_backoff(run, failure: Step) -> None:
    fake = FakeAPI(listing(["a"], "10"), failure, listing(["b"], "20"))
    reflector, consumer = run(fake)
    eventually(lambda: consumer.replaces == 2)
    assert consumer.names == {"b"}
    assert reflector._thread.is_alive()


@pytest.mark.parametrize("failure", [
    fail(ApiException(status=503, reason="Service Unavailable")),
    fail(ApiException(status=410, reason="Gone")),
    lambda kwargs: Body(b"{not json"),
    lambda kwargs: Body(b'{"items": []}'),
], ids=["http-503", "http-410", "not-json", "no-resource-version"])
def test_a_failed_list_is_tried_again(run, failure: Step) -> None:
    fake = FakeAPI(failure, listing(["a"], "10"))
    reflector, consumer = run(fake)
    eventually(lambda: consumer.replaces == 1)
    assert consumer.names == {"a"}
    assert reflector.synced.is_set()


def test_a_watch_that_ends_goes_on_from_the_last_resource_version(run) -> None:
    fake = FakeAPI(
        listing(["a"], "10"),
        watch(event("ADDED", "b", "11"), {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "15"}}}),
        watch(event("DELETED", "a", "16")),
        watch(),
    )
    reflector, consumer = run(fake, backoff=60.0)
    eventually(lambda: len(fake.watches()) == 4)
    assert [call["resource_version"] for call in fake.watches()] == ["10", "15", "16", "16"]
    assert consumer.events == [("ADDED", "b"), ("DELETED", "a")]  # the bookmark only moves the version
    assert consumer.names == {"b"}
    assert fake.lists() == 1


def test_an_event_the_consumer_fails_on_is_logged_and_skipped(run, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAPI(listing([], "10"), watch(event("ADDED", "bad", "11"), event("ADDED", "good", "12")))
    reflector, consumer = run(fake, fail_on=frozenset({"bad"}))
    eventually(lambda: consumer.events == [("ADDED", "good")])
    assert "on_event failed for ADDED Pod ns/bad" in caplog.text
    assert fake.lists() == 1 and reflector.down_for() is None


def test_a_list_the_consumer_fails_on_is_listed_again(run, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAPI(listing(["a"], "10"), listing(["a", "b"], "11"))
    reflector, consumer = run(fake, fail_replace=1)
    eventually(lambda: consumer.replaces == 1)
    assert consumer.names == {"a", "b"}
    assert "the consumer cannot take this list" in caplog.text  # with its traceback
    assert reflector.synced.is_set()


def test_down_for_counts_from_the_failure_until_the_watch_is_back(run) -> None:
    broken, back = threading.Event(), threading.Event()
    fake = FakeAPI(listing(["a"], "10"), watch(hold=True, release=broken), after(back, listing(["a"], "20")),
                   watch(hold=True))
    reflector, consumer = run(fake)
    eventually(lambda: reflector.down_for() is None)
    assert reflector.healthy(max_down=0)
    broken.set()
    eventually(lambda: reflector.down_for() is not None)
    first = reflector.down_for()
    eventually(lambda: (reflector.down_for() or 0) > (first or 0) + 0.05)
    assert reflector.healthy(max_down=60) and not reflector.healthy(max_down=0.05)
    back.set()
    eventually(lambda: reflector.down_for() is None)
    assert reflector.healthy(max_down=0)


def test_down_before_the_first_watch() -> None:
    reflector = watching.Reflector(FakeAPI(), name="Pods", on_replace=lambda items: None,
                                   on_event=lambda kind, item: None)
    assert reflector.down_for() is not None
    assert not reflector.synced.is_set()


def test_unexpected_errors_are_logged_with_their_traceback(run, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAPI(*(fail(KeyError("raw_object")) for _ in range(3)), listing(["a"], "10"))
    reflector, consumer = run(fake)
    eventually(lambda: consumer.replaces == 1)
    assert caplog.text.count("unexpected failure") == 3
    assert all(record.exc_info for record in caplog.records if "unexpected failure" in record.message)


def test_deciding_waits_for_nodes_and_pods_while_every_watch_counts_for_health() -> None:
    """Namespaces only matter to pods whose pod affinity selects namespaces by label: those wait in the model."""
    core = type("Core", (), {name: FakeAPI() for name in ("list_node", "list_pod_for_all_namespaces", "list_namespace")})
    noop = lambda *args: None  # noqa: E731
    watches = watching.ClusterWatches.of_cluster(core(), on_nodes=noop, on_node=noop, on_pods=noop, on_pod=noop,
                                                 on_namespaces=noop, on_namespace=noop)
    assert [r.name for r in watches.reflectors] == ["Nodes", "Pods", "Namespaces"]
    watches.reflectors[0].synced.set()
    watches.reflectors[1].synced.set()
    assert watches.synced
    assert watches.down(max_down=-1) == [f"{name}: watch down for 0 s" for name in ("Nodes", "Pods", "Namespaces")]


def test_the_standalone_scheduler_also_watches_the_selectors_of_services_and_controllers_without_waiting():
    """`run` alone (the extender leaves topology spread to kube-scheduler): each selector watch hands the kind of
    its objects to the callbacks, none holds decisions back, and each counts for health."""
    lists = {name: FakeAPI() for name in ("list_node", "list_pod_for_all_namespaces", "list_namespace",
                                          "list_service_for_all_namespaces",
                                          "list_replication_controller_for_all_namespaces")}
    apps = {name: FakeAPI() for name in ("list_replica_set_for_all_namespaces", "list_stateful_set_for_all_namespaces")}
    noop = lambda *args: None  # noqa: E731
    handed: list[tuple[Any, ...]] = []
    watches = watching.ClusterWatches.of_cluster(
        type("Core", (), lists)(), on_nodes=noop, on_node=noop, on_pods=noop, on_pod=noop, on_namespaces=noop,
        on_namespace=noop, apps=type("Apps", (), apps)(), on_selectors=lambda *args: handed.append(args),
        on_selector=lambda *args: handed.append(args))
    names = ["Nodes", "Pods", "Namespaces", "Services", "ReplicationControllers", "ReplicaSets", "StatefulSets"]
    assert [r.name for r in watches.reflectors] == names
    watches.reflectors[5]._on_replace([])
    watches.reflectors[6]._on_event("ADDED", {})
    assert handed == [("ReplicaSet", []), ("StatefulSet", "ADDED", {})]
    watches.reflectors[0].synced.set()
    watches.reflectors[1].synced.set()
    assert watches.synced
    assert watches.down(max_down=-1) == [f"{name}: watch down for 0 s" for name in names]


def test_an_optional_kind_the_api_does_not_serve_is_an_empty_list_and_is_asked_for_again(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A CRD not installed (404 on the list) is no failure: no objects, synced, healthy, one log line; once the
    CRD is installed, the next ask lists and watches it."""
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(watching, "ABSENT_RETRY", 0.01)
    gone = ApiException(status=404, reason="Not Found")
    fake = FakeAPI(fail(gone), fail(gone), fail(gone), listing(["a"], "7"), listing(["a"], "7"), watch(hold=True))
    consumer = Consumer()
    reflector = watching.Reflector(fake, name="PodGroups", on_replace=consumer.on_replace, on_event=consumer.on_event,
                                   optional=True)
    reflector.start()
    try:
        eventually(lambda: consumer.names == {"a"})
        assert reflector.synced.is_set() and reflector.down_for() is None
        assert consumer.replaces == 2  # the empty list once, then the real one
        assert caplog.text.count("not served by the API") == 1 and "now served" in caplog.text
        eventually(lambda: len(fake.watches()) == 1)
        assert fake.watches()[0]["resource_version"] == "7" and not reflector.absent
    finally:
        reflector.stop()
        fake.finished.set()
        reflector._thread.join(5)
