"""The binding floor: pods bound with no decision at all, the most pods/s any scheduler gets from this apiserver here.

    python benchmarks/floor.py KUBECONFIG SCHEDULER_NAME

It lists the nodes and the pods, then watches the pods, and binds each pending pod of SCHEDULER_NAME to the next node,
round-robin, with room for its GPUs and one more pod. It speaks through what `gpu-scheduler run` binds with: the same
client (gpu_scheduler.kubeclient), the same Binding (gpu_scheduler.runtime.binding.bind), on as many binder threads.
Where no node has room, a pod of higher priority takes the next node round-robin whose lower-priority pods free
enough GPUs, deletes those (grace period 0, as the preemption benchmarks' victims) and binds: the writes of
preemption without its choice. Gang members bind one by one as they come. Nothing is checked beyond GPUs and the pod
count: a pod that needs a decision (affinity, spread, volumes) may land where a scheduler would not put it. That is
the point: what is left is the cost of reading the pods and writing the bindings.
"""

from __future__ import annotations

import json
import logging
import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_scheduler import kubeclient  # noqa: E402
from gpu_scheduler.runtime import binding  # noqa: E402
from scheduler_core import quantity, requests  # noqa: E402

GPU = "nvidia.com/gpu"
BINDER_THREADS = 32  # as `gpu-scheduler run` (--binder-threads' default)
log = logging.getLogger("floor")


@dataclass
class Node:
    name: str
    gpus: int
    pods: int
    used_gpus: int = 0
    used_pods: int = 0
    residents: dict[str, tuple[int, int]] = field(default_factory=dict)  # uid -> (priority, GPUs)

    def fits(self, gpus: int) -> bool:
        return self.used_pods < self.pods and self.gpus - self.used_gpus >= gpus

    def take(self, uid: str, priority: int, gpus: int) -> None:
        if uid not in self.residents:
            self.residents[uid] = (priority, gpus)
            self.used_gpus += gpus
            self.used_pods += 1

    def release(self, uid: str) -> None:
        held = self.residents.pop(uid, None)
        if held is not None:
            self.used_gpus -= held[1]
            self.used_pods -= 1


def gpus_of(pod: dict[str, Any]) -> int:
    """The pod's GPUs, as the scheduler counts them (its effective request)."""
    return int(requests.pod_requests(pod.get("spec") or {}, only=(GPU,)).get(GPU, 0))


class Floor:
    def __init__(self, kubeconfig: str, scheduler_name: str) -> None:
        from kubernetes import client

        self.api = kubeclient.api_client(kubeconfig)
        self.core: Any = client.CoreV1Api(self.api)
        self.scheduler_name = scheduler_name
        self.nodes: list[Node] = []
        self.holding: dict[str, tuple[str, str, str]] = {}  # pod uid -> (node, namespace, name): pods holding room
        self.by_name: dict[str, Node] = {}
        self.cursor = 0
        self.events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.binder = ThreadPoolExecutor(BINDER_THREADS, thread_name_prefix="binder")
        self.pending: dict[str, dict[str, Any]] = {}  # uid -> pod not placed yet (no room yet)

    def run(self) -> None:
        for item in self.core.list_node().items:
            allocatable = item.status.allocatable or {}
            node = Node(item.metadata.name, int(quantity.parse(allocatable.get(GPU, "0"))),
                        int(quantity.parse(allocatable.get("pods", "110"))))
            self.nodes.append(node)
            self.by_name[node.name] = node
        reply = self.core.list_pod_for_all_namespaces(_preload_content=False)
        listing = json.loads(reply.data)
        for pod in listing["items"]:
            self.events.put(("ADDED", pod))
        threading.Thread(target=self._watch, args=(listing["metadata"]["resourceVersion"],), daemon=True).start()
        while True:
            kind, pod = self.events.get()
            self._take(kind, pod)
            if self.events.empty():
                self._place_waiting()

    def _watch(self, version: str) -> None:
        from kubernetes import watch

        while True:
            try:
                for event in watch.Watch().stream(self.core.list_pod_for_all_namespaces, resource_version=version,
                                                  timeout_seconds=300, deserialize=False):
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    self.events.put((event["type"], event["object"]))
            except Exception as err:  # noqa: BLE001 - a floor, not a scheduler: say so and relist from here
                log.warning("watch ended: %s", err)

    def _take(self, kind: str, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        uid = meta["uid"]
        gone = kind == "DELETED" or meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
            "Succeeded", "Failed")
        if gone:
            self.pending.pop(uid, None)
            self._release(uid)
            return
        if spec.get("nodeName"):
            self.pending.pop(uid, None)
            node = self.by_name.get(spec["nodeName"])
            if node is not None and uid not in self.holding:
                self._hold(node, pod, spec.get("priority") or 0, gpus_of(pod))
            return
        if spec.get("schedulerName") == self.scheduler_name and uid not in self.holding:
            self.pending[uid] = pod

    def _hold(self, node: Node, pod: dict[str, Any], priority: int, gpus: int) -> None:
        meta = pod["metadata"]
        node.take(meta["uid"], priority, gpus)
        self.holding[meta["uid"]] = (node.name, meta["namespace"], meta["name"])

    def _release(self, uid: str) -> None:
        held = self.holding.pop(uid, None)
        if held is not None:
            self.by_name[held[0]].release(uid)

    def _place_waiting(self) -> None:
        for uid, pod in list(self.pending.items()):
            gpus, priority = gpus_of(pod), (pod["spec"].get("priority") or 0)
            node = self._next(lambda n: n.fits(gpus)) or self._preempt(gpus, priority)
            if node is None:
                continue
            del self.pending[uid]
            self._hold(node, pod, priority, gpus)
            self.binder.submit(self._bind, pod, node.name)

    def _next(self, wanted: Any) -> Node | None:
        count = len(self.nodes)
        for step in range(count):
            node = self.nodes[(self.cursor + step) % count]
            if wanted(node):
                self.cursor = (self.cursor + step + 1) % count
                return node
        return None

    def _preempt(self, gpus: int, priority: int) -> Node | None:
        def freeable(node: Node) -> bool:
            lower = sum(g for p, g in node.residents.values() if p < priority)
            return node.gpus - node.used_gpus + lower >= gpus
        node = self._next(freeable)
        if node is None:
            return None
        for uid, (held, _) in sorted(node.residents.items(), key=lambda item: item[1][0]):
            if node.fits(gpus) or held >= priority:
                break
            _, namespace, name = self.holding[uid]
            self._release(uid)
            self.binder.submit(self._delete, namespace, name, uid)
        return node

    def _delete(self, namespace: str, name: str, uid: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:  # the uid precondition spares another pod of the victim's name
            self.core.delete_namespaced_pod(name, namespace, body={"gracePeriodSeconds": 0, "preconditions": {
                "uid": uid}})
        except ApiException as err:
            log.warning("victim %s/%s not deleted: %s", namespace, name, err.reason)

    def _bind(self, pod: dict[str, Any], node: str) -> None:
        from kubernetes.client.exceptions import ApiException

        meta = pod["metadata"]
        try:
            binding.bind(self.api, namespace=meta["namespace"], name=meta["name"], uid=meta["uid"], node=node)
        except ApiException as err:
            log.warning("pod %s/%s not bound to %s: %s", meta["namespace"], meta["name"], node, err.reason)


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    Floor(sys.argv[1], sys.argv[2]).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
