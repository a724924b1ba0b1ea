"""The reflector over a real apiserver whose watches fail under it: etcd compacted, the apiserver killed.

With the watch cache off, the apiserver serves each watch straight from etcd, so a watch from a
resourceVersion that etcd has compacted away gets an ERROR event (a Status: 410 Expired) inside
a 200 stream: the event the kubernetes client's `Watch` raised `KeyError: 'raw_object'` on, which
killed the reflector's thread and froze the scheduler's model. This module has its own control
plane for that flag, stopped at the end of the module.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import REGISTRY

from gpu_scheduler import watching
from tests.e2e import conftest
from tests.e2e import controlplane as cp
from tests.servers import eventually

# Each watch request ends after this long and the next starts from the last resourceVersion seen:
# with no node changing meanwhile, that is the list's version, which the compaction removes.
WATCH_SECONDS = 1


@pytest.fixture(scope="module")
def plane() -> Iterator[cp.ControlPlane]:
    """Named as the session fixture so failures attach these logs; this one has no watch cache."""
    conftest.require_binaries()
    with cp.ControlPlane(extra_apiserver_args=["--watch-cache=false"]) as control_plane:
        def logs() -> tuple[str, str]:
            return "control plane without watch cache", control_plane.logs_tail(40)

        conftest.LOG_SOURCES.append(logs)
        yield control_plane
        conftest.LOG_SOURCES.remove(logs)


@pytest.fixture(scope="module")
def core(plane: cp.ControlPlane) -> Iterator[Any]:
    api = plane.api_client()
    yield client.CoreV1Api(api)
    api.close()


class NodeCache:
    """What a consumer keeps from the reflector: node name -> resourceVersion."""

    def __init__(self) -> None:
        self.nodes: dict[str, str] = {}
        self.lists = 0

    def replace(self, items: list[dict[str, Any]]) -> None:
        self.nodes = {item["metadata"]["name"]: item["metadata"]["resourceVersion"] for item in items}
        self.lists += 1

    def event(self, kind: str, node: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.nodes.pop(node["metadata"]["name"], None)
        else:
            self.nodes[node["metadata"]["name"]] = node["metadata"]["resourceVersion"]


@pytest.fixture()
def reflect(core: Any) -> Iterator[Callable[..., tuple[watching.Reflector, NodeCache]]]:
    """`reflect(**options)` -> a started Reflector over nodes, once its first watch is established."""
    started: list[watching.Reflector] = []

    def start(**options: Any) -> tuple[watching.Reflector, NodeCache]:
        cache = NodeCache()
        reflector = watching.Reflector(core.list_node, name=f"Nodes-{uuid.uuid4().hex[:6]}",
                                       on_replace=cache.replace, on_event=cache.event, **options)
        started.append(reflector.start())
        eventually(lambda: reflector.down_for() is None, timeout=30)
        return reflector, cache

    yield start
    for reflector in started:
        reflector.stop()


def api_nodes(core: Any) -> dict[str, str]:
    return {node.metadata.name: node.metadata.resource_version for node in core.list_node().items}


def new_node(core: Any, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    return name


def failures(reflector: watching.Reflector, reason: str) -> float:
    return REGISTRY.get_sample_value("gpu_scheduler_watch_failures_total",
                                     {"watch": reflector.name, "reason": reason}) or 0.0


def test_a_watch_from_a_compacted_version_gets_410_lists_again_and_catches_up(
    plane: cp.ControlPlane, core: Any, reflect: Callable[..., tuple[watching.Reflector, NodeCache]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger=watching.__name__)
    before = new_node(core, "compacted")
    reflector, cache = reflect(watch_seconds=WATCH_SECONDS)
    assert cache.nodes == api_nodes(core)

    # Write twice without touching a node, then compact: a watch from version R reads from R+1, and
    # etcd keeps the revision it compacted at, so the history must have moved at least two past R.
    namespace = f"compaction-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    core.patch_namespace(namespace, {"metadata": {"labels": {"written": "twice"}}})
    plane.compact_etcd()

    eventually(lambda: failures(reflector, "expired") >= 1, timeout=30)
    expired = [r.getMessage() for r in caplog.records if "watch expired" in r.getMessage()]
    assert any("ERROR event 410 Expired" in message for message in expired), expired
    eventually(lambda: cache.lists >= 2 and reflector.down_for() is None, timeout=30)
    assert failures(reflector, "error") == 0  # a 410 is not a failure to back off from

    # The watch goes on from the new list: changes made now arrive.
    added = [new_node(core, "after-compaction") for _ in range(2)]
    core.delete_node(before)
    eventually(lambda: cache.nodes == api_nodes(core), timeout=30)
    assert set(added) <= set(cache.nodes) and before not in cache.nodes
    assert reflector._thread.is_alive()


def test_the_watch_comes_back_after_the_apiserver_is_killed_and_restarted(
    plane: cp.ControlPlane, core: Any, reflect: Callable[..., tuple[watching.Reflector, NodeCache]],
) -> None:
    reflector, cache = reflect(max_backoff=1.0)
    assert reflector.healthy(max_down=0)

    plane.kill_apiserver()
    try:
        first = eventually(reflector.down_for, timeout=30)
        eventually(lambda: (reflector.down_for() or 0) > first + 1.0, timeout=30)
        assert not reflector.healthy(max_down=1.0)
        assert reflector.healthy(max_down=60.0)
    finally:
        plane.restart_apiserver()

    eventually(lambda: reflector.down_for() is None, timeout=60)
    assert reflector.healthy(max_down=0)
    added = new_node(core, "after-restart")
    eventually(lambda: added in cache.nodes and cache.nodes == api_nodes(core), timeout=30)
